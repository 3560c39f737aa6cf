"""``kosmos-env train-policy``: train an image-conditioned closed-loop policy inside an env.

Stages: ``bc`` records demonstrations of a weak scripted policy in the simulator
(``Kosmos-Tabletop-v1`` at 64x64) and behaviour-clones a small CNN policy on them; ``ppo``
fine-tunes a checkpoint (``--init``, or the ``bc`` stage's) with stable-baselines3 PPO in
``--env`` under the ``--reward`` mode; ``both`` runs one after the other. Every checkpoint is a
``.safetensors`` file that loads as a policy: ``--policy ckpt:path=FILE``::

    kosmos-env train-policy --stage both --env Kosmos-TabletopLearned-v1 --reward progress \\
        --demos demos.npz --steps 20000 --n-envs 2 --checkpoint-every 10 --out runs/learned_progress

The run folder: a non-empty ``--out`` is refused unless ``--resume`` (continue there: reuse its
``bc.safetensors``, keep its checkpoints, continue PPO from its ``sb3_last.zip``) or
``--overwrite`` (delete what an earlier run wrote there, :mod:`kosmos_env.training.run_folder`).
While PPO trains, the network is scored on held-out tuning seeds (``--eval-every``,
``--eval-units``) into ``curve.json`` and ``curve.png``; ``--tensorboard`` and ``--wandb`` log the
same numbers live. Every problem with the arguments (a missing extra included) is one line and
exit status 2 before anything runs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

#: ``--tensorboard`` given without a folder: ``<--out>/tensorboard``
_TB_IN_OUT = "<out>/tensorboard"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train-policy",
        help="behaviour-clone and PPO-fine-tune a CNN policy inside an env (CPU)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--env", default="Kosmos-Tabletop-v1", help="env id PPO trains in (default Kosmos-Tabletop-v1)")
    p.add_argument("--stage", choices=["bc", "ppo", "both"], default="both", help="what to run (default both)")
    p.add_argument(
        "--demos", default=None, help="demonstrations .npz: read if it exists, else recorded and written there"
    )
    # defaults chosen on tuning seeds (bench/results/train_recipe/pilots.md; the clone's settings
    # from bench/results/train_in_world/pilot.txt): the registered recipe of
    # bench/train_in_world_registered.py
    p.add_argument("--demo-skill", type=float, default=1.0, help="skill of the scripted demonstrator (default 1.0)")
    p.add_argument("--demo-seeds", type=int, default=100, help="demonstration seeds per task (default 100)")
    p.add_argument(
        "--demo-seed-start",
        type=int,
        default=300000,
        help="first demonstration seed (default 300000: training seeds, apart from evaluation seeds)",
    )
    p.add_argument("--bc-steps", type=int, default=6000, help="behaviour-cloning gradient steps (default 6000)")
    p.add_argument("--frame-stack", type=int, default=1, help="frames the network sees (default 1)")
    p.add_argument("--init", default=None, metavar="CKPT", help="checkpoint PPO starts from (--stage ppo)")
    p.add_argument(
        "--reward",
        choices=["terminal", "progress", "oracle"],
        default=None,
        help="reward mode of the env (spec override; default: the spec's own, terminal)",
    )
    p.add_argument(
        "--terminate-on-success",
        action="store_true",
        help="end an episode once the step signal says success (progress/oracle only)",
    )
    p.add_argument(
        "--success-threshold",
        type=float,
        default=0.5,
        help="step signal that counts as success with --terminate-on-success (default 0.5)",
    )
    p.add_argument(
        "--success-patience",
        type=int,
        default=3,
        help="consecutive steps at or above the threshold before the episode ends (default 3, chosen on "
        "tuning seeds: the frame judge sees success while the object is still held over its target)",
    )
    p.add_argument(
        "--init-log-std",
        type=float,
        default=-1.6,
        help="PPO's exploration log-std at the start (default -1.6, std 0.2 of the [-1, 1] action range; "
        "the cloned -1.0 turned every rollout into a failure: bench/results/train_recipe/pilots.md)",
    )
    p.add_argument("--steps", type=int, default=49152, help="PPO env steps in total (default 49152)")
    p.add_argument("--n-envs", type=int, default=8, help="envs stepped side by side (default 8)")
    p.add_argument("--n-steps", type=int, default=128, help="steps per env per PPO update (default 128)")
    p.add_argument("--batch-size", type=int, default=256, help="PPO minibatch (default 256)")
    p.add_argument(
        "--vec-env",
        choices=["auto", "dummy", "batched"],
        default="auto",
        help="how the --n-envs envs step: batched (one pass of the world for all of them: the learned "
        "tabletop), dummy (one after another), auto (default: batched where the world batches)",
    )
    p.add_argument("--n-epochs", type=int, default=5, help="passes over each update's rollout (default 5)")
    p.add_argument("--learning-rate", type=float, default=3e-4, help="PPO's Adam learning rate (default 3e-4)")
    p.add_argument(
        "--clip-range", type=float, default=0.1, help="PPO's clip range on the probability ratio (default 0.1)"
    )
    p.add_argument(
        "--critic-warmup",
        type=int,
        default=2,
        help="first PPO updates that train only the critic, the cloned actor frozen (default 2)",
    )
    p.add_argument(
        "--checkpoint-every", type=int, default=12, help="save a checkpoint every N PPO updates (default 12)"
    )
    p.add_argument(
        "--eval-every",
        type=int,
        default=None,
        metavar="N",
        help="score the network on held-out tuning seeds every N PPO updates, at the start and at the end "
        "(default: --checkpoint-every; 0: never): true success in the simulator for the tabletop worlds, "
        "the env's own judge for others; into curve.json and curve.png",
    )
    p.add_argument(
        "--eval-units",
        type=int,
        default=5,
        metavar="K",
        help="held-out seeds per task: (task i, 329000 + 100 i + j), j < K, in the tuning range (default 5: on "
        "the tabletop, 20 episodes per evaluation, about 7 %% of the env steps trained between two "
        "evaluations at the default settings)",
    )
    p.add_argument("--horizon", type=int, default=None, help="episode length override for PPO and demos (spec field)")
    p.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--out", default="policy_run", help="output folder (default policy_run)")
    folder = p.add_mutually_exclusive_group()
    folder.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in a non-empty --out: reuse its bc.safetensors, keep its checkpoints and "
        "continue PPO from its sb3_last.zip (same settings; --steps may grow)",
    )
    folder.add_argument(
        "--overwrite",
        action="store_true",
        help="delete what an earlier run wrote in --out (bc.safetensors, ppo_update_*.safetensors, curve.*, "
        "sb3_last.zip, its tensorboard/ and wandb/ logs), nothing else, then start afresh",
    )
    p.add_argument(
        "--tensorboard",
        nargs="?",
        const=_TB_IN_OUT,
        default=None,
        metavar="DIR",
        help="log PPO to TensorBoard in DIR (default --out/tensorboard): SB3's losses, reward, success, "
        "held-out success and the hyper-parameters (tensorboard extra)",
    )
    p.add_argument(
        "--wandb",
        nargs="?",
        const="kosmos-env",
        default=None,
        metavar="PROJECT",
        help="log PPO to W&B (project PROJECT, default kosmos-env; honours WANDB_MODE=offline and WANDB_DIR, "
        "else its files go to --out/wandb): settings, per-update losses, reward and success, held-out "
        "results and the first held-out episode of each evaluation as a video (wandb extra)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.error = _one_line_error(p)
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def _one_line_error(parser: argparse.ArgumentParser):
    """argparse's own refusals (a non-integer seed, an unknown choice) as one line, exit status 2."""

    def error(message: str):
        parser.exit(2, f"kosmos-env train-policy: error: {message}\n")

    return error


