"""What the console costs a running campaign, and how fast it lists a large one.

1. Throughput: the same 2-worker tabletop campaign (``kosmos-env eval --workers 2``, videos on)
   runs with and without the console watching it. "Watching" is a ``kosmos-env serve``
   process on the runs folder with live-view clients subscribed to the campaign's server-sent
   events (what an open live tab does: one ledger read per client per second), plus a page
   load of the live view and the campaigns list every few seconds. Runs alternate
   off/on/off/on... so drift in the machine's load hits both arms; throughput is episodes
   over the eval run's wall clock from its own ledger. Target: ratio (on / off) >= 0.95.
   Because that ratio carries the machine's run-to-run noise, the script also prints the
   console server's CPU seconds over the campaign's (eval process and workers): the share of
   a CPU-bound campaign's throughput the console can take at most.
2. Scale: a synthetic ledger of 10,000 finished episodes (4 policies x 4 tasks x 625 seeds)
   served by the console; the campaigns page, live numbers, episode browser and a late
   page of it are timed over HTTP (first request and median of five). Target: list page < 1 s.

    python bench/console_load.py [--pairs 2] [--seeds 4] [--clients 2] [--out bench/results/console_load.txt]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from _report import load_average, save  # bench/_report.py: the script's folder is on sys.path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
POLICIES = ["scripted:skill=1.0", "scripted:skill=0.6", "random"]
TOKEN = "bench-console-token-0123456789"


def run_eval(out: str, seeds: int) -> tuple[float, float]:
    """One 2-worker campaign in a child process; returns (episodes per hour of its eval run,
    CPU seconds of the eval process and its workers)."""
    argv = [
        sys.executable,
        "-m",
        "kosmos_env.cli",
        "eval",
        "--image-size",
        "64",
        "64",
        "--seeds",
        str(seeds),
        "--workers",
        "2",
        "--executor",
        "process",
        "--no-progress",
        "--out",
        out,
    ]
    for p in POLICIES:
        argv += ["--policy", p]
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"), HF_HUB_OFFLINE="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the eval process and its reaped workers
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    con = sqlite3.connect(os.path.join(out, "ledger.sqlite"))
    try:
        started, finished = con.execute("SELECT started, finished FROM runs ORDER BY started LIMIT 1").fetchone()
        n = con.execute("SELECT COUNT(*) FROM episodes WHERE status = 'done'").fetchone()[0]
    finally:
        con.close()
    return n / (finished - started) * 3600.0, cpu


class Watcher:
    """A ``kosmos-env serve`` process plus live-view clients on one campaign folder."""

    def __init__(self, runs: str, campaign: str, clients: int):
        env = dict(os.environ, KOSMOS_CONSOLE_TOKEN=TOKEN)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kosmos_env.cli", "serve", runs, "--port", "0"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if not m:
            raise RuntimeError(f"the console did not start: {line}")
        self.port = int(m.group(1))
        from kosmos_env.console.campaigns import folder_key

        self.key = folder_key(__import__("pathlib").Path(campaign))
        self.stop = threading.Event()
        self.events = 0
        self.pages = 0
        self.threads = [threading.Thread(target=self._sse, daemon=True) for _ in range(clients)]
        self.threads.append(threading.Thread(target=self._pages, daemon=True))
        for t in self.threads:
            t.start()

    def _sse(self) -> None:
        while not self.stop.is_set():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", f"/c/{self.key}/events")
                resp = conn.getresponse()
                if resp.status != 200:  # the campaign folder does not exist yet
                    resp.read()
                    conn.close()
                    time.sleep(0.5)
                    continue
                while not self.stop.is_set():
                    line = resp.fp.readline()
                    if not line:
                        break
                    if line.startswith(b"data:"):
                        self.events += 1
                conn.close()
            except OSError:
                time.sleep(0.5)

    def _pages(self) -> None:
        while not self.stop.wait(3.0):
            for path in ("/", f"/c/{self.key}"):
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                    conn.request("GET", path)
                    conn.getresponse().read()
                    conn.close()
                    self.pages += 1
                except OSError:
                    pass

    def cpu_seconds(self) -> float:
        """CPU seconds the console server process has used so far (start-up imports included)."""
        import psutil

        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def close(self) -> None:
        self.stop.set()
        self.proc.terminate()
        self.proc.wait(timeout=10)


def throughput(pairs: int, seeds: int, clients: int) -> tuple[list[float], list[float], list[str], list[float]]:
    """Alternating runs without/with the console; also the console's CPU share of each watched run."""
    off, on, notes, shares = [], [], [], []
    for i in range(pairs):
        for watched in (False, True) if i % 2 == 0 else (True, False):
            runs = tempfile.mkdtemp(prefix="kosmos-console-bench-")
            out = os.path.join(runs, "campaign")
            watcher = Watcher(runs, out, clients) if watched else None
            try:
                idle = watcher.cpu_seconds() if watcher else 0.0  # start-up, before the campaign runs
                rate, cpu = run_eval(out, seeds)
                if watcher:
                    console_cpu = watcher.cpu_seconds() - idle
                    shares.append(console_cpu / cpu)
                    notes.append(
                        f"pair {i + 1}: console pushed {watcher.events} live updates to {clients} client(s), "
                        f"served {watcher.pages} page loads, used {console_cpu:.2f} CPU s while the campaign "
                        f"used {cpu:.1f} CPU s ({100 * console_cpu / cpu:.2f}%)"
                    )
            finally:
                if watcher:
                    watcher.close()
                shutil.rmtree(runs, ignore_errors=True)
            (on if watched else off).append(rate)
            print(f"pair {i + 1} {'with' if watched else 'without'} console: {rate:.0f} rollouts/hour", flush=True)
    return off, on, notes, shares


