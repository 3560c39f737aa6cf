"""Campaigns end to end on the tabletop: kill -9 and resume, two processes on one folder,
verify catching tampered artifacts, retries ending in recorded errors, and the known ranking."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from kosmos_env import cli
from kosmos_env.campaign import make_config, run_campaign, verify_campaign
from kosmos_env.campaign.executors import InProcessExecutor, ProcessPoolExecutor
from kosmos_env.campaign.worker import WorkSettings
from tests.support.campaign import SLOW, kill_after_done, ledger_rows, tabletop_eval_argv
from tests.support.paths import ROOT

pytestmark = pytest.mark.usefixtures("allow_test_policy_import")  # SLOW is a module:Class policy
TASKS = ["carrot_on_plate", "spoon_on_towel"]


def _eval_argv(out, *extra, policies=(f"{SLOW}:skill=1.0,delay=0.01", f"{SLOW}:skill=0.3,delay=0.01")):
    return tabletop_eval_argv(out, policies, *extra, tasks=TASKS, seeds=3)


def _spawn(argv):
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUJOCO_GL="egl", HF_HUB_OFFLINE="1")
    return subprocess.Popen(
        [sys.executable, "-m", "kosmos_env.cli", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


_outcomes = ledger_rows


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted campaign the interrupted ones must reproduce."""
    out = tmp_path_factory.mktemp("reference")
    assert cli.main([*_eval_argv(out)]) == 0
    return out


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_matches_uninterrupted(tmp_path, reference):
    out = tmp_path / "killed"
    proc = _spawn(_eval_argv(out))
    kill_after_done(proc, out, 3, timeout=120)
    before = _outcomes(out)
    n_before = sum(1 for v in before.values() if v[0] == "done")
    assert 3 <= n_before < 12, n_before
    in_flight = [k for k, v in before.items() if v[0] == "leased"]

    resumed = _spawn(_eval_argv(out))
    stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr[-3000:]
    after = _outcomes(out)
    # finished episodes were kept as they were, not redone
    for key, value in before.items():
        if value[0] == "done":
            assert after[key] == value
    assert after == _outcomes(reference)  # identical outcomes, every planned episode exactly once, done
    con = sqlite3.connect(out / "ledger.sqlite")
    ok = dict(
        con.execute("SELECT episode_id, COUNT(*) FROM attempts WHERE status = 'ok' GROUP BY episode_id").fetchall()
    )
    abandoned = [r[0] for r in con.execute("SELECT episode_id FROM attempts WHERE status = 'abandoned'")]
    con.close()
    assert set(ok) == set(after) and set(ok.values()) == {1}
    assert sorted(abandoned) == sorted(in_flight)  # the dead process's lease was taken over at once
    report = verify_campaign(out)
    assert report.ok, report.problems
    assert "scripted" not in stdout or "rank" in stdout
    assert "rank" in stdout and "wilson 95% CI" in stdout


