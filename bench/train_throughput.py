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

Part 3: PPO through the learned world's batched vector env. The same SB3 PPO (the settings measured then,
pinned in ``_measured_ppo``: n_steps 64, batch 64, 4 epochs, lr 1e-4; ``target_kl`` off, so every update runs all its epochs
whatever the data) with the network ``train-policy`` trains (``KosmosActorCritic``, default
``NetConfig``) over ``Kosmos-TabletopLearned-v1`` as ``finetune_ppo`` makes its envs: ``DummyVecEnv``
of :func:`kosmos_env.training.ppo.make_training_env` envs (1, and 8 for reference) against
:func:`kosmos_env.training.sb3_vec.make_sb3_vec_env` (4 and 8 sub-envs, one batched world pass per
step). Every row times the same number of env steps (rollouts and updates) after one untimed
rollout + update; the rows' repeats are interleaved (row 1, row 2, ..., row 1, ...) so that a change
of load on the machine hits every row alike; each number is the median over repeats. Each row also
prints the share of its wall time spent in rollouts (env steps, resets, policy inference) and the
update's milliseconds per env step, which no env speed-up reduces. The ``MultiInputPolicy`` rows
repeat the 1-env and batched-8 runs with SB3's own network; each row's ratio is to the 1-env row of
its own policy.

A bench prints ratios; it asserts nothing about timings. Run from the repository root:

    nice -n 10 python bench/train_throughput.py --out bench/results/train_throughput.txt
    nice -n 10 python bench/train_throughput.py --sections batched-ppo --out bench/results/train_throughput_batched_ppo.txt
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
from _report import load_average, save  # noqa: E402  (bench/_report.py: the script's folder is on sys.path)

WORLDS = {
    "Kosmos-Tabletop-v1": {"image_size": (64, 64)},
    "Kosmos-TabletopLearned-v1": {},  # 64x64 is its only size
}
MODES = ("sync", "async", "vector_entry_point")
TARGET = 3.0
LEARNED = "Kosmos-TabletopLearned-v1"
SECTIONS = ("vector", "ppo", "batched-ppo")


def _measured_ppo():
    """The PPO settings bench/results/train_throughput_batched_ppo.txt was measured with (PPOConfig's
    defaults then), pinned so the rows stay comparable after the defaults became the training recipe."""
    from kosmos_env.training.ppo import PPOConfig

    return PPOConfig(
        n_steps=64, batch_size=64, n_epochs=4, learning_rate=1e-4, target_kl=None, critic_warmup=0, clip_range=0.2
    )


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


# -- part 3: PPO through the batched vector env --------------------------------------------------
#: (policy, vec env, sub-envs); the first row is the single env every ratio is taken against
BATCHED_PPO_ROWS = (
    ("KosmosActorCritic", "DummyVecEnv", 1),
    ("KosmosActorCritic", "KosmosVecEnv", 4),
    ("KosmosActorCritic", "KosmosVecEnv", 8),
    ("KosmosActorCritic", "DummyVecEnv", 8),
    ("MultiInputPolicy", "DummyVecEnv", 1),
    ("MultiInputPolicy", "KosmosVecEnv", 8),
)


def _rollout_clock():
    from stable_baselines3.common.callbacks import BaseCallback

    class RolloutClock(BaseCallback):
        """Wall seconds spent in ``collect_rollouts`` (env steps, resets, policy inference)."""

        def __init__(self):
            super().__init__()
            self.seconds = 0.0
            self._t0 = 0.0

        def _on_rollout_start(self) -> None:
            self._t0 = time.perf_counter()

        def _on_rollout_end(self) -> None:
            self.seconds += time.perf_counter() - self._t0

        def _on_step(self) -> bool:
            return True

    return RolloutClock()


