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
the whole horizon (a clean throughput measure); the tests cover early-ending episodes. CPU
numbers say nothing about a GPU.

    python bench/campaign_lockstep.py [--lanes 4] [--seeds 4] [--horizon 3] [--steps 2] [--rounds 2]
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

from _report import load_average, save  # noqa: E402  (bench/_report.py)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=4, help="lockstep width compared with 1")
    parser.add_argument("--seeds", type=int, default=4, help="seeds per task (3 tasks)")
    parser.add_argument("--horizon", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="denoising steps per world call")
    parser.add_argument("--size", type=int, default=48, help="model input height (width 4:3)")
    parser.add_argument("--rounds", type=int, default=2)
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
    overrides = {"image_size": [args.size, width], "horizon": args.horizon, "gate": {"enabled": False},
                 "world": {"device": "cpu", "dtype": "float32", "num_inference_steps": args.steps, "chunk_size": 4,
                           "input_size": [args.size, width]}}
    config = make_config("Kosmos-Bridge-v1", ["random:chunk=4"], seeds=args.seeds, judge="action_only",
                         spec_overrides=overrides, video=False)
    n = config.n_episodes
    tmp = tempfile.mkdtemp(prefix="kosmos-lockstep-bench-")

    import kosmos_env.batched_vector as batched_vector

    batched_call = batched_vector._generate_batch

    def one_by_one(pipe, requests):  # the control: same lockstep worker, world calls not batched
        class Report:
            batched = False
        return [np.asarray(pipe(**kw).video) for kw in requests], Report()

    def campaign(lanes: int, tag: str, batch_world: bool = True) -> tuple[float, str]:
        out = os.path.join(tmp, tag)
        batched_vector._generate_batch = batched_call if batch_world else one_by_one
        try:
            t0 = time.perf_counter()
            run_campaign(config, out, settings=WorkSettings(lockstep=lanes), progress=False)
            return time.perf_counter() - t0, out
        finally:
            batched_vector._generate_batch = batched_call

    def summary(out: str) -> tuple[float, dict]:
        with Ledger(os.path.join(out, LEDGER_NAME), create=False) as ledger:
            rows = ledger.episodes()
        total = sum(r["timings"]["total"] for r in rows)
        per = {r["episode_id"]: (r["outcome"], r["steps"], np.load(os.path.join(out, r["actions"]))) for r in rows}
        return total, per

    lines = [f"machine: {platform.machine()}, {os.cpu_count()} cores, torch threads 1, python {platform.python_version()}",
             f"load average before: {load_average()}",
             f"Kosmos-Bridge-v1 with the tiny random Cosmos 3 checkpoint (kosmos_env.testing.tiny_run), input "
             f"{args.size}x{width}, {args.steps} denoising steps, model chunk 4, horizon {args.horizon}, gate off, "
             f"no video; 1 policy (random:chunk=4) x 3 tasks x {args.seeds} seeds = {n} episodes "
             f"({n * args.horizon} world calls); best of {args.rounds} interleaved rounds after a warm-up campaign"]
    try:
        campaign(1, "warm-up")
        arms = {"1": (1, True), "N": (args.lanes, True), "control": (args.lanes, False)}
        names = {"1": "lockstep 1", "N": f"lockstep {args.lanes}",
                 "control": f"lockstep {args.lanes}, world calls one by one (control)"}
        walls: dict[str, list[float]] = {a: [] for a in arms}
        outs: dict[str, str] = {}
        for r in range(args.rounds):
            for arm, (lanes, batch_world) in arms.items():
                wall, outs[arm] = campaign(lanes, f"{arm}-r{r}", batch_world)
                walls[arm].append(wall)
                total, _ = summary(outs[arm])
                lines.append(f"round {r + 1} {names[arm]}: wall {wall:.2f} s, {n / wall:.3f} episodes/s, "
                             f"sum of recorded per-episode totals {total:.2f} s")
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
            f"(per-round ratios: {', '.join(f'{a / b:.2f}' for a, b in zip(walls['1'], walls['N']))})",
            f"control ratio (lockstep {args.lanes} without batched world calls) / lockstep 1: {best1 / bestc:.2f}x "
            f"(per-round ratios: {', '.join(f'{a / b:.2f}' for a, b in zip(walls['1'], walls['control']))}): "
            f"what side-by-side stepping gains without the batched denoising loop",
            f"same outcomes and steps per episode: {same_outcomes}; largest |action difference|: {max_action_diff:.1e}",
            f"load average after: {load_average()}",
        ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = "\n".join(lines)
    print(text)
    save(text, args.out)


if __name__ == "__main__":
    main()
