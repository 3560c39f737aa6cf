"""PPO fine-tuning with stable-baselines3 over the network of a checkpoint, saving checkpoints as it goes.

The envs are ``kosmos_env.wrappers``' RL view of a Kosmos env (``image``/``state``/``task``,
actions in [-1, 1]) in SB3's ``DummyVecEnv``; every reset draws one of the suite's tasks from
a seeded generator, so one run trains the whole instruction list. The reward is the env's own
(``reward=`` is the spec override ``{"mode": "terminal"|"progress"|"oracle", ...}``); the
checkpoints record it with the spec hash it produced.

Outputs in ``out_dir``: ``ppo_update_NNNN.safetensors`` every ``checkpoint_every`` PPO updates
and after the last one, ``curve.csv`` (one row per finished episode), ``curve.json`` (per update:
env steps, mean episode reward, success rate; plus the run's settings), ``curve.png`` and
``sb3_last.zip`` (SB3's archive of the last model, to resume training only).
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kosmos_env.hashing import sha256_file
from kosmos_env.policies.checkpoint import NetConfig, checkpoint_fit_problem, jsonable, load_checkpoint, save_checkpoint
from kosmos_env.training.demos import episode_success

REWARD_MODES = ("terminal", "progress", "oracle")


@dataclass
class PPOConfig:
    """SB3 PPO settings (per update: ``n_steps`` steps from each of ``n_envs`` envs)."""

    n_steps: int = 64
    batch_size: int = 64
    n_epochs: int = 4
    learning_rate: float = 1e-4  # small: the actor starts from behaviour cloning, not from scratch
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = 0.05  # stop an update's epochs early rather than undo the cloned actor
    #: the Gaussian's log-std at the start of fine-tuning (None: the checkpoint's own). A cloned
    #: actor's precision is what makes its episodes succeed: exploration noise much wider than its
    #: error turns every rollout into a failure, and PPO then has no success to learn from
    init_log_std: float | None = None
    threads: int = 1


def reward_override(reward: str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The spec's ``reward`` override for a mode name (``progress`` scores frames with the
    ``vision_frame`` judge), a full mapping passed through, or None for the spec's own."""
    if reward is None:
        return None
    if isinstance(reward, str):
        if reward not in REWARD_MODES:
            raise ValueError(f"reward mode must be one of {list(REWARD_MODES)}, got {reward!r}")
        return {"mode": reward, "step_judge": {"type": "vision_frame"}} if reward == "progress" else {"mode": reward}
    return dict(reward)


def _task_sampler_class():
    import gymnasium

    class TaskSampler(gymnasium.Wrapper):
        """Each reset lays out a task drawn from ``tasks`` with its own seeded generator."""

        def __init__(self, env, tasks: Sequence[str], seed: int):
            super().__init__(env)
            self.tasks = list(tasks)
            self._rng = np.random.default_rng(seed)

        def reset(self, *, seed=None, options=None):
            options = dict(options or {})
            options.setdefault("task", self.tasks[int(self._rng.integers(len(self.tasks)))])
            return self.env.reset(seed=seed, options=options)

    return TaskSampler


def make_training_env(
    env_id: str,
    *,
    image_size: Sequence[int],
    frame_stack: int,
    tasks: Sequence[str] | None,
    seed: int,
    env_kwargs: Mapping[str, Any] | None = None,
):
    """One env as PPO sees it: the Kosmos env (rendered at ``image_size`` unless ``env_kwargs``
    says otherwise), a task drawn per reset, then ``kosmos_env.wrappers.wrap_rl_env``."""
    import gymnasium

    import kosmos_env  # noqa: F401  (registers the env ids)
    from kosmos_env.wrappers import wrap_rl_env

    kwargs = dict(env_kwargs or {})
    # the world renders at the network's size (a spec override, recorded in the spec hash), so no
    # resizing happens in training; wrap_rl_env rather than make_rl_env because make_rl_env's
    # image_size is the wrapper's resize, not the spec's
    kwargs.setdefault("image_size", tuple(int(v) for v in image_size))
    env = gymnasium.make(env_id, **kwargs)
    try:
        names = list(tasks) if tasks else list(env.unwrapped.task_names)
        unknown = [t for t in names if t not in env.unwrapped.task_names]
        if unknown:
            raise ValueError(f"unknown task(s) {unknown} for {env_id}; tasks: {env.unwrapped.task_names}")
        return wrap_rl_env(
            _task_sampler_class()(env, names, seed), image_size=tuple(image_size), frame_stack=int(frame_stack)
        )
    except Exception:
        env.close()
        raise