def run(args) -> int:
    missing = _missing_extras(args)
    problem = None if missing else _check(args)
    for line in missing or ([problem] if problem else []):
        print(f"kosmos-env train-policy: error: {line}", file=sys.stderr)
    if missing or problem:
        return 2
    from kosmos_env.training.run_folder import remove_run_outputs

    out = Path(args.out)
    if args.overwrite:
        gone = remove_run_outputs(out)
        if gone:
            print(f"--overwrite: deleted {len(gone)} file(s)/folder(s) of an earlier run in {out}", file=sys.stderr)
    loggers = []
    if args.wandb:  # opened before the first stage: a W&B problem (no credentials online) shows before any work
        from kosmos_env.training.loggers import WandbTrainingLog

        wandb_dir = None if os.environ.get("WANDB_DIR") else out
        loggers.append(WandbTrainingLog(args.wandb, name=out.resolve().name, dir=wandb_dir))
        loggers[0].start({"command": {k: v for k, v in vars(args).items() if k != "func"}})
    try:
        return _stages(args, out, loggers)
    finally:
        for lg in loggers:
            lg.finish()  # already finished by PPO unless a stage before it failed
            if lg.run_dir:
                print(f"W&B run: {lg.run_dir}", file=sys.stderr)


def _stages(args, out: Path, loggers: list) -> int:
    from kosmos_env.training import bc, demos, ppo

    horizon = {"horizon": args.horizon} if args.horizon is not None else {}
    init = args.init
    if args.stage in ("bc", "both"):
        if args.resume and (out / "bc.safetensors").is_file():
            init = str(out / "bc.safetensors")
            print(f"--resume: reusing {init} (behaviour cloning skipped)")
        else:
            if args.demos and Path(args.demos).is_file():
                recorded = demos.Demos.load(args.demos)
                print(f"read {recorded.n_episodes} demonstration episodes from {args.demos}", file=sys.stderr)
            else:
                recorded = demos.record_demos(
                    policy=_demo_policy(args),
                    seeds_per_task=args.demo_seeds,
                    seed_start=args.demo_seed_start,
                    env_kwargs={**demos.DEFAULT_DEMO_KWARGS, **horizon},
                    out=args.demos,
                    progress=not args.quiet,
                )
            rate = float((recorded.success == 1).mean()) if recorded.n_episodes else 0.0
            cfg = bc.BCConfig(steps=args.bc_steps, seed=args.seed, threads=args.threads, frame_stack=args.frame_stack)
            init = str(bc.behaviour_clone(recorded, out / "bc.safetensors", cfg, progress=not args.quiet))
            print(
                f"behaviour cloning on {len(recorded)} steps of {recorded.n_episodes} episodes "
                f"(demonstrator success {rate:.2f}) -> {init}"
            )
    if args.stage in ("ppo", "both"):
        reward = ppo.reward_override(args.reward)
        if args.terminate_on_success:
            reward = {
                **(reward or {}),
                "terminate_on_success": True,
                "success_threshold": args.success_threshold,
                "success_patience": args.success_patience,
            }
        tensorboard = _tensorboard_dir(args)
        paths = ppo.finetune_ppo(
            args.env,
            init,
            reward=reward,
            total_steps=args.steps,
            n_envs=args.n_envs,
            seed=args.seed,
            out_dir=out,
            checkpoint_every=args.checkpoint_every,
            env_kwargs=horizon,
            config=ppo.PPOConfig(
                n_steps=args.n_steps,
                batch_size=args.batch_size,
                n_epochs=args.n_epochs,
                learning_rate=args.learning_rate,
                clip_range=args.clip_range,
                critic_warmup=args.critic_warmup,
                threads=args.threads,
                init_log_std=args.init_log_std,
            ),
            progress=not args.quiet,
            eval_every=_eval_every(args),
            eval_units=args.eval_units,
            tensorboard_log=tensorboard,
            loggers=loggers,
            resume=args.resume,
            vec_env=ppo.default_vec_env(args.env) if args.vec_env == "auto" else args.vec_env,
        )
        if not paths:
            print(
                f"--resume: PPO in {out} already holds --steps {args.steps} env steps; nothing to continue "
                "(give a larger --steps to train on)"
            )
            return 0
        print(
            f"PPO in {args.env}: {len(paths)} checkpoints in {out}/ (last {paths[-1].name}); "
            f"learning curve {out / 'curve.png'}"
        )
        if tensorboard:
            print(f"TensorBoard: tensorboard --logdir {tensorboard}")
    return 0


