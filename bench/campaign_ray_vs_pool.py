"""Campaign throughput: the Ray executor against the spawn process pool, same campaign, this machine.

Both run the real command (``python -m kosmos_env.cli eval``) in a child process with the same
number of workers on the tabletop; Ray starts a private local instance sized by
``--ray-num-cpus`` (its start-up is part of its wall time, reported separately from the steady
state). Throughput is measured two ways from the ledger: wall (command start to end, start-up
included) and steady state (first to last finished episode). Runs alternate pool, ray, pool,
ray, ... so machine-load drift hits both; medians are compared.

    python bench/campaign_ray_vs_pool.py [--seeds 3] [--workers 2] [--rounds 2] [--keep DIR] \
        [--out bench/results/campaign_ray_vs_pool.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from _report import load_average, save  # bench/_report.py: the script's folder is on sys.path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICIES = ["scripted:skill=1.0", "scripted:skill=0.6", "random"]


def run(out: str, executor: str, workers: int, seeds: int) -> dict:
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
        executor,
        "--no-progress",
        "--out",
        out,
    ]
    if executor == "ray":
        argv += ["--ray-num-cpus", str(workers)]
    for p in POLICIES:
        argv += ["--policy", p]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{executor} eval failed:\n{proc.stderr[-3000:]}")
    con = sqlite3.connect(os.path.join(out, "ledger.sqlite"))
    n, first_start, first_done, last_done = con.execute(
        "SELECT COUNT(*), MIN(started), MIN(finished), MAX(finished) FROM episodes WHERE status = 'done'"
    ).fetchone()
    run_start = con.execute("SELECT MIN(started) FROM runs").fetchone()[0]
    con.close()
    return {
        "n": n,
        "wall": wall,
        "per_min_wall": n / wall * 60,
        "per_min_steady": (n - 1) / (last_done - first_done) * 60,
        "to_first_episode": first_done - run_start,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--keep", default=None, help="keep the last Ray campaign folder here (for bench/time_breakdown.py)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "campaign_ray_vs_pool.txt"))
    args = ap.parse_args(argv)
    import ray

    n_eps = len(POLICIES) * 4 * args.seeds
    lines = [
        f"campaign throughput, Ray executor vs process pool, {time.strftime('%Y-%m-%d %H:%M:%S')}",
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs (shared with other jobs), "
        f"python {platform.python_version()}, ray {ray.__version__}",
        f"load average before: {load_average()}",
        f"campaign: Kosmos-Tabletop-v1 64x64, {len(POLICIES)} policies x 4 tasks x {args.seeds} seeds = {n_eps} "
        f"episodes (MP4 kept), {args.workers} workers each",
    ]
    print("\n".join(lines), flush=True)
    tmp = tempfile.mkdtemp(prefix="kosmos-ray-bench-")
    res = {"process": [], "ray": []}
    try:
        for r in range(args.rounds):
            for ex in ("process", "ray"):
                out = os.path.join(tmp, f"{ex}{r}")
                m = run(out, ex, args.workers, args.seeds)
                res[ex].append(m)
                line = (
                    f"round {r} {ex:7s}: {m['n']} episodes in {m['wall']:.1f} s wall = {m['per_min_wall']:.0f} rollouts/min "
                    f"incl. start-up ({m['to_first_episode']:.1f} s to the first finished episode); steady state "
                    f"{m['per_min_steady']:.0f} rollouts/min; load now {os.getloadavg()[0]:.2f}"
                )
                print(line, flush=True)
                lines.append(line)
                if ex == "ray" and args.keep and r == args.rounds - 1:
                    shutil.rmtree(args.keep, ignore_errors=True)
                    shutil.copytree(out, args.keep)
        med = {
            ex: {k: statistics.median(m[k] for m in ms) for k in ("per_min_wall", "per_min_steady", "to_first_episode")}
            for ex, ms in res.items()
        }
        lines.append(
            f"RATIO ray / process pool (medians over {args.rounds} rounds): wall {med['ray']['per_min_wall'] / med['process']['per_min_wall']:.2f}x, "
            f"steady state {med['ray']['per_min_steady'] / med['process']['per_min_steady']:.2f}x; time to first "
            f"episode {med['ray']['to_first_episode']:.1f} s (ray) vs {med['process']['to_first_episode']:.1f} s (pool)"
        )
        lines.append(f"load average after: {load_average()}")
        print("\n".join(lines[-2:]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    save("\n".join(lines), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
