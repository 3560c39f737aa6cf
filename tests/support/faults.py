"""Helpers shared by the fault-matrix tests (test_faults_inputs.py, campaign/test_faults.py,
campaign/test_verify_faults.py, publish/test_leaderboard*.py): a tiny tabletop campaign (64x64,
one task, few seeds) run through the real CLI, and process-tree inspection for the "no stray
process" checks."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.support.campaign import ledger_count, tabletop_eval_argv
from tests.support.paths import ROOT

TASK = "carrot_on_plate"


def eval_argv(out, *extra, policies=("scripted:skill=1.0",), seeds: int = 2) -> list[str]:
    """The fault tests' campaign: one task, ``seeds`` seeds, 64x64, no video."""
    return tabletop_eval_argv(out, policies, *extra, tasks=(TASK,), seeds=seeds)


TWO_POLICIES = ("scripted:skill=1.0", "random")  # successes and failures


def spawn_cli(argv, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUJOCO_GL="egl", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-m", "kosmos_env.cli", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def attempt_counts(out) -> dict[str, dict[str, int]]:
    """status -> {episode_id: number of attempts rows with that status}."""
    con = sqlite3.connect(Path(out) / "ledger.sqlite")
    try:
        rows = con.execute("SELECT status, episode_id, COUNT(*) FROM attempts GROUP BY status, episode_id").fetchall()
    finally:
        con.close()
    out_: dict[str, dict[str, int]] = {}
    for status, eid, n in rows:
        out_.setdefault(status, {})[eid] = n
    return out_


def runs_started(out) -> int:
    """How many eval runs the ledger in ``out`` has recorded (0 while it does not exist yet)."""
    return ledger_count(out, "SELECT COUNT(*) FROM runs")


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def wait_gone(pids, timeout: float = 60.0) -> set[int]:
    """Wait (bounded) until every pid has exited; returns those still alive at the deadline."""
    deadline = time.time() + timeout
    left = {p for p in pids if alive(p)}
    while left and time.time() < deadline:
        time.sleep(0.1)
        left = {p for p in left if alive(p)}
    return left


def kill_tree_now(pids) -> None:
    """Clean-up after a failed test: SIGKILL the processes this test started (by pid)."""
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


_LAUNCHER = r"""
import json, os, signal, sys
os.environ.setdefault("MUJOCO_GL", "egl")
import gymnasium, mujoco, kosmos_env                     # noqa: F401  everything an eval imports,
import kosmos_env.campaign.worker, kosmos_env.rollouts   # noqa: F401  imported once, nothing rendered
import kosmos_env.worlds.tabletop.world, kosmos_env.judges, kosmos_env.policies.scripted  # noqa: F401
import tests.support.campaign                           # noqa: F401
from kosmos_env import cli
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps finished or killed children
print("ready", flush=True)
for line in sys.stdin:
    argv = json.loads(line)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0); os.dup2(null, 1); os.dup2(null, 2)
        code = 1
        try:
            code = cli.main(argv)
        finally:
            os._exit(code)
    print(pid, flush=True)
"""


class EvalLauncher:
    """Starts ``kosmos-env eval`` processes in a fraction of a second: a helper process imports
    the package once (rendering nothing) and forks one child per launch that runs the CLI's
    ``main(argv)``. The child is a real, separate eval process a test can SIGKILL; only the
    import time of a fresh interpreter is saved (several seconds each on a loaded machine)."""

    def __init__(self):
        env = dict(os.environ, PYTHONPATH=str(ROOT), MUJOCO_GL="egl", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"eval launcher did not start (said {line!r})")

    def launch(self, argv) -> int:
        import json

        self.proc.stdin.write(json.dumps(list(argv)) + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
