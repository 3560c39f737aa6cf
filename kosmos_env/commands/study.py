"""``kosmos-env study``: measure an evaluator world against its ground truth.

    kosmos-env study --world Kosmos-TabletopLearned-v1 --reference Kosmos-Tabletop-v1 --out study_out

Runs the same policies (scripted at several skills, random) on both worlds with paired seeds,
judges every rollout with every applicable judge, and writes ``report.md``, PNG plots and
``study.json`` (every number and every episode row) into ``--out``. Defaults: 6 policies ×
4 tasks × 10 seeds per world, a few minutes on 2 CPU cores.
"""
from __future__ import annotations

import sys
import time


def add_parser(subparsers) -> None:
    # defaults are filled in by run(): importing kosmos_env.study here would load scipy.stats
    # (seconds) for every kosmos-env command, since the CLI builds every parser
    p = subparsers.add_parser("study", help="evaluator-validity study: rank policies in a world and in its simulator",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--world", default="Kosmos-TabletopLearned-v1", help="the evaluator world (default Kosmos-TabletopLearned-v1)")
    p.add_argument("--reference", default="Kosmos-Tabletop-v1", help="the ground-truth simulator (default Kosmos-Tabletop-v1)")
    p.add_argument("--policies", nargs="+", default=None, help="policies as name:k=v (default: scripted at 5 skills + random)")
    p.add_argument("--tasks", nargs="+", default=None, help="tasks (default: every task of the suite)")
    p.add_argument("--seeds", type=int, default=10, help="seeds per (policy, task) (default 10)")
    p.add_argument("--seed-offset", type=int, default=100000, help="first seed (default 100000, away from training seeds)")
    p.add_argument("--horizons", type=int, nargs="+", default=None,
                   help="horizons for the horizon sweep (default: kosmos_env.study.run.DEFAULT_HORIZONS)")
    p.add_argument("--no-gate", action="store_true", help="skip the with-gate run")
    p.add_argument("--threads", type=int, default=1, choices=[1, 2], help="torch CPU threads (default 1)")
    p.add_argument("--weights", default=None, help="learned-world weights file (its sha256 must match the spec)")
    p.add_argument("--vision-weights", default=None, help="vision-judge weights (default: the shipped ones)")
    p.add_argument("--out", default="study_out", help="output directory (default study_out)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args) -> int:
    from kosmos_env.study import StudyConfig, analyze, run_study, write_report
    from kosmos_env.study.run import DEFAULT_HORIZONS, DEFAULT_POLICIES

    args.policies = list(DEFAULT_POLICIES) if args.policies is None else args.policies
    args.horizons = list(DEFAULT_HORIZONS) if args.horizons is None else args.horizons

    if args.world != "Kosmos-TabletopLearned-v1" or args.reference != "Kosmos-Tabletop-v1":
        from kosmos_env.spec import load_spec

        if load_spec(args.reference).world["type"] != "tabletop":
            raise ValueError(f"--reference must be a simulator with ground truth (a tabletop env), got {args.reference}")
        load_spec(args.world)
    cfg = StudyConfig(world=args.world, reference=args.reference, policies=tuple(args.policies),
                      tasks=tuple(args.tasks) if args.tasks else None, seeds=args.seeds, seed_offset=args.seed_offset,
                      horizons=tuple(sorted(set(args.horizons))), gate=not args.no_gate, threads=args.threads,
                      world_kwargs={"weights_path": args.weights} if args.weights else {},
                      vision_weights=args.vision_weights)
    t0 = time.perf_counter()
    study = run_study(cfg, progress=not args.quiet)
    results = analyze(study)
    files = write_report(results, study, args.out)
    head = results["evaluators"]
    for name in ("learned/vision", "learned/robot_log"):
        a = head[name]["agreement"]
        print(f"{name}: Spearman {a['spearman']['value']}, Kendall {a['kendall']['value']}, "
              f"Pearson {a['pearson']['value']}, MMRV {a['mmrv']['value']} (floor {a['mmrv']['random_floor']})")
    print(f"wrote {files['report']} and {len(files) - 2} plots in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0
