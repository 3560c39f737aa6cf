"""``kosmos-env analyze DIR``: the evaluator's statistics for one campaign.

First line: the verdict on the top two policies ("A better than B" / "no detectable difference
yet (need about N more pairs)" / "B better"), from one rule chosen before the data: Tango's
score interval for paired proportions on success per (task, seed), the verdict being "the
interval excludes 0", so the interval printed is the one that decided. Every pair gets the same
verdict in a table below it; the bootstrap, paired t-tests and the anytime-valid A/B (on judge
scores) follow as secondary, each naming what it is computed on.

Prints, and writes to DIR/analysis.json (keys verdict and verdicts, then): per-policy success with Wilson and Clopper–Pearson
intervals and the worst case with discards/abstentions; paired bootstrap (by task and seed) of
pairwise differences and of the ranking; split-half repeatability of the ranking; minimum
detectable difference and the share of policy pairs the campaign separates; horizon
sensitivity from per-step ground truth in the robot logs; an anytime-valid paired A/B test of
the top two policies. ``--reference FILE.csv`` (columns task, policy, reference) adds rank
agreement (Pearson, Spearman, Kendall tau-b, MMRV, each with its random floor), and over all
(task, policy) cells each metric with a bootstrap interval over (task, seed) units, a permutation
p-value against a random ranking and the difference to the action-only baseline (the commands
alone, judged from each episode's stored actions). ``--map "csv_name=label;..."`` maps the
CSV's policy and task names onto the campaign's (every name must map, else one error).

Every analysis names the judge of its success numbers (label and identity hash) and states the
time and money per stage (warm per-rollout seconds; model loads apart) with the judge's share
of the bill. Last, "how far to trust this world": the truth-free diagnostics the run has (the
gate's discard rate when it ran with the gate) read against the fidelity ladder
(``kosmos_env.study.trust``; ``kosmos-env trust --env ID`` measures all three). On the simulator
itself (the ground truth those diagnostics are read against) that is one line saying so.

``--judge ID_OR_NAME`` reads the numbers of another judge stored with the campaign
(``kosmos-env judge DIR --judge SPEC``): its identity, a unique prefix of it, or its label;
``campaign`` (the default) is the campaign's own judge. An unknown judge is an error that lists
the stored ones.

``kosmos-env analyze --cost-sweep RUN1 RUN2 ...`` compares campaigns of one design run at several
settings of a world: cost per rollout (with the judge's share), agreement with the truth (the
``--reference`` CSV, else the most expensive run) with intervals, and the cheapest run whose
Kendall interval's lower end holds ``--cost-bar``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="statistics of a campaign: intervals, ranking uncertainty, "
        "repeatability, detectable differences, horizon, A/B, agreement",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "dir", type=Path, metavar="DIR", nargs="?", default=None, help="campaign output directory (holds results.json)"
    )
    p.add_argument(
        "--reference",
        type=Path,
        default=None,
        metavar="FILE.csv",
        help="reference success rates: CSV with columns task, policy, reference (or real)",
    )
    p.add_argument(
        "--map",
        dest="name_map",
        default=None,
        metavar="NAME=LABEL;...",
        help="map the reference CSV's policy/task names to campaign labels, e.g. "
        '"rt-1-x=scripted:skill=0.3;widowx_spoon_on_towel=spoon_on_towel"',
    )
    p.add_argument(
        "--cost-sweep",
        nargs="+",
        default=None,
        metavar="RUN",
        help="campaign directories of one design at several world settings: find the cheapest that ranks "
        "correctly (DIR is then not needed)",
    )
    p.add_argument(
        "--cost-bar",
        type=float,
        default=0.6,
        help="cost sweep bar: lower end of the Kendall interval must be >= this (default 0.6)",
    )
    p.add_argument(
        "--registration",
        type=Path,
        default=None,
        metavar="REG.json",
        help="a pre-registered study: compute its registered metrics and report PASS/FAIL for each bar "
        "(with its interval) first; every other number is labelled exploratory",
    )
    p.add_argument(
        "--judge",
        default=None,
        metavar="ID_OR_NAME",
        help="whose verdicts the success numbers are: 'campaign' (default: the campaign's own judge) or "
        "the identity, id prefix or label of a judge stored by `kosmos-env judge DIR --judge SPEC`",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="error level of intervals and tests (default 0.05)")
    p.add_argument("--power", type=float, default=0.8, help="power for the minimum detectable difference (default 0.8)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--n-splits", type=int, default=1000, help="random split-half splits (default 1000)")
    p.add_argument("--horizon-step", type=int, default=5, help="step between truncated horizons (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the resampling (default 0)")
    p.add_argument("--json", action="store_true", help="print the JSON instead of tables")
    p.add_argument("--no-write", action="store_true", help="do not write DIR/analysis.json")
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="analyze even if DIR fails `kosmos-env verify` (default: refuse such a folder)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kosmos_env.report.analysis import analyze_bundle
    from kosmos_env.report.bundle import load_bundle
    from kosmos_env.report.text import analysis_text

    if args.n_boot < 100:
        raise ValueError(f"--n-boot must be at least 100, got {args.n_boot}")
    if args.n_splits < 10:
        raise ValueError(f"--n-splits must be at least 10, got {args.n_splits}")
    name_map = None
    if args.name_map is not None:
        from kosmos_env.report.name_map import parse_name_map

        name_map = parse_name_map(args.name_map)
    if args.cost_sweep and args.judge is not None:
        raise ValueError(
            "--judge chooses the judge of one campaign DIR; --cost-sweep compares runs by their own judges"
        )
    if args.cost_sweep:
        from kosmos_env.report.cost_sweep import cost_sweep_runs, format_cost_sweep

        runs = ([args.dir] if args.dir is not None else []) + list(args.cost_sweep)
        sweep = cost_sweep_runs(
            runs,
            reference=args.reference,
            name_map=name_map,
            bar=args.cost_bar,
            alpha=args.alpha,
            n_boot=args.n_boot,
            seed=args.seed,
        )
        print(json.dumps(sweep, indent=2, default=_jsonable) if args.json else format_cost_sweep(sweep))
        return 0
    if args.dir is None:
        raise ValueError("give a campaign directory DIR (or --cost-sweep RUN...)")
    if not args.no_verify:
        from kosmos_env.campaign.verify import check_before_use

        check_before_use(args.dir, "analyze")
    bundle = load_bundle(args.dir)
    registered = None
    if args.registration is not None:
        if args.judge not in (None, "campaign"):
            raise ValueError("--registration checks the registered judge's numbers; it cannot be combined with --judge")
        from kosmos_env.registration import load_registration
        from kosmos_env.registration.report import registered_from_bundle

        registered = registered_from_bundle(bundle, load_registration(args.registration))
    result = analyze_bundle(
        bundle,
        alpha=args.alpha,
        power=args.power,
        reference=args.reference,
        n_boot=args.n_boot,
        n_splits=args.n_splits,
        seed=args.seed,
        horizon_step=args.horizon_step,
        name_map=name_map,
        judge=args.judge,
    )
    # how far to trust the world: what this run has of the truth-free diagnostics, read against the ladder
    from kosmos_env.study.trust import diagnostics_from_campaign, trust_lines

    trust = diagnostics_from_campaign(bundle, n_boot=args.n_boot, seed=args.seed)
    result = {**result, "trust": trust}
    if registered is not None:
        from kosmos_env.registration.report import EXPLORATORY_NOTE

        result = {"registered": registered, "exploratory_note": EXPLORATORY_NOTE, **result}
    text = json.dumps(result, indent=2, allow_nan=False, default=_jsonable)
    if not args.no_write:  # another judge's analysis goes to DIR/judges/<id>/, never over the campaign's own
        from kosmos_env.report.judge_view import judge_output_dir

        written = judge_output_dir(bundle.root, result["judge"]) / "analysis.json"
        written.write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    elif registered is not None:
        from kosmos_env.registration.report import exploratory_header, registered_text

        print(registered_text(registered) + "\n\n" + exploratory_header() + "\n\n" + analysis_text(result))
    else:
        print(analysis_text(result))
    if not args.json:
        print("\n" + "\n".join(trust_lines(trust)))
    if not args.no_write and not args.json:
        print(f"\nwrote {written}")
    return 0


def _jsonable(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"cannot write {type(x).__name__} to JSON")
