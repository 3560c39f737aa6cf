"""`kosmos-env judge-label`: run a teacher judge over a campaign's stored rollouts, keep every judgment.

The labels are a parquet dataset folder keyed by (rollout hash, judge spec hash); rerunning
the same command skips what is already labelled, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "judge-label",
        help="label a campaign's rollouts with a (teacher) judge into a resumable parquet dataset",
        description=__doc__,
    )
    p.add_argument(
        "--judge",
        required=True,
        metavar="SPEC",
        help="judge spec, e.g. vlm:model=/models/Cosmos-Reason1-7B,k=5 (or a JSON object)",
    )
    p.add_argument("--rollouts", required=True, metavar="DIR", help="campaign folder written by kosmos-env eval")
    p.add_argument("--out", required=True, metavar="LABELS", help="labels dataset folder (created or resumed)")
    p.add_argument("--batch-size", type=int, default=None, help="rollouts per write (default: the judge's batch_size)")
    p.add_argument("--limit", type=int, default=None, help="label at most this many new rollouts in this run")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from kosmos_env.distill.judgespec import build_judge, judge_identity, model_label, parse_judge_arg
    from kosmos_env.distill.labels import label_campaign

    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    spec = parse_judge_arg(args.judge)
    judge = build_judge(spec)
    summary = label_campaign(
        judge,
        judge_identity(judge, spec),
        args.rollouts,
        args.out,
        model=model_label(spec),
        batch_size=args.batch_size,
        limit=args.limit,
        progress=not args.no_progress,
    )
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        skipped = ", ".join(f"{v} {k}" for k, v in summary["skipped"].items()) or "none"
        print(
            f"judge-label: {summary['labelled']} rollout(s) labelled now, {summary['already']} already there, "
            f"{summary['total']} judgeable in campaign {summary['campaign_id']} (episodes skipped: {skipped}); "
            f"judge spec {summary['spec_hash'][:12]} -> {summary['labels']}"
        )
    return 0
