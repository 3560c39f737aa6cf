"""Fault matrix, bad input: every case fails fast with one line, a non-zero exit and no
traceback (issue 18, items 5-8). The campaign-folder cases share one tiny finished campaign."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import gymnasium
import numpy as np
import pytest

import kosmos_env  # noqa: F401  (registers the env ids)
from kosmos_env import cli
from tests.conftest import requires_extra
from tests.support.faults import eval_argv
from tests.support.paths import ROOT

pytestmark = pytest.mark.usefixtures("allow_test_policy_import")


def _one_line_error(capsys, rc, code=2) -> str:
    """Assert the command failed with ``code`` and printed exactly one line on stderr; return it."""
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == code, (rc, err[-2000:])
    assert len(lines) == 1, err[-2000:]
    assert "Traceback" not in err
    return lines[0]


# -- item 5: a bad --policy fails before any episode runs ---------------------------------------
# the expected words of cases whose message comes from name resolution (policies/__init__.py)
# are left open: only "cannot be built" and the policy's label are promised for those
@pytest.mark.parametrize(
    "policy, says",
    [
        ("no_such_policy", None),  # unknown name
        ("scripted:skill=0.5,oops", None),  # malformed: an item without '='
        ("scripted:skill=5", "skill must be in [0, 1]"),  # out of range
        ("scripted:skil=0.5", "bad keyword argument"),  # a keyword the adapter does not take
        ("scripted:skill=high", "skill"),  # a value of the wrong type
        ("kosmos_env.no_such_module:Policy", None),  # a class that cannot be loaded
    ],
)
def test_bad_policy_fails_before_any_episode(tmp_path, capsys, policy, says):
    out = tmp_path / "c"
    rc = cli.main(eval_argv(out, policies=("random", policy)))
    line = _one_line_error(capsys, rc)
    assert line.startswith("kosmos-env eval: error:"), line
    assert "--policy" in line or "policy" in line.lower(), line
    if says is not None:
        assert says in line and "cannot be built" in line, line
    assert not (out / "ledger.sqlite").exists()  # nothing was planned, nothing ran


# -- item 6: paths, corrupt files, offline ------------------------------------------------------
def test_out_that_is_a_file_or_read_only(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    line = _one_line_error(capsys, cli.main(eval_argv(afile)))
    assert "is a file, not a folder" in line
    line = _one_line_error(capsys, cli.main(eval_argv(afile / "sub")))
    assert "cannot create the folder" in line
    # read-only: a folder this process cannot write (even root cannot create files in /proc)
    if os.geteuid() == 0:
        read_only = Path("/proc")
    else:
        read_only = tmp_path / "ro"
        read_only.mkdir()
        read_only.chmod(0o500)
    try:
        line = _one_line_error(capsys, cli.main(eval_argv(read_only)))
        assert "is not writable" in line
        line = _one_line_error(capsys, cli.main(["leaderboard", "build", str(tmp_path), "--out", str(read_only)]))
        assert "is not writable" in line
    finally:
        if read_only != Path("/proc"):
            read_only.chmod(0o700)
    line = _one_line_error(capsys, cli.main(["leaderboard", "build", str(tmp_path), "--out", str(afile)]))
    assert "is a file, not a folder" in line


def test_verify_on_a_corrupt_ledger_reports_it(tmp_path, capsys):
    (tmp_path / "ledger.sqlite").write_bytes(b"this is not a database" * 100)
    assert cli.main(["verify", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    problems = [ln for ln in captured.out.splitlines() if ln.startswith("PROBLEM")]
    assert len(problems) == 1 and "cannot be read" in problems[0] and "corrupt" in problems[0]


@pytest.fixture(scope="module")
def campaign(tiny_campaign):
    return tiny_campaign


def test_analyze_on_a_corrupt_artifact(tmp_path, capsys, campaign):
    import json

    out = tmp_path / "c"
    shutil.copytree(campaign, out)
    rel = json.loads((out / "results.json").read_text())["per_episode"][0]["artifacts"]["log"]
    (out / rel).chmod(0o644)
    (out / rel).write_bytes(b"PK\x03\x04 not a zip file")
    capsys.readouterr()
    line = _one_line_error(capsys, cli.main(["analyze", str(out), "--n-boot", "100", "--n-splits", "10"]))
    assert "fails verification" in line and "corrupt" in line and "--no-verify" in line
    # told to go on, it still does not crash: the unreadable log is left out, with a note
    rc = cli.main(["analyze", str(out), "--n-boot", "100", "--n-splits", "10", "--no-verify", "--no-write"])
    captured = capsys.readouterr()
    assert rc == 0 and "Traceback" not in captured.err
    assert "could not be read" in captured.out


@requires_extra("hub")
def test_publish_offline_says_so_in_one_line(capsys, campaign, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    rc = cli.main(["publish", str(campaign), "--repo", "org/results"])
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if not ln.startswith("note: ")]  # notes on the plan come first
    assert rc == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert "offline" in errors[0] and "--dry-run" in errors[0]


# -- item 7: async vector envs ------------------------------------------------------------------
def test_async_vector_env_with_default_arguments_refuses_naming_the_fix():
    with pytest.raises(ValueError, match=r'vector_kwargs=\{"context": "spawn", "shared_memory": False\}') as info:
        gymnasium.make_vec("Kosmos-Tabletop-v1", num_envs=2, vectorization_mode="async", image_size=(32, 32))
    assert "shared_memory" in str(info.value)
    # shared memory off but the fork start method: refused too (children hang after a render)
    with pytest.raises(ValueError, match="fork"):
        gymnasium.make_vec(
            "Kosmos-Tabletop-v1",
            num_envs=2,
            vectorization_mode="async",
            image_size=(32, 32),
            vector_kwargs={"shared_memory": False, "context": "fork"},
        )


# -- item 8: dtypes as documented, and a closed env ---------------------------------------------
def test_action_dtypes_match_the_readme_and_a_closed_env_refuses():
    readme = (ROOT / "README.md").read_text()
    assert "float64 arrays and Python lists of numbers\n  are cast to float32" in readme
    assert "an integer, boolean or object array" in readme
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(32, 32))
    try:
        action = [0.01, -0.01, 0.0, 0.0, 0.0, 0.05, 1.0]
        results = []
        for a in (np.asarray(action, np.float32), np.asarray(action, np.float64), action, tuple(action)):
            env.reset(seed=3)
            obs, *_ = env.step(a)
            results.append(obs)
        for obs in results[1:]:  # cast to float32: the same step as the float32 action
            np.testing.assert_array_equal(obs["image"], results[0]["image"])
            np.testing.assert_array_equal(obs["ee_pos"], results[0]["ee_pos"])
        env.reset(seed=3)
        for bad in (np.zeros(7, np.int64), np.zeros(7, bool), np.array(["a"] * 7), np.zeros(7, object)):
            with pytest.raises(ValueError, match="dtype"):
                env.step(bad)
    finally:
        env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step(np.zeros(7, np.float32))
    with pytest.raises(RuntimeError, match="closed"):
        env.reset(seed=0)
    env.close()  # a second close is harmless