def make_batched_ppo(policy: str, vec_kind: str, n_envs: int, seed: int = 0):
    """PPO over the learned world's training envs, as finetune_ppo builds them (its seeds, its config)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from kosmos_env.policies.checkpoint import NetConfig
    from kosmos_env.training.ppo import make_training_env
    from kosmos_env.training.sb3 import KosmosActorCritic
    from kosmos_env.training.sb3_vec import make_sb3_vec_env

    net, cfg = NetConfig(), _measured_ppo()
    common = {"image_size": net.image_size, "frame_stack": net.frame_stack, "tasks": None, "env_kwargs": {}}
    if vec_kind == "KosmosVecEnv":
        vec = make_sb3_vec_env(LEARNED, n_envs, seed=seed, **common)
    else:
        vec = DummyVecEnv(
            [lambda i=i: make_training_env(LEARNED, seed=seed * 1000 + i, **common) for i in range(n_envs)]
        )
    n_tasks = len(vec.get_attr("instructions")[0])
    if n_tasks != net.n_tasks:
        vec.close()
        raise RuntimeError(f"{LEARNED} has {n_tasks} tasks; the default NetConfig reads {net.n_tasks}")
    kosmos = policy == "KosmosActorCritic"
    model = PPO(
        KosmosActorCritic if kosmos else "MultiInputPolicy",
        vec,
        **cfg.sb3_kwargs(),  # target_kl off: every update runs all its epochs, the same work per env step in every row
        policy_kwargs={"net_config": net.to_dict()} if kosmos else None,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    return model, vec, cfg


def batched_ppo_rates(steps: int, repeats: int) -> dict[tuple[str, str, int], dict[str, float]]:
    """Per row: median env-steps/s of ``learn`` over ``steps`` env steps, median rollout share and
    update milliseconds per env step; repeats interleaved across the rows."""
    models = {}
    try:
        for row in BATCHED_PPO_ROWS:
            model, vec, cfg = make_batched_ppo(*row)
            models[row] = (model, vec)
            per_update = cfg.n_steps * row[2]
            if steps % per_update:
                raise ValueError(f"--batched-ppo-steps {steps} is not a multiple of n_steps x envs = {per_update}")
            model.learn(per_update)  # warm-up: first rollout and update, not timed
        samples: dict[tuple[str, str, int], list[tuple[float, float, float]]] = {row: [] for row in models}
        for _ in range(repeats):
            for row, (model, _) in models.items():
                clock = _rollout_clock()
                t0 = time.perf_counter()
                model.learn(steps, reset_num_timesteps=False, callback=clock)
                wall = time.perf_counter() - t0
                samples[row].append((steps / wall, clock.seconds / wall, 1000 * (wall - clock.seconds) / steps))
        return {
            row: {
                "rate": statistics.median(s[0] for s in got),
                "rollout_share": statistics.median(s[1] for s in got),
                "update_ms": statistics.median(s[2] for s in got),
            }
            for row, got in samples.items()
        }
    finally:
        for _, vec in models.values():
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
    parser.add_argument("--batched-ppo-steps", type=int, default=512, help="timed env steps per repeat (part 3)")
    parser.add_argument("--batched-ppo-repeats", type=int, default=3)
    parser.add_argument("--no-ppo", action="store_true", help="skip both PPO parts")
    parser.add_argument(
        "--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS, help="which parts to run (default: all)"
    )
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

    sections = [s for s in args.sections if not (args.no_ppo and s in ("ppo", "batched-ppo"))]
    emit("# bench/train_throughput.py")
    emit(f"# date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    emit(
        f"# machine: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), shared with other "
        f"jobs; load average at start {load_average()}"
    )
    emit(f"# command: {' '.join([os.path.relpath(sys.argv[0])] + (argv if argv is not None else sys.argv[1:]))}")
    emit(
        f"# torch {torch.__version__} ({args.torch_threads} intra-op thread(s) per process), gymnasium "
        f"{gymnasium.__version__}, python {platform.python_version()}"
    )
    emit(f"# sections: {' '.join(sections)}")
    if "vector" in sections:
        emit(
            f"# vector: {args.warmup} warm-up + {args.steps} timed vector steps, median of {args.repeats} repeats, "
            f"64x64 frames, fixed random actions, default horizon (autoresets included)"
        )
    emit()

    single: dict[str, float] = {}
    rates: dict[tuple[str, str, int], float] = {}
    for env_id in WORLDS if "vector" in sections else ():
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

    learned = LEARNED
    key = (learned, "vector_entry_point", 8)
    if key in rates and learned in single:
        ratio = rates[key] / single[learned]
        emit(
            f"learned world, batched 8 envs / single env: {ratio:.2f}x (target {TARGET:.0f}x: "
            f"{'met' if ratio >= TARGET else 'NOT met'})"
        )
        emit()

    if "ppo" in sections:
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

    if "batched-ppo" in sections:
        cfg = _measured_ppo()
        emit(
            f"## PPO through the learned world's batched VecEnv ({learned}; stable-baselines3 PPO, n_steps "
            f"{cfg.n_steps}, batch {cfg.batch_size}, {cfg.n_epochs} epochs, lr {cfg.learning_rate:g}, target_kl off; "
            f"KosmosActorCritic: default NetConfig; {args.batched_ppo_steps} timed env steps per repeat after one "
            f"untimed rollout + update, median of {args.batched_ppo_repeats} interleaved repeats)"
        )
        emit(
            f"{'policy':<18} {'vec env':<13} {'envs':>4} {'env-steps/s':>12} {'x 1 env':>8} "
            f"{'rollout share':>14} {'update ms/step':>15}"
        )
        got = batched_ppo_rates(args.batched_ppo_steps, args.batched_ppo_repeats)
        for row in BATCHED_PPO_ROWS:
            policy, kind, n = row
            base = got[(policy, "DummyVecEnv", 1)]["rate"]
            r = got[row]
            emit(
                f"{policy:<18} {kind:<13} {n:>4} {r['rate']:12.1f} {r['rate'] / base:8.2f} "
                f"{r['rollout_share']:14.2f} {r['update_ms']:15.2f}"
            )
        single_row, batched_row = (
            got[("KosmosActorCritic", "DummyVecEnv", 1)],
            got[("KosmosActorCritic", "KosmosVecEnv", 8)],
        )
        ratio = batched_row["rate"] / single_row["rate"]
        # the update's cost per env step is the same whatever steps the envs: even free env steps
        # leave it, so the single env's time per step over it bounds the ratio
        ceiling = (1000 / single_row["rate"]) / batched_row["update_ms"]
        emit()
        emit(
            f"PPO (KosmosActorCritic), batched 8 envs / single env: {ratio:.2f}x (target {TARGET:.0f}x: "
            f"{'met' if ratio >= TARGET else 'NOT met'}); the update alone takes {batched_row['update_ms']:.2f} ms "
            f"per env step at 8 envs, so with free env steps the ratio could reach {ceiling:.1f}x at most"
        )
        emit()
    emit(f"# load average at end {load_average()}")

    save("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
