"""Fault matrix, campaigns: nothing is lost to an infrastructure failure, errors are loud, and
no process outlives a kill (issue 18, items 2-4, and the kill / outage acceptance runs).

Each test injects the fault for real: a dead lease owner, a policy server stopped and restarted
mid-campaign, a worker and then the whole eval process killed with SIGKILL, ten SIGKILLs at
seeded random moments. Campaigns are tiny (64x64, one task, few seeds)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from kosmos_env import cli
from kosmos_env.campaign import make_config, run_campaign, verify_campaign
from kosmos_env.campaign.executors import InProcessExecutor
from kosmos_env.campaign.failures import is_infrastructure_failure
from kosmos_env.campaign.ledger import Ledger
from kosmos_env.campaign.runner import open_campaign
from kosmos_env.campaign.worker import WorkSettings
from tests.support.campaign import SLOW, done_count, ledger_rows
from tests.support.faults import (
    TASK,
    EvalLauncher,
    alive,
    attempt_counts,
    descendants,
    eval_argv,
    kill_tree_now,
    runs_started,
    spawn_cli,
    wait_gone,
)

pytestmark = pytest.mark.usefixtures("allow_test_policy_import")

# 0.03 s a step: an episode takes at least 1.2 s on any machine, so no run of the ten-kill test can
# finish the campaign before its kill (its seeded windows are at most 2 s, only one above 1.2 s)
KILL_POLICY = f"{SLOW}:delay=0.03"
KILL_SEEDS = 3


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _tiny_config(policies=("scripted:skill=1.0",), seeds=2):
    return make_config(
        "Kosmos-Tabletop-v1", list(policies), tasks=[TASK], seeds=seeds, image_size=(64, 64), video=False
    )


# -- item 2: which failures are final ----------------------------------------------------------
def test_failure_kinds_are_told_apart():
    from kosmos_env.policies.protocol import RemotePolicyError

    for exc in (
        MemoryError(),
        ConnectionRefusedError(111, "refused"),
        TimeoutError("slow"),
        RemotePolicyError("cannot reach the remote policy", transport=True),
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    ):
        assert is_infrastructure_failure(exc), exc
    try:  # the cause counts: an adapter that wraps an OOM is still out of memory
        try:
            raise MemoryError()
        except MemoryError as inner:
            raise ValueError("model failed") from inner
    except ValueError as wrapped:
        assert is_infrastructure_failure(wrapped)
    for exc in (
        ValueError("bad action"),
        RuntimeError("policy refuses seed 1"),
        KeyError("x"),
        RemotePolicyError("answered HTTP 500 policy_error: boom", transport=False),
    ):
        assert not is_infrastructure_failure(exc), exc


def test_dead_owners_and_infrastructure_failures_never_close_an_episode(tmp_path):
    cfg = _tiny_config(seeds=1)
    open_campaign(cfg, tmp_path)
    host = socket.gethostname()
    with Ledger(tmp_path / "ledger.sqlite", create=False) as ledger:
        # the owner dies five times in a row (max_attempts 3): the episode is taken over every time
        for i in range(5):
            key = ledger.claim(f"{host}:{_dead_pid()}:t{i}", 60.0, max_attempts=3)
            assert key is not None and key.seed == 0, f"take-over {i} refused"
        assert ledger.counts()["error"] == 0
        owner = f"{host}:{os.getpid()}:live"
        key = ledger.claim(owner, 60.0, max_attempts=3)  # takes over the fifth dead lease
        # ten infrastructure failures in a row: always back to pending, never an error
        for _ in range(10):
            assert (
                ledger.fail(key.episode_id, owner, "RemotePolicyError: cannot reach", 3, infrastructure=True)
                == "pending"
            )
            key = ledger.claim(owner, 60.0, max_attempts=3)
        assert ledger.counts()["error"] == 0
        # the policy's own failures count: the third one closes the episode as an error
        assert ledger.fail(key.episode_id, owner, "ValueError: bad action", 3) == "pending"
        key = ledger.claim(owner, 60.0, 3)
        assert ledger.fail(key.episode_id, owner, "ValueError: bad action", 3) == "pending"
        key = ledger.claim(owner, 60.0, 3)
        assert ledger.fail(key.episode_id, owner, "ValueError: bad action", 3) == "done"
        assert ledger.counts()["error"] == 1
        # a rerun reopens infrastructure errors only; --retry-errors reopens the policy's too
        assert ledger.reopen_errors(all_errors=False) == 0
        assert ledger.reopen_errors(all_errors=True) == 1
        key = ledger.claim(owner, 60.0, 3)
        assert key is not None  # and its earlier failures no longer count:
        assert ledger.fail(key.episode_id, owner, "ValueError: bad action", 3) == "pending"
        # an older ledger's "abandoned after N attempts" error is an infrastructure failure: reopened
        ledger.conn.execute(
            "UPDATE episodes SET status = 'done', outcome = 'error', error = "
            "'abandoned after 3 attempts: the worker running it stopped (owner process died) each time'"
        )
        assert ledger.reopen_errors(all_errors=False) == 1
        assert ledger.counts()["pending"] == 1


def _serve(port: int = 0):
    from kosmos_env.policies import make_policy
    from kosmos_env.policies.protocol import PolicyServer
    from kosmos_env.policies.remote import policy_info

    policy = make_policy("scripted", skill=1.0)
    return PolicyServer(policy, policy_info(policy), port=port).start()


@pytest.mark.slow
def test_policy_server_outage_mid_campaign_loses_nothing(tmp_path):
    """The server stops for one second mid-campaign and comes back: every episode still finishes,
    none is an error, each is recorded once, outcomes equal an in-process run's."""
    server = _serve()
    port = server.httpd.server_address[1]
    out = tmp_path / "remote"
    cfg = _tiny_config([f"remote:url=http://127.0.0.1:{port}"], seeds=3)
    state = {"server": server, "stopped_at_done": None}

    def outage():
        deadline = time.time() + 300
        while done_count(out) < 1 and time.time() < deadline:
            time.sleep(0.01)
        state["stopped_at_done"] = done_count(out)
        state["server"].close()  # the server process goes away, open connections included
        time.sleep(1.0)
        state["server"] = _serve(port)  # ... and is restarted on the same port

    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    try:
        results = run_campaign(cfg, out, InProcessExecutor(), WorkSettings(infra_backoff=0.2), progress=False)
    finally:
        thread.join(timeout=60)
        state["server"].close()
    assert state["stopped_at_done"] is not None and state["stopped_at_done"] < 3, "the outage came too late"
    attempts = attempt_counts(out)
    assert sum(attempts.get("infra-error", {}).values()) >= 1, "the outage hit no request"
    episodes = results["per_episode"]
    assert len(episodes) == 3 and all(e["outcome"] in ("success", "failure") for e in episodes), [
        (e["outcome"], (e["error"] or "")[-200:]) for e in episodes
    ]
    assert set(attempts["ok"].values()) == {1} and len(attempts["ok"]) == 3  # none lost, none twice
    assert verify_campaign(out).ok
    local = run_campaign(_tiny_config(seeds=3), tmp_path / "local", progress=False)
    assert sorted((e["seed"], e["outcome"], e["steps"]) for e in episodes) == sorted(
        (e["seed"], e["outcome"], e["steps"]) for e in local["per_episode"]
    )