def check_init_fits(meta: Mapping[str, Any], env) -> None:
    """Refuse (one-line ``ValueError``) a checkpoint that cannot drive the wrapped env ``env``."""
    raw = env.unwrapped
    inner_image = tuple(int(v) for v in raw.kosmos_spec.image_size)
    problem = checkpoint_fit_problem(
        meta,
        action_low=raw.action_space.low,
        action_high=raw.action_space.high,
        instructions=env.get_wrapper_attr("instructions"),
        image_size=inner_image,
    )
    if problem:
        raise ValueError(f"checkpoint does not fit {raw.kosmos_spec.id}: {problem}")


def finetune_ppo(
    env_id: str,
    init_checkpoint: str | Path | None,
    *,
    reward: str | Mapping[str, Any] | None = None,
    total_steps: int = 20_000,
    n_envs: int = 2,
    seed: int = 0,
    out_dir: str | Path = "ppo_run",
    checkpoint_every: int = 5,
    env_kwargs: Mapping[str, Any] | None = None,
    tasks: Sequence[str] | None = None,
    config: PPOConfig | None = None,
    net: NetConfig | None = None,
    progress: bool = True,
) -> list[Path]:
    """Fine-tune ``init_checkpoint`` (a ``bc`` or ``ppo`` checkpoint) with SB3 PPO in ``env_id``.

    ``init_checkpoint=None`` starts from a fresh network (``net`` sizes; image size 64x64 by
    default). ``env_kwargs`` go to ``gymnasium.make`` (spec overrides such as ``horizon=``);
    ``reward`` becomes its ``reward=`` override. Returns the checkpoint paths written, oldest first.
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from kosmos_env.training.sb3 import KosmosActorCritic

    cfg = config or PPOConfig()
    for name, value in (
        ("total_steps", total_steps),
        ("n_envs", n_envs),
        ("checkpoint_every", checkpoint_every),
        ("n_steps", cfg.n_steps),
        ("batch_size", cfg.batch_size),
        ("n_epochs", cfg.n_epochs),
    ):
        if int(value) < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    torch.set_num_threads(max(1, int(cfg.threads)))
    init_meta, init_net, init_sha = None, None, None
    if init_checkpoint is not None:
        init_net, init_meta = load_checkpoint(init_checkpoint)
        init_sha = sha256_file(init_checkpoint)
        net_cfg = init_net.cfg
    else:
        net_cfg = net or NetConfig()
    kwargs = dict(env_kwargs or {})
    override = reward_override(reward)
    if override is not None:
        kwargs["reward"] = override

    def factory(i: int):
        return lambda: make_training_env(
            env_id,
            image_size=net_cfg.image_size,
            frame_stack=net_cfg.frame_stack,
            tasks=tasks,
            seed=seed * 1000 + i,
            env_kwargs=kwargs,
        )

    # one env made here first: a checkpoint that does not fit is refused before SB3 starts
    probe = factory(0)()
    instructions = list(probe.get_wrapper_attr("instructions"))
    if init_meta is not None:
        try:
            check_init_fits(init_meta, probe)
        except ValueError:
            probe.close()
            raise
    elif net_cfg.n_tasks != len(instructions):
        net_cfg = NetConfig(**{**asdict(net_cfg), "n_tasks": len(instructions)})
    raw = probe.unwrapped
    run_meta = {
        "env_id": raw.kosmos_spec.id,
        "spec_hash": raw.spec_hash,
        "reward": dict(getattr(raw.kosmos_spec, "reward", None) or {"mode": "terminal"}),
        "instructions": instructions,
        "image_size": list(net_cfg.image_size),
        "frame_stack": net_cfg.frame_stack,
        "action_low": raw.action_space.low.tolist(),
        "action_high": raw.action_space.high.tolist(),
        "seed": int(seed),
    }
    horizon = int(raw.kosmos_spec.horizon)
    probe.close()

    vec = DummyVecEnv([factory(i) for i in range(int(n_envs))])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = PPO(
        KosmosActorCritic,
        vec,
        n_steps=cfg.n_steps,
        batch_size=cfg.batch_size,
        n_epochs=cfg.n_epochs,
        learning_rate=cfg.learning_rate,
        gamma=cfg.gamma,
        gae_lambda=cfg.gae_lambda,
        clip_range=cfg.clip_range,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        target_kl=cfg.target_kl,
        policy_kwargs={"net_config": net_cfg.to_dict()},
        seed=int(seed),
        device="cpu",
        verbose=0,
    )
    if init_net is not None:
        model.policy.net.load_state_dict(init_net.state_dict())
    if cfg.init_log_std is not None:
        with torch.no_grad():
            model.policy.net.log_std.fill_(float(cfg.init_log_std))
    settings = {
        "ppo": asdict(cfg),
        "n_envs": int(n_envs),
        "total_steps": int(total_steps),
        "checkpoint_every": int(checkpoint_every),
        "env_kwargs": jsonable(kwargs),
        "horizon": horizon,
        "tasks": list(tasks) if tasks else None,
        "init_checkpoint": None
        if init_checkpoint is None
        else {"path": str(init_checkpoint), "sha256": init_sha, "stage": init_meta["stage"]},
    }
    saved: list[Path] = []

    def save(update: int) -> None:
        path = out / f"ppo_update_{update:04d}.safetensors"
        model.policy.net.eval()  # the network has no train-only layers; eval keeps it explicit
        save_checkpoint(
            model.policy.net,
            path,
            {
                **run_meta,
                "stage": "ppo",
                "env_steps": int(model.num_timesteps),
                "update": int(update),
                "training": settings,
            },
        )
        saved.append(path)

    tracker = _make_callback(save, int(checkpoint_every), int(total_steps), int(n_envs), progress)
    t0 = time.perf_counter()
    try:
        model.learn(total_timesteps=int(total_steps), callback=tracker, progress_bar=False)
    finally:
        tracker.close_bar()
        vec.close()
    if not saved or tracker.updates_done != int(saved[-1].stem.rsplit("_", 1)[1]):
        save(tracker.updates_done)
    # SB3's own archive (optimiser state included) to resume training with PPO.load; it is
    # pickle-based, so policies are never loaded from it: the .safetensors checkpoints are the product
    model.save(out / "sb3_last.zip")
    seconds = time.perf_counter() - t0
    write_curve(
        out,
        tracker.episodes,
        tracker.update_rows,
        {
            **run_meta,
            "training": settings,
            "seconds": round(seconds, 1),
            "env_steps": int(model.num_timesteps),
            "steps_per_second": round(model.num_timesteps / seconds, 2),
            "checkpoints": [p.name for p in saved],
        },
    )
    return saved


def _make_callback(save, every: int, total: int, n_envs: int, progress: bool):
    from stable_baselines3.common.callbacks import BaseCallback
    from tqdm.auto import tqdm

    class Tracker(BaseCallback):
        """Episode returns and successes, a progress bar, and a checkpoint every ``every`` updates."""

        def __init__(self):
            super().__init__()
            self.episodes: list[dict[str, Any]] = []
            self.update_rows: list[dict[str, Any]] = []
            self.updates_done = 0
            self._rollouts = 0
            self._returns = np.zeros(n_envs)
            self._lengths = np.zeros(n_envs, dtype=int)
            self._bar = None
            self._t0 = time.perf_counter()

        def _on_training_start(self) -> None:
            self._bar = tqdm(total=total, desc="ppo", unit="step", disable=not progress)

        def _on_rollout_start(self) -> None:
            # called before every rollout: each call after the first follows one finished update
            if self._rollouts > 0:
                self._finish_update()
            self._rollouts += 1

        def _finish_update(self) -> None:
            self.updates_done = self._rollouts
            mine = [e for e in self.episodes if e["update"] == self.updates_done]
            judged = [e["success"] for e in mine if e["success"] >= 0]
            self.update_rows.append(
                {
                    "update": self.updates_done,
                    "env_steps": int(self.num_timesteps),
                    "episodes": len(mine),
                    "mean_reward": float(np.mean([e["return"] for e in mine])) if mine else None,
                    "success_rate": float(np.mean(judged)) if judged else None,
                }
            )
            if self.updates_done % every == 0:
                save(self.updates_done)

        def _on_step(self) -> bool:
            rewards, dones, infos = self.locals["rewards"], self.locals["dones"], self.locals["infos"]
            self._returns += rewards
            self._lengths += 1
            for i in np.flatnonzero(dones):
                self.episodes.append(
                    {
                        "env_steps": int(self.num_timesteps),
                        "update": self._rollouts,
                        "task": infos[i].get("task"),
                        "return": float(self._returns[i]),
                        "length": int(self._lengths[i]),
                        "success": episode_success(infos[i]),
                        "outcome": infos[i].get("outcome"),
                    }
                )
                self._returns[i], self._lengths[i] = 0.0, 0
            if self._bar is not None:
                self._bar.update(len(dones))
                if dones.any():
                    recent = self.episodes[-20:]
                    judged = [e["success"] for e in recent if e["success"] >= 0]
                    post = {
                        "ep/s": f"{len(self.episodes) / max(1e-9, time.perf_counter() - self._t0):.2f}",
                        "reward": f"{np.mean([e['return'] for e in recent]):.3f}",
                    }
                    if judged:
                        post["success"] = f"{np.mean(judged):.2f}"
                    self._bar.set_postfix(post)
            return True

        def _on_training_end(self) -> None:
            self._finish_update()  # the last update has no rollout after it

        def close_bar(self) -> None:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    return Tracker()


def write_curve(
    out_dir: Path, episodes: list[dict[str, Any]], updates: list[dict[str, Any]], meta: Mapping[str, Any]
) -> Path:
    """``curve.csv`` (episodes), ``curve.json`` (per update + run settings) and ``curve.png``."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on training machines
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    fields = ["env_steps", "update", "task", "return", "length", "success", "outcome"]
    with open(out_dir / "curve.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(episodes)
    (out_dir / "curve.json").write_text(json.dumps({"meta": jsonable(meta), "updates": updates}, indent=1))
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = [u for u in updates if u["mean_reward"] is not None]
    ax.plot(
        [u["env_steps"] for u in rows],
        [u["mean_reward"] for u in rows],
        "o-",
        color="tab:blue",
        label="mean episode reward (per update)",
    )
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean episode reward", color="tab:blue")
    judged = [u for u in updates if u["success_rate"] is not None]
    if judged:
        ax2 = ax.twinx()
        ax2.plot(
            [u["env_steps"] for u in judged],
            [u["success_rate"] for u in judged],
            "s--",
            color="tab:green",
            label="episode success rate",
        )
        ax2.set_ylabel("episode success rate", color="tab:green")
        ax2.set_ylim(-0.05, 1.05)
    reward = meta.get("reward") or {}
    ax.set_title(f"PPO in {meta.get('env_id')} (reward {reward.get('mode')}, seed {meta.get('seed')})", fontsize=10)
    fig.tight_layout()
    fig.savefig(out_dir / "curve.png", dpi=100)
    plt.close(fig)
    return out_dir / "curve.png"
