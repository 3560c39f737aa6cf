"""PPO fine-tuning with stable-baselines3 over the network of a checkpoint, saving checkpoints as it goes.

The envs are ``kosmos_env.wrappers``' RL view of a Kosmos env (``image``/``state``/``task``,
actions in [-1, 1]) in SB3's ``DummyVecEnv``; every reset draws one of the suite's tasks from
a seeded generator, so one run trains the whole instruction list. The reward is the env's own
(``reward=`` is the spec override ``{"mode": "terminal"|"progress"|"oracle", ...}``); the
checkpoints record it with the spec hash it produced.

Outputs in ``out_dir``: ``ppo_update_NNNN.safetensors`` every ``checkpoint_every`` PPO updates
and after the last one; with each of them ``sb3_last.zip`` (SB3's archive of the model, to resume
training only) and the learning curve so far: ``curve.csv`` (one row per finished episode),
``curve.json`` (per update: env steps, mean episode reward, success rate; the held-out rows; the
run's settings and the archive's sha256) and ``curve.png``. With ``eval_every`` the network is
scored on held-out tuning seeds at the start, every ``eval_every`` updates and at the end
(:mod:`kosmos_env.training.heldout`); ``tensorboard_log`` and ``loggers`` (W&B) get the same numbers
live. ``resume=True`` continues a run from its folder (:func:`resume_point`).
"""

from __future__ import annotations

import csv
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kosmos_env.hashing import sha256_file
from kosmos_env.policies.checkpoint import NetConfig, checkpoint_fit_problem, jsonable, load_checkpoint, save_checkpoint
from kosmos_env.training.demos import episode_success
from kosmos_env.training.training_envs import _task_sampler_class, make_training_env  # noqa: F401  (re-exported)
from kosmos_env.training.run_folder import CHECKPOINT_GLOB, SB3_ARCHIVE, checkpoint_update

REWARD_MODES = ("terminal", "progress", "oracle")
VEC_ENVS = ("dummy", "batched")


def default_vec_env(env_id: str) -> str:
    """``"batched"`` for an env whose registered vector entry point batches the world (the learned
    tabletop: 8 envs step in one pass), else ``"dummy"`` (the simulator's envs gain nothing)."""
    from kosmos_env.spec import load_spec

    return "batched" if load_spec(env_id).world.get("type") == "tabletop_learned" else "dummy"