def _demo_policy(args) -> str:
    return f"scripted:skill={args.demo_skill}"


def _eval_every(args) -> int:
    return args.checkpoint_every if args.eval_every is None else args.eval_every


def _tensorboard_dir(args) -> Path | None:
    if args.tensorboard is None:
        return None
    return Path(args.out) / "tensorboard" if args.tensorboard == _TB_IN_OUT else Path(args.tensorboard)


def _missing_extras(args) -> list[str]:
    """One line per package the chosen stage and flags need that is not installed (checked before
    anything runs: a missing stable-baselines3 would otherwise surface after demos and cloning)."""
    from kosmos_env.errors import missing_extra_line

    needs = []  # (module, who needs it, the extra that brings it)
    if args.stage in ("ppo", "both"):
        needs += [
            ("stable_baselines3", f"--stage {args.stage} (PPO)", "rl"),
            ("matplotlib", f"--stage {args.stage} (the learning curve)", "rl"),
        ]
    if args.tensorboard is not None:
        needs.append(("tensorboard", "--tensorboard", "tensorboard"))
    if args.wandb is not None:
        needs.append(("wandb", "--wandb", "wandb"))
    return [line for module, who, extra in needs if (line := missing_extra_line(module, who, extra))]


def _check(args) -> str | None:
    """The first problem with the arguments, as one line (None when they are fine)."""
    from kosmos_env.utils.threads import threads_problem

    for flag in (
        "steps",
        "n_envs",
        "n_steps",
        "batch_size",
        "checkpoint_every",
        "demo_seeds",
        "bc_steps",
        "frame_stack",
        "eval_units",
        "n_epochs",
    ):
        if getattr(args, flag) < 1:
            return f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}"
    if problem := threads_problem(args.threads):  # the check every command's --threads shares
        return problem
    if args.horizon is not None and args.horizon < 1:
        return f"--horizon must be >= 1, got {args.horizon}"
    if args.eval_every is not None and args.eval_every < 0:
        return f"--eval-every must be >= 0 (0: no held-out evaluation), got {args.eval_every}"
    for flag in ("demo_skill", "success_threshold", "init_log_std", "learning_rate", "clip_range"):
        if not math.isfinite(getattr(args, flag)):
            return f"--{flag.replace('_', '-')} must be a finite number, got {getattr(args, flag)}"
    if args.learning_rate <= 0:
        return f"--learning-rate must be > 0, got {args.learning_rate}"
    if not 0.0 < args.clip_range < 1.0:
        return f"--clip-range must be in (0, 1), got {args.clip_range}"
    if args.critic_warmup < 0:
        return f"--critic-warmup must be >= 0 (0: the actor trains from the first update), got {args.critic_warmup}"
    if not 0.0 <= args.demo_skill <= 1.0:
        return f"--demo-skill must be in [0, 1], got {args.demo_skill}"
    if not 0 <= args.seed < 2**32:
        return f"--seed must be in [0, 2**32), got {args.seed}"
    if args.demo_seed_start < 0:
        return f"--demo-seed-start must be >= 0, got {args.demo_seed_start}"
    if args.stage == "ppo" and not args.init:
        return "--stage ppo fine-tunes a checkpoint: give --init CKPT (or use --stage both)"
    if args.stage != "ppo" and args.init:
        return "--init is for --stage ppo (stage bc and both train their own starting checkpoint)"
    if args.stage == "bc" and (args.tensorboard is not None or args.wandb is not None):
        return "--tensorboard and --wandb log PPO: give --stage ppo or both"
    if not 0.0 <= args.success_threshold <= 1.0:
        return f"--success-threshold must be in [0, 1], got {args.success_threshold}"
    if args.success_patience < 1:
        return f"--success-patience must be >= 1, got {args.success_patience}"
    if args.terminate_on_success and args.reward in (None, "terminal"):
        return "--terminate-on-success needs --reward progress or oracle (a per-step success signal)"
    problem = _check_env(args.env)
    if problem:
        return problem
    if args.stage != "ppo":
        problem = _check_demo_seeds(args.demo_seed_start, args.demo_seeds)
        if problem:
            return problem
    if args.stage != "bc" and _eval_every(args) > 0:
        problem = _check_heldout(args.env, args.eval_units)
        if problem:
            return problem
    if args.demos:
        problem = _check_demos(Path(args.demos))
        if problem:
            return problem
    if args.init:
        from kosmos_env.policies.checkpoint import read_checkpoint_meta

        if Path(args.init).is_dir():
            return f"--init {args.init} is a folder, not a checkpoint file (e.g. {args.init}/bc.safetensors)"
        try:
            read_checkpoint_meta(args.init)
        except ValueError as exc:
            return f"--init: {exc}"
    return _check_out(args)


