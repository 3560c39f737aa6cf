"""Where the time goes per rollout (policy, world, gate, judge, I/O, overhead): a table and a PNG,
read from a finished campaign's results.json (per-episode timings recorded by the workers).

    python bench/time_breakdown.py CAMPAIGN_DIR [--out bench/results/time_breakdown] [--title TEXT]

Writes OUT.txt (table per policy and overall, seconds per rollout and share of the total) and
OUT.png (stacked bars per policy). "overhead" is total minus the named stages: claiming,
lease bookkeeping, env reset, the policy's reset, and, for the Ray executor, dispatch and
result transfer.

    python bench/time_breakdown.py --video-writers [--seeds 3] [--rounds 2] [--out bench/results/time_breakdown_video]

runs one tabletop campaign (Kosmos-Tabletop-v1 at its stored 128x128 frames, policies random,
scripted:skill=0.6 and scripted:skill=1.0, every task, tuning seeds 200000+) three ways: BEFORE,
the ffmpeg subprocess (imageio-ffmpeg) in the worker's own thread, as campaigns wrote videos until
issue 42; in-process PyAV in the worker's thread; and AFTER, in-process PyAV on the worker's writer
thread (``WorkSettings.video_thread``, the default). All run in this process, one worker, in
alternating order over ``--rounds`` rounds (so load on the machine hits them alike), each into a
fresh folder, after a small warm-up campaign per way that is not measured. The table splits "io"
into the video write (the worker's ``video`` timing, kept in the ledger: the time the rollout
waited for its MP4) and the rest; the script prints the video write's share of a rollout before
and after, their ratio, and rollouts per hour over the wall clock (the writer thread still spends
CPU, beside the next rollout). Target: the video write at most 10 % of a tabletop rollout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from _report import load_average, save  # bench/_report.py: the script's folder is on sys.path

STAGES = ("policy", "world", "gate", "judge", "io", "overhead")


def breakdown(results: dict) -> dict[str, dict[str, float]]:
    """Mean seconds per rollout and stage, per policy and for "all"."""
    groups: dict[str, list[dict]] = {}
    for ep in results["per_episode"]:
        groups.setdefault(ep["policy"], []).append(ep["timings"])
        groups.setdefault("all", []).append(ep["timings"])
    table = {}
    for label, rows in groups.items():
        sums = {s: 0.0 for s in (*STAGES, "total")}
        for t in rows:
            named = sum(float(t.get(s, 0.0)) for s in STAGES if s != "overhead")
            for s in STAGES:
                sums[s] += float(t.get(s, 0.0)) if s != "overhead" else max(0.0, float(t["total"]) - named)
            sums["total"] += float(t["total"])
        table[label] = {k: v / len(rows) for k, v in sums.items()} | {"n": len(rows)}
    return table


def format_table(table: dict, stages: tuple[str, ...] = STAGES) -> str:
    head = f"{'policy':24s} {'n':>4s} " + " ".join(f"{s:>14s}" for s in stages) + f" {'total':>9s}"
    lines = [head, "-" * len(head)]
    for label, row in sorted(table.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        cells = " ".join(f"{row[s] * 1e3:8.1f} ({row[s] / row['total'] * 100:3.0f}%)" for s in stages)
        lines.append(f"{label[:24]:24s} {row['n']:4d} {cells} {row['total'] * 1e3:7.1f}ms")
    return "\n".join(lines)


# --------------------------------------------------------------------------- --video-writers

#: the stages of the writer comparison: "video" is the MP4 write, "io" the rest of the artifact writes
VIDEO_STAGES = ("policy", "world", "gate", "judge", "video", "io", "overhead")
#: (name in the table, encoder of kosmos_env.utils.video.write_mp4, video written on the worker's writer thread)
WRITERS = (
    ("BEFORE: ffmpeg subprocess, in the worker's thread", "ffmpeg", False),
    ("PyAV in-process, in the worker's thread", "pyav", False),
    ("AFTER: PyAV in-process, on the writer thread", "pyav", True),
)
FIRST_SEED = 200000  # tuning range (kosmos_env/study/seed_ranges.json): a timing bench reads no evaluation seed


def video_breakdown(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Mean seconds per rollout and stage (VIDEO_STAGES), per policy and for "all", from ledger rows."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["policy"], []).append(row["timings"])
        groups.setdefault("all", []).append(row["timings"])
    table = {}
    for label, timings in groups.items():
        sums = dict.fromkeys((*VIDEO_STAGES, "total"), 0.0)
        for t in timings:
            t = {**t, "io": float(t.get("io", 0.0)) - float(t.get("video", 0.0))}
            named = sum(float(t.get(s, 0.0)) for s in VIDEO_STAGES if s != "overhead")
            for s in VIDEO_STAGES:
                sums[s] += float(t.get(s, 0.0)) if s != "overhead" else max(0.0, float(t["total"]) - named)
            sums["total"] += float(t["total"])
        table[label] = {k: v / len(timings) for k, v in sums.items()} | {"n": len(timings)}
    return table


def run_with_writer(config, out: str, encoder: str, video_thread: bool) -> tuple[list[dict], float]:
    """Run ``config`` into ``out`` in this process with MP4 writer ``encoder`` (on the worker's writer
    thread or not); the finished ledger rows and the campaign's wall seconds."""
    import functools

    import kosmos_env.utils.video as video
    from kosmos_env.campaign.executors import InProcessExecutor
    from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger
    from kosmos_env.campaign.runner import run_campaign
    from kosmos_env.campaign.worker import WorkSettings

    original = video.write_mp4
    # the artifact store imports write_mp4 from its module at each call, so this picks the writer
    video.write_mp4 = functools.partial(original, encoder=encoder)
    t0 = time.perf_counter()
    try:
        run_campaign(config, out, InProcessExecutor(), WorkSettings(video_thread=video_thread), progress=False)
    finally:
        wall = time.perf_counter() - t0
        video.write_mp4 = original
    with Ledger(os.path.join(out, LEDGER_NAME), create=False) as ledger:
        rows = ledger.episodes(status="done")
    if not all(r["video"] and "video" in (r["timings"] or {}) for r in rows):
        raise SystemExit(f"{out}: an episode has no video or no video timing; nothing to compare")
    return rows, wall


