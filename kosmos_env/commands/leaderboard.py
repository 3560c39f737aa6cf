"""`kosmos-env leaderboard build SUBMISSION... --out DIR`: rank only what verifies.

Each submission folder is checked (allow-listed data files only, no links or escaping paths,
every sha256 against its manifest, the env spec hash, the episode design) and every number is
recomputed from its per-episode rows. Outcomes must re-derive from the submission's artifacts:
every episode's actions and robot log (and frames where the judge reads them) are required, the
deterministic judge is re-run on them, and --replay N simulator episodes per submission (a sample
drawn with --replay-seed) are replayed from their stored actions bit for bit. Accepted results are grouped by env id and spec hash and
ranked with Wilson 95% intervals; DIR gets leaderboard.json and a self-contained index.html.
Rejected submissions are listed with the reason. Exit code 0 when every submission was accepted,
1 when any was rejected (the leaderboard is still written).
"""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "leaderboard",
        help="build a leaderboard from verified result submissions",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    lsub = p.add_subparsers(dest="leaderboard_command", metavar="ACTION")
    b = lsub.add_parser(
        "build",
        help="verify submissions and write leaderboard.json and index.html",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument(
        "submissions",
        nargs="+",
        metavar="SUBMISSION",
        help="submission folders (a campaign folder, or a published results/<env>/<spec>/<campaign>/ folder)",
    )
    b.add_argument("--out", required=True, help="output folder for leaderboard.json and index.html")
    b.add_argument(
        "--allow-overrides",
        action="store_true",
        help="accept campaigns with spec overrides or a non-default judge; they get their own boards",
    )
    b.add_argument("--json", action="store_true", help="print leaderboard.json to stdout as well")
    b.add_argument(
        "--replay",
        default=None,
        metavar="N|all",
        help="simulator episodes replayed per submission (default kosmos_env.publish.validate.DEFAULT_REPLAY_SAMPLE)",
    )
    b.add_argument("--replay-seed", type=int, default=0, help="seed of the replay sample (default 0)")
    b.set_defaults(func=run_build)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run_build(args: argparse.Namespace) -> int:
    import json

    from kosmos_env.utils.fileio import check_writable_path
    from kosmos_env.publish.leaderboard import build_leaderboard, write_leaderboard

    from kosmos_env.campaign.rederive import replay_count
    from kosmos_env.publish.validate import DEFAULT_REPLAY_SAMPLE

    replay = DEFAULT_REPLAY_SAMPLE if args.replay is None else replay_count(args.replay)
    check_writable_path(args.out)  # a file or read-only folder fails before any submission is checked
    data = build_leaderboard(
        args.submissions,
        allow_overrides=args.allow_overrides,
        progress=len(args.submissions) > 5,
        replay_sample=replay,
        replay_seed=args.replay_seed,
    )
    js, page = write_leaderboard(data, args.out)
    for r in data["rejected"]:
        print(f"REJECTED {r['submission']} ({r['check']}): {r['reason']}", file=sys.stderr)
    for board in data["boards"]:
        kind = "official" if board["official"] else "non-default"
        print(f"{board['env_id']} spec {board['spec_hash'][:12]} ({kind}):")
        for e in board["entries"]:
            rate = "-" if e["success_rate"] is None else f"{100 * e['success_rate']:.1f}%"
            ci = "" if not e["wilson_95"] else f" [{100 * e['wilson_95'][0]:.1f}, {100 * e['wilson_95'][1]:.1f}]"
            tie = "  (not separable from next)" if e["separable_from_next"] is False else ""
            print(f"  {e['rank']:>3}  {e['policy']}  {rate}{ci}  n={e['n']}  campaign {e['campaign_id']}{tie}")
    print(f"{len(data['accepted'])} accepted, {len(data['rejected'])} rejected -> {js}, {page}")
    if args.json:
        print(json.dumps(data, indent=1))
    return 1 if data["rejected"] else 0
