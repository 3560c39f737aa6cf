"""``kosmos-env compare``: how well does an evaluator rank policies, and is A better than B?

* ``--csv FILE``: agreement table for a CSV with columns task, policy, reference, evaluator
  (``real``/``sim`` accepted): Pearson, Spearman, Kendall tau-b and MMRV per task, mean over
  tasks and pooled, each with its random-ranking floor.
* ``--a A.json --b B.json``: is A better than B? Two per-seed score sequences in [0, 1]; each
  file holds a JSON list of scores (paired by position) or an object {seed: score} (paired by
  seed; only shared seeds are used, in sorted order). The first line is the verdict from one
  pre-chosen rule whose interval decides (0/1 values: success, Tango's score interval for
  paired proportions; other values: judge scores, the Agresti-Min adjusted interval). Below
  it, secondary: the anytime-valid paired A/B test, decided by its own empirical-Bernstein
  confidence sequence (the interval it prints).
* ``--judges RUN A B``: agreement of two judges on the same stored rollouts of campaign RUN
  (``campaign`` = the campaign's own judge; others by judge id, id prefix or label, as filed
  by ``kosmos-env judge``): confusion table, raw and chance agreement, Cohen's kappa with a
  bootstrap interval. RUN is verified first, as ``analyze`` does (every stored judgment against its
  evidence, its judge's identity and, for deterministic judges, a re-run): an edited verdict is
  refused, not counted (``--no-verify`` compares anyway).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="rank agreement with a reference (CSV), or an anytime-valid paired A/B test",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--csv", type=Path, help="CSV with columns task, policy, reference, evaluator")
    p.add_argument("--reference-col", default=None, help="reference column name (default: reference or real)")
    p.add_argument("--evaluator-col", default=None, help="evaluator column name (default: evaluator or sim)")
    p.add_argument("--mmrv-weight", choices=("reference", "evaluator"), default="reference")
    p.add_argument(
        "--mmrv-ties",
        choices=("greater", "less", "strict"),
        default="greater",
        help="tie convention for MMRV (default greater = SIMPLER's released code)",
    )
    p.add_argument("--no-pooled", action="store_true", help="omit the pooled (all rows as one vector) line")
    p.add_argument("--a", dest="a", type=Path, help="per-seed scores of policy A (JSON)")
    p.add_argument("--b", dest="b", type=Path, help="per-seed scores of policy B (JSON)")
    p.add_argument(
        "--judges",
        nargs=3,
        metavar=("RUN", "JUDGE_A", "JUDGE_B"),
        help="agreement of two judges on campaign RUN's rollouts (see kosmos-env judge)",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="--judges: compare even if RUN fails `kosmos-env verify` (default: refuse such a folder)",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="error level of the A/B test (default 0.05)")
    p.add_argument("--seed", type=int, default=0, help="seed for Monte Carlo random floors (large n)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a text table")
    p.set_defaults(func=run)


def _load_scores(path: Path) -> dict | list:
    if not path.is_file():
        raise FileNotFoundError(f"score file not found: {path}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if isinstance(data, dict) and "scores" in data and not all(k.lstrip("-").isdigit() for k in data):
        data = data["scores"]
    if not isinstance(data, (list, dict)):
        raise ValueError(f"{path} must hold a JSON list of scores or an object {{seed: score}}")
    return data


def _pair(a, b, pa: Path, pb: Path) -> tuple[list[float], list[float], str]:
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            raise ValueError(f"{pa} has {len(a)} scores but {pb} has {len(b)}; lists pair by position")
        return [float(x) for x in a], [float(x) for x in b], "position"
    if isinstance(a, dict) and isinstance(b, dict):
        shared = sorted(set(a) & set(b), key=lambda k: (0, int(k), "") if k.lstrip("-").isdigit() else (1, 0, k))
        if not shared:
            raise ValueError(f"{pa} and {pb} share no seed")
        return [float(a[k]) for k in shared], [float(b[k]) for k in shared], "seed"
    raise ValueError("both score files must be lists, or both objects keyed by seed")


def run(args: argparse.Namespace) -> int:
    from kosmos_env.stats.numbers import signed, signed_interval
    from kosmos_env.stats.report import agreement_table, read_agreement_csv, report_text
    from kosmos_env.stats.sequential import sequential_ab
    from kosmos_env.stats.verdict import paired_verdict

    if args.csv is None and args.a is None and args.b is None and args.judges is None:
        raise ValueError("give --csv FILE, --a A.json --b B.json, or --judges RUN A B")
    if (args.a is None) != (args.b is None):
        raise ValueError("the A/B test needs both --a and --b")
    out: dict = {}
    texts: list[str] = []
    if args.csv is not None:
        rows = read_agreement_csv(args.csv, reference_col=args.reference_col, evaluator_col=args.evaluator_col)
        table = agreement_table(
            rows, mmrv_weight=args.mmrv_weight, mmrv_ties=args.mmrv_ties, pooled=not args.no_pooled, seed=args.seed
        )
        out["agreement"] = table.to_dict()
        texts.append(report_text(table))
    if args.a is not None:
        a, b, how = _pair(_load_scores(args.a), _load_scores(args.b), args.a, args.b)
        binary = all(x in (0.0, 1.0) for x in a + b)
        verdict = paired_verdict(a, b, names=("A", "B"), measure="success" if binary else "score", alpha=args.alpha)
        out["verdict"] = verdict.to_dict() | {"paired_by": how}
        # the secondary A/B decides by its own confidence sequence, so the interval it prints is the
        # one that decided (the betting rule decides earlier but has no interval to show)
        res = sequential_ab(a=a, b=b, alpha=args.alpha, rule="eb")
        out["ab"] = res.to_dict() | {"paired_by": how, "rule": "eb", "measure": verdict.measure}
        f = res.final
        texts.append(
            f"VERDICT: {verdict.headline()}\n"
            f"  (A = {args.a}, B = {args.b}, paired by {how})\n\n"
            f"secondary: anytime-valid paired A/B on {verdict.measure_words} (decision and interval from one "
            f"empirical-Bernstein confidence sequence, alpha={args.alpha}):\n"
            f"  decision: {res.decision} after {res.n_used} of {res.n_total} paired episodes\n"
            f"  mean(A - B) = {signed(f.mean_diff, 3)}, {100 * (1 - args.alpha):g}% anytime-valid interval "
            f"{signed_interval(f.lower, f.upper, 3)}"
        )
    if args.judges is not None:
        from kosmos_env.campaign.judge_compare import compare_judges, format_comparison

        if not args.no_verify:  # stored verdicts are checked as verify checks them, never counted on trust
            from kosmos_env.campaign.verify import check_before_use

            check_before_use(args.judges[0], "compare")
        res = compare_judges(*args.judges, alpha=args.alpha, seed=args.seed)
        out["judges"] = res
        texts.append(format_comparison(res))
    print(json.dumps(out, indent=2) if args.json else "\n\n".join(texts))
    return 0