def video_writers(args) -> int:
    """Run the same campaign with each MP4 writer and print the video write's share before and after."""
    import tempfile

    import numpy as np

    from kosmos_env.campaign.design import make_config
    from kosmos_env.utils.video import write_mp4

    policies = ["random", "scripted:skill=0.6", "scripted:skill=1.0"]
    config = make_config("Kosmos-Tabletop-v1", policies, seeds=args.seeds, seed_offset=FIRST_SEED)
    with tempfile.TemporaryDirectory(prefix="kosmos-video-writers-") as tmp:
        # each writer's first use (PyAV's import, the ffmpeg binary's first start) is not a rollout's cost
        for encoder in {w[1] for w in WRITERS}:
            write_mp4(os.path.join(tmp, f"warm-{encoder}.mp4"), np.zeros((2, 16, 16, 3), np.uint8), 5.0, encoder)
        # a first campaign in this process (renderer, policies, first episodes) is not measured
        warm = make_config("Kosmos-Tabletop-v1", policies, tasks=config.tasks[:1], seeds=1, seed_offset=FIRST_SEED)
        for k, (_, encoder, thread) in enumerate(WRITERS):
            run_with_writer(warm, os.path.join(tmp, f"warm-{k}"), encoder, thread)
        rows: dict[str, list[dict]] = {name: [] for name, *_ in WRITERS}
        wall = dict.fromkeys(rows, 0.0)
        for r in range(args.rounds):
            for k, (name, encoder, thread) in enumerate(WRITERS if r % 2 == 0 else WRITERS[::-1]):
                got, seconds = run_with_writer(config, os.path.join(tmp, f"{r}-{k}"), encoder, thread)
                rows[name] += got
                wall[name] += seconds
                print(f"round {r + 1}/{args.rounds}: {name} done", flush=True)
    tables = {name: video_breakdown(rows[name]) for name in rows}
    before_name, after_name = WRITERS[0][0], WRITERS[-1][0]
    before, after = tables[before_name]["all"], tables[after_name]["all"]
    share_before, share_after = before["video"] / before["total"], after["video"] / after["total"]
    lines = [
        f"video write per tabletop rollout, before and after, {time.strftime('%Y-%m-%d %H:%M:%S')}",
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs, shared and loaded "
        f"(other jobs' training runs; the bench ran under nice -n 10), load average {load_average()} at the end",
        f"campaign: {config.env_id} {config.spec['image_size'][0]}x{config.spec['image_size'][1]}, "
        f"{', '.join(policies)}; {len(config.tasks)} tasks x {args.seeds} seeds (from {FIRST_SEED}) = "
        f"{config.n_episodes} rollouts per run; in-process executor, one worker; {args.rounds} rounds per writer in "
        "alternating order, each into a fresh folder",
        "mean milliseconds per rollout (share of the rollout's total); video = the time the worker spent on the MP4",
        "(with the writer thread: handing the frames over, and waiting for a video not yet written when its episode",
        "is recorded), io = the other artifacts",
    ]
    for name, _, thread in WRITERS:
        per_hour = len(rows[name]) / wall[name] * 3600.0
        lines += ["", name, format_table(tables[name], VIDEO_STAGES)]
        if thread:
            on_thread = np.mean([r["timings"]["video_writer"] for r in rows[name]]) * 1e3
            lines.append(f"the writer thread's own time per video (beside the next rollout): {on_thread:.1f} ms")
        lines.append(f"rollouts per hour over the campaigns' wall clock: {per_hour:.0f}")
    met = "met" if share_after <= 0.10 else "NOT met"
    rate = {name: len(rows[name]) / wall[name] for name in rows}
    lines += [
        "",
        f"video write BEFORE: {before['video'] * 1e3:.1f} ms = {share_before * 100:.1f} % of a rollout "
        f"({before['total'] * 1e3:.1f} ms)",
        f"video write AFTER:  {after['video'] * 1e3:.1f} ms = {share_after * 100:.1f} % of a rollout "
        f"({after['total'] * 1e3:.1f} ms)",
        "medians per rollout (robust to a preempted rollout on the loaded machine): video "
        + ", ".join(
            f"{np.median([r['timings']['video'] for r in rows[n]]) * 1e3:.1f} ms of "
            f"{np.median([r['timings']['total'] for r in rows[n]]) * 1e3:.1f} ms ({n.split(':')[0]})"
            for n in (before_name, after_name)
        ),
        f"video write before / after: {before['video'] / after['video']:.1f}x; rollout total before / after: "
        f"{before['total'] / after['total']:.2f}x; rollouts per hour after / before: "
        f"{rate[after_name] / rate[before_name]:.2f}x",
        f"target (video write <= 10 % of a tabletop rollout): {met}",
    ]
    text = "\n".join(lines)
    print(text)
    save(text, args.out + ".txt")
    print(f"wrote {args.out}.txt")
    return 0