def _check_env(env_id: str) -> str | None:
    """An env id that names a registered spec (never a path); close matches when it does not."""
    import difflib

    from kosmos_env.errors import SpecError
    from kosmos_env.spec import load_spec, registered_spec_ids

    try:
        load_spec(env_id)  # the registry's own check, as `kosmos-env eval --env` runs it
    except SpecError as exc:
        known = {i.lower(): i for i in registered_spec_ids()}
        close = [known[m] for m in difflib.get_close_matches(str(env_id).lower(), list(known), n=2, cutoff=0.85)]
        return f"--env: {exc}" + (f"; did you mean {' or '.join(close)}?" if close else "")
    return None


def _check_demo_seeds(start: int, count: int) -> str | None:
    """Demonstration seeds lie in one training range of kosmos_env/study/seed_ranges.json."""
    from kosmos_env.study.seed_ranges import seed_ranges

    last = start + count - 1
    spans = seed_ranges()["training"]
    if not any(a <= start and last <= b for a, b in spans):
        where = " or ".join(f"[{a}, {b}]" for a, b in spans)
        return (
            f"demonstration seeds {start}..{last} (--demo-seed-start, --demo-seeds) must lie in one training "
            f"seed range, {where} (kosmos_env/study/seed_ranges.json)"
        )
    return None


