"""Framework overhead: a full ``env.step`` against the raw ``world.step`` it wraps, same actions.

Tabletop (MuJoCo): (a) *paired* — inside each env.step, the seconds of its own world.step call
(``env.unwrapped.last_step_timings["world"]``) against the whole step; (b) *unpaired* — the same
action sequence replayed on a second, identically reset world by calling ``world.step`` directly.
Cosmos 3 (tiny random pipeline, kosmos_env/testing/cosmos_tiny.py): the paired measure only, because a model
call costs seconds on this CPU; bench/cosmos_overhead.py compares env.step with a direct
*pipeline* call (one level lower) and is not repeated here.

    python bench/framework_overhead.py [--steps 400] [--cosmos-steps 4] [--out bench/results/framework_overhead.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

from _report import load_average, save  # bench/_report.py: the script's folder is on sys.path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def machine() -> str:
    return (
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs (shared with other jobs), "
        f"python {platform.python_version()}, load average {load_average()}"
    )


def actions(space, n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a = (rng.uniform(space.low, space.high) * 0.3).astype(np.float32)
        a[..., 6] = rng.integers(0, 2, size=a[..., 6].shape)
        out.append(a)
    return out


def tabletop(n_steps: int) -> list[str]:
    import gymnasium as gym

    import kosmos_env  # noqa: F401

    env = gym.make("Kosmos-Tabletop-v1", image_size=(64, 64), horizon=10**6, defer_judging=True)
    twin = gym.make("Kosmos-Tabletop-v1", image_size=(64, 64), horizon=10**6, defer_judging=True)
    base, world = env.unwrapped, twin.unwrapped.world
    acts = actions(env.action_space, n_steps)
    env.reset(seed=0)
    twin.reset(seed=0)
    env.step(acts[0])
    world.step(acts[0][None])  # warm-up (renderer, caches)
    t_env, t_inner, t_raw = [], [], []
    for a in acts[1:]:
        t0 = time.perf_counter()
        env.step(a)
        t_env.append(time.perf_counter() - t0)
        t_inner.append(base.last_step_timings["world"])
        t0 = time.perf_counter()
        world.step(a[None])
        t_raw.append(time.perf_counter() - t0)
    env.close()
    twin.close()
    paired = [e / i for e, i in zip(t_env, t_inner, strict=True)]
    return [
        f"tabletop (MuJoCo, 64x64, {len(t_env)} steps, gate on, judging deferred):",
        f"  env.step median {statistics.median(t_env) * 1e3:.3f} ms; world.step inside it {statistics.median(t_inner) * 1e3:.3f} ms; "
        f"direct world.step (same actions, twin world) {statistics.median(t_raw) * 1e3:.3f} ms",
        f"  RATIO env.step / world.step: paired median {statistics.median(paired):.3f}, "
        f"unpaired medians {statistics.median(t_env) / statistics.median(t_raw):.3f}, "
        f"sums {sum(t_env) / sum(t_raw):.3f}",
        f"  time outside the world call per step: median {statistics.median([e - i for e, i in zip(t_env, t_inner, strict=True)]) * 1e3:.3f} ms "
        "(validation, the consistency gate, frame checks, episode bookkeeping)",
    ]


def cosmos(n_steps: int) -> list[str]:
    import gymnasium as gym

    import kosmos_env  # noqa: F401
    from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline

    env = gym.make(
        "Kosmos-Bridge-v1",
        env_spec=tiny_bridge_spec(size=64, steps=2, horizon=10**6),
        judge="state",
        defer_judging=True,
        world_kwargs={"pipeline": tiny_pipeline()},
    )
    base = env.unwrapped
    acts = actions(env.action_space, n_steps + 1)
    env.reset(seed=0)
    env.step(acts[0])
    t_env, t_inner = [], []
    for a in acts[1:]:
        t0 = time.perf_counter()
        env.step(a)
        t_env.append(time.perf_counter() - t0)
        t_inner.append(base.last_step_timings["world"])
        if base._episode_over:  # the gate may discard a random model's frames: start a new episode
            env.reset()
    env.close()
    paired = [e / i for e, i in zip(t_env, t_inner, strict=True)]
    return [
        f"Cosmos 3 (tiny random Cosmos3OmniPipeline, 64x64, chunk 4, 2 sampling steps, {len(t_env)} steps):",
        f"  env.step median {statistics.median(t_env) * 1e3:.1f} ms; world.step inside it {statistics.median(t_inner) * 1e3:.1f} ms",
        f"  RATIO env.step / world.step: paired median {statistics.median(paired):.4f} (max {max(paired):.4f}); "
        f"outside the world call median {statistics.median([e - i for e, i in zip(t_env, t_inner, strict=True)]) * 1e3:.1f} ms",
        "  (env.step vs a direct pipeline call: see bench/results/cosmos_overhead.txt)",
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--cosmos-steps", type=int, default=4, help="0 skips the Cosmos part")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    lines = [f"framework overhead bench, {time.strftime('%Y-%m-%d %H:%M:%S')}", machine()]
    lines += tabletop(args.steps)
    if args.cosmos_steps:
        lines += cosmos(args.cosmos_steps)
    lines.append(f"load average after: {load_average()}")
    text = "\n".join(lines)
    print(text)
    save(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