def plot(table: dict, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [k for k in sorted(table) if k != "all"] + ["all"]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(labels) + 1.8))
    left = [0.0] * len(labels)
    for stage in STAGES:
        vals = [table[k][stage] * 1e3 for k in labels]
        ax.barh(labels, vals, left=left, label=stage)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_xlabel("milliseconds per rollout (mean)")
    ax.set_title(title, fontsize=9)
    ax.legend(ncol=len(STAGES), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("campaign", nargs="?", help="a campaign folder with results.json")
    ap.add_argument(
        "--out", default=None, help="OUT.txt and OUT.png are written (default: bench/results/time_breakdown)"
    )
    ap.add_argument("--title", default=None)
    ap.add_argument(
        "--video-writers", action="store_true", help="run one tabletop campaign with each MP4 writer and compare"
    )
    ap.add_argument("--seeds", type=int, default=3, help="--video-writers: seeds per policy and task")
    ap.add_argument("--rounds", type=int, default=2, help="--video-writers: runs per writer")
    args = ap.parse_args(argv)
    results_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    if args.video_writers:
        if args.campaign:
            ap.error("--video-writers runs its own campaigns: give no CAMPAIGN_DIR")
        args.out = args.out or os.path.join(results_dir, "time_breakdown_video")
        return video_writers(args)
    if not args.campaign:
        ap.error("give a CAMPAIGN_DIR, or --video-writers")
    args.out = args.out or os.path.join(results_dir, "time_breakdown")
    with open(os.path.join(args.campaign, "results.json")) as fh:
        results = json.load(fh)
    camp = results["campaign"]
    table = breakdown(results)
    runs_executor = None
    try:
        import sqlite3

        con = sqlite3.connect(f"file:{os.path.join(args.campaign, 'ledger.sqlite')}?mode=ro", uri=True)
        runs_executor = sorted({r[0] for r in con.execute("SELECT executor FROM runs")})
        con.close()
    except Exception:
        pass
    title = args.title or (
        f"{camp['env_id']} campaign {camp['id']}: {len(results['per_episode'])} rollouts, "
        f"executor {','.join(runs_executor or ['?'])}"
    )
    text = "\n".join(
        [
            f"time per rollout by stage, {time.strftime('%Y-%m-%d %H:%M:%S')}",
            f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs (shared), "
            f"load average {load_average()} (when this table was made; the campaign ran earlier)",
            title,
            "mean milliseconds per rollout (share of the rollout's total)",
            format_table(table),
            f"rollouts/hour over the campaign's wall clock: {results['aggregated']['cost'].get('rollouts_per_hour')}",
        ]
    )
    print(text)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".txt", "w") as fh:
        fh.write(text + "\n")
    plot(table, args.out + ".png", title)
    print(f"wrote {args.out}.txt and {args.out}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
