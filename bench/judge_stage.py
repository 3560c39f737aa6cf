"""Judging as its own stage, measured on CPU: batched judging of stored rollouts, and overlapping stages.

Same run, tiny random Qwen2.5-VL judge (``kosmos_env.testing``, the ``--tiny`` judge spec with
``batch_size`` 8) over the tabletop world at 64x64, one torch thread per process:

(a) a campaign's rollouts are rolled out once and filed for the judge stage; the same stored
    rollouts are then judged by the judge stage's own code (``JudgeRunner``: read from the
    store, ``judge_many``) in batches of 8 and one by one: first one untimed pass over all
    rollouts with each (one-time costs: allocator growth, first-call paths), then ``--rounds``
    timed rounds; in each round both arms judge every batch of 8 stored rollouts back to back
    (which arm goes first alternates), so that the machine's drifting speed hits both alike;
    every round's totals printed; throughput ratio = median round time one by one / median
    round time batched, in wall seconds and in process CPU seconds, and the same ratio pooled
    over all (round, batch) pairs with a 95 % bootstrap interval over the pairs; plus whether
    verdicts and scores are identical (they must be: per-rollout seeding);
(b) the same campaign run four ways into fresh folders: in-line judging with 1 worker
    process (the baseline), two stages at once with 1 rollout process + 1 judge process (the
    judge's own batch of 8, then ``--judge-batch 1``), and in-line judging with 2 worker
    processes (the same number of processes as the two stages, for context); wall ratio =
    two-stage / in-line-1, start-up (process spawn, imports, model loads) included. The
    per-rollout judge share is the in-line run's warm judge seconds over its total seconds.

    python bench/judge_stage.py [--seeds 16] [--rounds 3] [--out bench/results/judge_stage.txt]

Ratios are measured within one run; the machine's load is printed with them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the spawned workers: one thread each

from _report import load_average, save  # noqa: E402  (bench/_report.py)

POLICIES = ["scripted:skill=0.8", "scripted:skill=0.3"]
STAGED = "two stages, 1 rollout + 1 judge worker (judge batch 8)"
STAGED_1 = "two stages, 1 rollout + 1 judge worker, --judge-batch 1"
TASKS = ["spoon_on_towel", "carrot_on_plate"]


def judge_spec():
    from kosmos_env.testing.tiny_run import tiny_judge_dir, tiny_judge_spec

    return {**tiny_judge_spec({"type": "vlm"}, tiny_judge_dir()), "batch_size": 8}


def batched_vs_single(config, folder: str, rounds: int, lines: list[str]) -> float:
    from kosmos_env.campaign.judge_stage import JudgeRunner
    from kosmos_env.campaign.ledger import Ledger, make_owner
    from kosmos_env.campaign.runner import open_campaign
    from kosmos_env.campaign.worker import WorkSettings, work
    from kosmos_env.judges import make_judge

    open_campaign(config, folder)
    t0 = time.perf_counter()
    work(folder, config, make_owner("rollout"), WorkSettings(judge_stage=True))
    roll_s = time.perf_counter() - t0
    with Ledger(os.path.join(folder, "ledger.sqlite"), create=False) as ledger:
        rows = ledger.judge_queue()
    lines.append(f"(a) {len(rows)} rollouts rolled out and stored once ({roll_s / len(rows):.3f} s per rollout)")
    spec = dict(config.judge)
    runners = {b: JudgeRunner(config, folder, make_judge({**spec, "batch_size": b}), b) for b in (1, 8)}

    def judge(b: int, some_rows) -> list:
        """``some_rows`` judged by the batch-``b`` runner, ``b`` at a time."""
        out = []
        for i in range(0, len(some_rows), b):
            out += runners[b].judge_rows(some_rows[i : i + b])
        return out

    for b in runners:  # untimed warm-up pass: one-time costs are not judging
        judge(b, rows)
    # Both arms judge the same 8 stored rollouts back to back, for every batch of 8 in turn (which
    # arm goes first alternates): a shared machine's speed drifts over seconds (on the 2-core
    # machine of bench/results, one batch of 8 took 0.71-1.01 s in 15 repeats at load < 1), so
    # arms timed a whole pass apart would measure the drift as much as the batching.
    chunks = [rows[i : i + 8] for i in range(0, len(rows), 8)]
    units: list[tuple[float, float, float, float]] = []  # per (round, chunk): wall 1, wall 8, cpu 1, cpu 8
    wall: dict[int, list[float]] = {1: [], 8: []}
    cpu: dict[int, list[float]] = {1: [], 8: []}
    verdicts: dict[int, list] = {}
    for r in range(rounds):
        took = {1: [0.0, 0.0], 8: [0.0, 0.0]}  # this round's wall, CPU per arm
        outs: dict[int, list] = {1: [], 8: []}
        for i, chunk in enumerate(chunks):
            unit = {}
            for b in (1, 8) if (r + i) % 2 == 0 else (8, 1):
                t0, c0 = time.perf_counter(), time.process_time()
                outs[b] += judge(b, chunk)
                unit[b] = (time.perf_counter() - t0, time.process_time() - c0)
                took[b][0] += unit[b][0]
                took[b][1] += unit[b][1]
            units.append((unit[1][0], unit[8][0], unit[1][1], unit[8][1]))
        for b in (1, 8):
            wall[b].append(took[b][0])
            cpu[b].append(took[b][1])
            verdicts[b] = [(rec["outcome"], rec["judgment"]["score"], rec["judgment"]["votes"]) for rec, _ in outs[b]]
            lines.append(
                f"    round {r + 1}, batch {b}: {took[b][0]:.2f} s = {len(rows) / took[b][0]:.2f} rollouts/s "
                f"(process CPU {took[b][1]:.2f} s)"
            )
    wall_1, wall_8 = statistics.median(wall[1]), statistics.median(wall[8])
    ratio = wall_1 / wall_8
    lines.append(
        f"(a) judge throughput, batches of 8 vs one by one (median of {rounds} rounds, wall): "
        f"{len(rows) / wall_8:.2f} / {len(rows) / wall_1:.2f} rollouts/s = {ratio:.2f}x (target >= 2x); "
        f"verdicts and scores identical: {verdicts[8] == verdicts[1]}"
    )
    # the judge runs in this process on one thread: its CPU seconds are what the machine's load inflates least
    cpu_1, cpu_8 = statistics.median(cpu[1]), statistics.median(cpu[8])
    lines.append(
        f"(a) judge CPU seconds per rollout (median of rounds), one by one vs batches of 8: "
        f"{cpu_1 / len(rows):.3f} / {cpu_8 / len(rows):.3f} s = {cpu_1 / cpu_8:.2f}x"
    )
    for name, one, eight in (("wall", 0, 1), ("process CPU", 2, 3)):
        pooled, low, high = pooled_ratio(units, one, eight)
        lines.append(
            f"(a) pooled over all {len(units)} (round, batch) pairs, {name}: total one by one / total batched = "
            f"{pooled:.2f}x [{low:.2f}, {high:.2f}] (95 % bootstrap interval over the pairs)"
        )
    return ratio


def pooled_ratio(units, one: int, eight: int, resamples: int = 2000) -> tuple[float, float, float]:
    """sum of column ``one`` / sum of column ``eight`` over the paired units, with a 95 %
    percentile bootstrap interval that resamples the units (fixed seed)."""
    import numpy as np

    a = np.array([u[one] for u in units])
    b = np.array([u[eight] for u in units])
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(units), size=(resamples, len(units)))
    boot = a[picks].sum(axis=1) / b[picks].sum(axis=1)
    return float(a.sum() / b.sum()), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))


def campaigns(config, base: str, lines: list[str]) -> float:
    from kosmos_env.campaign.executors import make_executor
    from kosmos_env.campaign.runner import run_campaign
    from kosmos_env.campaign.worker import WorkSettings

    runs = {}
    for i, (name, executor, settings) in enumerate(
        (
            ("in-line, 1 worker", make_executor(1, "process"), WorkSettings()),
            (STAGED, make_executor(1, "process", judge_workers=1), WorkSettings()),
            (STAGED_1, make_executor(1, "process", judge_workers=1), WorkSettings(judge_batch=1)),
            ("in-line, 2 workers", make_executor(2, "process"), WorkSettings()),
        )
    ):
        folder = os.path.join(base, f"campaign-{i}")
        t0 = time.perf_counter()
        results = run_campaign(config, folder, executor, settings, progress=False)
        runs[name] = (time.perf_counter() - t0, results)
    base_wall, base_results = runs["in-line, 1 worker"]
    per = [e["timings"] for e in base_results["per_episode"]]
    judge_s = sum(t["judge"] for t in per) / len(per)
    total_s = sum(t["total"] for t in per) / len(per)
    share = judge_s / total_s
    lines.append(
        f"(b) in-line per rollout: judge {judge_s:.3f} s of {total_s:.3f} s total -> judge share {share:.2f} "
        "(the target applies where it is >= 0.33)"
    )
    for name, (wall, results) in runs.items():
        same = [(e["outcome"], e["score"]) for e in results["per_episode"]] == [
            (e["outcome"], e["score"]) for e in base_results["per_episode"]
        ]
        lines.append(
            f"    {name}: wall {wall:.1f} s ({len(results['per_episode'])} episodes, same outcomes as "
            f"in-line-1: {same}, queue at the end {results['campaign']['queue']})"
        )
    staged, staged_1 = runs[STAGED][0], runs[STAGED_1][0]
    ratio = staged / base_wall
    lines.append(
        f"(b) wall, two stages vs in-line judging (1 rollout worker each): {staged:.1f} / {base_wall:.1f} s "
        f"= {ratio:.2f}x (target <= 0.8x); with --judge-batch 1: {staged_1 / base_wall:.2f}x; two stages vs "
        f"in-line with 2 workers: {staged / runs['in-line, 2 workers'][0]:.2f}x"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=16, help="seeds per task (2 policies x 2 tasks x seeds episodes)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each arm, after one untimed pass")
    parser.add_argument("--out", default=None, help="also save the report here")
    args = parser.parse_args()
    if args.seeds < 1 or args.rounds < 1:
        parser.error("--seeds and --rounds must be >= 1")
    import torch

    torch.set_num_threads(1)
    from kosmos_env.campaign.design import make_config

    config = make_config(
        "Kosmos-Tabletop-v1", POLICIES, tasks=TASKS, seeds=args.seeds, image_size=(64, 64), judge=judge_spec()
    )
    lines = [
        f"judge stage bench: {config.n_episodes} episodes ({len(POLICIES)} policies x {len(TASKS)} tasks x "
        f"{args.seeds} seeds), tabletop 64x64, tiny random VLM judge (k={config.judge.get('k', 5)}), "
        f"1 torch thread per process",
        f"load average before: {load_average()}",
    ]
    base = tempfile.mkdtemp(prefix="kosmos-judge-stage-")
    try:
        batched_vs_single(config, os.path.join(base, "stored"), args.rounds, lines)
        campaigns(config, base, lines)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    lines.append(f"load average after: {load_average()}")
    text = "\n".join(lines)
    print(text)
    save(text, args.out)


if __name__ == "__main__":
    main()
