"""``eval --lockstep N``: a worker runs N episodes side by side through one vector env.

On Kosmos-Bridge-v1 (a tiny random Cosmos 3 checkpoint on CPU, the real diffusers pipeline) the
sub-envs' world calls of a step meet in one batched call, and a lane whose episode ends early
(the gate discards) takes the next pending episode at once while the other lanes go on (a
batched call then holds episodes at different steps); every record equals the one-at-a-time
campaign's for the same seeds. A lockstep campaign SIGKILLed while refilled lanes run, then
rerun, finishes every episode exactly once and keeps what was finished before the kill.
On the tabletop (no vector entry point) the plain sync vector env is used, and a policy that
offers a batched ``act_many`` is asked once per step for all lanes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kosmos_env import cli
from kosmos_env.policies.random_policy import RandomPolicy
from tests.conftest import requires_extra
from tests.support.campaign import ledger_count

pytestmark = pytest.mark.slow
from tests.support.paths import ROOT  # noqa: E402

LANES = 4
# small CPU settings; the gate's collapse threshold is lowered so that the tiny random model's
# frames pass it on one task (those episodes run the whole horizon) and fail it on the others
# (discarded after one step): lanes end at different steps
BRIDGE_OVERRIDES = {
    "image_size": [48, 64],
    "horizon": 3,
    "gate": {"collapse_ratio": 0.2},
    "world": {"device": "cpu", "dtype": "float32", "num_inference_steps": 2, "chunk_size": 4, "input_size": [48, 64]},
}


def bridge_config(seeds: int = 2):
    from kosmos_env.campaign.design import make_config

    return make_config(
        "Kosmos-Bridge-v1", ["random:chunk=4"], seeds=seeds, judge="action_only", spec_overrides=BRIDGE_OVERRIDES
    )


@pytest.fixture(scope="module")
def tiny_weights():
    """The saved tiny Cosmos 3 checkpoint (what ``--tiny`` runs), found by the world through its env var."""
    from kosmos_env.spec import load_spec
    from kosmos_env.testing.tiny_run import tiny_cosmos3_dir

    var = load_spec("Kosmos-Bridge-v1").world["local_path_env"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(var, tiny_cosmos3_dir())
        yield var


def run(config, out, lanes: int) -> dict:
    import torch

    from kosmos_env.campaign.runner import run_campaign
    from kosmos_env.campaign.worker import WorkSettings

    torch.set_num_threads(1)
    return run_campaign(config, out, settings=WorkSettings(lockstep=lanes), progress=False)


def records(out) -> dict[str, dict]:
    from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger

    with Ledger(Path(out) / LEDGER_NAME, create=False) as ledger:
        return {r["episode_id"]: r for r in ledger.episodes()}


def assert_same_episodes(out_a, out_b, same_attempts: bool = True) -> None:
    """Per episode: the same record fields, outcome, judgment (but its seconds), gate verdicts,
    artifacts and, within float tolerance, the same actions and robot log (and attempts, unless a
    kill interrupted some)."""
    a, b = records(out_a), records(out_b)
    assert sorted(a) == sorted(b)
    for recs in (a, b):  # each run filed its world, judge and policy builds as loads
        loads = {k for r in recs.values() for k in (r["timings"] or {}) if k.startswith("load_")}
        assert {"load_world", "load_judge", "load_policy"} <= loads, loads
    for eid in a:
        ra, rb = a[eid], b[eid]
        assert ra["status"] == rb["status"] == "done"
        for field in ("outcome", "success", "steps", "judge", "ground_truth", "provenance"):
            assert ra[field] == rb[field], (eid, field)
        assert ra["attempts"] == rb["attempts"] or not same_attempts, eid
        last_line = lambda text: text and text.strip().splitlines()[-1]  # noqa: E731  (tracebacks differ above it)
        assert last_line(ra["error"]) == last_line(rb["error"]), eid
        if ra["outcome"] == "error":
            continue
        if ra["score"] is None:
            assert rb["score"] is None, eid
        else:
            assert ra["score"] == pytest.approx(rb["score"], abs=1e-6), eid
        strip = lambda j: None if j is None else {k: v for k, v in j.items() if k != "seconds"}  # noqa: E731
        assert strip(ra["judgment"]) == strip(rb["judgment"]), eid
        ga, gb = ra["gate"], rb["gate"]
        assert [c["passed"] for c in ga["calls"]] == [c["passed"] for c in gb["calls"]], eid
        assert [c["check"] for c in ga["calls"]] == [c["check"] for c in gb["calls"]], eid
        np.testing.assert_allclose([c["score"] for c in ga["calls"]], [c["score"] for c in gb["calls"]], atol=1e-2)
        # model loads are filed with whichever episode a worker finishes first: not compared per episode
        warm = lambda t: sorted(k for k in t if not k.startswith("load_"))  # noqa: E731
        assert warm(ra["timings"]) == warm(rb["timings"]), eid
        for kind in ("video", "actions", "log"):
            assert (ra[kind] is None) == (rb[kind] is None), (eid, kind)
        np.testing.assert_allclose(
            np.load(Path(out_a) / ra["actions"]), np.load(Path(out_b) / rb["actions"]), atol=1e-6
        )
        if ra["log"]:
            la, lb = np.load(Path(out_a) / ra["log"]), np.load(Path(out_b) / rb["log"])
            assert sorted(la.files) == sorted(lb.files)
            for name in la.files:
                np.testing.assert_allclose(la[name], lb[name], atol=1e-4, err_msg=f"{eid} log {name}")


@pytest.fixture(scope="module")
def one_at_a_time(tiny_weights, tmp_path_factory):
    out = tmp_path_factory.mktemp("lockstep") / "single"
    run(bridge_config(), out, lanes=1)
    return out


def batch_sizes(steps_in_claim_order: list[int], lanes: int, refill: bool) -> list[int]:
    """The sizes of the batched world calls a lockstep worker makes for episodes of these lengths."""
    queue, running, sizes = list(steps_in_claim_order), [], []
    while queue or running:
        if refill or not running:
            while queue and len(running) < lanes:
                running.append(queue.pop(0))
        sizes.append(len(running))
        running = [left - 1 for left in running if left > 1]
    return sizes


@requires_extra("models")  # a tiny Cosmos 3 pipeline
def test_lockstep_equals_one_at_a_time_and_batches_the_world(one_at_a_time, tmp_path, monkeypatch):
    import kosmos_env.batched_vector as bv
    from kosmos_env.campaign.verify import verify_campaign

    sizes = []
    real = bv._generate_batch

    def counting(pipe, requests):
        sizes.append(len(requests))
        return real(pipe, requests)

    monkeypatch.setattr(bv, "_generate_batch", counting)
    out = tmp_path / "lockstep"
    results = run(bridge_config(), out, lanes=LANES)
    assert results["campaign"]["complete"]
    single = records(one_at_a_time)
    outcomes = sorted(r["outcome"] for r in single.values())
    steps = sorted(r["steps"] for r in single.values())
    # what makes the comparison worth something: some episodes ran the whole horizon, others ended early
    assert "discarded" in outcomes and any(o != "discarded" for o in outcomes), outcomes
    assert min(steps) == 1 and max(steps) == BRIDGE_OVERRIDES["horizon"], steps
    assert_same_episodes(one_at_a_time, out)
    # every world call went through a batched call; the first step held all 4 lanes, and lanes that
    # ended stopped being stepped: the later batches are only the episodes still running
    assert sum(sizes) == sum(steps)
    assert sizes[0] == LANES and max(sizes) == LANES and len(sizes) < sum(steps)
    # a freed lane took the next episode at once (claims go in plan order): the calls are exactly
    # those of refilled lanes, which here differ from (are fewer than) whole batches'
    by_order = [r["steps"] for r in sorted(single.values(), key=lambda r: r["ord"])]
    refilled, whole = batch_sizes(by_order, LANES, True), batch_sizes(by_order, LANES, False)
    assert sizes == refilled and len(refilled) < len(whole), (sizes, refilled, whole)
    assert verify_campaign(out).ok


@requires_extra("models")
def test_sigkill_during_a_lockstep_batch_then_rerun_finishes_each_episode_once(one_at_a_time, tiny_weights, tmp_path):
    out = tmp_path / "killed"
    script = (
        "import sys, torch; torch.set_num_threads(1)\n"
        "from tests.campaign.test_lockstep import bridge_config, run\n"
        f"run(bridge_config(), sys.argv[1], lanes={LANES})\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUJOCO_GL="egl", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 240
        seen = None
        while time.time() < deadline and proc.poll() is None:
            done = ledger_count(out, "SELECT COUNT(*) FROM episodes WHERE status = 'done'")
            leased = ledger_count(out, "SELECT COUNT(*) FROM episodes WHERE status = 'leased'")
            # lanes are running and at least one of them was refilled (more episodes started than lanes)
            if done >= 1 and leased >= 1 and done + leased > LANES:
                os.kill(proc.pid, signal.SIGKILL)
                seen = (done, leased)
                break
            time.sleep(0.02)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert seen is not None, (
        f"the lockstep campaign ended (rc {proc.returncode}) before a kill could land: {proc.stderr.read()[-2000:]}"
    )
    assert proc.returncode == -signal.SIGKILL
    planned = len(records(one_at_a_time))
    assert seen[0] < planned
    before = {eid: r for eid, r in records(out).items() if r["status"] == "done"}

    results = run(bridge_config(), out, lanes=LANES)  # the rerun resumes the same campaign
    after = records(out)
    for eid, rec in before.items():  # finished before the kill: kept as recorded, not run again
        assert after[eid] == rec, eid
    assert results["campaign"]["complete"]
    assert ledger_count(out, "SELECT COUNT(*) FROM episodes WHERE status = 'done'") == planned
    # exactly once: one recorded completion per episode, none ignored as a duplicate
    assert ledger_count(out, "SELECT COUNT(*) FROM attempts WHERE status = 'ok'") == planned
    assert ledger_count(out, "SELECT COUNT(DISTINCT episode_id) FROM attempts WHERE status = 'ok'") == planned
    assert ledger_count(out, "SELECT COUNT(*) FROM attempts WHERE status = 'duplicate-ignored'") == 0
    # the episodes the kill interrupted were taken over (logged), not counted against them
    assert 1 <= ledger_count(out, "SELECT COUNT(*) FROM attempts WHERE status = 'abandoned'") <= LANES
    assert_same_episodes(one_at_a_time, out, same_attempts=False)


class BatchedRandom(RandomPolicy):
    """RandomPolicy with a batched ``act_many`` (counts its calls): what a batching model would offer."""

    name = "batched-random"
    calls: list[int] = []

    @classmethod
    def act_many(cls, policies, observations):
        cls.calls.append(len(policies))
        return [p.act(o) for p, o in zip(policies, observations, strict=True)]


class FailsMidway(RandomPolicy):
    """RandomPolicy that raises at its 5th action of seed 1: an episode failing mid-batch."""

    name = "fails-midway"

    def reset(self, instruction, seed=None):
        super().reset(instruction, seed)
        self.seed, self.t = seed, 0

    def act(self, obs):
        self.t += 1
        if self.seed == 1 and self.t == 5:
            raise RuntimeError("FailsMidway fails at step 5 of seed 1 (test failure injection)")
        return super().act(obs)


def test_tabletop_lockstep_uses_a_sync_vector_env_and_a_policys_batched_call(tmp_path, monkeypatch):
    from kosmos_env.campaign.design import make_config

    monkeypatch.setenv("KOSMOS_ENV_ALLOW_IMPORT", "1")
    BatchedRandom.calls.clear()
    policies = [
        "scripted:skill=1.0",
        "tests.campaign.test_lockstep:BatchedRandom",
        "tests.campaign.test_lockstep:FailsMidway",
    ]
    config = make_config(
        "Kosmos-Tabletop-v1",
        policies,
        tasks=["carrot_on_plate"],
        seeds=2,
        judge="state",
        image_size=(64, 64),
        video=False,
        spec_overrides={"horizon": 12},
    )
    run(config, tmp_path / "one", lanes=1)
    assert BatchedRandom.calls == []  # one at a time: plain act
    run(config, tmp_path / "six", lanes=6)
    # FailsMidway's seed-1 episode fails mid-batch (the other lanes go on) in each of its 3 attempts
    # and ends as an error, as one at a time
    assert [r["outcome"] for r in records(tmp_path / "six").values()].count("error") == 1
    assert_same_episodes(tmp_path / "one", tmp_path / "six")
    # the first batch holds all 6 episodes: BatchedRandom is asked once per step for both of its
    # lanes (one action per step), so its calls cover exactly its episodes' steps
    steps = sum(r["steps"] for r in records(tmp_path / "six").values() if r["policy"].endswith("BatchedRandom"))
    assert max(BatchedRandom.calls) == 2 and sum(BatchedRandom.calls) == steps


class SharedState(RandomPolicy):
    """A policy whose instances share one episode state (``side_by_side = False``)."""

    side_by_side = False


def test_bad_lockstep_is_one_line_and_nothing_runs(tmp_path, capsys, monkeypatch):
    out = tmp_path / "camp"
    assert cli.main(["eval", "--policy", "random", "--seeds", "1", "--out", str(out), "--lockstep", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--lockstep must be at least 1" in err[0]
    # a policy whose instances share one state cannot take a batch (refused before it is built;
    # a served remote: policy runs in lockstep: each lane is its own server session, see
    # tests/policies/test_server_sessions.py)
    monkeypatch.setenv("KOSMOS_ENV_ALLOW_IMPORT", "1")
    argv = [
        "eval",
        "--policy",
        "tests.campaign.test_lockstep:SharedState",
        "--seeds",
        "1",
        "--out",
        str(out),
        "--lockstep",
        "2",
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "side by side" in err[0] and "--lockstep 1" in err[0], err
    # with Ray actors as well (checked before Ray starts)
    assert cli.main(argv + ["--executor", "ray"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "side by side" in err[0], err
    assert (
        cli.main(
            ["eval", "--policy", "random", "--seeds", "1", "--out", str(out), "--lockstep", "-1", "--executor", "ray"]
        )
        == 2
    )
    assert "--lockstep must be at least 1" in capsys.readouterr().err
    assert not out.exists()


def test_lockstep_rollout_workers_feed_the_judge_stage(tmp_path):
    """``--lockstep`` with ``--judge-workers``: lockstep rollout workers file rolled-out episodes and the
    judge stage judges them; the records equal a one-at-a-time campaign judged in-line."""
    from kosmos_env.campaign.verify import verify_campaign
    from tests.support.campaign import ledger_rows

    base = [
        "eval",
        "--env",
        "Kosmos-Tabletop-v1",
        "--policy",
        "scripted:skill=1.0",
        "--policy",
        "random",
        "--tasks",
        "carrot_on_plate",
        "--seeds",
        "2",
        "--image-size",
        "64",
        "64",
        "--no-video",
        "--no-progress",
    ]
    assert cli.main(base + ["--out", str(tmp_path / "inline")]) == 0
    staged = tmp_path / "staged"
    assert (
        cli.main(
            base
            + [
                "--out",
                str(staged),
                "--executor",
                "process",
                "--workers",
                "1",
                "--judge-workers",
                "1",
                "--lockstep",
                "3",
            ]
        )
        == 0
    )
    assert ledger_rows(staged) == ledger_rows(tmp_path / "inline")
    assert {r[1] for r in ledger_rows(staged).values()} == {"success", "failure"}
    assert verify_campaign(staged).ok
    # the rollout worker ran in lockstep: it leased the first 3 episodes together, the 4th after they ended
    started = [
        ledger_count(staged, f"SELECT CAST(1000 * started AS INTEGER) FROM episodes WHERE ord = {i}") for i in range(4)
    ]
    assert started[2] - started[0] < started[3] - started[2], started


def refilled_attempts(out) -> list[str]:
    """Attempts that started while an earlier-started attempt of the same worker was still running
    *and* after another of that worker's attempts had ended: a lane refilled mid-batch. (Whole
    batches never do this: they claim only when every lane is free.)"""
    from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger

    with Ledger(Path(out) / LEDGER_NAME, create=False) as ledger:
        # a failed attempt has its own times; the last (ok) attempt's start is the episode's
        rows = [a for a in ledger.attempts() if a["status"] == "error"]
        rows += [{**e, "attempt": e["attempts"]} for e in ledger.episodes("done") if e["outcome"] != "error"]
    found = []
    for b in rows:
        mine = [a for a in rows if a["worker"] == b["worker"] and a is not b]
        if any(a["started"] < b["started"] < a["finished"] for a in mine) and any(
            a["finished"] <= b["started"] for a in mine
        ):
            found.append(f"{b['episode_id']}#{b['attempt']}")
    return found


@requires_extra("ray")
def test_ray_actors_run_lockstep_lanes_refilled_with_the_same_records(tmp_path, monkeypatch):
    """``--executor ray --lockstep 3``: a Ray actor runs 3 lanes, the driver holds their leases and
    feeds a freed lane (a policy error at step 5) while the others go on. The actor is SIGKILLed
    while its lanes run (an OOM kill): its episodes go back unfinished, a new actor finishes them,
    nothing finished is run again, and the records equal one at a time."""
    import psutil
    import ray

    from kosmos_env.campaign.design import make_config
    from kosmos_env.campaign.executors import make_executor
    from kosmos_env.campaign.runner import run_campaign
    from kosmos_env.campaign.verify import verify_campaign
    from kosmos_env.campaign.worker import WorkSettings

    monkeypatch.setenv("KOSMOS_ENV_ALLOW_IMPORT", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the Ray worker imports this module's FailsMidway
    # 3 seeds: FailsMidway's seed-1 episode runs beside others, so its lane is refilled mid-batch
    # (the scripted policy waits 20 ms per action so that the kill below lands while lanes run)
    config = make_config(
        "Kosmos-Tabletop-v1",
        ["tests.support.campaign:SlowScripted:skill=1.0,delay=0.02", "tests.campaign.test_lockstep:FailsMidway"],
        tasks=["carrot_on_plate"],
        seeds=3,
        judge="state",
        image_size=(64, 64),
        video=False,
        spec_overrides={"horizon": 12},
    )
    run(config, tmp_path / "one", lanes=1)
    out = tmp_path / "ray"
    killed: list[tuple[int, int, dict]] = []

    def kill_the_actor_mid_run():
        deadline = time.time() + 120
        while time.time() < deadline and not killed:
            done = ledger_count(out, "SELECT COUNT(*) FROM episodes WHERE status = 'done'")
            leased = ledger_count(out, "SELECT COUNT(*) FROM episodes WHERE status = 'leased'")
            if done >= 1 and leased >= 2:
                actors = []
                for p in psutil.Process().children(recursive=True):
                    try:
                        if p.name().startswith("ray::EpisodeActor"):
                            actors.append(p)
                    except psutil.NoSuchProcess:  # exited between listing and reading its name
                        pass
                if actors:
                    snapshot = {e: r for e, r in records(out).items() if r["status"] == "done"}
                    for p in actors:
                        p.send_signal(signal.SIGKILL)
                    killed.append((done, leased, snapshot))
            time.sleep(0.02)

    import threading

    killer = threading.Thread(target=kill_the_actor_mid_run)
    killer.start()
    executor = make_executor(1, "ray", num_cpus=2)
    try:
        results = run_campaign(config, out, executor, settings=WorkSettings(lockstep=3), progress=False)
    finally:
        killer.join()
    assert not ray.is_initialized()
    assert killed, "the campaign ended before the actor could be killed mid-run"
    assert results["campaign"]["complete"]
    assert_same_episodes(tmp_path / "one", out, same_attempts=False)
    assert verify_campaign(out).ok
    after = records(out)
    for eid, rec in killed[0][2].items():  # finished before the kill: kept as recorded
        assert after[eid] == rec, eid
    # exactly once: one completion per episode; the killed lanes' runs were infrastructure attempts
    planned = len(after)
    assert ledger_count(out, "SELECT COUNT(*) FROM attempts WHERE status = 'ok'") == planned - 1  # 1 ends in error
    assert ledger_count(out, "SELECT COUNT(DISTINCT episode_id) FROM attempts WHERE status = 'ok'") == planned - 1
    assert ledger_count(out, "SELECT COUNT(*) FROM attempts WHERE status = 'duplicate-ignored'") == 0
    assert 1 <= ledger_count(out, "SELECT COUNT(*) FROM attempts WHERE status = 'infra-error'") <= 3
    assert {r["worker"].rsplit(":", 1)[-1] for r in after.values()} == {"ray-a0"}
    # 3 lanes at once, and a lane freed by the failing episode was refilled while the others ran
    assert refilled_attempts(out), "no lane was refilled mid-batch"
    assert not refilled_attempts(tmp_path / "one")


def test_ray_actor_lanes_send_every_artifact_when_episodes_ending_together_share_one(tmp_path):
    """The Ray actor's lockstep call, run here without Ray: two lanes whose episodes end in the same
    step with byte-identical actions (one content-addressed file) both send its bytes back."""
    from kosmos_env.campaign.design import make_config
    from kosmos_env.campaign.ray_executor import EpisodeActor

    config = make_config(
        "Kosmos-Tabletop-v1",
        ["random"],
        tasks=["carrot_on_plate", "spoon_on_towel"],
        seeds=1,
        judge="state",
        image_size=(64, 64),
        video=False,
        spec_overrides={"horizon": 2},
    )
    actor = EpisodeActor(config.to_dict(), "host:1:test")
    try:
        keys = list(config.episodes())
        result = actor.run_lanes(keys, 2)
        ended = result.ended  # a Fatal answer has no .ended: the test fails with its error shown
        assert sorted(e.key.episode_id for e in ended) == sorted(k.episode_id for k in keys)  # same step
        actions = [next(a for a in e.artifacts if a.kind == "actions") for e in ended]
        assert actions[0].rel == actions[1].rel and actions[0].data and actions[0].data == actions[1].data
        assert not actor.lanes.running and actor.lanes.free == 2
    finally:
        actor.close()
