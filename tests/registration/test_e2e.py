"""Pre-registered studies end to end on the tabletop: register, run exactly the registered design,
report PASS/FAIL with intervals apart from exploratory numbers, refuse deviations and edits, and
publish a failed study with its registration hash."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from kosmos_env import cli
from kosmos_env.registration import load_registration
from kosmos_env.spec import load_spec
from tests.conftest import requires_extra
from tests.support.registration import ENV, TASK, base_protocol, write_protocol, write_reference

pytestmark = pytest.mark.slow  # one real 6-episode campaign (about 10 s on 2 cores), shared by the module


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    _, sha = write_reference(root, [(TASK, "scripted:skill=1.0", 0.9), (TASK, "random", 0.1)])
    proto = base_protocol(reference={"path": "ref.csv", "sha256": sha})
    proto["metrics"].append(
        {
            "name": "agrees",
            "expr": 'mmrv(weight="reference", ties="greater")',
            "bar": {"op": "<=", "value": 0.1, "bound": "estimate"},
        }
    )
    reg = root / "reg.json"
    assert cli.main(["register", str(write_protocol(root, proto)), "--out", str(reg)]) == 0
    out = root / "run"
    assert cli.main(["eval", "--registration", str(reg), "--out", str(out), "--no-video", "--no-progress"]) == 0
    return root, reg, out


def test_the_registered_design_ran_with_the_overridden_spec(study):
    root, reg_path, out = study
    reg = load_registration(reg_path)
    camp = json.loads((out / "results.json").read_text())["campaign"]
    assert camp["registration"]["sha256"] == reg.sha256 and camp["registration"]["protocol"] == reg.protocol
    assert (
        camp["spec_hash"] == load_spec(ENV).with_overrides(image_size=[64, 64]).hash == reg.protocol["env"]["spec_hash"]
    )
    assert camp["spec_overrides"] == {"image_size": [64, 64]}
    assert camp["seeds"] == [100000, 100001, 100002] and camp["tasks"] == [TASK] and camp["complete"]
    assert camp["seed_provenance"]["held_out"] and camp["seed_provenance"]["counts"]["evaluation"] == 3
    assert {p["label"]: p["content_hash"] for p in camp["policies"]} == {
        p["policy"]: p["content_hash"] for p in reg.protocol["policies"]
    }


def test_analyze_reports_pass_and_fail_apart_from_exploratory_numbers(study, capsys):
    root, reg, out = study
    assert cli.main(["analyze", str(out), "--registration", str(reg), "--n-boot", "200", "--n-splits", "20"]) == 0
    text = capsys.readouterr().out
    reg_at, expl_at = text.index("REGISTERED RESULTS"), text.index("EXPLORATORY (not registered)")
    assert reg_at < expl_at
    registered, exploratory = text[reg_at:expl_at], text[expl_at:]
    assert load_registration(reg).sha256 in registered
    lines = {
        ln.split()[0]: ln
        for ln in registered.splitlines()
        if ln.split() and ln.split()[0] in ("scripted_succeeds", "random_succeeds", "agrees")
    }
    assert lines["scripted_succeeds"].rstrip().endswith("PASS") and "wilson 95%" in lines["scripted_succeeds"]
    assert lines["random_succeeds"].rstrip().endswith("FAIL")  # a negative result is reported, not dropped
    assert lines["agrees"].rstrip().endswith("PASS")
    assert "STUDY VERDICT: FAIL (2/3 registered bars passed)" in registered
    assert "success per policy" in exploratory and "success per policy" not in registered
    a = json.loads((out / "analysis.json").read_text())
    r = a["registered"]
    assert r["verdict"] == "FAIL" and r["registration"] == load_registration(reg).sha256
    by = {m["name"]: m for m in r["metrics"]}
    assert by["scripted_succeeds"]["estimate"] == 1.0 and by["random_succeeds"]["estimate"] == 0.0
    assert by["scripted_succeeds"]["checked_value"] == pytest.approx(by["scripted_succeeds"]["interval"]["lower"])
    assert by["agrees"]["estimate"] == 0.0 and by["agrees"]["random_floor"] is not None
    assert "exploratory" in a["exploratory_note"]


@requires_extra("hub")
def test_publish_dry_run_of_a_failed_study_carries_the_hash(study, tmp_path, capsys):
    root, reg, out = study
    sha = load_registration(reg).sha256
    assert cli.main(["publish", str(out), "--repo", "me/studies", "--dry-run", str(tmp_path / "pub")]) == 0
    results = list((tmp_path / "pub" / "dataset").rglob("results.json"))
    assert len(results) == 1 and json.loads(results[0].read_text())["campaign"]["registration"]["sha256"] == sha
    for card in (tmp_path / "pub" / "dataset").rglob("README.md"):
        text = card.read_text()
        assert sha in text and "Study verdict: FAIL" in text and "**FAIL**" in text and "**PASS**" in text
        assert "verdict: FAIL" in text.split("---")[1]  # the card's YAML metadata too


def test_resume_with_the_same_registration_is_allowed(study):
    root, reg, out = study
    assert (
        cli.main(
            [
                "eval",
                "--registration",
                str(reg),
                "--out",
                str(out),
                "--no-video",
                "--no-progress",
                "--seeds",
                "3",
                "--image-size",
                "64",
                "64",
                "--env",
                ENV,
                "--tasks",
                TASK,
                "--judge",
                "state",
                "--policy",
                "random",
                "--policy",
                "scripted:skill=1.0",
            ]
        )
        == 0
    )


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--seeds", "4"], "--seeds 4"),
        (["--seed-offset", "0"], "--seed-offset 0 = seeds 0-2"),
        (["--seeds", "3", "--seed-offset", "100001"], "seeds 100001-100003 (registered seeds: 100000-100002)"),
        (["--image-size", "32", "32"], "--image-size"),
        (["--policy", "random"], "--policy"),
        (["--judge", "robot_log"], "--judge"),
        (["--repeats", "2"], "--repeats"),
        (["--tasks", "all"], "--tasks"),
        (["--env", "Kosmos-Bridge-v1"], "--env"),
    ],
)
def test_deviating_design_flags_are_refused(study, tmp_path, capsys, flags, needle):
    root, reg, out = study
    new = tmp_path / "run"
    assert cli.main(["eval", "--registration", str(reg), "--out", str(new), "--no-progress", *flags]) == 2
    err = capsys.readouterr().err
    assert "deviates from the registered one" in err and needle in err
    assert not new.exists()  # refused before anything ran


def test_a_registration_on_training_seeds_is_refused_in_one_line(tmp_path, capsys):
    """A registration written before `register` refused training seeds (seeds 0-2) still loads, but
    `eval --registration` refuses to run it: a registered result must be on held-out scenes."""
    from kosmos_env.registration import build_registration, write_registration

    proto = write_protocol(tmp_path, base_protocol(seeds=[0, 1, 2]))
    assert cli.main(["register", str(proto), "--out", str(tmp_path / "refused.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training range" in err[0] and not (tmp_path / "refused.json").exists()
    old = write_registration(build_registration(proto, check_hashes=False), tmp_path / "old.json")
    assert load_registration(old).protocol["seeds"] == [0, 1, 2]
    assert cli.main(["eval", "--registration", str(old), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refusing to run registration" in err[0] and "seeds 0-2" in err[0], err
    assert "not held out" in err[0] and not (tmp_path / "run").exists()


def test_a_changed_spec_is_refused(study, tmp_path, monkeypatch, capsys):
    import kosmos_env.spec as spec_mod

    real = spec_mod.load_spec
    monkeypatch.setattr(
        spec_mod, "load_spec", lambda env_id: real(env_id).with_overrides(horizon=real(env_id).horizon + 1)
    )
    root, reg, out = study
    assert cli.main(["eval", "--registration", str(reg), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "the registered spec hash is" in err and not (tmp_path / "run").exists()


def test_a_changed_policy_is_refused(study, tmp_path, monkeypatch, capsys):
    from kosmos_env.policies.scripted import ScriptedPolicy

    real = ScriptedPolicy.config
    monkeypatch.setattr(ScriptedPolicy, "config", lambda self: {**real(self), "patched": True})
    root, reg, out = study
    assert cli.main(["eval", "--registration", str(reg), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    assert "policy scripted:skill=1.0 now has content hash" in capsys.readouterr().err


def test_an_edited_registration_is_refused_at_eval_and_analyze(study, tmp_path, capsys):
    root, reg, out = study
    data = json.loads(Path(reg).read_text())
    data["protocol"]["seeds"] = [100000, 100001, 100002, 100003]  # more seeds after the fact
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    assert cli.main(["eval", "--registration", str(edited), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    assert "edited after registration" in capsys.readouterr().err and not (tmp_path / "run").exists()
    assert cli.main(["analyze", str(out), "--registration", str(edited), "--no-write"]) == 2
    assert "edited after registration" in capsys.readouterr().err


def test_a_campaign_run_without_the_registration_is_refused(study, tmp_path, capsys):
    root, reg, out = study
    copy = tmp_path / "unregistered"
    shutil.copytree(out, copy)
    con = sqlite3.connect(copy / "ledger.sqlite")
    con.execute("DELETE FROM meta WHERE key = 'registration'")
    con.commit()
    con.close()
    # results already exist for this design: registering now would be registering after looking
    assert cli.main(["eval", "--registration", str(reg), "--out", str(copy), "--no-progress", "--no-video"]) == 2
    assert "run without a registration" in capsys.readouterr().err
    res = json.loads((copy / "results.json").read_text())
    del res["campaign"]["registration"]
    (copy / "results.json").write_text(json.dumps(res))
    assert cli.main(["analyze", str(copy), "--registration", str(reg), "--no-write"]) == 2
    assert "fails verification" in capsys.readouterr().err  # results.json was edited behind the manifest's back
    assert cli.main(["analyze", str(copy), "--registration", str(reg), "--no-write", "--no-verify"]) == 2
    assert "was not run under a registration" in capsys.readouterr().err


def test_analyze_refuses_another_registration(study, tmp_path, capsys):
    root, reg, out = study
    other = tmp_path / "other.json"
    p = base_protocol(name="another-study")
    assert cli.main(["register", str(write_protocol(tmp_path, p)), "--out", str(other)]) == 0
    assert cli.main(["analyze", str(out), "--registration", str(other), "--no-write"]) == 2
    assert "was run under registration" in capsys.readouterr().err
