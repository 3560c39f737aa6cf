"""The Ray executor: same outcomes as the in-process executor, leases shared with local workers,
a driver killed mid-campaign resumed with Ray, Ray shut down and no stray processes left.

The slow tests start a 2-CPU local Ray instance (about 5-10 s here) and keep campaigns tiny.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kosmos_env.campaign import make_config, run_campaign, verify_campaign
from kosmos_env.campaign.executors import InProcessExecutor, make_executor
from kosmos_env.campaign.ray_executor import parse_actor_resources
from kosmos_env.campaign.worker import WorkSettings
from tests.support.campaign import SLOW, done_count, kill_after_done, tabletop_eval_argv
from tests.support.paths import ROOT

pytestmark = pytest.mark.usefixtures("allow_test_policy_import")  # SLOW is a module:Class policy
TASKS = ["carrot_on_plate", "spoon_on_towel"]


def _outcomes(out) -> dict[str, tuple]:
    con = sqlite3.connect(Path(out) / "ledger.sqlite")
    try:
        rows = con.execute("SELECT episode_id, status, outcome, success, steps, actions, log FROM episodes").fetchall()
    finally:
        con.close()
    return {r[0]: r[1:] for r in rows}


def _workers(out) -> list[str]:
    con = sqlite3.connect(Path(out) / "ledger.sqlite")
    try:
        return [w for (w,) in con.execute("SELECT worker FROM episodes WHERE status = 'done'")]
    finally:
        con.close()


def _descendants():
    import psutil

    return psutil.Process().children(recursive=True)


def _name(proc) -> str:
    """A process's name, or "" when it exited between being listed and being read."""
    import psutil

    try:
        return proc.name()
    except psutil.NoSuchProcess:
        return ""


def _assert_all_exit(procs, timeout: float) -> None:
    """Every process in ``procs`` (ones this test started) exits within ``timeout``; else kill and fail."""
    import psutil

    _, alive = psutil.wait_procs(procs, timeout=timeout)
    names = [(p.pid, _name(p)) for p in alive if p.is_running()]
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    assert not names, f"stray processes left behind: {names}"


