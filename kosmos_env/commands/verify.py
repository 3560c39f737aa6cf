"""`kosmos-env verify DIR`: recheck a campaign folder's artifact hashes, ledger and bundle, and
re-derive its outcomes from the stored artifacts.

The campaign's deterministic judge is re-run on every episode's stored actions, log and frames;
``--replay N|all`` also replays N episodes (a sample drawn with ``--replay-seed``) from their
stored actions on a simulator world and compares frames and logs bit for bit. The folder is
only read (the ledger through a read-only SQLite connection). Exit code 0 when everything checks
out, 1 when anything is wrong (each problem is printed, naming the episode and the judge).
"""

from __future__ import annotations

import argparse
import sys


# the module docstring after its "`kosmos-env verify DIR`: " lead, as the command's --help description
_DESCRIPTION = __doc__.split(": ", 1)[1][0].upper() + __doc__.split(": ", 1)[1][1:]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="recheck a campaign folder (artifact hashes, ledger consistency, manifest)",
        description=_DESCRIPTION,
    )
    p.add_argument("dir", help="campaign folder written by kosmos-env eval")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--replay",
        default="0",
        metavar="N|all",
        help="replay N episodes (or all) from their stored actions and seed on a simulator world and "
        "check frames and logs bit for bit (default 0)",
    )
    p.add_argument("--replay-seed", type=int, default=0, help="seed of the --replay sample (default 0)")
    p.add_argument(
        "--no-rerun-policies",
        action="store_true",
        help="with --replay: do not re-run the campaign's policies (by default each replayed episode's "
        "policy is rebuilt and must take the stored actions)",
    )
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from kosmos_env.campaign.rederive import replay_count
    from kosmos_env.campaign.verify import verify_campaign

    replay = replay_count(args.replay)  # one line for a bad value (ValueError -> the CLI's error line)
    report = verify_campaign(
        args.dir, replay=replay, replay_seed=args.replay_seed, rerun_policies=not args.no_rerun_policies
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        for problem in report.problems:
            print(f"PROBLEM: {problem}")
        for warning in report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        checked = ", ".join(f"{v} {k}" for k, v in report.checked.items())
        print(
            f"{args.dir}: {'OK' if report.ok else f'{len(report.problems)} problem(s)'}"
            + (f" (checked {checked})" if checked else "")
        )
    return 0 if report.ok else 1