def synthetic_campaign(folder: str, seeds: int = 625) -> int:
    """A finished campaign of 4 policies x 4 tasks x ``seeds`` seeds, written straight into a ledger."""
    from kosmos_env.campaign.design import make_config
    from kosmos_env.campaign.ledger import Ledger

    config = make_config(
        "Kosmos-Tabletop-v1",
        ["scripted:skill=1.0", "scripted:skill=0.6", "scripted:skill=0.3", "random"],
        tasks=None,
        seeds=seeds,
    )
    os.makedirs(folder)
    rng = random.Random(0)
    skill = {p.label: s for p, s in zip(config.policies, (0.9, 0.6, 0.3, 0.05), strict=True)}
    now = time.time()
    with Ledger(os.path.join(folder, "ledger.sqlite")) as ledger:
        ledger.initialise(config)
        ledger.start_run("bench:0:synthetic", "synthetic", 2, [])
        with ledger.transaction() as conn:
            rows = conn.execute("SELECT episode_id, policy, ord FROM episodes").fetchall()
            updates = []
            for eid, pol, ord_ in rows:
                u = rng.random()
                outcome = "discarded" if u < 0.03 else ("success" if rng.random() < skill[pol] else "failure")
                success = None if outcome == "discarded" else int(outcome == "success")
                t = {"policy": 0.01, "world": 0.05 + 0.01 * rng.random(), "gate": 0.005, "judge": 0.002, "io": 0.01}
                t["total"] = sum(t.values()) + 0.003
                judgment = (
                    None
                    if success is None
                    else json.dumps(
                        {"success": bool(success), "score": float(success), "rationale": "synthetic", "votes": []}
                    )
                )
                updates.append(
                    (
                        outcome,
                        success,
                        None if success is None else float(success),
                        judgment,
                        json.dumps(t),
                        40,
                        now - 3600 + ord_ * 0.3,
                        eid,
                    )
                )
            conn.executemany(
                "UPDATE episodes SET status = 'done', outcome = ?, success = ?, score = ?, judgment = ?, "
                "judge = 'state', timings = ?, steps = ?, finished = ?, attempts = 1 WHERE episode_id = ?",
                updates,
            )
            conn.execute("UPDATE runs SET finished = ?", (now,))
    return len(rows)


def timed_get(port: int, path: str) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return time.perf_counter() - t0, resp.status, len(body)


def scale() -> list[str]:
    from kosmos_env.console.campaigns import folder_key
    from kosmos_env.console.server import ConsoleServer

    runs = tempfile.mkdtemp(prefix="kosmos-console-10k-")
    try:
        folder = os.path.join(runs, "synthetic-10k")
        n = synthetic_campaign(folder)
        server = ConsoleServer([runs], port=0, token=TOKEN).start_in_thread()
        key = folder_key(__import__("pathlib").Path(folder))
        lines = [f"synthetic campaign: {n} finished episodes"]
        try:
            for label, path in (
                ("campaigns list page", "/"),
                ("live view page", f"/c/{key}"),
                ("live numbers (live.json)", f"/c/{key}/live.json"),
                ("episode browser, page 1", f"/c/{key}/episodes"),
                ("episode browser, page 80, filtered", f"/c/{key}/episodes?outcome=success&page=40"),
                ("episode page", f"/c/{key}/episodes/9999"),
            ):
                first, status, size = timed_get(server.port, path)
                rest = [timed_get(server.port, path)[0] for _ in range(5)]
                lines.append(
                    f"{label:38s} HTTP {status}  {size / 1024:7.1f} KiB  first {first * 1000:7.1f} ms  "
                    f"median of 5 {statistics.median(rest) * 1000:7.1f} ms"
                )
        finally:
            server.stop()
        return lines
    finally:
        shutil.rmtree(runs, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=2, help="with/without pairs of the 2-worker campaign (default 2)")
    ap.add_argument("--seeds", type=int, default=4, help="seeds per task of that campaign (3 policies x 4 tasks)")
    ap.add_argument("--clients", type=int, default=2, help="live-view clients subscribed while watching (default 2)")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--out", default=None, help="also write the report here")
    args = ap.parse_args()
    lines = [
        f"# console load bench: {platform.node()}, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}",
        f"load average before: {load_average()}",
    ]
    print("\n".join(lines), flush=True)
    if not args.skip_throughput:
        off, on, notes, shares = throughput(args.pairs, args.seeds, args.clients)
        ratio = statistics.mean(on) / statistics.mean(off)
        lines += [
            f"2-worker campaign, {len(POLICIES)} policies x 4 tasks x {args.seeds} seeds, videos on; "
            f"{args.pairs} alternating pairs",
            "without console (rollouts/hour): " + ", ".join(f"{x:.0f}" for x in off),
            "with console open (rollouts/hour): " + ", ".join(f"{x:.0f}" for x in on),
            *notes,
            f"throughput ratio with/without console: {ratio:.3f} (target >= 0.95; run-to-run spread without "
            f"console: {min(off) / max(off):.3f} min/max: on a shared machine the ratio carries that noise)",
            f"console CPU share of the watched campaigns: {100 * max(shares):.2f}% at most (the throughput a "
            f"CPU-bound campaign can lose to it; target <= 5%)",
        ]
        print("\n".join(lines[-2:]), flush=True)
    scale_lines = scale()
    print("\n".join(scale_lines), flush=True)
    lines += scale_lines + [f"load average after: {load_average()}"]
    save("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
