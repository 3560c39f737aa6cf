"""Judging as its own stage: per-stage leases, exactly once under SIGKILL, same records as in-line judging."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kosmos_env import cli
from kosmos_env.campaign.design import make_config
from kosmos_env.campaign.executors import make_executor
from kosmos_env.campaign.ledger import Ledger, make_owner
from kosmos_env.campaign.runner import open_campaign, run_campaign
from kosmos_env.campaign.verify import verify_campaign
from kosmos_env.campaign.worker import WorkSettings, work
from tests.conftest import requires_extra
from tests.support.campaign import SLOW, kill_after_done, tabletop_eval_argv
from tests.support.paths import ROOT

ENV = "Kosmos-Tabletop-v1"


def _config(seeds=2, policies=("scripted:skill=0.8", "random"), tasks=("spoon_on_towel",)):
    return make_config(ENV, list(policies), tasks=list(tasks), seeds=seeds, image_size=(64, 64))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _stage_fake(ledger: Ledger, owner: str) -> str:
    key = ledger.claim(owner, 60.0, 3)
    record = {
        "outcome": "pending",
        "gate": None,
        "ground_truth": {"success": True},
        "steps": 3,
        "timings": {"policy": 0.1, "world": 0.2, "gate": 0.0, "judge": 0.0, "io": 0.0, "total": 0.3},
        "video": None,
        "actions": None,
        "log": None,
        "error": None,
        "provenance": {"world": {"type": "x"}},
    }
    assert ledger.stage_rollout(key.episode_id, owner, record, (), None, 10.0)
    return key.episode_id


def test_ledger_stages_lease_and_record_exactly_once(tmp_path):
    config = _config(seeds=2, policies=("random",))  # 2 episodes
    open_campaign(config, tmp_path)
    rollout, judge_a, judge_b = make_owner("r"), make_owner("ja"), make_owner("jb")
    with Ledger(tmp_path / "ledger.sqlite", create=False) as ledger:
        first = _stage_fake(ledger, rollout)
        # a staged episode belongs to the judge stage: no rollout worker claims it again
        assert ledger.stage_depths() == {"pending": 1, "rolling_out": 0, "rolled_out": 1, "judging": 0, "done": 0}
        second_key = ledger.claim(rollout, 60.0, 3)
        assert second_key is not None and second_key.episode_id != first
        assert ledger.claim(make_owner("other"), 60.0, 3) is None
        assert ledger.stage_depths()["rolling_out"] == 1
        # a lost rollout lease cannot be filed
        assert not ledger.stage_rollout(first, rollout, {"outcome": "pending"})
        rows = ledger.claim_judging(judge_a, 60.0, 8)
        assert [r["episode_id"] for r in rows] == [first] and rows[0]["record"]["steps"] == 3
        assert ledger.claim_judging(judge_b, 60.0, 8) == []  # a live judge lease is not taken over
        assert ledger.stage_depths()["judging"] == 1
        # the judge died: its lease is taken over by the next judge worker
        dead = f"{judge_a.split(':')[0]}:{_dead_pid()}:ja"
        ledger.conn.execute("UPDATE judge_queue SET owner = ? WHERE episode_id = ?", (dead, first))
        assert [r["episode_id"] for r in ledger.claim_judging(judge_b, 60.0, 8)] == [first]
        verdict = {
            **rows[0]["record"],
            "outcome": "success",
            "success": True,
            "score": 1.0,
            "judge": "state",
            "judgment": {"success": True, "score": 1.0, "judge": "state"},
        }
        assert ledger.complete_judging(first, judge_b, verdict)
        assert not ledger.complete_judging(first, dead, verdict)  # first finisher wins
        statuses = [a["status"] for a in ledger.attempts(first)]
        assert statuses.count("ok") == 1 and statuses.count("duplicate-ignored") == 1
        assert statuses.count("rolled-out") == 1 and statuses.count("judge-abandoned") == 1
        (row,) = [r for r in ledger.episodes() if r["episode_id"] == first]
        assert row["status"] == "done" and row["outcome"] == "success" and row["owner"] is None
        # a judge that keeps failing on a rollout ends the episode in error after max_attempts
        ledger.release(second_key.episode_id, rollout)
        second = _stage_fake(ledger, rollout)
        for expected in ("awaiting", "awaiting", "done"):
            ledger.claim_judging(judge_b, 60.0, 1)
            assert ledger.fail_judging(second, judge_b, "boom", 3) == expected
        counts = ledger.counts()
        assert counts["done"] == 2 and counts["error"] == 1 and counts["leased"] == 0
        # --retry-errors runs it again from the start: rolled out anew, judged once, and verify's stage check agrees
        assert ledger.reopen_errors(all_errors=True) == 1
        assert _stage_fake(ledger, rollout) == second
        assert [r["episode_id"] for r in ledger.claim_judging(judge_b, 60.0, 8)] == [second]
        assert ledger.complete_judging(
            second,
            judge_b,
            {
                **verdict,
                "outcome": "failure",
                "success": False,
                "score": 0.0,
                "judgment": {"success": False, "score": 0.0},
            },
        )
        from kosmos_env.campaign.stage_check import check_stage

        assert check_stage(ledger.episodes(), ledger.judge_queue(), ledger.attempts()) == []
        ledger.conn.execute("INSERT INTO attempts (episode_id, attempt, status) VALUES (?, 1, 'rolled-out')", (second,))
        assert any(
            "rolled out 2 times" in p for p in check_stage(ledger.episodes(), ledger.judge_queue(), ledger.attempts())
        )


def _comparable(results):
    out = {}
    for e in results["per_episode"]:
        judgment = {k: v for k, v in (e["judgment"] or {}).items() if k != "seconds"}
        out[e["episode_id"]] = (
            e["outcome"],
            e["score"],
            e["steps"],
            judgment,
            e["gate"],
            e["ground_truth"],
            e["artifacts"].get("actions") if isinstance(e.get("artifacts"), dict) else None,
            (e.get("provenance") or {}).get("identity_sha256"),
        )
    return out


@pytest.mark.slow
def test_two_stage_campaign_records_what_inline_judging_records(tmp_path):
    config = _config(seeds=2)
    inline = run_campaign(config, tmp_path / "inline", progress=False)
    staged = run_campaign(config, tmp_path / "staged", make_executor(1, "process", judge_workers=1), progress=False)
    assert staged["campaign"]["complete"]
    assert staged["campaign"]["queue"] == {"pending": 0, "rolling_out": 0, "rolled_out": 0, "judging": 0, "done": 4}
    assert _comparable(staged) == _comparable(inline)
    assert any(o[0] == "success" for o in _comparable(staged).values())  # not all alike: the check can fail
    report = verify_campaign(tmp_path / "staged")
    assert report.ok, report.problems
    assert report.checked["judge_stage"] == 4
    with Ledger(tmp_path / "staged" / "ledger.sqlite", create=False) as ledger:
        queue = ledger.judge_queue()
        assert [q["status"] for q in queue] == ["judged"] * 4
        assert all(q["frames"] for q in queue)  # the judge saw the env's own frames, not the lossy MP4
        judged_by = {q["judged_by"].split(":")[2].split("-")[0] for q in queue}
        rolled_by = {q["rolled_by"].split(":")[2].split("-")[0] for q in queue}
        assert judged_by == {"j0"} and rolled_by == {"w0"}  # each stage ran in its own worker
        # model loads are filed once per worker: the judge's by the judge worker, the world's by the rollout worker
        timings = [r["timings"] for r in ledger.episodes()]
        assert sum("load_judge" in t for t in timings) == 1 and sum("load_world" in t for t in timings) == 1


_SLOW_JUDGE = """
import sys, time
from kosmos_env.judges.state import StateJudge
from kosmos_env.campaign.judge_stage import judge_work
from kosmos_env.campaign.ledger import Ledger, make_owner
from kosmos_env.campaign.worker import WorkSettings
slow = StateJudge.judge
def judge(self, rollout):  # the campaign's own judge class (same identity), slowed so a kill lands mid-batch
    time.sleep(0.4)
    return slow(self, rollout)
