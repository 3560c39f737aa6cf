"""Batched Cosmos 3 calls vs single calls on the tiny random pipeline (CPU), same run.

N forward-dynamics requests (different prompts, conditioning frames, actions and seeds) are
generated twice: as N single ``pipeline(**kwargs)`` calls, and as one batched call
(:func:`kosmos_env.worlds.cosmos3_batch.generate_batch`: one VAE encode, one denoising loop,
one VAE decode for all N). Prints the wall time of each, their ratio (throughput of batched
over single), and the largest difference between the two outputs. Each side is timed
``--reps`` times, interleaved, and the best kept (a shared machine disturbs some rounds).
The tiny model's numbers say nothing about a GPU (see bench/gpu/cosmos3_speed.py
``--batch-sizes`` for that); they show the batched path runs and what it saves on CPU.

    python bench/cosmos_batch.py [--n 4] [--reps 2] [--out bench/results/cosmos_batch.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from _report import load_average, save  # noqa: E402  (bench/_report.py)

PROMPTS = ["put the carrot on the plate", "open the drawer", "put the spoon on the towel", "close the drawer"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline
    from kosmos_env.worlds.cosmos3 import Cosmos3World
    from kosmos_env.worlds.cosmos3_batch import generate_batch

    torch.set_num_threads(1)
    pipe = tiny_pipeline()
    world = Cosmos3World(tiny_bridge_spec(), pipeline=pipe)
    world.load()
    rng = np.random.default_rng(0)
    inputs = [
        (
            rng.integers(0, 255, (64, 64, 3), dtype=np.uint8),
            rng.normal(0, 0.3, (4, 10)).astype(np.float32),
            PROMPTS[i % len(PROMPTS)],
            100 + i,
        )
        for i in range(args.n)
    ]

    def requests():
        return [
            world.call_kwargs(img, act, prompt, torch.Generator().manual_seed(seed))
            for img, act, prompt, seed in inputs
        ]

    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch threads 1, python {platform.python_version()}",
        f"load average before: {load_average()}",
        f"tiny Cosmos3OmniPipeline (kosmos_env/testing/cosmos_tiny.py), {args.n} requests, chunk 4, 2 steps, 64x64 input; "
        f"best of {args.reps} interleaved rounds",
    ]
    pipe(**requests()[0])  # warm-up
    single_s, batch_s = [], []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        singles = [np.asarray(pipe(**r).video) for r in requests()]
        single_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        batched, report = generate_batch(pipe, requests())
        batch_s.append(time.perf_counter() - t0)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(singles, batched, strict=True))
    lines += [
        f"{args.n} single calls: {min(single_s):.2f} s ({min(single_s) / args.n:.2f} s per request)",
        f"1 batched call (batched={report.batched}): {min(batch_s):.2f} s ({min(batch_s) / args.n:.2f} s per request)",
        f"throughput ratio batched / single: {min(single_s) / min(batch_s):.2f}x",
        f"largest |batched - single| over all output pixels (float video in [0, 1]): {diff:.2e}",
        f"load average after: {load_average()}",
    ]
    text = "\n".join(lines)
    print(text)
    save(text, args.out)


if __name__ == "__main__":
    main()