@pytest.mark.slow
def test_two_processes_on_one_folder_share_the_campaign(tmp_path, reference):
    out = tmp_path / "shared"
    procs = [_spawn(_eval_argv(out)) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert _outcomes(out) == _outcomes(reference)
    con = sqlite3.connect(out / "ledger.sqlite")
    ok = con.execute("SELECT episode_id, COUNT(*) FROM attempts WHERE status = 'ok' GROUP BY episode_id").fetchall()
    pids = {w.split(":")[1] for (w,) in con.execute("SELECT worker FROM episodes")}
    con.close()
    assert len(ok) == 12 and {n for _, n in ok} == {1}  # no duplicate, no missing
    assert len(pids) == 2, f"expected both processes to take work, got workers from {pids}"
    assert verify_campaign(out).ok


@pytest.mark.slow
def test_verify_names_a_modified_and_a_deleted_artifact(tmp_path, capsys):
    out = tmp_path / "c"
    cfg = make_config(
        "Kosmos-Tabletop-v1",
        ["scripted:skill=1.0"],
        tasks=["carrot_on_plate"],
        seeds=2,
        image_size=(64, 64),
        video=True,
    )
    results = run_campaign(cfg, out, progress=False)
    assert len(results["per_episode"]) == 2
    assert cli.main(["verify", str(out)]) == 0
    video = results["per_episode"][0]["artifacts"]["video"]
    log = results["per_episode"][1]["artifacts"]["log"]
    assert video.endswith(".mp4") and (out / video).stat().st_size > 0

    data = bytearray((out / video).read_bytes())
    data[len(data) // 2] ^= 0x01
    (out / video).chmod(0o644)
    (out / video).write_bytes(bytes(data))
    report = verify_campaign(out)
    assert not report.ok
    assert any("corrupt" in p and video in p for p in report.problems), report.problems
    capsys.readouterr()
    assert cli.main(["verify", str(out)]) == 1
    assert video in capsys.readouterr().out

    (out / log).unlink()
    report = verify_campaign(out)
    assert any("missing" in p and log in p for p in report.problems), report.problems


@pytest.mark.slow
def test_failed_episodes_are_retried_then_recorded_and_campaign_goes_on(tmp_path):
    out = tmp_path / "flaky"
    cfg = make_config(
        "Kosmos-Tabletop-v1",
        [f"{SLOW}:delay=0.0,fail_seed=1"],
        tasks=["carrot_on_plate"],
        seeds=3,
        image_size=(64, 64),
        video=False,
    )
    results = run_campaign(cfg, out, InProcessExecutor(), WorkSettings(max_attempts=2), progress=False)
    by_seed = {e["seed"]: e for e in results["per_episode"]}
    assert by_seed[1]["outcome"] == "error" and by_seed[1]["attempts"] == 2
    assert "refuses seed 1" in by_seed[1]["error"] and "Traceback" in by_seed[1]["error"]
    assert by_seed[0]["outcome"] == by_seed[2]["outcome"] == "success"
    assert results["aggregated"]["per_policy"][cfg.policies[0].label]["errors"] == 1
    assert verify_campaign(out).ok


@pytest.mark.slow
def test_refuses_to_mix_configs_in_one_folder(tmp_path, capsys):
    out = tmp_path / "c"
    argv = [
        "eval",
        "--policy",
        "random",
        "--tasks",
        "carrot_on_plate",
        "--seeds",
        "1",
        "--image-size",
        "64",
        "64",
        "--no-video",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert cli.main(argv) == 0
    assert cli.main(argv[:-2] + ["--image-size", "32", "32", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "different config" in err and "spec_hash" in err and "new --out" in err
    assert cli.main(argv) == 0  # the same command again is a no-op resume


@pytest.mark.slow
def test_tabletop_campaign_ranks_known_skill_order(tmp_path):
    policies = ["scripted:skill=1.0", "scripted:skill=0.6", "scripted:skill=0.3", "random"]
    cfg = make_config("Kosmos-Tabletop-v1", policies, tasks=None, seeds=5, image_size=(64, 64), video=False)
    results = run_campaign(cfg, tmp_path / "rank", ProcessPoolExecutor(2), progress=False)
    agg = results["aggregated"]
    rates = {p: agg["per_policy"][p]["success_rate"] for p in policies}
    assert agg["ranking"] == policies, rates
    assert rates["scripted:skill=1.0"] >= 0.9 and rates["random"] <= 0.05
    assert rates["scripted:skill=0.6"] > rates["scripted:skill=0.3"] > rates["random"], rates
    assert all(agg["per_policy"][p]["n"] == 20 for p in policies)
    lo, hi = agg["per_policy"]["scripted:skill=0.6"]["wilson_95"]
    assert lo < rates["scripted:skill=0.6"] < hi
    # the bundle is complete and self-consistent
    assert json.loads((tmp_path / "rank" / "results.json").read_text())["schema_version"] == 1
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "rank" / "episodes.parquet")
    assert table.num_rows == 80 and set(table.column("policy").to_pylist()) == set(policies)
    assert verify_campaign(tmp_path / "rank").ok


@pytest.mark.slow
def test_pool_replaces_a_worker_killed_mid_episode(tmp_path):
    out = tmp_path / "crash"
    marker = tmp_path / "crashed"
    cfg = make_config(
        "Kosmos-Tabletop-v1",
        [f"{SLOW}:delay=0.0,crash_once_file={marker}"],
        tasks=["carrot_on_plate"],
        seeds=3,
        image_size=(64, 64),
        video=False,
    )
    results = run_campaign(cfg, out, ProcessPoolExecutor(2), progress=False)
    assert marker.exists()  # a worker really died on seed 1
    assert [e["outcome"] for e in sorted(results["per_episode"], key=lambda e: e["seed"])] == ["success"] * 3
    by_seed = {e["seed"]: e for e in results["per_episode"]}
    assert by_seed[1]["attempts"] == 2
    assert verify_campaign(out).ok


def test_abstentions_are_their_own_outcome(tmp_path):
    from kosmos_env.campaign.bundle import aggregate, format_ranking
    from kosmos_env.campaign.ledger import Ledger
    from kosmos_env.campaign.runner import open_campaign
    from kosmos_env.campaign.worker import EpisodeRunner
    from kosmos_env.judges import Judgment

    class Abstainer:
        name = "abstainer"

        def judge(self, rollout):
            return Judgment(success=None, score=0.0, rationale="cannot tell", judge=self.name)

    cfg = make_config(
        "Kosmos-Tabletop-v1",
        ["scripted:skill=1.0"],
        tasks=["carrot_on_plate"],
        seeds=1,
        image_size=(64, 64),
        video=False,
    )
    open_campaign(cfg, tmp_path)
    with Ledger(tmp_path / "ledger.sqlite", create=False) as ledger:
        runner = EpisodeRunner(cfg, tmp_path, ledger, "h:1:t")
        runner.judge = Abstainer()
        record, artifacts = runner.run(cfg.episodes()[0])
        runner.close()
    assert record["outcome"] == "abstained" and record["success"] is None and record["score"] is None
    assert record["ground_truth"]["success"] is True  # the truth is kept beside the judge's abstention
    assert {kind for *_, kind in artifacts} == {"actions", "log"}
    # the worker's first episode also carries the model builds it did (kept apart from the warm stage seconds)
    assert set(record["timings"]) == {
        "policy",
        "world",
        "gate",
        "judge",
        "io",
        "total",
        "load_policy",
        "load_world",
        "load_judge",
    }
    rows = [{"policy": "p", "task": "t", "outcome": o} for o in ("success", "abstained", "failure", "discarded")]
    agg = aggregate(rows, ["p"], ["t"])
    s = agg["per_policy"]["p"]
    assert (s["n"], s["successes"], s["failures"], s["abstained"], s["discarded"]) == (4, 1, 1, 1, 1)
    assert s["success_rate"] == 0.5 and s["worst_case_95"][0] < 0.25 < 0.75 < s["worst_case_95"][1]
    table = format_ranking({"aggregated": agg})
    assert "0.500" in table and "abstained" in table