StateJudge.judge = judge
with Ledger(sys.argv[1] + "/ledger.sqlite", create=False) as ledger:
    config = ledger.config()
judge_work(sys.argv[1], config, make_owner("slow-judge"), WorkSettings(judge_batch=2, lease_seconds=600.0))
"""


@pytest.mark.slow
def test_sigkill_during_judging_loses_nothing_and_judges_each_episode_once(tmp_path):
    config = _config(seeds=3)  # 6 episodes
    out = tmp_path / "run"
    open_campaign(config, out)
    # the rollout stage alone: every episode rolled out and filed for the judge stage
    work(out, config, make_owner("rollout"), WorkSettings(judge_stage=True))
    with Ledger(out / "ledger.sqlite", create=False) as ledger:
        assert ledger.stage_depths() == {"pending": 0, "rolling_out": 0, "rolled_out": 6, "judging": 0, "done": 0}
        rolled_before = {r["episode_id"]: r["record"] for r in ledger.judge_queue()}
        artifacts_before = len(ledger.artifacts())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_JUDGE, str(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 240
    done = 0
    while time.time() < deadline and proc.poll() is None:
        with Ledger(out / "ledger.sqlite", create=False) as ledger:
            done = ledger.counts()["done"]
        if done >= 2:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    with Ledger(out / "ledger.sqlite", create=False) as ledger:
        depths = ledger.stage_depths()
        judged_before = {
            q["episode_id"]: (q["judged_by"], q["judged_at"]) for q in ledger.judge_queue() if q["status"] == "judged"
        }
    assert 2 <= depths["done"] < 6, depths  # killed mid-way: some judged, some not
    assert depths["pending"] == depths["rolling_out"] == 0
    # rerun (in-line judging, no judge workers): the rest is judged from the stored rollouts
    results = run_campaign(config, out, progress=False)
    assert results["campaign"]["complete"]
    with Ledger(out / "ledger.sqlite", create=False) as ledger:
        queue = {q["episode_id"]: q for q in ledger.judge_queue()}
        assert all(q["status"] == "judged" for q in queue.values())
        for eid, (by, at) in judged_before.items():  # verdicts filed before the kill are kept as filed
            assert (queue[eid]["judged_by"], queue[eid]["judged_at"]) == (by, at)
        assert {eid: q["record"] for eid, q in queue.items()} == rolled_before  # no rollout was redone
        assert len(ledger.artifacts()) == artifacts_before
        for eid in rolled_before:
            statuses = [a["status"] for a in ledger.attempts(eid)]
            assert statuses.count("ok") == 1, (eid, statuses)  # judged exactly once
            assert statuses.count("rolled-out") == 1, (eid, statuses)  # rolled out exactly once
            assert not {"error", "abandoned"} & set(statuses)
    report = verify_campaign(out)
    assert report.ok, report.problems
    # verify checks each judged episode's judge identity: a verdict filed under another judge is caught
    with Ledger(out / "ledger.sqlite", create=False) as ledger:
        eid = next(iter(rolled_before))
        prov = ledger.conn.execute("SELECT provenance FROM episodes WHERE episode_id = ?", (eid,)).fetchone()[0]
        prov = json.loads(prov)
        prov["judge"]["spec"] = {"type": "robot_log"}
        ledger.conn.execute("UPDATE episodes SET provenance = ? WHERE episode_id = ?", (json.dumps(prov), eid))
    problems = verify_campaign(out).problems
    assert any("does not hash to its identity" in p for p in problems), problems
    assert any("different judges" in p for p in problems), problems


def test_bad_stage_flags_are_one_line_errors(tmp_path, capsys):
    base = tabletop_eval_argv(tmp_path / "run", ["random"], tasks=("spoon_on_towel",), seeds=1, video=True)
    cases = [
        (["--executor", "ray", "--judge-workers", "1", "--judge-resources", "{not json"], "--judge-resources"),
        (["--executor", "ray", "--judge-workers", "1", "--judge-resources", '{"num_gpus": -1}'], "num_gpus"),
        (["--executor", "ray", "--judge-workers", "1", "--judge-resources", '{"max_concurrency": 4}'], "unknown"),
        (["--executor", "ray", "--rollout-resources", "[1]"], "--rollout-resources"),
        (["--judge-workers", "1", "--executor", "in-process"], "in-process"),
        (["--judge-resources", '{"num_gpus": 0.25}'], "--judge-workers"),
        (["--judge-workers", "1", "--judge-batch", "0"], "--judge-batch"),
        (["--judge-workers", "-1"], "--judge-workers"),
    ]
    for extra, needle in cases:
        assert cli.main(base + extra) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0], (extra, err)
    assert not (tmp_path / "run" / "ledger.sqlite").exists()  # refused before anything ran


@pytest.mark.slow
@requires_extra("ray")
def test_ray_two_stage_campaign_places_judge_actors_by_their_own_resources(tmp_path):
    """1 rollout actor (1 CPU) + 2 judge actors packed on one CPU (0.5 each) in a 2-CPU Ray."""
    import ray

    config = _config(seeds=2)
    inline = run_campaign(config, tmp_path / "inline", progress=False)
    executor = make_executor(1, "ray", judge_workers=2, num_cpus=2, judge_resources='{"num_cpus": 0.5}')
    staged = run_campaign(config, tmp_path / "ray", executor, progress=False)
    assert not ray.is_initialized()
    assert staged["campaign"]["complete"] and _comparable(staged) == _comparable(inline)
    report = verify_campaign(tmp_path / "ray")
    assert report.ok, report.problems
    roles = sorted(info["role"] for info in executor.actor_info)
    assert roles == ["judge", "judge", "rollout"]
    with Ledger(tmp_path / "ray" / "ledger.sqlite", create=False) as ledger:
        queue = ledger.judge_queue()
    assert len(queue) == 4 and {q["status"] for q in queue} == {"judged"}
    assert all(":ray-j" in q["judged_by"] for q in queue) and all(":ray-a0" in q["rolled_by"] for q in queue)


@pytest.mark.slow
def test_two_stage_eval_killed_anywhere_resumes_without_redoing_a_finished_stage(tmp_path):
    """kill -9 a running `eval --judge-workers 1` (its worker processes die with it), rerun the same command."""
    out = tmp_path / "run"
    stages = ["--workers", "1", "--judge-workers", "1"]
    policies = [f"{SLOW}:skill=0.8,delay=0.03", "random"]
    argv = tabletop_eval_argv(out, policies, *stages, tasks=("spoon_on_towel",), seeds=3, video=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KOSMOS_ENV_ALLOW_IMPORT": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kosmos_env.cli", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    kill_after_done(proc, out, 2, timeout=240)
    with Ledger(out / "ledger.sqlite", create=False) as ledger:
        assert ledger.counts()["done"] < 6
        filed_before = {q["episode_id"]: q["record"] for q in ledger.judge_queue()}
    result = subprocess.run(
        [sys.executable, "-m", "kosmos_env.cli", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    with Ledger(out / "ledger.sqlite", create=False) as ledger:
        queue = {q["episode_id"]: q for q in ledger.judge_queue()}
        for eid, record in filed_before.items():  # a rollout filed before the kill was kept, not run again
            assert queue[eid]["record"] == record
        for row in ledger.episodes():
            statuses = [a["status"] for a in ledger.attempts(row["episode_id"])]
            assert row["status"] == "done" and statuses.count("ok") == 1, (row["episode_id"], statuses)
            if row["outcome"] != "discarded":
                assert statuses.count("rolled-out") == 1, (row["episode_id"], statuses)
    report = verify_campaign(out)
    assert report.ok, report.problems


def test_queue_depth_per_stage_in_progress_line_and_incomplete_note(tmp_path):
    from kosmos_env.campaign.progress import stage_postfix
    from kosmos_env.report.bundle import RESULTS_SCHEMA, SUPPORTED_SCHEMA_VERSIONS, bundle_from_data

    counts = {
        "success": 1,
        "discarded": 0,
        "abstained": 0,
        "error": 0,
        "pending": 3,
        "rolling_out": 2,
        "rolled_out": 4,
        "judging": 1,
    }
    assert stage_postfix(counts) == {
        "success": 1,
        "failure": 0,
        "discarded": 0,
        "abstained": 0,
        "errors": 0,
        "pending": 3,
        "rolling_out": 2,
        "await_judge": 4,
        "judging": 1,
    }
    idle = {**counts, "rolled_out": 0, "judging": 0}
    assert "await_judge" not in stage_postfix(idle) and stage_postfix(idle, two_stage=True)["await_judge"] == 0
    data = {
        "schema": RESULTS_SCHEMA,
        "schema_version": max(SUPPORTED_SCHEMA_VERSIONS),
        "campaign": {
            "complete": False,
            "planned": 10,
            "queue": {"pending": 3, "rolling_out": 2, "rolled_out": 4, "judging": 1, "done": 0},
        },
        "per_episode": [
            {
                "policy": "random",
                "task": "spoon_on_towel",
                "seed": 0,
                "repeat": 0,
                "outcome": "failure",
                "score": 0.0,
                "success": False,
            }
        ],
    }
    notes = bundle_from_data(tmp_path, tmp_path / "results.json", data).notes
    assert any("(pending 3, rolling out 2, rolled out 4, judging 1)" in n for n in notes), notes
