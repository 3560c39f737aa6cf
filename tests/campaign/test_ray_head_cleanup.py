"""A Ray head started by a campaign dies with it (issue 31): after a SIGKILL of the campaign
process, no process of its Ray session is left (the dashboard and runtime-env agents used to
outlive it by about a minute, blocked on a report to the dead GCS)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import requires_extra
from tests.support.campaign import SLOW, done_count, tabletop_eval_argv
from tests.support.faults import alive, kill_tree_now, wait_gone
from tests.support.paths import ROOT


def _alive(procs) -> list[tuple[int, str]]:
    import psutil

    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append((p.pid, p.name()))
        except psutil.NoSuchProcess:
            pass
    return out


def test_watchdog_finds_only_processes_marked_with_its_token(tmp_path):
    """The watchdog's attribution: a process carrying the head's token is found, one with another
    token is not, and a session folder no token-carrying process names is refused."""
    from kosmos_env.campaign.ray_watchdog import TOKEN_VAR, head_processes, owns_session

    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen(sleeper, env={**os.environ, TOKEN_VAR: "a" * 32})
    other = subprocess.Popen(sleeper, env={**os.environ, TOKEN_VAR: "b" * 32})
    try:
        found = head_processes("a" * 32, [], exclude={os.getpid()})
        assert ours.pid in found and other.pid not in found
        assert not owns_session("a" * 32, str(tmp_path))  # no process of that head names it
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()


DRIVER = """
import subprocess, sys, time
from kosmos_env.campaign.ray_watchdog import HeadGuard
guard = HeadGuard.start()
with guard.marking():  # as ray.init runs: what starts here belongs to the head
    head = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # started after: not the head's
print(head.pid, other.pid, guard.proc.pid, flush=True)
if sys.argv[1] == "close":
    guard.close()
    sys.exit(0)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process states from /proc (Linux)")
@pytest.mark.parametrize("end", ["killed", "close"])
def test_watchdog_stops_the_marked_processes_only_when_the_driver_dies(end):
    """Without Ray (the mechanism alone, on a core install): SIGKILL the driver and the process it
    marked is stopped, one it started afterwards is not; a driver that says ``close`` leaves everything be."""
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, end],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    head_pid, other_pid, watchdog_pid = (int(v) for v in driver.stdout.readline().split())
    try:
        if end == "killed":
            os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=60)
        assert not wait_gone([watchdog_pid], timeout=30), "the watchdog did not exit"  # it exits when done
        assert [pid for pid in (head_pid, other_pid) if alive(pid)] == (
            [other_pid] if end == "killed" else [head_pid, other_pid]
        )
    finally:
        kill_tree_now([head_pid, other_pid, watchdog_pid])


@pytest.mark.slow
@requires_extra("ray")
def test_sigkilled_campaign_takes_its_ray_head_down(tmp_path):
    psutil = pytest.importorskip(
        "psutil", reason="needs psutil (installed by the models extra: pip install -e '.[models]')"
    )
    if not sys.platform.startswith("linux"):
        pytest.skip("the process-tree checks read /proc")
    out = tmp_path / "campaign"
    ray_args = ["--executor", "ray", "--workers", "1", "--ray-num-cpus", "1"]
    argv = [sys.executable, "-m", "kosmos_env.cli"]
    argv += tabletop_eval_argv(out, [f"{SLOW}:skill=1.0,delay=0.02"], *ray_args, seeds=40)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KOSMOS_ENV_ALLOW_IMPORT": "1", "HF_HUB_OFFLINE": "1"}
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err:
        # its own session: the test's process group is never in the way of the kill
        driver = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
    head = []
    try:
        # an episode done: the head is up, its agents started and an actor ran
        deadline = time.monotonic() + 120
        while done_count(out) < 1 and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert driver.poll() is None and done_count(out) >= 1, stderr.read_text()[-2000:]
        head = [p for p in psutil.Process(driver.pid).children(recursive=True)]
        names = {n for _, n in _alive(head)}
        # the processes the issue names are there (the kill below is a real test of them)
        assert {"raylet", "gcs_server", "ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= names, names
        assert any(n.startswith("ray::EpisodeActor") for n in names), names
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        # the watchdog needs about a second; Ray alone leaves the agents for its 60 s GCS timeout
        deadline = time.monotonic() + 45
        while _alive(head) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = _alive(head)
        assert not left, f"processes of the killed campaign's Ray head still running: {left}"
        assert "stopped" in stderr.read_text() and "Ray head it started" in stderr.read_text()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for p in head:  # never leave strays to later tests, whatever failed above
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
