"""``kosmos-env trust --env ID``: how far to trust a world, from diagnostics that need no ground truth.

Runs policies × tasks × seeds in the world and measures (``kosmos_env.study.trust``): the share
of episodes the consistency gate discards, the shuffled-command gap (success in the world minus
success when the world executes its own commands of another seed permuted in time) and frame
drift against copy-first-frame at H = 20 commands (on a tabletop against its simulator, on Bridge
against the real clip shipped with the package). Each with a 95 % interval over (task, seed)
units, read against the fidelity ladder (bench/results/fidelity_ladder_v2): how well tabletop worlds
with such numbers ranked policies against simulator truth.

    kosmos-env trust --env Kosmos-TabletopLearned-v1 --seeds 3
    kosmos-env trust --env Kosmos-Bridge-v1 --seeds 2 --policies scripted:skill=1.0 random   # needs its GPU model
    kosmos-env trust --env Kosmos-Bridge-v1 --tiny --seeds 2 --tasks move_can_to_left        # plumbing only, CPU
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "trust",
        help="how far to trust a world: gate discards, shuffled-command gap, drift, read against the fidelity ladder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--env", required=True, metavar="ID", help="registered env id (e.g. Kosmos-TabletopLearned-v1)")
    p.add_argument(
        "--policies",
        nargs="+",
        default=None,
        metavar="POLICY",
        help="policies to run (default: scripted at skills 1.0, 0.6, 0.3 and random; add closed-loop checkpoints, 'ckpt:path=FILE', to compare learned worlds on what reacting policies do: the defaults do not tell Kosmos-TabletopLearned-v1 from -v2)",
    )
    p.add_argument("--tasks", nargs="+", default=None, metavar="TASK", help="tasks (default: every task of the env)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per (policy, task), at least 2 (default 3)")
    p.add_argument(
        "--seed-offset",
        type=int,
        default=100000,
        help="seed of (task 0, index 0); seeds are offset + 1000 * task index + i (default 100000)",
    )
    p.add_argument("--judge", default=None, help="judge type or judge spec as JSON (default: the env spec's judge)")
    p.add_argument(
        "--tiny",
        action="store_true",
        help="tiny random models in place of a Cosmos 3 world and a VLM judge (as `kosmos-env eval --tiny`): "
        "checks that the diagnostics run end to end; its numbers mean nothing",
    )
    p.add_argument(
        "--drift-seeds",
        type=int,
        default=1,
        help="seed indices per (policy, task) replayed open loop for the drift (default 1)",
    )
    p.add_argument("--world-kwargs", default=None, metavar="JSON", help="world keyword arguments as a JSON object")
    p.add_argument(
        "--ladder",
        type=Path,
        default=None,
        metavar="FILE.json",
        help="another ladder reference (default: the one installed with the package)",
    )
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--json", action="store_true", help="print the diagnostics as JSON instead of lines")
    p.add_argument("--out", type=Path, default=None, metavar="FILE.json", help="also write the diagnostics here")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kosmos_env.study.trust import TrustConfig, format_diagnostics, load_ladder, measure
    from kosmos_env.utils.threads import threads_problem

    if args.n_boot < 100:
        raise ValueError(f"--n-boot must be at least 100, got {args.n_boot}")
    if problem := threads_problem(args.threads):
        raise ValueError(problem)
    world_kwargs = {}
    if args.world_kwargs:
        try:
            world_kwargs = json.loads(args.world_kwargs)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--world-kwargs is not valid JSON: {exc.msg}") from None
        if not isinstance(world_kwargs, dict):
            raise ValueError("--world-kwargs must be a JSON object")
    judge = args.judge
    if judge and judge.lstrip().startswith("{"):
        try:
            judge = json.loads(judge)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--judge is not valid JSON: {exc.msg}") from None
    if args.tiny:
        from kosmos_env.testing.tiny_run import apply_tiny

        tiny_judge = apply_tiny(args.env)  # points the world at the tiny weights (os.environ)
        judge = judge or tiny_judge
    ladder = load_ladder(str(args.ladder)) if args.ladder else load_ladder()
    if args.ladder and ladder is None:
        raise ValueError(f"--ladder {args.ladder}: file not found")
    cfg = TrustConfig(
        env_id=args.env,
        seeds=args.seeds,
        seed_offset=args.seed_offset,
        judge=judge,
        drift_seeds=args.drift_seeds,
        threads=args.threads,
        world_kwargs=world_kwargs,
        tasks=tuple(args.tasks) if args.tasks else None,
        **({"policies": tuple(args.policies)} if args.policies else {}),
    )
    diag = measure(cfg, progress=not args.quiet, n_boot=args.n_boot)
    text = json.dumps(diag, indent=2, default=float)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text if args.json else format_diagnostics(diag, ladder))
    return 0