# -- fast: options and lazy import -----------------------------------------------------------
def test_ray_is_imported_only_by_the_ray_executor():
    code = (
        "import sys, kosmos_env, kosmos_env.campaign.runner\n"
        "from kosmos_env.campaign.executors import make_executor\n"
        "ex = make_executor(3, 'ray', actor_resources='{\"num_gpus\": 0.5}', address=None, num_cpus=None)\n"
        "assert 'ray' not in sys.modules, 'ray imported before the executor ran'\n"
        "print(type(ex).__name__, ex.workers, ex.actor_options)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "RayExecutor 3 {'num_gpus': 0.5, 'num_cpus': 1}"


@pytest.mark.parametrize(
    "bad, match",
    [
        ("{not json", "JSON object"),
        ("[1, 2]", "JSON object"),
        ('{"num_gpu": 1}', "unknown actor resource"),
        ('{"num_gpus": -1}', "non-negative"),
        ('{"num_gpus": 1.5}', "whole number"),
        ('{"num_cpus": "two"}', "non-negative number"),
        ('{"resources": {"TPU": -2}}', "non-negative numbers"),
    ],
)
def test_bad_actor_resources_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_actor_resources(bad)


def test_actor_resources_defaults_and_gpu_fractions():
    assert parse_actor_resources(None) == {"num_cpus": 1}
    assert parse_actor_resources('{"num_gpus": 1, "num_cpus": 2}') == {"num_gpus": 1, "num_cpus": 2}
    assert parse_actor_resources({"num_gpus": 0.25, "resources": {"world_model": 1}}) == {
        "num_gpus": 0.25,
        "resources": {"world_model": 1},
        "num_cpus": 1,
    }


def test_ray_only_options_are_refused_elsewhere_and_checked():
    with pytest.raises(ValueError, match="only apply to --executor ray"):
        make_executor(2, "process", address="auto")
    with pytest.raises(ValueError, match="cannot be used with --address"):
        make_executor(2, "ray", address="auto", num_cpus=2)
    with pytest.raises(ValueError, match="at least 1"):
        make_executor(0, "ray")


def test_eval_cli_accepts_the_ray_flags():
    import argparse

    from kosmos_env.commands import eval as eval_cmd

    parser = argparse.ArgumentParser()
    eval_cmd.add_parser(parser.add_subparsers())
    args = parser.parse_args(
        [
            "eval",
            "--policy",
            "random",
            "--out",
            "x",
            "--executor",
            "ray",
            "--workers",
            "4",
            "--address",
            "auto",
            "--actor-resources",
            '{"num_gpus": 1}',
        ]
    )
    assert (args.executor, args.address, args.actor_resources, args.ray_num_cpus) == (
        "ray",
        "auto",
        '{"num_gpus": 1}',
        None,
    )


# -- slow: real Ray ----------------------------------------------------------------------
@pytest.mark.slow
def test_ray_campaign_matches_in_process_and_shares_the_ledger(tmp_path, monkeypatch):
    """Same seeds, same outcomes and artifacts; a local worker runs beside the Ray actors."""
    ray = pytest.importorskip("ray", reason="needs the ray extra (pip install -e '.[ray]')")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # Ray workers import tests.support.campaign
    cfg = make_config(
        "Kosmos-Tabletop-v1",
        [f"{SLOW}:skill=1.0,delay=0.005", "scripted:skill=0.3"],
        tasks=TASKS,
        seeds=3,
        image_size=(64, 64),
        video=True,
    )
    ref = run_campaign(cfg, tmp_path / "local", InProcessExecutor(), progress=False)

    before = {p.pid for p in _descendants()}
    out = tmp_path / "ray"
    executor = make_executor(2, "ray", num_cpus=2)
    # a local worker on the same folder at the same time: both take leases from one ledger
    from kosmos_env.campaign.ledger import make_owner
    from kosmos_env.campaign.runner import open_campaign
    from kosmos_env.campaign.worker import work

    open_campaign(cfg, out)
    owner = make_owner("local")
    local_done, local_errors = [], []

    def local_worker():  # joins once the Ray actors are running, then takes leases like them
        try:
            deadline = time.time() + 90
            while done_count(out) < 1 and time.time() < deadline:
                time.sleep(0.05)
            local_done.append(work(out, cfg, owner, WorkSettings(wait_for_others=False)))
        except BaseException as exc:  # surfaced by the assertions below
            local_errors.append(exc)

    local = threading.Thread(target=local_worker)
    t0 = time.time()
    local.start()
    results = run_campaign(cfg, out, executor, progress=False)
    local.join(timeout=120)
    assert not local_errors, local_errors
    took = time.time() - t0
    assert not ray.is_initialized(), "the executor started Ray, so it must shut it down"
    _assert_all_exit([p for p in _descendants() if p.pid not in before], timeout=30)

    assert _outcomes(out) == _outcomes(tmp_path / "local")  # outcomes, steps, actions and log hashes
    assert [e["outcome"] for e in results["per_episode"]] == [e["outcome"] for e in ref["per_episode"]]
    assert results["campaign"]["complete"] and len(results["per_episode"]) == 12
    workers = _workers(out)
    ray_workers = {w for w in workers if ":ray-a" in w}
    assert ray_workers and len(ray_workers) <= 2, workers
    assert sum(1 for w in workers if w == owner) == local_done[0] >= 1  # mixed: local and Ray workers
    assert len(ray_workers) + local_done[0] + sum(1 for w in workers if ":ray-a" in w) >= 3
    assert {e["artifacts"]["video"] is not None for e in results["per_episode"]} == {True}
    assert all(e["timings"]["total"] >= e["timings"]["world"] > 0 for e in results["per_episode"])
    report = verify_campaign(out)
    assert report.ok, report.problems
    con = sqlite3.connect(out / "ledger.sqlite")
    ok = con.execute("SELECT episode_id, COUNT(*) FROM attempts WHERE status = 'ok' GROUP BY episode_id").fetchall()
    executors = [r[0] for r in con.execute("SELECT executor FROM runs")]
    con.close()
    assert len(ok) == 12 and {n for _, n in ok} == {1}  # no episode lost or run twice
    assert executors == ["ray"]
    assert took < 120


def _eval_argv(out, address):
    ray_args = ["--executor", "ray", "--workers", "2", "--address", address]
    return tabletop_eval_argv(out, [f"{SLOW}:skill=1.0,delay=0.02"], *ray_args, tasks=TASKS, seeds=4)


@pytest.mark.slow
def test_driver_killed_mid_campaign_resumes_with_ray(tmp_path, monkeypatch):
    """kill -9 the driver (Ray keeps running), then resume with Ray: exactly the missing episodes run."""
    ray = pytest.importorskip("ray", reason="needs the ray extra (pip install -e '.[ray]')")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = make_config(
        "Kosmos-Tabletop-v1", [f"{SLOW}:skill=1.0,delay=0.02"], tasks=TASKS, seeds=4, image_size=(64, 64), video=False
    )
    run_campaign(cfg, tmp_path / "reference", InProcessExecutor(), progress=False)

    before = {p.pid for p in _descendants()}
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    try:
        address = ray.get_runtime_context().gcs_address
        out = tmp_path / "killed"
        driver = subprocess.Popen(
            [sys.executable, "-m", "kosmos_env.cli", *_eval_argv(out, address)],
            cwd=ROOT,
            env=dict(os.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        kill_after_done(driver, out, 2, timeout=90)
        snapshot = _outcomes(out)
        n_done = sum(1 for v in snapshot.values() if v[0] == "done")
        in_flight = sorted(k for k, v in snapshot.items() if v[0] == "leased")
        assert 2 <= n_done < 8 and in_flight, (n_done, in_flight)

        # Ray removes the dead driver's actors (they never touch the ledger, so none can write late)

        deadline = time.time() + 30
        while time.time() < deadline:
            actors = [p for p in _descendants() if _name(p).startswith("ray::EpisodeActor")]
            if not actors:
                break
            time.sleep(0.5)
        assert not actors, [(p.pid, p.name()) for p in actors]

        # resume in this process on the same Ray instance (the executor leaves an instance it did not start)
        results = run_campaign(cfg, out, make_executor(2, "ray"), progress=False)
        assert ray.is_initialized()
        after = _outcomes(out)
        for key, value in snapshot.items():
            if value[0] == "done":
                assert after[key] == value  # finished episodes kept, not redone
        assert after == _outcomes(tmp_path / "reference")
        assert results["campaign"]["complete"]
        con = sqlite3.connect(out / "ledger.sqlite")
        ok = dict(con.execute("SELECT episode_id, COUNT(*) FROM attempts WHERE status = 'ok' GROUP BY episode_id"))
        abandoned = sorted(r[0] for r in con.execute("SELECT episode_id FROM attempts WHERE status = 'abandoned'"))
        runs = [
            (r[0], "--address" in json.loads(r[1]))
            for r in con.execute("SELECT executor, argv FROM runs ORDER BY started")
        ]
        con.close()
        assert set(ok) == set(after) and set(ok.values()) == {1}
        assert abandoned == in_flight  # the dead driver's leases were taken over at once
        assert runs == [("ray", True), ("ray", False)]  # the killed CLI driver, then this resume
        assert verify_campaign(out).ok
    finally:
        ray.shutdown()
    assert not ray.is_initialized()
    _assert_all_exit([p for p in _descendants() if p.pid not in before], timeout=30)
