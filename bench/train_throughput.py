"""Env-steps per second of the tabletop worlds in every vector mode, and of PPO with the policy in the loop.

Part 1: ``gymnasium.make_vec`` over ``Kosmos-Tabletop-v1`` (MuJoCo, 64x64) and
``Kosmos-TabletopLearned-v1`` (learned world, 64x64) with 1, 4 and 8 sub-envs in ``sync``,
``async`` (spawn, no shared memory) and ``vector_entry_point`` (the batched env of
:mod:`kosmos_env.batched_vector`: the learned world's sub-envs step as one engine pass; the MuJoCo
sub-envs step in turn, EGL contexts being per thread). Every sub-env steps a fixed random action
sequence (seeded; small moves, gripper open or closed); episodes run to the default horizon and
autoreset, as in training. Warm-up steps are not timed; each number is the median over repeats of
(sub-envs x timed vector steps) / wall seconds. Each row prints its ratio to the same world's
single env (sync, 1 env) measured in the same run, and the learned world's batched-8 / single
ratio is set against the 3x target.

Part 2: stable-baselines3 PPO (``MultiInputPolicy``, the same settings for all) over
``DummyVecEnv`` of the RL wrappers (:func:`kosmos_env.wrappers.wrap_rl_env`: Dict of ``image``,
``state``, ``task``) on both tabletop worlds and on Gymnasium's ``Pusher-v5`` rendered to a 64x64
image observation beside its state (``AddRenderObservation``): env-steps per second of
``learn`` (rollouts and updates; the first rollout and update not timed), as a ratio to Pusher-v5.

A bench prints ratios; it asserts nothing about timings. Run from the repository root:

    nice -n 10 python bench/train_throughput.py --out bench/results/train_throughput.txt
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

# before torch is imported anywhere (and inherited by async sub-processes): one intra-op thread
# per process unless asked otherwise, so that 8 async workers do not each start a pool
_THREADS = "1"
for _i, _arg in enumerate(sys.argv):
    if _arg == "--torch-threads" and _i + 1 < len(sys.argv):
        _THREADS = sys.argv[_i + 1]
    elif _arg.startswith("--torch-threads="):
        _THREADS = _arg.split("=", 1)[1]
os.environ["OMP_NUM_THREADS"] = _THREADS
os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import kosmos_env  # noqa: E402,F401

WORLDS = {
    "Kosmos-Tabletop-v1": {"image_size": (64, 64)},
    "Kosmos-TabletopLearned-v1": {},  # 64x64 is its only size
}
MODES = ("sync", "async", "vector_entry_point")
TARGET = 3.0


def actions_for(space, n_steps: int, n_envs: int, seed: int = 0) -> np.ndarray:
    """(n_steps, n_envs, 7): a fixed random sequence inside the bounds (half range, gripper 0 or 1)."""
    rng = np.random.default_rng(seed)
    low, high = space.low, space.high
    out = (rng.uniform(low, high, size=(n_steps, n_envs, *low.shape)) * 0.5).astype(np.float32)
    out[..., 6] = rng.integers(0, 2, size=out[..., 6].shape)
    return out


def vector_rate(env_id: str, mode: str, n: int, warmup: int, steps: int, repeats: int) -> float:
    kwargs = dict(WORLDS[env_id])
    vector_kwargs = {"context": "spawn", "shared_memory": False} if mode == "async" else {}
    if mode != "vector_entry_point":
        kwargs["vector_kwargs"] = vector_kwargs
    venv = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode=mode, **kwargs)
    try:
        acts = actions_for(venv.single_action_space, warmup + steps, n)
        rates = []
        for r in range(repeats):
            venv.reset(seed=[1000 * r + i for i in range(n)])
            for t in range(warmup):
                venv.step(acts[t])
            t0 = time.perf_counter()
            for t in range(warmup, warmup + steps):
                venv.step(acts[t])
            rates.append(n * steps / (time.perf_counter() - t0))
        return statistics.median(rates)
    finally:
        venv.close()


def make_ppo_env(name: str):
    if name == "Pusher-v5":
        from gymnasium.wrappers import AddRenderObservation

        env = gymnasium.make("Pusher-v5", render_mode="rgb_array", width=64, height=64)
        return AddRenderObservation(env, render_only=False, render_key="image", obs_key="state")
    from kosmos_env.wrappers import wrap_rl_env

    return wrap_rl_env(gymnasium.make(name, **WORLDS[name]), task_encoding="onehot")


def ppo_rate(name: str, n_envs: int, n_steps: int, rollouts: int, seed: int = 0) -> float:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    vec = DummyVecEnv([lambda: make_ppo_env(name) for _ in range(n_envs)])
    try:
        model = PPO(
            "MultiInputPolicy",
            vec,
            n_steps=n_steps,
            batch_size=n_steps * n_envs // 2,
            n_epochs=2,
            seed=seed,
            device="cpu",
            verbose=0,
        )
        model.learn(n_steps * n_envs)  # warm-up: first rollout and update, not timed
        t0 = time.perf_counter()
        model.learn(rollouts * n_steps * n_envs, reset_num_timesteps=False)
        return rollouts * n_steps * n_envs / (time.perf_counter() - t0)
    finally:
        vec.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--warmup", type=int, default=6, help="vector steps before timing (not timed)")
    parser.add_argument("--steps", type=int, default=30, help="timed vector steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ppo-envs", type=int, default=4)
    parser.add_argument("--ppo-steps", type=int, default=32, help="PPO n_steps (rollout length per env)")
    parser.add_argument("--ppo-rollouts", type=int, default=3, help="timed PPO rollouts (each followed by an update)")
    parser.add_argument("--no-ppo", action="store_true")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads per process (read before torch is imported)",
    )
    parser.add_argument("--out", help="also write the output here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.torch_threads)

    lines: list[str] = []

    def emit(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    load = os.getloadavg()
    emit("# bench/train_throughput.py")
    emit(f"# date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    emit(
        f"# machine: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), shared with other "
        f"jobs; load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    emit(f"# command: {' '.join([os.path.relpath(sys.argv[0])] + (argv if argv is not None else sys.argv[1:]))}")
    emit(
        f"# torch {torch.__version__} ({args.torch_threads} intra-op thread(s) per process), gymnasium "
        f"{gymnasium.__version__}, python {platform.python_version()}"
    )
    emit(
        f"# vector: {args.warmup} warm-up + {args.steps} timed vector steps, median of {args.repeats} repeats, "
        f"64x64 frames, fixed random actions, default horizon (autoresets included)"
    )
    emit()

    single: dict[str, float] = {}
    rates: dict[tuple[str, str, int], float] = {}
    for env_id in WORLDS:
        emit(f"## {env_id}")
        emit(f"{'mode':<20} {'envs':>4} {'env-steps/s':>12} {'x single env':>13}")
        for mode in args.modes:
            for n in args.envs:
                rate = vector_rate(env_id, mode, n, args.warmup, args.steps, args.repeats)
                rates[(env_id, mode, n)] = rate
                if mode == "sync" and n == 1:
                    single[env_id] = rate
                base = single.get(env_id)
                ratio = f"{rate / base:13.2f}" if base else f"{'-':>13}"
                emit(f"{mode:<20} {n:>4} {rate:12.1f} {ratio}")
        emit()

    learned = "Kosmos-TabletopLearned-v1"
    key = (learned, "vector_entry_point", 8)
    if key in rates and learned in single:
        ratio = rates[key] / single[learned]
        emit(
            f"learned world, batched 8 envs / single env: {ratio:.2f}x (target {TARGET:.0f}x: "
            f"{'met' if ratio >= TARGET else 'NOT met'})"
        )
        emit()

    if not args.no_ppo:
        emit(
            f"## PPO (stable-baselines3 MultiInputPolicy, DummyVecEnv of {args.ppo_envs} envs, n_steps "
            f"{args.ppo_steps}, batch {args.ppo_steps * args.ppo_envs // 2}, 2 epochs; {args.ppo_rollouts} timed "
            f"rollouts + updates)"
        )
        emit(f"{'env':<28} {'env-steps/s':>12} {'x Pusher-v5':>12}")
        ppo = {}
        for name in ("Pusher-v5", "Kosmos-Tabletop-v1", learned):
            ppo[name] = ppo_rate(name, args.ppo_envs, args.ppo_steps, args.ppo_rollouts)
            emit(f"{name:<28} {ppo[name]:12.1f} {ppo[name] / ppo['Pusher-v5']:12.2f}")
        emit()
    emit(f"# load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
