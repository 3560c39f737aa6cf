"""Campaign scaling on the tabletop: rollouts per minute with 1 and 2 workers, and peak memory
of a 500-episode campaign against a 100-episode one; and the same speed-up on the learned world
with a ``ckpt:`` policy, where torch's threads decide it.

Targets (issue 6): speed-up >= 1.6x from 1 to 2 workers on 2 cores; peak memory of the
500-episode campaign within 20% of the 100-episode one (memory must not grow with campaign
size: episodes are streamed to the ledger and the artifact store, nothing accumulates).

Learned-world row (issue 42 item 2): ``Kosmos-TabletopLearned-v1`` with ``ckpt:shipped=bc_clone_6000``
at ``--workers 2`` against ``--workers 1``, both with eval's default threads (the rule of
kosmos_env/utils/threads.py: max(1, cores // workers) per worker; ``OMP_NUM_THREADS`` is removed
from the children's environment so the rule applies), target >= 1.6x on 2 cores. A third run,
``--workers 1 --threads 1``, separates what the second worker adds from what the thread count
does. Each run's thread count is read back from its results.json (``campaign.worker_threads``).
On a busy machine two threads in one process are far slower than one (each op waits for a thread
that is not scheduled), so a ratio measured under load mostly measures that: the load average is
printed beside every run; measure the target on a quiet machine.

Each campaign runs as ``python -m kosmos_env.cli eval`` in a child process (the real command),
with a process pool of the given size (both speed runs pay the same worker start-up). Peak
memory is the largest sum of RSS over the eval process and all its workers, sampled every
50 ms with psutil, plus the largest single-process peak (``ru_maxrss`` from ``wait4``).
The machine's load average is recorded before and after, since its 2 cores are shared.

    python bench/campaign_scaling.py [--speed-seeds 8] [--no-video-speed] [--out bench/results/campaign_scaling.txt]
    python bench/campaign_scaling.py --learned-only [--learned-seeds 6]   # the learned-world row alone
"""

from __future__ import annotations

import argparse
import json
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
LEARNED_ENV = "Kosmos-TabletopLearned-v1"
LEARNED_POLICY = "ckpt:shipped=bc_clone_6000"


