"""`kosmos-env verify` re-derives outcomes from the stored artifacts (issue 31, item 2 and its rows
of item 6): consistent forgeries that every hash agrees with are caught by re-running the judge
on the episode's own log, by replaying its stored actions from its seed, and by rebuilding the
spec from its env id; the ledger is checked with SQLite's integrity check and only ever read."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kosmos_env import cli
from kosmos_env.campaign import verify_campaign
from kosmos_env.campaign.artifacts import ArtifactStore, npz_bytes
from kosmos_env.campaign.bundle import write_bundle
from tests.support.faults import TWO_POLICIES, eval_argv
from tests.support.paths import ROOT
from tests.support.publish_bundles import edit_results

pytestmark = pytest.mark.usefixtures("allow_test_policy_import")


@pytest.fixture(scope="module")
def campaign(tiny_campaign):
    """A finished tiny campaign: scripted (successes) and random (failures), 2 seeds, no video."""
    return tiny_campaign


def _copy(campaign, tmp_path, name="c") -> Path:
    return Path(shutil.copytree(campaign, tmp_path / name))


def _sql(out, sql, *params):
    con = sqlite3.connect(out / "ledger.sqlite")
    try:
        cur = con.execute(sql, params)
        rows = cur.fetchall()
        con.commit()
        return rows
    finally:
        con.close()


def _random_rows(out) -> list[tuple]:
    return _sql(
        out,
        "SELECT episode_id, actions, log, judgment, ground_truth FROM episodes WHERE policy = 'random' ORDER BY ord",
    )


def _forge_success(out, eid) -> None:
    """Turn a failure into a success consistently: outcome, success, score, judgment and ground truth."""
    judgment, truth = (
        json.loads(v) for v in _sql(out, "SELECT judgment, ground_truth FROM episodes WHERE episode_id = ?", eid)[0]
    )
    judgment.update(success=True, score=1.0, rationale="carrot rests on the plate and is released")
    truth.update(success=True, reason="carrot rests on the plate and is released")
    _sql(
        out,
        "UPDATE episodes SET outcome = 'success', success = 1, score = 1.0, judgment = ?, ground_truth = ? "
        "WHERE episode_id = ?",
        json.dumps(judgment),
        json.dumps(truth),
        eid,
    )


def test_a_genuine_campaign_passes_rederivation_and_a_full_replay(tmp_path, campaign):
    out = _copy(campaign, tmp_path)
    report = verify_campaign(out, replay="all")
    assert report.ok, report.problems
    assert report.checked["rederived"] == 4 and report.checked["replayed"] == 4


def test_a_consistent_ledger_forgery_is_caught_by_its_own_robot_log(tmp_path, campaign, capsys):
    out = _copy(campaign, tmp_path)
    eid = _random_rows(out)[0][0]
    _forge_success(out, eid)
    # the attacker reruns eval: the bundle is rebuilt from the forged ledger, every hash agrees
    assert cli.main(eval_argv(out, policies=TWO_POLICIES, seeds=2)) == 0
    report = verify_campaign(out)
    assert not report.ok
    mine = [p for p in report.problems if p.startswith(eid)]
    assert any("stored robot log" in p and "gt_success = False" in p and "judge state" in p for p in mine), mine
    assert all(not p.startswith("random|carrot_on_plate|1") for p in report.problems)  # the honest one is fine
    capsys.readouterr()
    assert cli.main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    assert f"PROBLEM: {eid}" in printed and "judge state" in printed


def test_a_forged_log_is_caught_by_replaying_the_stored_actions(tmp_path, campaign):
    out = _copy(campaign, tmp_path)
    eid, _actions, log_rel, _, _ = _random_rows(out)[0]
    _forge_success(out, eid)
    # ... and writes a robot log that agrees, stored under its own hash (so every hash checks out)
    with np.load(out / log_rel) as z:
        log = {k: z[k] for k in z.files}
    log["gt_success"] = np.ones_like(log["gt_success"])
    sha, rel, size = ArtifactStore(out).put_bytes(npz_bytes(log), "npz")
    _sql(out, "UPDATE episodes SET log = ? WHERE episode_id = ?", rel, eid)
    _sql(out, "INSERT INTO artifacts (sha256, relpath, size, kind, created) VALUES (?, ?, ?, 'log', 0)", sha, rel, size)
    write_bundle(out)
    report = verify_campaign(out)
    assert report.ok, report.problems  # the judge re-run agrees with the forged log: only a replay can tell
    report = verify_campaign(out, replay="all")
    assert any(p.startswith(f"{eid}: replay: its stored robot log is not what replaying") for p in report.problems), (
        report.problems
    )
    assert any(p.startswith(f"{eid}: replay:") and "ground truth" in p for p in report.problems), report.problems


def _swap(out, policy):
    rows = _sql(out, "SELECT episode_id, actions, log FROM episodes WHERE policy = ? ORDER BY ord", policy)
    (a, act_a, log_a), (b, act_b, log_b) = rows
    _sql(out, "UPDATE episodes SET actions = ?, log = ? WHERE episode_id = ?", act_b, log_b, a)
    _sql(out, "UPDATE episodes SET actions = ?, log = ? WHERE episode_id = ?", act_a, log_a, b)
    write_bundle(out)
    return a, b


def test_swapped_artifact_references_do_not_replay(tmp_path, campaign):
    out = _copy(campaign, tmp_path)
    a, b = _swap(out, "scripted:skill=1.0")  # both successes: the re-run judge cannot tell
    assert verify_campaign(out).ok
    report = verify_campaign(out, replay="all", rerun_policies=False)  # the world alone: the grasps miss
    for eid in (a, b):
        assert any(p.startswith(f"{eid}: replay:") and "robot log" in p for p in report.problems), report.problems


def test_swapped_artifacts_are_caught_by_the_replay_and_by_rerunning_the_policy(tmp_path, campaign):
    out = _copy(campaign, tmp_path)
    a, b = _swap(out, "random")  # random never touches the carrot: only the object's logged place differs
    # the simulator's log records the object's position after every action, and the seeds place it
    # differently: the world alone tells the swap apart
    world_only = verify_campaign(out, replay="all", rerun_policies=False)
    for eid in (a, b):
        assert any(p.startswith(f"{eid}: replay:") and "robot log" in p for p in world_only.problems), (
            world_only.problems
        )
    report = verify_campaign(out, replay="all")
    assert report.checked["policies_rerun"] == 4
    for eid in (a, b):
        assert any(
            p.startswith(f"{eid}: replay:") and "not what policy 'random' takes" in p for p in report.problems
        ), report.problems


def test_a_salted_replay_sample_is_reproducible(tmp_path, campaign):
    out = _copy(campaign, tmp_path)
    _swap(out, "random")
    first = verify_campaign(out, replay=2, replay_salt="7")
    again = verify_campaign(out, replay=2, replay_salt="7")
    assert first.checked["replayed"] == 2 and first.problems == again.problems


@pytest.mark.parametrize("edit", ["env_id", "world", "judge"])
def test_editing_env_world_or_judge_in_results_json_is_caught(tmp_path, campaign, edit):
    from kosmos_env.spec import EnvSpec

    out = _copy(campaign, tmp_path)

    def forge(results):
        c = results["campaign"]
        if edit == "env_id":
            c["env_id"] = "Kosmos-TabletopLearned-v1"
        elif edit == "world":  # a different world, with the spec hash recomputed to match it
            c["spec"]["world"]["physics_dt"] = 0.002
            c["spec_hash"] = EnvSpec.from_dict(c["spec"]).hash
            for e in results["per_episode"]:
                e["spec_hash"] = c["spec_hash"]
        else:
            c["judge"] = {"type": "optimistic"}

    edit_results(out, forge)  # the manifest is recomputed: only the content can tell
    problems = verify_campaign(out).problems
    want = {"env_id": "campaign env_id differs", "world": "campaign spec (world", "judge": "campaign judge differs"}
    assert any(want[edit] in p for p in problems), problems


def test_a_stored_spec_edited_in_the_ledger_is_caught(tmp_path, campaign):
    out = _copy(campaign, tmp_path)
    config = json.loads(_sql(out, "SELECT value FROM meta WHERE key = 'config'")[0][0])
    config["spec"]["world"]["physics_dt"] = 0.002  # the spec hash (and so the config hash) left as they were
    _sql(out, "UPDATE meta SET value = ? WHERE key = 'config'", json.dumps(config))
    problems = verify_campaign(out).problems
    assert any("stored spec hashes to" in p and "edited" in p for p in problems), problems


def test_verify_never_writes_and_a_read_only_copy_verifies(tmp_path, campaign):
    out = _copy(campaign, tmp_path)
    for name in ("ledger.sqlite-shm", "ledger.sqlite-wal"):  # a finished campaign's folder, as copied or downloaded
        (out / name).unlink(missing_ok=True)

    def snapshot():
        return {
            str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*"))
            if p.is_file()
        }

    before = snapshot()
    assert verify_campaign(out, replay=1).ok
    assert snapshot() == before  # no -shm, no WAL, no byte changed
    # a really read-only folder: chmod for a normal user; root ignores modes, so a read-only bind mount
    argv = [sys.executable, "-m", "kosmos_env.cli", "verify", str(out), "--replay", "1"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUJOCO_GL="egl", OMP_NUM_THREADS="1")
    if os.geteuid() != 0:
        for p in [out, *out.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        finally:
            for p in [out, *out.rglob("*")]:
                p.chmod(p.stat().st_mode | 0o200)
    else:
        mount = (
            f"mount --bind {out} {out} && mount -o remount,bind,ro {out} && touch {out}/probe 2>/dev/null; "
            f'test ! -e {out}/probe && exec "$@"'
        )
        probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {out} {out}"], capture_output=True)
        if probe.returncode != 0:
            pytest.skip("running as root without mount namespaces: no way to make a read-only folder here")
        proc = subprocess.run(
            ["unshare", "-m", "sh", "-c", mount, "sh", *argv], env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # with a write-ahead log beside it (as a folder copied from a live campaign has) mode=ro cannot open a
        # WAL ledger in a read-only folder without its -shm: verify falls back to reading it immutable
        (out / "ledger.sqlite-wal").write_bytes(b"")
        before = snapshot()
        proc = subprocess.run(
            ["unshare", "-m", "sh", "-c", mount, "sh", *argv], env=env, capture_output=True, text=True, timeout=120
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ": OK" in proc.stdout and "corrupt" not in proc.stdout + proc.stderr
    assert snapshot() == before


def test_a_ledger_failing_sqlites_integrity_check_fails_verify(tmp_path, campaign):
    out = _copy(campaign, tmp_path)
    ledger = out / "ledger.sqlite"
    page_size, root = (
        _sql(out, "PRAGMA page_size")[0][0],
        _sql(out, "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_episodes_2'")[0][0],
    )
    _sql(out, "PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(ledger.read_bytes())
    start, end = (root - 1) * page_size, root * page_size
    page = bytes(data[start:end])
    i = page.find(b"random")  # a key of the (policy, task, seed, repeat) index: the table row no longer matches it
    assert i > 0
    data[start + i : start + i + 6] = b"rAndom"
    ledger.write_bytes(bytes(data))
    assert _sql(out, "PRAGMA integrity_check") != [("ok",)]  # SQLite itself calls the file damaged ...
    report = verify_campaign(out)
    assert any("fails SQLite's integrity check" in p for p in report.problems), (
        report.problems
    )  # ... and so does verify


def test_a_bad_replay_value_is_one_line(tmp_path, campaign, capsys):
    assert cli.main(["verify", str(campaign), "--replay", "some"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "--replay" in err[0]


def test_another_judges_forged_verdict_is_re_derived_too(tmp_path, campaign):
    from kosmos_env.campaign.rejudge import rejudge

    out = _copy(campaign, tmp_path)
    rejudge(out, {"type": "robot_log"})  # kosmos-env judge: the robot-log judge's verdicts filed beside the campaign's
    assert verify_campaign(out).ok
    eid = _random_rows(out)[0][0]
    _sql(out, "UPDATE judgments SET outcome = 'success', success = 1, score = 1.0 WHERE episode_id = ?", eid)
    problems = verify_campaign(out).problems
    assert any(p.startswith(eid) and "judge robot_log re-run" in p and "kosmos-env judge" in p for p in problems), (
        problems
    )