def _check_heldout(env_id: str, units: int) -> str | None:
    from kosmos_env.spec import load_spec
    from kosmos_env.study.seed_ranges import check_seeds
    from kosmos_env.tasks import load_suite
    from kosmos_env.training.heldout import MAX_UNITS_PER_TASK, heldout_units

    if units > MAX_UNITS_PER_TASK:
        return (
            f"--eval-units must be at most {MAX_UNITS_PER_TASK} (each task's held-out seeds are 100 wide), got {units}"
        )
    names = load_suite(load_spec(env_id).tasks["suite"]).names
    try:
        check_seeds([s for _, s in heldout_units(names, units)], "tuning", "held-out seeds (--eval-units)")
    except ValueError as exc:
        return str(exc)
    return None


def _check_demos(path: Path) -> str | None:
    """A ``--demos`` path is a demonstrations file that exists, or a file path to write."""
    import json

    import numpy as np

    if path.is_dir():
        return f"--demos {path} is a folder; give the demonstrations .npz file to read (or to record into)"
    if not path.exists():
        return None
    try:  # an .npz opens lazily: only its small metadata array is read here
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"])) if "meta" in data.files else {}
    except Exception as exc:  # zip, npy or JSON errors of a file that is not ours
        return f"--demos {path}: not a demonstrations .npz ({type(exc).__name__})"
    from kosmos_env.training.demos import DEMO_FORMAT

    if not isinstance(meta, dict) or meta.get("format") != DEMO_FORMAT:
        return f"--demos {path}: not a Kosmos demonstrations file (kosmos-env train-policy records them)"
    return None


def _check_out(args) -> str | None:
    """The --out rule: an empty or new folder, or --resume / --overwrite of a run there."""
    from kosmos_env.training.run_folder import SB3_ARCHIVE, run_outputs
    from kosmos_env.utils.fileio import check_writable_path

    out = Path(args.out)
    try:
        check_writable_path(out)
    except ValueError as exc:
        return str(exc)
    if not out.is_dir() or not any(out.iterdir()):
        return None
    if not (args.resume or args.overwrite):
        return (
            f"--out {out} is not empty: give --resume to continue the run there, or --overwrite to delete "
            "what an earlier run wrote there"
        )
    if args.overwrite:
        doomed = {p.resolve() for p in run_outputs(out)}
        for flag, value in (("--init", args.init), ("--demos", args.demos)):
            if value and any(d == Path(value).resolve() or d in Path(value).resolve().parents for d in doomed):
                return (
                    f"{flag} {value} is among what --overwrite would delete in {out}: give --resume, or another --out"
                )
        return None
    bc_file = out / "bc.safetensors"
    if args.stage == "both" and (out / SB3_ARCHIVE).is_file() and not bc_file.is_file():
        return f"--resume: {out} holds a PPO run but not the bc.safetensors it started from; --overwrite starts again"
    if args.stage in ("bc", "both") and bc_file.is_file():
        return _check_bc_resume(args, bc_file)
    return None


def _check_bc_resume(args, path: Path) -> str | None:
    """A reused bc.safetensors was cloned with the settings given now."""
    from kosmos_env.policies.checkpoint import read_checkpoint_meta

    try:
        meta = read_checkpoint_meta(path)
    except ValueError as exc:
        return f"--resume: {exc}"
    bc_meta = meta.get("bc") or {}
    settings = bc_meta.get("settings") or {}
    for flag, before, now in (
        ("--bc-steps", settings.get("steps"), args.bc_steps),
        ("--seed", settings.get("seed"), args.seed),
        ("--frame-stack", settings.get("frame_stack"), args.frame_stack),
        ("--demo-skill", bc_meta.get("demo_policy"), _demo_policy(args) if not _demos_given(args) else None),
    ):
        if now is not None and before != now:
            return (
                f"--resume: {path} was cloned with {flag} {before} (now {now}); give the same settings, "
                "or --overwrite to clone again"
            )
    return None


def _demos_given(args) -> bool:
    return bool(args.demos) and Path(args.demos).is_file()
