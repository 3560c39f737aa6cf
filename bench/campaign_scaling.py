"""Campaign scaling on the tabletop: rollouts per minute with 1 and 2 workers, and peak memory
of a 500-episode campaign against a 100-episode one.

Targets (issue 6): speed-up >= 1.6x from 1 to 2 workers on 2 cores; peak memory of the
500-episode campaign within 20% of the 100-episode one (memory must not grow with campaign
size: episodes are streamed to the ledger and the artifact store, nothing accumulates).

Each campaign runs as ``python -m kosmos_env.cli eval`` in a child process (the real command),
with a process pool of the given size (both speed runs pay the same worker start-up). Peak
memory is the largest sum of RSS over the eval process and all its workers, sampled every
50 ms with psutil, plus the largest single-process peak (``ru_maxrss`` from ``wait4``).
The machine's load average is recorded before and after, since its 2 cores are shared.

    python bench/campaign_scaling.py [--speed-seeds 8] [--no-video-speed] [--out bench/results/campaign_scaling.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

import psutil

from _report import load_average, save  # bench/_report.py: the script's folder is on sys.path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICIES = ["scripted:skill=1.0", "scripted:skill=0.8", "scripted:skill=0.6", "scripted:skill=0.3", "random"]


def run_eval(out: str, policies: list[str], seeds: int, workers: int, video: bool) -> dict:
    """Run one campaign in a child process; return wall time, rates and peak memory."""
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
        str(workers),
        "--executor",
        "process",
        "--no-progress",
        "--out",
        out,
    ]
    for p in policies:
        argv += ["--policy", p]
    if not video:
        argv.append("--no-video")
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"), HF_HUB_OFFLINE="1")
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    parent = psutil.Process(proc.pid)
    peak_sum = 0
    while proc.poll() is None:
        try:
            procs = [parent] + parent.children(recursive=True)
            total = 0
            for p in procs:
                try:
                    total += p.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            peak_sum = max(peak_sum, total)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    stdout = proc.stdout.read().decode()
    proc.wait()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"eval failed ({proc.returncode}):\n{stdout[-2000:]}")
    import resource

    child_max_rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # max over every child so far
    con = sqlite3.connect(os.path.join(out, "ledger.sqlite"))
    started, finished, n = con.execute(
        "SELECT MIN(started), MAX(finished), COUNT(*) FROM episodes WHERE status = 'done'"
    ).fetchone()
    first_done = con.execute("SELECT MIN(finished) FROM episodes").fetchone()[0]
    con.close()
    steady = (n - 1) / (finished - first_done) * 60 if finished > first_done else float("nan")
    return {
        "episodes": n,
        "wall_s": wall,
        "per_min_wall": n / wall * 60,
        "per_min_steady": steady,
        "busy_s": finished - started,
        "peak_rss_sum_mb": peak_sum / 2**20,
        "max_child_rss_mb_so_far": child_max_rss_kb / 1024,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speed-seeds", type=int, default=6, help="seeds for the speed runs (5 policies x 4 tasks x N)")
    ap.add_argument("--small-seeds", type=int, default=5, help="seeds of the small memory run (100 episodes)")
    ap.add_argument("--large-seeds", type=int, default=25, help="seeds of the large memory run (500 episodes)")
    ap.add_argument("--memory-workers", type=int, default=2)
    ap.add_argument("--no-video-speed", action="store_true", help="speed runs without MP4 encoding")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "campaign_scaling.txt"))
    args = ap.parse_args()

    lines = [
        f"campaign scaling bench, {time.strftime('%Y-%m-%d %H:%M:%S')}",
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs (shared with other "
        f"jobs), python {platform.python_version()}",
        f"load average before: {load_average()}",
    ]
    print("\n".join(lines), flush=True)
    tmp = tempfile.mkdtemp(prefix="kosmos-campaign-bench-")
    try:
        speed = {}
        n_speed = len(POLICIES) * 4 * args.speed_seeds
        for workers in (1, 2):
            r = run_eval(
                os.path.join(tmp, f"speed{workers}"), POLICIES, args.speed_seeds, workers, video=not args.no_video_speed
            )
            speed[workers] = r
            line = (
                f"speed, {workers} worker(s): {r['episodes']} episodes (64x64, 40 steps, "
                f"{'no video' if args.no_video_speed else 'MP4 kept'}) in {r['wall_s']:.1f} s wall "
                f"= {r['per_min_wall']:.0f} rollouts/min including start-up; steady state "
                f"{r['per_min_steady']:.0f} rollouts/min; load now {os.getloadavg()[0]:.2f}"
            )
            print(line, flush=True)
            lines.append(line)
        assert speed[1]["episodes"] == speed[2]["episodes"] == n_speed
        su_wall = speed[2]["per_min_wall"] / speed[1]["per_min_wall"]
        su_steady = speed[2]["per_min_steady"] / speed[1]["per_min_steady"]
        lines.append(
            f"speed-up 2 vs 1 workers: {su_wall:.2f}x wall (incl. start-up), {su_steady:.2f}x steady state "
            f"(target >= 1.6x): {'PASS' if su_steady >= 1.6 else 'MISS'}"
        )
        print(lines[-1], flush=True)

        mem = {}
        for label, seeds in (("small", args.small_seeds), ("large", args.large_seeds)):
            r = run_eval(os.path.join(tmp, f"mem-{label}"), POLICIES, seeds, args.memory_workers, video=True)
            mem[label] = r
            line = (
                f"memory, {r['episodes']} episodes ({args.memory_workers} workers, MP4 kept): peak RSS summed over "
                f"eval + workers {r['peak_rss_sum_mb']:.0f} MiB, {r['wall_s']:.1f} s wall, "
                f"{r['per_min_wall']:.0f} rollouts/min; load now {os.getloadavg()[0]:.2f}"
            )
            print(line, flush=True)
            lines.append(line)
        ratio = mem["large"]["peak_rss_sum_mb"] / mem["small"]["peak_rss_sum_mb"]
        lines.append(
            f"peak memory {mem['large']['episodes']} vs {mem['small']['episodes']} episodes: {ratio:.3f}x "
            f"(target within 20%, i.e. <= 1.20x): {'PASS' if ratio <= 1.2 else 'MISS'}"
        )
        lines.append(
            f"largest single-process peak (ru_maxrss of any child): {mem['large']['max_child_rss_mb_so_far']:.0f} MiB"
        )
        lines.append(f"load average after: {load_average()}")
        print("\n".join(lines[-3:]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    save("\n".join(lines), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
