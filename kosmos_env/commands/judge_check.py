"""`kosmos-env judge-check`: does the configured judge tell a real Bridge success from its negatives?"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "judge-check",
        help="judge readiness: the real Bridge episode vs a frozen copy and a mismatched instruction",
        description="Feed the configured judge the real Bridge episode shipped with the package (its own instruction), "
        "a frozen copy and the real episode under a mismatched instruction. READY only if the judge calls "
        "the real one a success and both negatives not-success (abstentions count as not telling them "
        "apart). With --progress, a progress judge scores the real episode and a frozen copy chunk by chunk (4 "
        "frames each, with the first frame): READY only if the real episode's progress rises (Spearman with "
        "the chunk index >= 0.5, last - first >= 0.2) and the frozen copy's does not. Exit status 0 when "
        "ready, 1 when not.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--env", default=None, help="use this env's judge (default: Kosmos-Bridge-v1)")
    src.add_argument(
        "--judge",
        default=None,
        metavar="SPEC",
        help='judge type or JSON spec, e.g. \'{"type": "vlm", "local_path": "/models/Cosmos-Reason1-7B"}\'',
    )
    p.add_argument(
        "--tiny", action="store_true", help="check the tiny random Qwen-VL judge (runs on CPU; reports not ready)"
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="check a progress judge (default: vlm_progress with its pinned settings): scored chunk by chunk, "
        "the real episode's progress must rise and a frozen copy's must not",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from kosmos_env.checks.judge_readiness import run_judge_check

    report = run_judge_check(env_id=args.env, judge=args.judge, tiny=args.tiny, progress=args.progress)
    print(json.dumps(report.to_dict(), indent=1) if args.json else report.format())
    return 0 if report.ready else 1
