"""`kosmos-env doctor`: tell whether a real run of an env will work here, and what to fix if not."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="check GPU, memory, weights, packages, statistics, frames, a timed world and judge call",
        description="Check everything a real run of an env needs: CUDA and free memory against the model's need, "
        "the weights (path, revision, file hashes), diffusers/transformers versions, the action statistics "
        "and initial frames, one timed world call and one judge call (cold and warm) and the judge "
        "readiness check. Every failure names its fix; the exit status is 1 when a real run would fail. "
        "--tiny runs every step with tiny random models on CPU. Offline unless --online.",
    )
    p.add_argument("--env", default="Kosmos-Bridge-v1", help="registered env id (default: %(default)s)")
    p.add_argument(
        "--weights",
        default=None,
        metavar="DIR",
        help="world weights folder (default: the spec's environment variable or the Hugging Face cache)",
    )
    p.add_argument("--judge", default=None, help="judge type or JSON spec (default: the env spec's judge)")
    p.add_argument(
        "--tiny",
        action="store_true",
        help="use tiny random Cosmos 3 and Qwen-VL models (built once in ~/.cache/kosmos-env): checks the "
        "install end to end on CPU; outputs mean nothing",
    )
    p.add_argument(
        "--online",
        action="store_true",
        help="let the checks reach the Hugging Face Hub (a judge named by model id then checks its revision "
        "there); by default the doctor is offline (HF_HUB_OFFLINE=1 while it runs) and checks what is on disk",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from kosmos_env.campaign.design import parse_judge
    from kosmos_env.checks.doctor import run_doctor
    from kosmos_env.spec import load_spec

    judge = parse_judge(args.judge, load_spec(args.env).judge) if args.judge else None
    report = run_doctor(args.env, tiny=args.tiny, weights_path=args.weights, judge_spec=judge, online=args.online)
    print(json.dumps(report.to_dict(), indent=1) if args.json else report.format())
    return 0 if report.ok else 1
