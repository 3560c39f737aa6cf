"""The study's design arguments, shared by ``kosmos-env study`` and ``kosmos-env register --study``,
so a registration and the run it registers are described by the same arguments and turned into
the same config by the same code.

Light to import: the CLI builds every command's parser, so nothing here loads scipy or torch
until a config is made.
"""

from __future__ import annotations

import argparse


def add_design_arguments(p: argparse.ArgumentParser) -> None:
    """Everything that decides a study's numbers (defaults filled in by :func:`config_from_args`)."""
    p.add_argument(
        "--world", default="Kosmos-TabletopLearned-v1", help="the evaluator world (default Kosmos-TabletopLearned-v1)"
    )
    p.add_argument(
        "--reference", default="Kosmos-Tabletop-v1", help="the ground-truth simulator (default Kosmos-Tabletop-v1)"
    )
    p.add_argument(
        "--policies",
        nargs="+",
        default=None,
        help="policies as name:k=v (default: scripted at 6 skills, random, 3 deceptive, 7 closed-loop checkpoints)",
    )
    p.add_argument("--tasks", nargs="+", default=None, help="tasks (default: every task of the suite)")
    p.add_argument("--seeds", type=int, default=5, help="seeds per (policy, task) (default 5)")
    p.add_argument(
        "--seed-offset",
        type=int,
        default=100000,
        help="first seed; seeds are OFFSET + 1000 * task index + i (default 100000, in the evaluation "
        "range of kosmos_env/study/seed_ranges.json)",
    )
    p.add_argument(
        "--horizons",
        type=int,
        nargs="+",
        default=None,
        help="cut horizons H for the drift table (each within the episode length; default 5 10 20 30 40)",
    )
    p.add_argument("--gate", action="store_true", help="also run the world with the consistency gate")
    p.add_argument(
        "--no-null-world",
        action="store_true",
        help="skip the copy-first-frame and null worlds (and so the action-only baselines)",
    )
    p.add_argument(
        "--control",
        choices=["shuffled"],
        default=None,
        help="shuffled: also run the world executing another episode's commands permuted in time",
    )
    p.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="a world setting to sweep (repeat for several); one setting varied at a time",
    )
    p.add_argument("--sweep-world", default=None, help="world whose settings are swept (default: --world)")
    p.add_argument(
        "--sweep-seeds", type=int, default=3, help="seeds per (policy, task) for each swept setting (default 3)"
    )
    p.add_argument(
        "--frame-error-seeds",
        type=int,
        default=1,
        help="seeds per (policy, task) replayed open loop for the frame-error table (default 1; 0 = skip)",
    )
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument(
        "--closed-loop-bars",
        action="store_true",
        help="also register (and judge) the closed-loop bars: each world evaluator beats the best cheap baseline "
        "on the ckpt: policies alone, and the frame judge's Kendall on the world's frames is >= 0.8 and >= 0.85 x "
        "its Kendall on the simulator's frames there (needs at least 2 ckpt: policies; see kosmos_env/study/bars.py)",
    )
    p.add_argument("--weights", default=None, help="learned-world weights file (its sha256 must match the spec)")
    p.add_argument("--vision-weights", default=None, help="vision-judge weights (default: the shipped ones)")


def config_from_args(args):
    """The study's config from the design arguments (defaults filled, every check that can fail
    before an episode runs done: one ValueError line each)."""
    from kosmos_env.study.run import StudyConfig
    from kosmos_env.study.run import DEFAULT_HORIZONS, DEFAULT_POLICIES, validate
    from kosmos_env.study.sweep import parse_sweep

    policies = list(DEFAULT_POLICIES) if args.policies is None else args.policies
    horizons = list(DEFAULT_HORIZONS) if args.horizons is None else args.horizons
    if args.n_boot < 100:
        raise ValueError(f"--n-boot must be at least 100, got {args.n_boot}")
    cfg = StudyConfig(
        world=args.world,
        reference=args.reference,
        policies=tuple(policies),
        tasks=tuple(args.tasks) if args.tasks else None,
        seeds=args.seeds,
        seed_offset=args.seed_offset,
        horizons=tuple(sorted(set(horizons))),
        gate=args.gate,
        null_world=not args.no_null_world,
        control=args.control,
        sweep=parse_sweep(args.sweep),
        sweep_world=args.sweep_world,
        sweep_seeds=args.sweep_seeds,
        threads=getattr(args, "threads", 1),
        world_kwargs={"weights_path": args.weights} if args.weights else {},
        vision_weights=args.vision_weights,
        frame_error_seeds=args.frame_error_seeds,
    )
    validate(cfg)
    if getattr(args, "closed_loop_bars", False):
        from kosmos_env.study.analyze import policy_kind
        from kosmos_env.study.bars import CLOSED_LOOP_MIN_POLICIES

        n = sum(policy_kind(p) == "closed_loop" for p in cfg.policies)
        if n < CLOSED_LOOP_MIN_POLICIES:
            raise ValueError(
                f"--closed-loop-bars ranks the closed-loop checkpoints: give at least {CLOSED_LOOP_MIN_POLICIES} "
                f"ckpt: policies, got {n}"
            )
    return cfg


def bars_from_args(args) -> list[dict]:
    """The bars this design registers: today's, plus the closed-loop ones with ``--closed-loop-bars``
    (a flag, not a config field, so every earlier registration's body stays as it was)."""
    from kosmos_env.study.bars import default_bars

    return default_bars(closed_loop=bool(getattr(args, "closed_loop_bars", False)))


def registration_from_args(args) -> tuple:
    """(config, the registration body this design implies now)."""
    from kosmos_env.study.registration import registration_body
    from kosmos_env.study.run import planned_baselines, study_tasks

    cfg = config_from_args(args)
    return cfg, registration_body(
        cfg, study_tasks(cfg), bars_from_args(args), planned_baselines(cfg), n_boot=args.n_boot
    )
