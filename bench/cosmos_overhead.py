"""Overhead of the Cosmos 3 env step over a bare ``Cosmos3OmniPipeline`` call (target ratio <= 1.05).

Same tiny random pipeline (kosmos_env/testing/cosmos_tiny.py), same process, same inputs: an env.step of
Kosmos-Bridge-v1 (validation, 7-D -> 10-D conversion, normalisation, seeding, the call, frame
conversion and resizing, episode bookkeeping) against a direct ``pipe(...)`` call with the same
conditioning frame, the same normalised actions and the same sampler settings. Calls alternate
so drifts in machine load hit both; the medians are compared.

    python bench/cosmos_overhead.py [--reps 10] [--size 64] [--steps 2] [--out bench/results/cosmos_overhead.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

from _report import save  # bench/_report.py: the script's folder is on sys.path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def machine_line() -> str:
    import torch

    cpu = platform.processor() or "unknown cpu"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"machine: {platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} logical CPUs visible "
        f"(shared with other jobs), torch {torch.__version__} threads={torch.get_num_threads()}, "
        f"python {platform.python_version()}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import gymnasium as gym
    import torch
    from diffusers import CosmosActionCondition

    import kosmos_env  # noqa: F401
    from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline
    from kosmos_env.actions import env_to_bridge10, normalize_bridge10

    pipe = tiny_pipeline()
    spec = tiny_bridge_spec(size=args.size, steps=args.steps, horizon=10_000)
    env = gym.make(
        "Kosmos-Bridge-v1", env_spec=spec, judge="state", defer_judging=True, world_kwargs={"pipeline": pipe}
    )
    env.reset(seed=0)
    world = env.unwrapped.world
    cfg = world.config
    act = np.zeros((4, 7), np.float32)
    act[:, 0], act[:, 6] = 0.01, 1.0

    # the direct call's inputs: the same frame, actions and settings the env uses
    image = world._cond_frame.copy()
    raw, _, _ = env_to_bridge10(act, np.zeros(3), np.eye(3))
    norm = cfg["bridge"]["normalization"]
    model_actions = torch.as_tensor(
        normalize_bridge10(raw, norm["method"], norm["q01"], norm["q99"]), dtype=torch.float32
    )

    def direct():
        return pipe(
            prompt="put carrot on plate",
            action=CosmosActionCondition(
                mode="forward_dynamics",
                chunk_size=cfg["chunk_size"],
                domain_name="bridge_orig_lerobot",
                resolution_tier=cfg["resolution_tier"],
                raw_actions=model_actions,
                image=image,
                view_point="ego_view",
            ),
            fps=5.0,
            num_inference_steps=cfg["num_inference_steps"],
            guidance_scale=cfg["guidance_scale"],
            use_system_prompt=False,
            generator=torch.Generator().manual_seed(1),
            output_type="np",
        )

    direct()
    env.step(act)  # warm-up both paths
    t_env, t_direct, t_inner = [], [], []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        env.step(act)
        t_env.append(time.perf_counter() - t0)
        t_inner.append(world.timings["call_seconds"][-1])
        t0 = time.perf_counter()
        direct()
        t_direct.append(time.perf_counter() - t0)
    env.close()

    m_env, m_dir = statistics.median(t_env), statistics.median(t_direct)
    paired = [e / i for e, i in zip(t_env, t_inner, strict=True)]
    outside = [e - i for e, i in zip(t_env, t_inner, strict=True)]
    lines = [
        "Cosmos 3 env overhead: env.step (Kosmos-Bridge-v1, tiny random Cosmos3OmniPipeline) vs direct pipeline call",
        machine_line(),
        f"settings: {args.size}x{args.size} frames, chunk {cfg['chunk_size']} (4 env actions -> 5 frames), "
        f"{cfg['num_inference_steps']} sampling steps, guidance {cfg['guidance_scale']}, {args.reps} alternating reps",
        f"env.step      median {m_env * 1000:8.1f} ms  (min {min(t_env) * 1000:.1f}, max {max(t_env) * 1000:.1f})",
        f"direct call   median {m_dir * 1000:8.1f} ms  (min {min(t_direct) * 1000:.1f}, max {max(t_direct) * 1000:.1f})",
        f"ratio env/direct (medians): {m_env / m_dir:.3f}   (target <= 1.05; unpaired, includes machine-load noise)",
        f"ratio env/direct (minima):  {min(t_env) / min(t_direct):.3f}",
        f"paired ratio env.step / the pipeline call inside that same step: median {statistics.median(paired):.4f}, "
        f"max {max(paired):.4f}   (noise-free measure of the env's own overhead)",
        f"time in env.step outside the pipeline call: median {statistics.median(outside) * 1000:.1f} ms, "
        f"max {max(outside) * 1000:.1f} ms",
        f"model load seconds reported by the world: {world.timings['load_seconds']:.4f} (pipeline injected, resident={world.timings['resident']})",
    ]
    text = "\n".join(lines)
    print(text)
    save(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