@dataclass
class PPOConfig:
    """SB3 PPO settings (per update: ``n_steps`` steps from each of ``n_envs`` envs)."""

    # defaults: the recipe chosen on tuning seeds (bench/results/train_recipe/pilots.md), standard-strength
    # PPO updates; the earlier small, KL-stopped updates barely moved a cloned actor (about 2 % of its weights
    # in 12k steps, bench/results/train_in_world/results.md)
    n_steps: int = 128
    batch_size: int = 256
    n_epochs: int = 5
    learning_rate: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    #: 0.1, not SB3's 0.2: the only change from the registered round 2 (whose oracle arm lifted +0.10) to
    #: round 3 (+0.23 [+0.18, +0.29], bench/results/train_in_world/round3/); chosen on tuning units, training
    #: seeds 0-2 (bench/results/train_recipe/pilots.md)
    clip_range: float = 0.1
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    #: the Gaussian's log-std at the start of fine-tuning (None: the checkpoint's own). A cloned
    #: actor's precision is what makes its episodes succeed: exploration noise much wider than its
    #: error turns every rollout into a failure, and PPO then has no success to learn from
    init_log_std: float | None = -1.6
    #: PPO updates at the start that train only the critic (its trunk and head; the shared encoder,
    #: the actor and its log-std are frozen): a behaviour-cloned actor starts beside a random
    #: critic, whose advantages would otherwise push the actor in random directions
    critic_warmup: int = 2
    threads: int = 1

    def sb3_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of SB3's ``PPO`` these settings fix (the algorithm's, not ours)."""
        names = ("n_steps", "batch_size", "n_epochs", "learning_rate", "gamma", "gae_lambda", "clip_range")
        names += ("ent_coef", "vf_coef", "max_grad_norm", "target_kl")
        return {name: getattr(self, name) for name in names}


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
    eval_every: int = 0,
    eval_units: int = 2,
    tensorboard_log: str | Path | None = None,
    loggers: Sequence[Any] = (),
    resume: bool = False,
    vec_env: str = "dummy",
) -> list[Path]:
    """Fine-tune ``init_checkpoint`` (a ``bc`` or ``ppo`` checkpoint) with SB3 PPO in ``env_id``.

    ``init_checkpoint=None`` starts from a fresh network (``net`` sizes; image size 64x64 by
    default). ``env_kwargs`` go to ``gymnasium.make`` (spec overrides such as ``horizon=``);
    ``reward`` becomes its ``reward=`` override. Returns the checkpoint paths this call wrote,
    oldest first (empty when ``resume`` finds the run already at ``total_steps``).

    ``eval_every``: every that many PPO updates (and at the start and the end), the network is
    evaluated on ``eval_units`` held-out tuning seeds per task (:mod:`kosmos_env.training.heldout`);
    0 turns it off. ``tensorboard_log``: SB3's TensorBoard folder (losses, reward, success,
    held-out success, hyper-parameters). ``loggers``: live logs such as
    :class:`kosmos_env.training.loggers.WandbTrainingLog`. ``resume``: continue the run in
    ``out_dir`` from its ``sb3_last.zip`` (see :func:`resume_point`). ``vec_env``: ``"dummy"``
    (SB3's ``DummyVecEnv``: envs step one after another) or ``"batched"``
    (:mod:`kosmos_env.training.sb3_vec`: the world's batched vector env steps every env in one
    pass; the same observations, rewards and seeds); :func:`default_vec_env` picks per world.
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from kosmos_env.training.heldout import HeldOut
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
    if vec_env not in VEC_ENVS:
        raise ValueError(f"vec_env must be one of {list(VEC_ENVS)}, got {vec_env!r}")
    if int(eval_every) < 0:
        raise ValueError(f"eval_every must be >= 0 (0: no held-out evaluation), got {eval_every}")
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

    def factory(i: int, task_seed):
        return lambda: make_training_env(
            env_id,
            image_size=net_cfg.image_size,
            frame_stack=net_cfg.frame_stack,
            tasks=tasks,
            seed=task_seed,
            env_kwargs=kwargs,
        )

    # one env made here first: a checkpoint that does not fit is refused before SB3 starts
    probe = factory(0, seed * 1000)()
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
    world_type = str(raw.kosmos_spec.world.get("type"))
    task_names = list(raw.task_names)
    probe.close()

    heldout = None
    if int(eval_every) > 0:
        heldout = HeldOut(
            env_id,
            world_type,
            task_names,
            int(eval_units),
            env_kwargs=kwargs,
            image_size=net_cfg.image_size,
            tasks=tasks,
        )
    settings = {
        "ppo": asdict(cfg),
        "n_envs": int(n_envs),
        "vec_env": vec_env,
        "total_steps": int(total_steps),
        "checkpoint_every": int(checkpoint_every),
        "env_kwargs": jsonable(kwargs),
        "horizon": horizon,
        "tasks": list(tasks) if tasks else None,
        "init_checkpoint": None
        if init_checkpoint is None
        else {"path": str(init_checkpoint), "sha256": init_sha, "stage": init_meta["stage"]},
        "heldout": None if heldout is None else {"every": int(eval_every), **heldout.describe()},
    }
    out = Path(out_dir)
    prior = resume_point(out, run_meta, settings) if resume else None
    start_update = prior["update"] if prior else 0
    start_steps = prior["env_steps"] if prior else 0
    if prior is not None and start_steps >= int(total_steps):
        return []  # the run already holds total_steps env steps: nothing to continue
    if prior is not None:
        for stale in out.glob(CHECKPOINT_GLOB):  # written after the archive by a run that was killed
            if (checkpoint_update(stale) or 0) > start_update:
                stale.unlink()

    # a resumed run re-seeds its random streams from (seed, update): reproducible, not bit-identical
    # to a run that was never interrupted (its envs start fresh episodes)
    task_seeds = [seed * 1000 + i if prior is None else [seed * 1000 + i, start_update] for i in range(int(n_envs))]
    if vec_env == "batched":
        from kosmos_env.training.sb3_vec import make_sb3_vec_env

        vec = make_sb3_vec_env(
            env_id,
            int(n_envs),
            image_size=net_cfg.image_size,
            frame_stack=net_cfg.frame_stack,
            tasks=tasks,
            seed=task_seeds,
            env_kwargs=kwargs,
        )
    else:
        vec = DummyVecEnv([factory(i, task_seeds[i]) for i in range(int(n_envs))])
    out.mkdir(parents=True, exist_ok=True)
    tb = None if tensorboard_log is None else str(tensorboard_log)
    try:
        if prior is None:
            model = PPO(
                KosmosActorCritic,
                vec,
                **cfg.sb3_kwargs(),
                policy_kwargs={"net_config": net_cfg.to_dict()},
                seed=int(seed),
                device="cpu",
                verbose=0,
                tensorboard_log=tb,
            )
            if init_net is not None:
                model.policy.net.load_state_dict(init_net.state_dict())
            if cfg.init_log_std is not None:
                with torch.no_grad():
                    model.policy.net.log_std.fill_(float(cfg.init_log_std))
        else:
            # SB3's pickle archive: loaded only here, from the run folder this run wrote and whose
            # curve.json records the archive's sha256 (resume_point checked it)
            model = PPO.load(out / SB3_ARCHIVE, env=vec, device="cpu", tensorboard_log=tb)
            if int(model.num_timesteps) != start_steps:
                raise ValueError(
                    f"cannot resume PPO in {out}: {SB3_ARCHIVE} holds {model.num_timesteps} env steps, "
                    f"curve.json says {start_steps}; train-policy --overwrite starts again"
                )
            model.set_random_seed(int(np.random.SeedSequence([int(seed), start_update]).generate_state(1)[0]))
    except BaseException:
        vec.close()
        if heldout is not None:
            heldout.close()
        raise
    warmup = CriticWarmup(model.policy.net, int(cfg.critic_warmup))
    warmup.set(start_update)

    earlier = prior["curve"] if prior else {}
    earlier_meta = earlier.get("meta", {})
    prior_episodes = _read_episodes(out / "curve.csv", start_update) if prior else []
    prior_rows = [u for u in earlier.get("updates", []) if u["update"] <= start_update]
    heldout_rows = [h for h in earlier.get("heldout", []) if h["update"] <= start_update]
    prior_checkpoints = [n for n in earlier_meta.get("checkpoints", []) if (checkpoint_update(n) or 0) <= start_update]
    resumes = list(earlier_meta.get("resumes", []))
    if prior is not None:
        resumes.append({"update": start_update, "env_steps": start_steps})
    prior_seconds = float(earlier_meta.get("seconds", 0.0))
    log_config = {**run_meta, "training": settings, "resumed_from": resumes[-1] if prior else None}
    saved: list[Path] = []
    scratch = tempfile.TemporaryDirectory(prefix="kosmos-heldout-")
    t0 = time.perf_counter()
    tracker = None

    def checkpoint_meta(update: int) -> dict[str, Any]:
        return {
            **run_meta,
            "stage": "ppo",
            "env_steps": int(model.num_timesteps),
            "update": int(update),
            "training": settings,
        }

    def save(update: int) -> Path:
        path = out / f"ppo_update_{update:04d}.safetensors"
        model.policy.net.eval()  # the network has no train-only layers; eval keeps it explicit
        save_checkpoint(model.policy.net, path, checkpoint_meta(update))
        saved.append(path)
        return path

    def evaluate(update: int, path: Path | None) -> dict[str, Any]:
        """Held-out row for the network now (its checkpoint ``path``, else a scratch copy), logged."""
        if path is None:
            path = Path(scratch.name) / f"update_{update:04d}.safetensors"
            model.policy.net.eval()
            save_checkpoint(model.policy.net, path, checkpoint_meta(update))
        want_video = any(getattr(lg, "wants_video", False) for lg in loggers)
        row, frames = heldout.evaluate(str(path), update, int(model.num_timesteps), frames=want_video)
        heldout_rows.append(row)
        if progress:
            from tqdm.auto import tqdm

            lo, hi = row["wilson_95"]
            rate = "n/a" if row["success"] is None else f"{row['success']:.2f}"
            tqdm.write(
                f"held-out success at update {update}: {rate} [{lo:.2f}, {hi:.2f}] (n={row['n']}, {row['mode']})"
            )
        if frames is not None:
            task, seed_ = heldout.units[0]
            for lg in loggers:
                if getattr(lg, "wants_video", False):
                    lg.video(
                        row["env_steps"],
                        "heldout/rollout",
                        frames,
                        f"update {update} | {task} | seed {seed_} | success {row['verdicts'][0]}",
                    )
        return row

    def log(step: int, update_row: Mapping[str, Any] | None, held: Mapping[str, Any] | None) -> None:
        """One row of scalars to SB3's logger (TensorBoard) and to every logger, at ``step``."""
        values: dict[str, float] = {}
        if update_row is not None:
            values.update({k: float(v) for k, v in model.logger.name_to_value.items() if k.startswith("train/")})
            values["rollout/episodes"] = float(update_row["episodes"])
            if update_row["mean_reward"] is not None:
                values["rollout/mean_episode_reward"] = float(update_row["mean_reward"])
            if update_row["success_rate"] is not None:
                values["rollout/episode_success_rate"] = float(update_row["success_rate"])
        if held is not None:
            values["heldout/n"] = float(held["n"])
            values["heldout/wilson_95_lo"], values["heldout/wilson_95_hi"] = map(float, held["wilson_95"])
            if held["success"] is not None:
                values["heldout/success"] = float(held["success"])
        for key, value in values.items():
            if not key.startswith("train/"):  # SB3 recorded those itself
                model.logger.record(key, value)
        model.logger.dump(step=int(step))
        for lg in loggers:
            lg.log(int(step), values)

    def persist(final: bool) -> None:
        """SB3's archive (to resume) and the learning curve, as of the update just finished."""
        tmp = out / (SB3_ARCHIVE + ".tmp")
        with open(tmp, "wb") as fh:
            model.save(fh)
        digest = sha256_file(tmp)
        tmp.replace(out / SB3_ARCHIVE)
        seconds = time.perf_counter() - t0
        steps = int(model.num_timesteps)
        write_curve(
            out,
            prior_episodes + tracker.episodes,
            prior_rows + tracker.update_rows,
            {
                **run_meta,
                "training": settings,
                "seconds": round(prior_seconds + seconds, 1),
                "env_steps": steps,
                "update": int(tracker.updates_done),
                "steps_per_second": round((steps - start_steps) / max(seconds, 1e-9), 2),
                "checkpoints": prior_checkpoints + [p.name for p in saved],
                "sb3_last_sha256": digest,
                "resumes": resumes,
                "complete": bool(final),
            },
            heldout_rows,
        )

    def on_start() -> None:
        _log_settings(model.logger, log_config, start_steps)
        if heldout is not None and not any(h["update"] == start_update for h in heldout_rows):
            start = Path(init_checkpoint) if (init_checkpoint is not None and prior is None) else None
            log(start_steps, None, evaluate(start_update, start))

    def on_update(update: int, row: Mapping[str, Any]) -> None:
        path = save(update) if update % int(checkpoint_every) == 0 else None
        held = evaluate(update, path) if heldout is not None and update % int(eval_every) == 0 else None
        log(row["env_steps"], row, held)
        if path is not None:
            persist(final=False)

    tracker = _make_callback(
        on_update,
        int(total_steps) - start_steps,
        int(n_envs),
        progress,
        warmup,
        start_update=start_update,
        on_start=on_start,
    )
    try:
        for lg in loggers:
            lg.start(log_config)
        model.learn(
            total_timesteps=int(total_steps) - start_steps,
            callback=tracker,
            progress_bar=False,
            reset_num_timesteps=prior is None,
            tb_log_name=out.resolve().name or "ppo",
        )
        last = tracker.updates_done
        path = saved[-1] if saved and checkpoint_update(saved[-1]) == last else save(last)
        if heldout is not None and (not heldout_rows or heldout_rows[-1]["update"] != last):
            log(int(model.num_timesteps), None, evaluate(last, path))
        # SB3's own archive (optimiser state included) to resume training; it is pickle-based, so
        # policies are never loaded from it: the .safetensors checkpoints are the product
        persist(final=True)
    finally:
        tracker.close_bar()
        vec.close()
        if heldout is not None:
            heldout.close()
        scratch.cleanup()
        for lg in loggers:
            lg.finish()
        if getattr(model, "_logger", None) is not None:  # SB3 makes its logger when learning starts
            model.logger.close()
    return saved


def resume_point(out: Path, run_meta: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where a PPO run in ``out`` continues: ``{"update", "env_steps", "curve"}``, or None when the
    folder holds no PPO run (PPO then starts there afresh). One-line ``ValueError`` when it holds one
    that cannot be continued honestly.

    A resumed run loads ``sb3_last.zip`` (written with every checkpoint: network, log-std, optimiser
    state, step count) only if ``curve.json`` records its sha256, and only with the settings the run
    was started with (env, spec hash, reward, seed, PPO settings but ``threads``, envs, start
    checkpoint, held-out units; ``--steps`` may grow). Checkpoints up to the archive's update are
    kept, later ones (a kill between the two writes) are written again. What is not restored: the
    envs' episodes in flight and the random streams, re-seeded from (seed, update).
    """
    archive = out / SB3_ARCHIVE
    has_checkpoints = any(out.glob(CHECKPOINT_GLOB))
    if not archive.is_file():
        if has_checkpoints:
            raise ValueError(
                f"cannot resume PPO in {out}: it holds PPO checkpoints but no {SB3_ARCHIVE} to continue from; "
                "train-policy --overwrite starts again"
            )
        return None
    try:
        curve = json.loads((out / "curve.json").read_text(encoding="utf-8"))
        meta = curve["meta"]
        recorded, update, steps = meta.get("sb3_last_sha256"), int(meta["update"]), int(meta["env_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(
            f"cannot resume PPO in {out}: its curve.json is missing or does not record {SB3_ARCHIVE}, so the "
            "archive is not loaded; train-policy --overwrite starts again"
        ) from None
    if not recorded or sha256_file(archive) != recorded:
        raise ValueError(
            f"cannot resume PPO in {out}: {SB3_ARCHIVE} is not the archive its curve.json records (a run "
            "killed while saving, or a file from elsewhere), so it is not loaded; train-policy --overwrite starts again"
        )
    problem = _settings_differ(meta, run_meta, settings)
    if problem:
        raise ValueError(
            f"cannot resume PPO in {out}: it was trained with {problem}; resume with the same settings, "
            "or train-policy --overwrite starts again"
        )
    return {"update": update, "env_steps": steps, "curve": curve}


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(jsonable(value)))


def _settings_differ(meta: Mapping[str, Any], run_meta: Mapping[str, Any], settings: Mapping[str, Any]) -> str | None:
    """The first setting a resumed run would change (None when it changes none that matter)."""

    def differ(name: str, before: Any, now: Any) -> str | None:
        before, now = _plain(before), _plain(now)
        return None if before == now else f"{name} {json.dumps(before)} (now {json.dumps(now)})"

    for key in ("env_id", "spec_hash", "reward", "instructions", "image_size", "frame_stack", "seed"):
        found = differ(key, meta.get(key), run_meta[key])
        if found:
            return found
    before = meta.get("training") or {}
    for key in ("n_envs", "env_kwargs", "horizon", "tasks"):
        found = differ(key, before.get(key), settings[key])
        if found:
            return found
    defaults = asdict(PPOConfig())
    for key, now in settings["ppo"].items():
        if key != "threads":
            found = differ(key, (before.get("ppo") or {}).get(key, defaults.get(key)), now)
            if found:
                return found
    init_before = (before.get("init_checkpoint") or {}).get("sha256")
    init_now = (settings.get("init_checkpoint") or {}).get("sha256")
    if init_before != init_now:
        return f"another start checkpoint (sha256 {str(init_before)[:12]}, now {str(init_now)[:12]})"
    held_before, held_now = before.get("heldout"), settings.get("heldout")
    if held_before and held_now:
        for key in ("mode", "units_per_task"):
            found = differ(f"held-out {key}", held_before.get(key), held_now.get(key))
            if found:
                return found
    return None


def _read_episodes(path: Path, max_update: int) -> list[dict[str, Any]]:
    """The rows of ``curve.csv`` up to ``max_update``, typed as the tracker writes them."""
    if not path.is_file():
        return []
    types = {"env_steps": int, "update": int, "return": float, "length": int, "success": int}
    rows = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            typed = {k: (types[k](v) if k in types else (v or None)) for k, v in row.items()}
            if typed["update"] <= max_update:
                rows.append(typed)
    return rows


def _log_settings(logger, config: Mapping[str, Any], step: int) -> None:
    """The run's settings to SB3's logger: TensorBoard's HPARAMS tab and a ``settings`` text."""
    from stable_baselines3.common.logger import HParam

    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}/{k}" if prefix else str(k), v)
        elif isinstance(value, (bool, int, float, str)):
            flat[prefix] = value
        else:
            flat[prefix] = json.dumps(jsonable(value))

    walk("", {k: v for k, v in config.items() if k not in ("instructions", "action_low", "action_high")})
    metrics = {"heldout/success": 0.0, "rollout/episode_success_rate": 0.0}
    text = "\n".join("    " + line for line in json.dumps(jsonable(config), indent=1).splitlines())
    not_tb = ("stdout", "log", "json", "csv")
    logger.record("hparams", HParam(flat, metrics), exclude=not_tb)
    logger.record("settings", text, exclude=not_tb)
    logger.dump(step=int(step))


class CriticWarmup:
    """Freezes every parameter but the critic's for the first ``updates`` PPO updates.

    A frozen parameter gets no gradient, so PPO's optimiser leaves it as it is; the critic's
    trunk and value head learn the returns of the unchanged actor meanwhile.
    """

    def __init__(self, net, updates: int):
        self.updates = max(0, int(updates))
        self._frozen = [p for name, p in net.named_parameters() if not name.startswith(("vf_trunk.", "value_head."))]
        self.set(updates_done=0)

    def set(self, updates_done: int) -> None:
        train_actor = updates_done >= self.updates
        for p in self._frozen:
            p.requires_grad_(train_actor)


def _make_callback(
    on_update,
    total: int,
    n_envs: int,
    progress: bool,
    warmup: CriticWarmup | None = None,
    *,
    start_update: int = 0,
    on_start=None,
):
    """The SB3 callback of :func:`finetune_ppo`: ``on_update(update, row)`` after each PPO update
    (its number counts on from ``start_update``), ``on_start()`` when learning starts."""
    from stable_baselines3.common.callbacks import BaseCallback
    from tqdm.auto import tqdm

    class Tracker(BaseCallback):
        """Episode returns and successes, a progress bar, and ``on_update`` after every update."""

        def __init__(self):
            super().__init__()
            self.episodes: list[dict[str, Any]] = []
            self.update_rows: list[dict[str, Any]] = []
            self.updates_done = int(start_update)
            self._rollouts = int(start_update)
            self._collecting = False
            self._returns = np.zeros(n_envs)
            self._lengths = np.zeros(n_envs, dtype=int)
            self._bar = None
            self._t0 = time.perf_counter()

        def _on_training_start(self) -> None:
            self._bar = tqdm(total=total, desc="ppo", unit="step", disable=not progress)
            if on_start is not None:
                on_start()

        def _on_rollout_start(self) -> None:
            # called before every rollout: each call after the first follows one finished update
            if self._collecting:
                self._finish_update()
            self._rollouts += 1
            self._collecting = True

        def _finish_update(self) -> None:
            self._collecting = False
            self.updates_done = self._rollouts
            mine = [e for e in self.episodes if e["update"] == self.updates_done]
            judged = [e["success"] for e in mine if e["success"] >= 0]
            row = {
                "update": self.updates_done,
                "env_steps": int(self.model.num_timesteps),
                "episodes": len(mine),
                "mean_reward": float(np.mean([e["return"] for e in mine])) if mine else None,
                "success_rate": float(np.mean(judged)) if judged else None,
            }
            self.update_rows.append(row)
            if warmup is not None:
                warmup.set(self.updates_done)
            on_update(self.updates_done, row)

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
            if self._collecting:
                self._finish_update()  # the last update has no rollout after it

        def close_bar(self) -> None:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    return Tracker()


def _write_atomic(path: Path, write) -> None:
    """``write(tmp_path)`` then move it over ``path``: a reader (or a resume) never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    tmp.replace(path)


def write_curve(
    out_dir: Path,
    episodes: list[dict[str, Any]],
    updates: list[dict[str, Any]],
    meta: Mapping[str, Any],
    heldout: list[dict[str, Any]] | None = None,
) -> Path:
    """``curve.csv`` (episodes), ``curve.json`` (per update, held-out rows, run settings) and
    ``curve.png`` (mean reward, episode success rate and held-out success with its Wilson 95 % band)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on training machines
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    heldout = list(heldout or [])
    fields = ["env_steps", "update", "task", "return", "length", "success", "outcome"]

    def write_csv(tmp: Path) -> None:
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            writer.writerows(episodes)

    _write_atomic(out_dir / "curve.csv", write_csv)
    document = {"meta": jsonable(meta), "updates": updates, "heldout": jsonable(heldout)}
    _write_atomic(out_dir / "curve.json", lambda tmp: tmp.write_text(json.dumps(document, indent=1)))
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = [u for u in updates if u["mean_reward"] is not None]
    lines = ax.plot(
        [u["env_steps"] for u in rows],
        [u["mean_reward"] for u in rows],
        "o-",
        color="tab:blue",
        label="mean episode reward (per update)",
    )
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean episode reward", color="tab:blue")
    judged = [u for u in updates if u["success_rate"] is not None]
    held = [h for h in heldout if h.get("success") is not None]
    if judged or held:
        ax2 = ax.twinx()
        if judged:
            lines += ax2.plot(
                [u["env_steps"] for u in judged],
                [u["success_rate"] for u in judged],
                "s--",
                color="tab:green",
                label="episode success rate",
            )
        if held:
            x = [h["env_steps"] for h in held]
            ax2.fill_between(
                x, [h["wilson_95"][0] for h in held], [h["wilson_95"][1] for h in held], color="tab:red", alpha=0.15
            )
            what = "true" if held[-1].get("mode") == "truth" else "world-judged"
            lines += ax2.plot(
                x,
                [h["success"] for h in held],
                "D-",
                color="tab:red",
                label=f"held-out {what} success (tuning seeds, n={held[-1]['n']}, Wilson 95 %)",
            )
        ax2.set_ylabel("success rate")
        ax2.set_ylim(-0.05, 1.05)
    if len(lines) > 1:
        ax.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="upper left")
    reward = meta.get("reward") or {}
    ax.set_title(f"PPO in {meta.get('env_id')} (reward {reward.get('mode')}, seed {meta.get('seed')})", fontsize=10)
    fig.tight_layout()
    _write_atomic(out_dir / "curve.png", lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)
    return out_dir / "curve.png"
