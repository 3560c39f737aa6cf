"""Campaign throughput with ``--lockstep N`` vs one episode at a time, tiny Cosmos 3 on CPU, same run.

The same Kosmos-Bridge-v1 campaign (a tiny random Cosmos 3 checkpoint, the one ``--tiny``
runs, at small CPU settings) runs in this process with ``WorkSettings(lockstep=1)`` and with
``lockstep=N``, each into a fresh folder, in interleaved rounds (best of ``--rounds``; a
shared machine disturbs some rounds). A warm-up campaign loads the pipeline first, so all arms
run warm. A control arm runs the same lockstep worker with the world calls of a step made one
by one (the batched call replaced by single pipeline calls): it separates what the batched
denoising loop gains from what side-by-side stepping alone does. Prints episodes per second of
each arm, the ratios, the summed per-episode ``total`` seconds against the wall time (lockstep
charges each of n side-by-side episodes 1/n of a step, so the two should be close), and whether
lockstep 1 and N recorded the same actions and outcomes. The gate is off so every episode runs
the whole horizon (a clean throughput measure).

Part ``refill``: episodes of unequal length (the gate on, its collapse threshold lowered so
that the tiny model's frames pass it on one task, whose episodes run the whole ``--long-horizon``,
and fail it on the others, discarded after one step). The same lockstep-N worker with a freed
lane taking the next episode at once (refill, the default) and with whole batches
(``WorkSettings(refill=False)``), interleaved: batched world calls, lane-steps per call, wall.

Part ``ray``: the same unequal-length campaign at lockstep N in one process-pool worker and in
one Ray actor (a local 2-CPU Ray instance, started inside the timed run): walls including
start-up, and whether both recorded the same outcomes, steps and actions.

CPU numbers say nothing about a GPU.

    python bench/campaign_lockstep.py [--lanes 4] [--seeds 4] [--horizon 3] [--long-horizon 6] [--steps 2]
                                      [--rounds 2] [--parts throughput,refill,ray]
                                      [--out bench/results/campaign_lockstep.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # worker processes and Ray actors: one thread, as this process

from _report import load_average, save  # noqa: E402  (bench/_report.py)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=4, help="lockstep width compared with 1")
    parser.add_argument("--seeds", type=int, default=4, help="seeds per task (3 tasks)")
    parser.add_argument("--horizon", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="denoising steps per world call")
    parser.add_argument("--size", type=int, default=48, help="model input height (width 4:3)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--long-horizon", type=int, default=6, help="horizon of the unequal-length campaign")
    parser.add_argument(
        "--parts",
        default="throughput,refill,ray",
        help="comma-separated: throughput (lockstep N vs 1), refill (vs whole batches), ray "
        "(Ray actor vs process pool)",
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    from kosmos_env.campaign.design import make_config
    from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger
    from kosmos_env.campaign.runner import run_campaign
    from kosmos_env.campaign.worker import WorkSettings
    from kosmos_env.spec import load_spec
    from kosmos_env.testing.tiny_run import tiny_cosmos3_dir

    torch.set_num_threads(1)
    os.environ[load_spec("Kosmos-Bridge-v1").world["local_path_env"]] = tiny_cosmos3_dir()
    width = max(16, int(round(args.size * 4 / 3 / 16)) * 16)
    overrides = {
        "image_size": [args.size, width],
        "horizon": args.horizon,
        "gate": {"enabled": False},
        "world": {
            "device": "cpu",
            "dtype": "float32",
            "num_inference_steps": args.steps,
            "chunk_size": 4,
            "input_size": [args.size, width],
        },
    }
    config = make_config(
        "Kosmos-Bridge-v1",
        ["random:chunk=4"],
        seeds=args.seeds,
        judge="action_only",
        spec_overrides=overrides,
        video=False,
    )
    n = config.n_episodes
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = parts - {"throughput", "refill", "ray"}
    if unknown:
        parser.error(f"--parts: unknown part(s) {sorted(unknown)}")
    # unequal lengths: the gate ends most episodes after one step (as in tests/campaign/test_lockstep.py)
    uneven = make_config(
        "Kosmos-Bridge-v1",
        ["random:chunk=4"],
        seeds=args.seeds,
        judge="action_only",
        spec_overrides={**overrides, "horizon": args.long_horizon, "gate": {"collapse_ratio": 0.2}},
        video=False,
    )
    tmp = tempfile.mkdtemp(prefix="kosmos-lockstep-bench-")

    import kosmos_env.batched_vector as batched_vector

    batched_call = batched_vector._generate_batch

    def one_by_one(pipe, requests):  # the control: same lockstep worker, world calls not batched
        class Report:
            batched = False

        return [np.asarray(pipe(**kw).video) for kw in requests], Report()

    calls: list[int] = []  # sizes of the batched world calls of the running campaign

    def counted(pipe, requests):
        calls.append(len(requests))
        return batched_call(pipe, requests)

    def campaign(
        lanes: int, tag: str, batch_world: bool = True, cfg=config, refill: bool = True, executor=None
    ) -> tuple[float, str]:
        out = os.path.join(tmp, tag)
        calls.clear()
        batched_vector._generate_batch = counted if batch_world else one_by_one
        try:
            t0 = time.perf_counter()
            run_campaign(cfg, out, executor, settings=WorkSettings(lockstep=lanes, refill=refill), progress=False)
            return time.perf_counter() - t0, out
        finally:
            batched_vector._generate_batch = batched_call

    def summary(out: str) -> tuple[float, dict]:
        with Ledger(os.path.join(out, LEDGER_NAME), create=False) as ledger:
            rows = ledger.episodes()
        total = sum(r["timings"]["total"] for r in rows)
        per = {r["episode_id"]: (r["outcome"], r["steps"], np.load(os.path.join(out, r["actions"]))) for r in rows}
        return total, per

    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch threads 1, python {platform.python_version()}",
        f"load average before: {load_average()}",
        f"Kosmos-Bridge-v1 with the tiny random Cosmos 3 checkpoint (kosmos_env.testing.tiny_run), input "
        f"{args.size}x{width}, {args.steps} denoising steps, model chunk 4, horizon {args.horizon}, gate off, "
        f"no video; 1 policy (random:chunk=4) x 3 tasks x {args.seeds} seeds = {n} episodes "
        f"({n * args.horizon} world calls); best of {args.rounds} interleaved rounds after a warm-up campaign",
    ]
    try:
        campaign(1, "warm-up")
        if "throughput" in parts:
            arms = {"1": (1, True), "N": (args.lanes, True), "control": (args.lanes, False)}
            names = {
                "1": "lockstep 1",
                "N": f"lockstep {args.lanes}",
                "control": f"lockstep {args.lanes}, world calls one by one (control)",
            }
            walls: dict[str, list[float]] = {a: [] for a in arms}
            outs: dict[str, str] = {}
            for r in range(args.rounds):
                for arm, (lanes, batch_world) in arms.items():
                    wall, outs[arm] = campaign(lanes, f"{arm}-r{r}", batch_world)
                    walls[arm].append(wall)
                    total, _ = summary(outs[arm])
                    lines.append(
                        f"round {r + 1} {names[arm]}: wall {wall:.2f} s, {n / wall:.3f} episodes/s, "
                        f"sum of recorded per-episode totals {total:.2f} s"
                    )
            best1, bestn, bestc = min(walls["1"]), min(walls["N"]), min(walls["control"])
            _, per1 = summary(outs["1"])
            _, pern = summary(outs["N"])
            same_outcomes = all(per1[k][:2] == pern[k][:2] for k in per1)
            max_action_diff = max(float(np.abs(per1[k][2] - pern[k][2]).max()) for k in per1)
            lines += [
                f"lockstep 1: {n / best1:.3f} episodes/s (best wall {best1:.2f} s)",
                f"lockstep {args.lanes}: {n / bestn:.3f} episodes/s (best wall {bestn:.2f} s)",
                f"{names['control']}: {n / bestc:.3f} episodes/s (best wall {bestc:.2f} s)",
                f"campaign throughput ratio lockstep {args.lanes} / lockstep 1: {best1 / bestn:.2f}x "
                f"(per-round ratios: {', '.join(f'{a / b:.2f}' for a, b in zip(walls['1'], walls['N'], strict=True))})",
                f"control ratio (lockstep {args.lanes} without batched world calls) / lockstep 1: {best1 / bestc:.2f}x "
                f"(per-round ratios: {', '.join(f'{a / b:.2f}' for a, b in zip(walls['1'], walls['control'], strict=True))}): "
                f"what side-by-side stepping gains without the batched denoising loop",
                f"same outcomes and steps per episode: {same_outcomes}; largest |action difference|: {max_action_diff:.1e}",
            ]
        if "refill" in parts:
            lines += refill_part(args, uneven, campaign, calls, summary)
        if "ray" in parts:
            lines += ray_part(args, uneven, campaign, summary)
        lines += [
            f"load average after: {load_average()}",
        ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = "\n".join(lines)
    print(text)
    save(text, args.out)


def same_episodes(a: dict, b: dict) -> tuple[bool, float]:
    """Whether two campaigns recorded the same outcomes and steps per episode, and the largest action difference."""
    same = sorted(a) == sorted(b) and all(a[k][:2] == b[k][:2] for k in a)
    diff = max(
        (float(np.abs(a[k][2] - b[k][2]).max()) for k in a if k in b and a[k][2].shape == b[k][2].shape),
        default=float("nan"),
    )
    return same, diff


def refill_part(args, uneven, campaign, calls, summary) -> list[str]:
    """Refill vs whole batches on episodes of unequal length, interleaved rounds."""
    n = uneven.n_episodes
    lines = [
        f"-- refill vs whole batches: lockstep {args.lanes}, horizon {args.long_horizon}, gate on (collapse "
        f"threshold 0.2: one task's episodes run the whole horizon, the others end after one step), {n} episodes"
    ]
    arms = {"refill": True, "whole batches": False}
    walls: dict[str, list[float]] = {a: [] for a in arms}
    stats: dict[str, tuple[int, int]] = {}
    outs: dict[str, str] = {}
    for r in range(args.rounds):
        for arm, refill in arms.items():
            wall, outs[arm] = campaign(
                args.lanes, f"uneven-{'refill' if refill else 'batch'}-r{r}", cfg=uneven, refill=refill
            )
            walls[arm].append(wall)
            stats[arm] = (len(calls), sum(calls))
            lines.append(
                f"round {r + 1} {arm}: wall {wall:.2f} s, {len(calls)} batched world calls holding "
                f"{sum(calls)} lane-steps ({sum(calls) / max(1, len(calls)):.2f} per call), "
                f"{n / wall:.3f} episodes/s"
            )
    _, per_r = summary(outs["refill"])
    _, per_b = summary(outs["whole batches"])
    steps = sorted(v[1] for v in per_r.values())
    same, diff = same_episodes(per_r, per_b)
    best_r, best_b = min(walls["refill"]), min(walls["whole batches"])
    lines += [
        f"episode lengths (steps): {steps}",
        f"world calls: refill {stats['refill'][0]} vs whole batches {stats['whole batches'][0]} "
        f"(ratio {stats['refill'][0] / max(1, stats['whole batches'][0]):.2f}) for the same "
        f"{stats['refill'][1]} lane-steps",
        f"wall: refill {best_r:.2f} s vs whole batches {best_b:.2f} s (best of {args.rounds}; ratio "
        f"{best_r / best_b:.2f}; per-round ratios: "
        f"{', '.join(f'{a / b:.2f}' for a, b in zip(walls['refill'], walls['whole batches'], strict=True))})",
        f"same outcomes and steps per episode: {same}; largest |action difference|: {diff:.1e}",
    ]
    return lines


def ray_part(args, uneven, campaign, summary) -> list[str]:
    """One Ray actor vs one process-pool worker, both at lockstep N, on the unequal-length campaign."""
    from kosmos_env.campaign.executors import ProcessPoolExecutor
    from kosmos_env.campaign.ray_executor import RayExecutor

    pool_wall, pool_out = campaign(args.lanes, "pool", cfg=uneven, executor=ProcessPoolExecutor(1))
    ray_wall, ray_out = campaign(args.lanes, "ray", cfg=uneven, executor=RayExecutor(1, num_cpus=2))
    _, per_p = summary(pool_out)
    _, per_y = summary(ray_out)
    same, diff = same_episodes(per_p, per_y)
    return [
        f"-- Ray vs process pool: lockstep {args.lanes}, 1 worker each, the unequal-length campaign "
        f"({uneven.n_episodes} episodes), walls include start-up (a fresh process; a local Ray instance "
        f"and its actor)",
        f"process pool: wall {pool_wall:.2f} s; Ray: wall {ray_wall:.2f} s (ratio {ray_wall / pool_wall:.2f})",
        f"same outcomes and steps per episode: {same}; largest |action difference|: {diff:.1e}",
    ]


if __name__ == "__main__":
    main()
