"""``kosmos-env study``: measure an evaluator world against its ground truth and its baselines.

    kosmos-env register --study --out reg.json            # first: bind design, world, judges, bars
    kosmos-env study --registration reg.json --out study_out

Runs the same policies (scripted at several skills, deceptive policies, random, closed-loop
checkpoints) in the world, the simulator, the copy-first-frame and null (blank) worlds with
paired seeds; judges every rollout with every applicable judge (robot log, vision, the
action-only rule and the learned action-only judge), at the full horizon and cut at each
``--horizons`` step; replays simulator commands open loop for the frame-error table; optionally
runs the shuffled-command control (``--control shuffled``) and a cost sweep (``--sweep
NAME=V1,V2 ...`` over settings the world declares, e.g. ``image_size`` or ``physics_dt`` on
Kosmos-Tabletop-v1). Writes ``report.md`` (bars PASS/FAIL first), PNG plots and ``study.json``
into ``--out``.

With ``--registration FILE`` (made by ``kosmos-env register --study`` with the same design
arguments, before this run) the bars are judged PASS/FAIL; any difference between the
registration and this run (design, seeds, world weights or code, judges, policies, bars) is
refused in one line naming the field. Without one the study is exploratory, and says so on every
page it writes. ``--closed-loop-bars`` (given to both commands) adds the closed-loop bars of
issue 41 for a population of ``ckpt:`` policies (:mod:`kosmos_env.study.bars` says why it is a
flag and not a rule on the policies).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time


def add_parser(subparsers) -> None:
    from kosmos_env.study.arguments import add_design_arguments

    p = subparsers.add_parser(
        "study",
        help="evaluator-validity study: rank policies in a world, its simulator and baselines; bars, drift, cost sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_design_arguments(p)
    p.add_argument(
        "--registration",
        default=None,
        metavar="REG.json",
        help="a registration made before this run by `kosmos-env register --study` with the same design "
        "arguments; without one the study is exploratory and no bar is judged",
    )
    p.add_argument("--threads", type=int, default=1, choices=[1, 2], help="torch CPU threads (default 1)")
    p.add_argument("--out", default="study_out", help="output directory (default study_out)")
    p.add_argument(
        "--from-episodes",
        default=None,
        metavar="DIR",
        help="re-analyse the episodes a previous study saved in DIR (episodes.json, examples.npz) instead of "
        "running them; the registration in DIR, if any, is checked and kept",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args) -> int:
    from kosmos_env.study.analyze import analyze
    from kosmos_env.study.report import write_report
    from kosmos_env.study.run import run_study
    from kosmos_env.study.bars import judge_bars
    from kosmos_env.study.registration import utc_now

    started = utc_now()
    t0 = time.perf_counter()
    if args.from_episodes:
        from kosmos_env.study.episodes import load_episodes, load_registration

        study = load_episodes(args.from_episodes)
        registration = load_registration(args.from_episodes, study)
        n_boot = (registration or {}).get("analysis", {}).get("n_boot", args.n_boot)
    else:
        from kosmos_env.study.episodes import save_episodes

        if args.registration:
            from pathlib import Path

            from kosmos_env.study.registration import check_registration, load_registration_file

            from kosmos_env.study.arguments import registration_from_args

            registration = load_registration_file(args.registration)
            cfg, current = registration_from_args(args)
            check_registration(registration, current, started, args.registration)
            Path(args.out).mkdir(parents=True, exist_ok=True)
            if Path(args.registration).resolve() != (Path(args.out) / "registration.json").resolve():
                shutil.copyfile(args.registration, Path(args.out) / "registration.json")
        else:
            from kosmos_env.study.arguments import config_from_args

            cfg, registration = config_from_args(args), None
            print(
                "exploratory study: no --registration, so no bar is judged (make one first with "
                "`kosmos-env register --study <the same arguments>`)",
                file=sys.stderr,
            )
        n_boot = args.n_boot
        study = run_study(cfg, progress=not args.quiet)
        study["started_utc"] = started
        save_episodes(study, args.out)  # before any analysis: the episodes outlive a failing report
    status = "registered" if registration else "exploratory"
    results = analyze(study, n_boot=n_boot)
    bars = judge_bars(registration, results) if registration else None
    trust = _trust_lines(study, n_boot)
    from kosmos_env.study.arguments import bars_from_args

    files = write_report(
        results,
        study,
        args.out,
        bars=bars if registration else bars_from_args(args),
        registration=registration,
        status=status,
        trust=trust,
    )
    if registration:
        for b in bars:
            print(f"[{b['verdict']}] {b['text']}")
    else:
        print("EXPLORATORY (no registration): bars not judged")
    agr = results["agreement"]["evaluators"]
    for name in ("learned/robot_log", "learned/vision", "baseline/action_only", "baseline/action_learned"):
        if name in agr:
            k = agr[name]["kendall"]
            print(f"{name}: Kendall {k['value']} interval {k['interval']} p {k['p_value']}")
    for line in trust:
        print(line)
    print(f"wrote {files['report']} and {len(files) - 2} plots in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


def _trust_lines(study, n_boot: int) -> list[str]:
    """The world's truth-free diagnostics (gate discards, shuffled-command gap, drift), read against
    the fidelity ladder: what a Bridge user could compute, beside the agreement it should predict."""
    from kosmos_env.study.trust import diagnostics_from_study, trust_lines

    return trust_lines(diagnostics_from_study(study, n_boot=n_boot))
