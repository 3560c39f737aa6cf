"""Campaign helpers for tests in several folders (no tests here): ``SlowScripted``, a test-only
policy that spawned workers import as ``tests.support.campaign:SlowScripted`` (a ``module:Class``
entry point, ``SLOW``); the ``eval`` arguments of a small tabletop campaign; ledger reads; a killer
that waits for N finished episodes; and a planned, never-run ledger."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

from kosmos_env.campaign.design import CampaignConfig, PolicyRef, make_config
from kosmos_env.campaign.ledger import Ledger
from kosmos_env.policies.scripted import ScriptedPolicy

SLOW = "tests.support.campaign:SlowScripted"  # the policy below, as a module:Class entry point


class SlowScripted(ScriptedPolicy):
    """ScriptedPolicy that sleeps ``delay`` seconds per action, so a kill lands mid-campaign."""

    def __init__(self, skill: float = 1.0, delay: float = 0.01, fail_seed: int = -1, crash_once_file: str = ""):
        super().__init__(skill=skill)
        self.delay = float(delay)
        self.fail_seed = int(fail_seed)
        self.crash_once_file = crash_once_file

    def reset(self, instruction, seed=None):
        if seed == self.fail_seed:
            raise RuntimeError(f"SlowScripted refuses seed {seed} (test failure injection)")
        if self.crash_once_file and seed == 1 and not os.path.exists(self.crash_once_file):
            open(self.crash_once_file, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # a worker dying hard, as on a segfault
        super().reset(instruction, seed=seed)

    def act(self, obs):
        time.sleep(self.delay)
        return super().act(obs)

    def config(self):
        return {
            **super().config(),
            "delay": self.delay,
            "fail_seed": self.fail_seed,
            "crash_once_file": self.crash_once_file,
        }


def tabletop_eval_argv(
    out, policies, *extra, tasks=("carrot_on_plate",), seeds: int = 2, video: bool = False, seed_offset: int = 0
) -> list[str]:
    """``kosmos-env eval`` arguments for a small tabletop campaign: 64x64 frames, no progress bar,
    no video unless asked, one ``--policy`` per entry of ``policies``, then ``extra`` as given.

    Seeds start at ``seed_offset`` (0: the tests that use this helper are about faults, executors
    and reports, and inject failures at chosen seeds; the default evaluation seeds are tested in
    tests/commands/test_eval_seeds.py)."""
    argv = ["eval", "--env", "Kosmos-Tabletop-v1", "--tasks", *tasks, "--seeds", str(seeds), "--image-size", "64", "64"]
    argv += ["--seed-offset", str(seed_offset)]
    argv += ["--no-progress", "--out", str(out)] + ([] if video else ["--no-video"])
    for policy in policies:
        argv += ["--policy", policy]
    return argv + list(extra)


def ledger_count(out, sql: str) -> int:
    """A COUNT query on a campaign folder's ledger (0 while it does not exist yet); read-only, so
    tests can poll a running campaign."""
    path = Path(out) / "ledger.sqlite"
    if not path.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(sql).fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError:
        return 0


def ledger_rows(out) -> dict[str, tuple]:
    """episode_id -> (status, outcome, success, steps, actions) read from the ledger."""
    con = sqlite3.connect(Path(out) / "ledger.sqlite")
    try:
        rows = con.execute("SELECT episode_id, status, outcome, success, steps, actions FROM episodes").fetchall()
    finally:
        con.close()
    return {r[0]: r[1:] for r in rows}


def done_count(out) -> int:
    """Episodes a campaign folder's ledger records as done."""
    return ledger_count(out, "SELECT COUNT(*) FROM episodes WHERE status = 'done'")


def kill_after_done(proc, out, n: int, timeout: float):
    """SIGKILL ``proc`` once its campaign ledger in ``out`` records ``n`` finished episodes.

    Fails the test if the campaign ends (or the deadline passes) before it could be killed."""
    import time as _time

    deadline = _time.time() + timeout
    while done_count(out) < n and proc.poll() is None and _time.time() < deadline:
        _time.sleep(0.02)
    assert proc.poll() is None, f"campaign ended before it could be killed: {proc.communicate()[1][-2000:]}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()


def planned_ledger(folder: Path, labels=("scripted:skill=1.0", "random"), seeds=3) -> CampaignConfig:
    """A campaign folder whose ledger is planned but never run (no env is stepped)."""
    base = make_config("Kosmos-Tabletop-v1", ["scripted:skill=1.0"], tasks=["carrot_on_plate"], seeds=seeds)
    config = CampaignConfig(**{**base.__dict__, "policies": tuple(PolicyRef(lab, "scripted", {}) for lab in labels)})
    folder.mkdir(parents=True)
    with Ledger(folder / "ledger.sqlite") as ledger:
        ledger.initialise(config)
    return config
