"""`kosmos-env verify DIR`: recheck a campaign folder's artifact hashes, ledger and bundle.

Exit code 0 when everything checks out, 1 when anything is wrong (each problem is printed).
"""
from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="recheck a campaign folder (artifact hashes, ledger consistency, manifest)")
    p.add_argument("dir", help="campaign folder written by kosmos-env eval")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from kosmos_env.campaign.verify import verify_campaign

    report = verify_campaign(args.dir)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        for problem in report.problems:
            print(f"PROBLEM: {problem}")
        for warning in report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        checked = ", ".join(f"{v} {k}" for k, v in report.checked.items())
        print(f"{args.dir}: {'OK' if report.ok else f'{len(report.problems)} problem(s)'}"
              + (f" (checked {checked})" if checked else ""))
    return 0 if report.ok else 1
