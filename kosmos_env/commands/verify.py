"""`kosmos-env verify DIR`: recheck a campaign folder's artifact hashes, ledger and bundle, and
re-derive its outcomes from the stored artifacts.

The campaign's deterministic judge is re-run on every episode's stored actions, log and frames.
On a simulator world a sample of episodes (50 by default, every episode of a smaller campaign;
``--replay N|all``) is also replayed from their stored actions and seed, frames and logs compared
bit for bit, and each sampled episode's policy is re-run and must take the stored actions. The
sample is drawn with a salt verify picks at random (printed; ``--replay-salt S`` repeats a run),
so whoever wrote the campaign cannot know which episodes will be replayed; the chance that k forged
episodes all escape it is printed. On a generated world the generation cannot be replayed:
``--rerun N`` re-runs N sampled episodes' policies in the recorded world from their recorded seeds
and compares what they do with the stored episodes. Nothing is contacted over the network unless
``--allow-network``. The folder is only read (the ledger through a read-only SQLite connection).
Exit code 0 when everything checks out, 1 when anything is wrong (each problem is printed, naming
the episode and the judge).
"""

from __future__ import annotations

import argparse
import sys


# the module docstring after its "`kosmos-env verify DIR`: " lead, as the command's --help description
_DESCRIPTION = __doc__.split(": ", 1)[1][0].upper() + __doc__.split(": ", 1)[1][1:]


def add_parser(sub: argparse._SubParsersAction) -> None:
    from kosmos_env.campaign.rederive import DEFAULT_REPLAY_SAMPLE

    p = sub.add_parser(
        "verify",
        help="recheck a campaign folder (artifact hashes, ledger consistency, manifest, a replayed sample)",
        description=_DESCRIPTION,
    )
    p.add_argument("dir", help="campaign folder written by kosmos-env eval")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--replay",
        default=str(DEFAULT_REPLAY_SAMPLE),
        metavar="N|all",
        help="replay a salted sample of N episodes (or all) from their stored actions and seed on a simulator "
        f"world, check frames and logs bit for bit and re-run their policies (default {DEFAULT_REPLAY_SAMPLE}; "
        "0: none)",
    )
    p.add_argument(
        "--replay-salt",
        default=None,
        metavar="S",
        help="salt of the sample (default: a fresh random one, printed, so a run can be repeated with it)",
    )
    # the sample used to be drawn with a fixed seed anyone could predict; a script still passing it is
    # told what replaced it rather than given a sample it believes repeatable
    p.add_argument("--replay-seed", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--rerun",
        default="0",
        metavar="N|all",
        help="re-run N sampled episodes' policies in the recorded world from their recorded seeds and compare "
        "what they do with the stored episodes: what a generated world's generation needs (default 0)",
    )
    p.add_argument(
        "--no-rerun-policies",
        action="store_true",
        help="with --replay: do not re-run the campaign's policies (by default each replayed episode's "
        "policy is rebuilt and must take the stored actions)",
    )
    p.add_argument(
        "--allow-network",
        action="store_true",
        help="let verify contact hosts: a remote policy's server (its URL is the campaign's own record) and "
        "anything a rebuilt policy connects to (default: no network call)",
    )
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from kosmos_env.campaign.rederive import replay_count
    from kosmos_env.campaign.verify import describe, verify_campaign

    # one line for a bad value (ValueError -> the CLI's error line)
    replay = replay_count(args.replay)
    rerun = replay_count(args.rerun, "--rerun")
    if args.replay_seed is not None:
        raise ValueError(
            "--replay-seed is gone: verify draws its sample with a random salt of its own and prints it; "
            "repeat a run with --replay-salt S"
        )
    if args.replay_salt is not None and not args.replay_salt.strip():
        raise ValueError("--replay-salt takes a non-empty string (the salt a verify run printed)")
    report = verify_campaign(
        args.dir,
        replay=replay,
        replay_salt=args.replay_salt,
        rerun=rerun,
        rerun_policies=not args.no_rerun_policies,
        allow_network=args.allow_network,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        for problem in report.problems:
            print(f"PROBLEM: {problem}")
        for warning in report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        for line in describe(report, args.dir):
            print(line)
        checked = ", ".join(f"{v} {k}" for k, v in report.checked.items())
        print(
            f"{args.dir}: {'OK' if report.ok else f'{len(report.problems)} problem(s)'}"
            + (f" (checked {checked})" if checked else "")
        )
    return 0 if report.ok else 1
