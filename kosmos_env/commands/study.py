"""``kosmos-env study``: measure an evaluator world against its ground truth and its baselines.

    kosmos-env study --world Kosmos-TabletopLearned-v1 --reference Kosmos-Tabletop-v1 --out study_out

Registers its bars (``registration.json``: bars, design, sha256, UTC time) before any episode runs;
runs the same policies (scripted at several skills, deceptive policies, random) in the world, the
simulator and the null world with paired seeds; judges every rollout with every applicable judge
(and the action-only judge), at the full horizon and cut at each ``--horizons`` step; replays
simulator commands open loop for the frame-error table; optionally runs the shuffled-command
control (``--control shuffled``) and a cost sweep (``--sweep NAME=V1,V2 ...`` over settings the
world declares, e.g. ``image_size`` or ``physics_dt`` on Kosmos-Tabletop-v1). Writes ``report.md``
(bars PASS/FAIL first), PNG plots and ``study.json`` into ``--out``.
"""
from __future__ import annotations

import argparse
import sys
import time


def add_parser(subparsers) -> None:
    # defaults are filled in by run(): importing kosmos_env.study here would load scipy.stats
    # (seconds) for every kosmos-env command, since the CLI builds every parser
    p = subparsers.add_parser("study", help="evaluator-validity study: rank policies in a world, its simulator and "
                                            "baselines; bars, drift, cost sweep",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", default="Kosmos-TabletopLearned-v1", help="the evaluator world (default Kosmos-TabletopLearned-v1)")
    p.add_argument("--reference", default="Kosmos-Tabletop-v1", help="the ground-truth simulator (default Kosmos-Tabletop-v1)")
    p.add_argument("--policies", nargs="+", default=None,
                   help="policies as name:k=v (default: scripted at 6 skills, random, 3 deceptive)")
    p.add_argument("--tasks", nargs="+", default=None, help="tasks (default: every task of the suite)")
    p.add_argument("--seeds", type=int, default=5, help="seeds per (policy, task) (default 5)")
    p.add_argument("--seed-offset", type=int, default=100000, help="first seed (default 100000, away from training seeds)")
    p.add_argument("--horizons", type=int, nargs="+", default=None,
                   help="cut horizons H for the drift table (each within the episode length; default 5 10 20 30 40)")
    p.add_argument("--gate", action="store_true", help="also run the world with the consistency gate")
    p.add_argument("--no-null-world", action="store_true", help="skip the null world (and so the action-only baseline)")
    p.add_argument("--control", choices=["shuffled"], default=None,
                   help="shuffled: also run the world executing another episode's commands permuted in time")
    p.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2",
                   help="a world setting to sweep (repeat for several); one setting varied at a time")
    p.add_argument("--sweep-world", default=None, help="world whose settings are swept (default: --world)")
    p.add_argument("--sweep-seeds", type=int, default=3, help="seeds per (policy, task) for each swept setting (default 3)")
    p.add_argument("--frame-error-seeds", type=int, default=1,
                   help="seeds per (policy, task) replayed open loop for the frame-error table (default 1; 0 = skip)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--threads", type=int, default=1, choices=[1, 2], help="torch CPU threads (default 1)")
    p.add_argument("--weights", default=None, help="learned-world weights file (its sha256 must match the spec)")
    p.add_argument("--vision-weights", default=None, help="vision-judge weights (default: the shipped ones)")
    p.add_argument("--out", default="study_out", help="output directory (default study_out)")
    p.add_argument("--from-episodes", default=None, metavar="DIR",
                   help="re-analyse the episodes a previous study saved in DIR (episodes.json, examples.npz) instead of "
                        "running them; the registration in DIR is kept")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args) -> int:
    from kosmos_env.study import StudyConfig, analyze, run_study, write_report
    from kosmos_env.study.bars import default_bars, judge_bars, register
    from kosmos_env.study.run import validate
    from kosmos_env.study.sweep import parse_sweep
    from kosmos_env.study.run import DEFAULT_HORIZONS, DEFAULT_POLICIES

    args.policies = list(DEFAULT_POLICIES) if args.policies is None else args.policies
    args.horizons = list(DEFAULT_HORIZONS) if args.horizons is None else args.horizons

    if args.n_boot < 100:
        raise ValueError(f"--n-boot must be at least 100, got {args.n_boot}")
    cfg = StudyConfig(world=args.world, reference=args.reference, policies=tuple(args.policies),
                      tasks=tuple(args.tasks) if args.tasks else None, seeds=args.seeds, seed_offset=args.seed_offset,
                      horizons=tuple(sorted(set(args.horizons))), gate=args.gate, null_world=not args.no_null_world,
                      control=args.control, sweep=parse_sweep(args.sweep), sweep_world=args.sweep_world,
                      sweep_seeds=args.sweep_seeds, threads=args.threads,
                      world_kwargs={"weights_path": args.weights} if args.weights else {},
                      vision_weights=args.vision_weights, frame_error_seeds=args.frame_error_seeds)
    validate(cfg)
    from kosmos_env.spec import load_spec

    world_judge = load_spec(cfg.world).judge.get("type", "robot_log")
    world_judge = world_judge if world_judge in ("robot_log", "vision") else "robot_log"
    t0 = time.perf_counter()
    if args.from_episodes:
        from kosmos_env.study.episodes import load_episodes, load_registration

        study = load_episodes(args.from_episodes)
        registration = load_registration(args.from_episodes)
    else:
        from kosmos_env.study.episodes import save_episodes

        registration = register(args.out, cfg.to_dict(), default_bars(f"learned/{world_judge}"))
        study = run_study(cfg, progress=not args.quiet)
        save_episodes(study, args.out)  # before any analysis: the episodes outlive a failing report
    results = analyze(study, n_boot=args.n_boot)
    bars = judge_bars(registration, results)
    files = write_report(results, study, args.out, bars=bars, registration=registration)
    for b in bars:
        print(f"[{b['verdict']}] {b['text']}")
    agr = results["agreement"]["evaluators"]
    for name in ("learned/robot_log", "learned/vision", "baseline/action_only"):
        if name in agr:
            k = agr[name]["kendall"]
            print(f"{name}: Kendall {k['value']} interval {k['interval']} p {k['p_value']}")
    print(f"wrote {files['report']} and {len(files) - 2} plots in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0