def run_eval(
    out: str, policies: list[str], seeds: int, workers: int, video: bool, extra: list[str] | None = None
) -> dict:
    """Run one campaign in a child process; return wall time, rates, peak memory and the workers'
    torch threads. ``extra``: more eval flags; without ``--env`` the tabletop at 64x64."""
    extra = list(extra or [])
    argv = [
        sys.executable,
        "-m",
        "kosmos_env.cli",
        "eval",
        *(extra if "--env" in extra else ["--image-size", "64", "64", *extra]),
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
    env.pop("OMP_NUM_THREADS", None)  # it would override eval's thread rule, which the learned row measures
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
    with open(os.path.join(out, "results.json")) as fh:
        threads = sorted({w["torch_threads"] for w in json.load(fh)["campaign"].get("worker_threads", [])})
    return {
        "episodes": n,
        "wall_s": wall,
        "per_min_wall": n / wall * 60,
        "per_min_steady": steady,
        "busy_s": finished - started,
        "peak_rss_sum_mb": peak_sum / 2**20,
        "max_child_rss_mb_so_far": child_max_rss_kb / 1024,
        "torch_threads": threads,
    }


def learned_row(tmp: str, seeds: int) -> list[str]:
    """The learned world with a ckpt: policy: --workers 2 against --workers 1 (eval's default threads),
    and --workers 1 --threads 1; one line per run, then the ratios."""
    from kosmos_env.utils.threads import available_cores

    lines = [f"learned world: {available_cores()} core(s) for the thread rule (kosmos_env.utils.threads)"]
    runs = {}
    for label, workers, threads in (("1 worker", 1, None), ("2 workers", 2, None), ("1 worker --threads 1", 1, 1)):
        extra = ["--env", LEARNED_ENV] + ([] if threads is None else ["--threads", str(threads)])
        load_before = os.getloadavg()[0]
        r = run_eval(os.path.join(tmp, f"learned-{workers}-{threads}"), [LEARNED_POLICY], seeds, workers, False, extra)
        runs[label] = dict(r, load_before=load_before)
        lines.append(
            f"learned, {label}: {r['episodes']} episodes ({LEARNED_ENV}, {LEARNED_POLICY}, no video), "
            f"torch threads per worker {r['torch_threads']}, {r['wall_s']:.1f} s wall = {r['per_min_wall']:.1f} "
            f"rollouts/min including start-up; steady state {r['per_min_steady']:.1f} rollouts/min; "
            f"load {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
        )
        print(lines[-1], flush=True)
    two, one, one_t1 = runs["2 workers"], runs["1 worker"], runs["1 worker --threads 1"]
    first_summary = len(lines)
    lines.append(
        f"learned speed-up --workers 2 vs --workers 1 (default threads): {two['per_min_wall'] / one['per_min_wall']:.2f}x "
        f"wall, {two['per_min_steady'] / one['per_min_steady']:.2f}x steady state (target >= 1.6x on 2 cores): "
        f"{'PASS' if two['per_min_steady'] / one['per_min_steady'] >= 1.6 else 'MISS'}"
    )
    lines.append(
        f"learned speed-up --workers 2 vs --workers 1 --threads 1 (the second worker alone): "
        f"{two['per_min_steady'] / one_t1['per_min_steady']:.2f}x steady state; --threads 1 vs default with one "
        f"worker: {one_t1['per_min_steady'] / one['per_min_steady']:.2f}x"
    )
    # the first run's: later ones include this row's own earlier runs in the 1-minute average
    load_first = runs["1 worker"]["load_before"]
    if load_first > 1.0:
        lines.append(
            f"note: the load average was {load_first:.1f} on {available_cores()} core(s) before these runs: the "
            "ratios above were measured under load (two threads in one process are far slower on busy cores), "
            "not the quiet-machine figure the target is about"
        )
    print("\n".join(lines[first_summary:]), flush=True)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speed-seeds", type=int, default=6, help="seeds for the speed runs (5 policies x 4 tasks x N)")
    ap.add_argument("--small-seeds", type=int, default=5, help="seeds of the small memory run (100 episodes)")
    ap.add_argument("--large-seeds", type=int, default=25, help="seeds of the large memory run (500 episodes)")
    ap.add_argument("--memory-workers", type=int, default=2)
    ap.add_argument("--no-video-speed", action="store_true", help="speed runs without MP4 encoding")
    ap.add_argument(
        "--learned-seeds", type=int, default=6, help="seeds per task of the learned-world runs (4 tasks x N episodes)"
    )
    ap.add_argument("--learned-only", action="store_true", help="only the learned-world row")
    ap.add_argument(
        "--out",
        default=None,
        help="report file (default bench/results/campaign_scaling.txt; campaign_scaling_learned.txt with "
        "--learned-only)",
    )
    args = ap.parse_args()
    name = "campaign_scaling_learned.txt" if args.learned_only else "campaign_scaling.txt"
    args.out = args.out or os.path.join(ROOT, "bench", "results", name)

    lines = [
        f"campaign scaling bench, {time.strftime('%Y-%m-%d %H:%M:%S')}",
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs (shared with other "
        f"jobs), python {platform.python_version()}",
        f"load average before: {load_average()}",
    ]
    print("\n".join(lines), flush=True)
    tmp = tempfile.mkdtemp(prefix="kosmos-campaign-bench-")
    try:
        if args.learned_only:
            lines += learned_row(tmp, args.learned_seeds)
            lines.append(f"load average after: {load_average()}")
            save("\n".join(lines), args.out)
            print(f"wrote {args.out}")
            return 0
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
        lines += learned_row(tmp, args.learned_seeds)
        lines.append(f"load average after: {load_average()}")
        print("\n".join(lines[-3:]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    save("\n".join(lines), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
