"""Tabletop env step+render rate against Gymnasium's Pusher-v5 (rgb_array) at the same size.

Both are measured in this run, on this machine, so the ratio is meaningful even if the
absolute numbers are not. Target: Kosmos-Tabletop-v1 at least 5x Pusher-v5.

    python bench/tabletop_throughput.py [--steps 400] [--out bench/results/tabletop_throughput.txt]
"""
from __future__ import annotations

import argparse
import os
import platform
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium  # noqa: E402
import numpy as np  # noqa: E402

import kosmos_env  # noqa: E402,F401

from _report import save  # bench/_report.py: the script's folder is on sys.path


def rate(env, steps: int, render: bool) -> float:
    """Steps per second of step (+ render() when the env does not return the frame itself)."""
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    low, high = env.action_space.low, env.action_space.high
    actions = rng.uniform(low, high, size=(steps, *low.shape)).astype(np.float32)
    for a in actions[:10]:  # warm up (context creation, first compile)
        env.step(a)
    env.reset(seed=0)
    start = time.perf_counter()
    for a in actions:
        _, _, terminated, truncated, _ = env.step(a)
        if render:
            env.render()
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}, "
        f"MUJOCO_GL={os.environ.get('MUJOCO_GL')}",
        f"{'size':>9} {'tabletop steps/s':>17} {'Pusher-v5 steps/s':>18} {'ratio':>7}",
    ]
    for size in (64, 128):
        tabletop = gymnasium.make("Kosmos-Tabletop-v1", image_size=(size, size))
        pusher = gymnasium.make("Pusher-v5", render_mode="rgb_array", width=size, height=size)
        # the tabletop renders its observation inside step(); Pusher renders on render()
        t_rate = rate(tabletop, args.steps, render=False)
        p_rate = rate(pusher, args.steps, render=True)
        tabletop.close()
        pusher.close()
        lines.append(f"{size:>4}x{size:<4} {t_rate:>17.1f} {p_rate:>18.1f} {t_rate / p_rate:>6.2f}x")
    text = "\n".join(lines)
    print(text)
    save(text, args.out)


if __name__ == "__main__":
    main()