# -- item 3: errors are loud ----------------------------------------------------------------
@pytest.mark.slow
def test_eval_exits_nonzero_on_errors_and_retry_errors_retries_them(tmp_path, capsys):
    out = tmp_path / "errs"
    argv = eval_argv(out, "--max-attempts", "1", policies=(f"{SLOW}:delay=0.0,fail_seed=1",))
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if "ended in error" in ln]
    assert len(lines) == 1 and "1 of 2 episodes ended in error" in lines[0], captured.err
    assert "refuses seed 1" in lines[0] and "--retry-errors" in lines[0] and "Traceback" not in captured.err
    assert "(!)" in captured.out  # the ranking marks the policy with errors
    assert cli.main(argv) == 1  # a plain rerun does not retry the policy's own error ...
    assert sum(attempt_counts(out)["error"].values()) == 1
    capsys.readouterr()
    assert cli.main([*argv, "--retry-errors"]) == 1  # ... --retry-errors does (and it fails again)
    assert sum(attempt_counts(out)["error"].values()) == 2
    assert verify_campaign(out).ok  # a real error is a valid result, reported as a warning


# -- item 4 and the kill acceptance runs ---------------------------------------------------------
@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted campaign every killed one must reproduce."""
    out = tmp_path_factory.mktemp("faults-reference")
    assert cli.main(eval_argv(out, policies=(KILL_POLICY,), seeds=KILL_SEEDS)) == 0
    return ledger_rows(out)


def _pool_workers(pids) -> list[int]:
    found = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"spawn_main" in fh.read():
                    found.append(pid)
        except OSError:
            pass
    return sorted(found)


def _finish_and_check(out, reference) -> None:
    """Rerun to the end; 0 lost, 0 duplicated, 0 in error, outcomes as uninterrupted."""
    proc = spawn_cli(eval_argv(out, policies=(KILL_POLICY,), seeds=KILL_SEEDS))
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    rows = ledger_rows(out)
    assert rows == reference
    attempts = attempt_counts(out)
    assert set(attempts["ok"]) == set(rows) and set(attempts["ok"].values()) == {1}
    assert "error" not in attempts
    report = verify_campaign(out)
    assert report.ok, report.problems


@pytest.mark.slow
def test_killed_worker_then_sigkilled_parent_leave_no_process_and_lose_nothing(tmp_path, reference):
    out = tmp_path / "pool"
    proc = spawn_cli(
        eval_argv(out, "--workers", "2", "--executor", "process", policies=(KILL_POLICY,), seeds=KILL_SEEDS)
    )
    started: set[int] = set()
    try:
        deadline = time.time() + 180
        while done_count(out) < 1 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        workers = _pool_workers(descendants(proc.pid))
        assert proc.poll() is None and len(workers) == 2, (workers, proc.poll())
        started |= descendants(proc.pid)
        os.kill(workers[0], signal.SIGKILL)  # a worker dies mid-episode (as under the OOM killer)
        replaced: list[int] = []
        while not replaced and proc.poll() is None and time.time() < deadline:
            replaced = sorted(set(_pool_workers(descendants(proc.pid))) - set(workers))
            time.sleep(0.02)
        assert replaced, "the killed worker was not replaced"
        while done_count(out) < 2 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "the campaign ended before the parent could be killed"
        tree = descendants(proc.pid)
        started |= tree
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        left = wait_gone(tree, timeout=60)
        assert not left, f"processes outlived the SIGKILLed eval: {sorted(left)}"
    finally:
        kill_tree_now(p for p in started | {proc.pid} if alive(p))
    _finish_and_check(out, reference)


@pytest.mark.slow
def test_sigkill_at_ten_seeded_random_moments_then_resume(tmp_path, reference):
    """Ten runs of the same eval command, each SIGKILLed at a seeded random moment after its run
    started (anywhere from set-up through an episode to writing the bundle), then one to the end."""
    out = tmp_path / "ten-kills"
    rng = random.Random(18)
    kills = 0
    launcher = EvalLauncher()
    try:
        for i in range(10):
            pid = launcher.launch(eval_argv(out, policies=(KILL_POLICY,), seeds=KILL_SEEDS))
            tree: set[int] = set()
            try:
                deadline = time.time() + 180
                while runs_started(out) <= i and alive(pid) and time.time() < deadline:
                    time.sleep(0.02)
                moment = time.time() + rng.uniform(0.0, 2.0)
                while time.time() < moment and alive(pid):
                    tree |= descendants(pid)
                    time.sleep(0.05)
                if not alive(pid):
                    break  # the campaign finished before this kill: nothing left to interrupt
                tree |= descendants(pid)
                os.kill(pid, signal.SIGKILL)
                kills += 1
                left = wait_gone(tree | {pid}, timeout=60)
                assert not left, f"kill {kills}: processes outlived the SIGKILLed eval: {sorted(left)}"
            finally:
                kill_tree_now(p for p in tree | {pid} if alive(p))
    finally:
        launcher.close()
    assert kills == 10, f"only {kills} kills landed before the campaign finished"
    _finish_and_check(out, reference)
