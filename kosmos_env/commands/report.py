"""``kosmos-env report DIR``: write DIR/report.md and a self-contained DIR/report.html for a
campaign directory (figures and rollout thumbnails embedded; numbers recomputed from the
per-episode rows of DIR/results.json). Both include the statistics of ``kosmos-env analyze``
(intervals, pairwise differences, split-half, MDD, horizon, discard bounds, A/B) with plots,
name the judge of the success numbers (label and identity hash), and state the warm seconds
and money per stage, model loads apart, with the judge's share of the bill. ``--judge
ID_OR_NAME`` reports the verdicts of another judge stored with the campaign (``kosmos-env
judge DIR --judge SPEC``) into DIR/judges/<judge id>/; an unknown judge is an error that lists
the stored ones."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="write report.md and a self-contained report.html for a campaign", description=__doc__
    )
    p.add_argument("dir", type=Path, metavar="DIR", help="campaign output directory (holds results.json)")
    p.add_argument("--no-thumbnails", action="store_true", help="skip the animated rollout thumbnails")
    p.add_argument("--no-analysis", action="store_true", help="skip the statistical analysis section")
    p.add_argument(
        "--judge",
        default=None,
        metavar="ID_OR_NAME",
        help="whose verdicts the success numbers are: 'campaign' (default: the campaign's own judge) or "
        "the identity, id prefix or label of a judge stored by `kosmos-env judge DIR --judge SPEC`",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="report even if DIR fails `kosmos-env verify` (default: refuse such a folder)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kosmos_env.report.render import write_report

    if not args.no_verify:
        from kosmos_env.campaign.verify import check_before_use

        check_before_use(args.dir, "report")
    paths = write_report(args.dir, thumbnails=not args.no_thumbnails, analysis=not args.no_analysis, judge=args.judge)
    print(f"wrote {paths['html']} and {paths['markdown']} (figures in {paths['assets']})")
    return 0
