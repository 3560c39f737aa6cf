"""``kosmos-env judge RUN --judge SPEC``: judge a finished campaign's stored rollouts with another judge.

No rollout is regenerated: the stored videos, actions and robot logs (and the simulator's
recorded evaluation) are read back, judged in batches, and the verdicts are filed in the
campaign's ledger under the judge's identity (a hash of its spec), next to the campaign's own
judgment, which is unchanged. The judge must load and the campaign must pass ``kosmos-env
verify`` before anything is written. Killed and rerun, it judges only what is missing: every
episode is judged exactly once per judge. ``kosmos-env compare --judges RUN A B`` then shows
how two judges agree (``campaign`` names the campaign's own judge).

    kosmos-env judge runs/c1 --judge robot_log
    kosmos-env judge runs/c1 --judge '{"type": "vlm", "local_path": "/models/Cosmos-Reason1-7B", "k": 5}'
"""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "judge",
        help="re-judge a campaign's stored rollouts with another judge",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", help="campaign folder (kosmos-env eval --out)")
    p.add_argument(
        "--judge",
        required=True,
        metavar="SPEC",
        help='judge type (robot_log, state, vlm, ...) or JSON spec {"type": ..., settings}',
    )
    p.add_argument("--batch-size", type=int, default=8, help="rollouts per judge batch (default 8)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    from kosmos_env.utils.threads import add_threads_argument

    add_threads_argument(p)
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kosmos_env.campaign.design import parse_judge
    from kosmos_env.campaign.rejudge import rejudge

    from kosmos_env.utils.threads import choose_threads, threads_applied

    spec = parse_judge(args.judge, {})
    with threads_applied(choose_threads(1, given=args.threads).threads):  # before the judge loads torch
        report = rejudge(args.run, spec, batch_size=args.batch_size)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(report.skipped.items())) or "none"
        print(
            f"judge {report.label} [{report.judge_id}]: judged {report.judged_now} rollouts now, "
            f"{report.already_judged} already judged, of {report.eligible} judged episodes "
            f"(not judgeable: {skipped}); rollouts generated: {report.rollouts_generated}, artifacts added: "
            f"{report.artifacts_added}; {report.seconds:.1f} s"
        )
        print(f"compare with: kosmos-env compare --judges {args.run} campaign {report.judge_id}")
    return 0
