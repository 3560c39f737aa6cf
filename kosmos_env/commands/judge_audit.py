"""`kosmos-env judge-audit`: paired teacher vs student report on held-out rollouts only.

Separates engineering gains (schema-valid and bare-JSON answers, tokens, decode time) from
judging-quality claims (agreement with the teacher and with ground truth), and states a
quality difference only when its paired interval supports it. Writes judgments.parquet
(every per-rollout judgment), report.json and report.md to --out.
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "judge-audit", help="paired teacher/student judge report on held-out rollouts", description=__doc__
    )
    p.add_argument(
        "--teacher", required=True, metavar="SPEC", help="teacher judge spec, e.g. vlm:model=/models/big,k=5"
    )
    p.add_argument(
        "--student",
        required=True,
        metavar="SPEC|ADAPTER",
        help="student judge spec (vlm:model=...,adapter=...) or the adapter folder judge-distill wrote",
    )
    p.add_argument("--rollouts", required=True, metavar="DIR", help="campaign folder with the rollouts to audit")
    p.add_argument("--out", required=True, metavar="REPORT", help="report folder")
    p.add_argument(
        "--split",
        default=None,
        metavar="FILE",
        help="split.json naming the held-out rollouts (default: the one in the student's adapter folder)",
    )
    p.add_argument(
        "--all-rollouts",
        action="store_true",
        help="audit every rollout (no split; for students that were never trained on this campaign)",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="1 - confidence level of the intervals (default 0.05)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print report.json instead of report.md")
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from kosmos_env.distill.audit import run_audit
    from kosmos_env.distill.judgespec import build_judge, judge_identity, resolve_judge_arg, spec_hash
    from kosmos_env.distill.split import read_split

    if not 0 < args.alpha < 1 or args.n_boot < 100:
        raise ValueError("--alpha must be in (0, 1) and --n-boot >= 100")
    student_spec = resolve_judge_arg(args.student)
    heldout, source = None, "all rollouts"
    if args.split or not args.all_rollouts:
        split_path = args.split or student_spec.get("adapter")
        if not split_path:
            raise ValueError(
                "the student has no adapter folder with a split.json: pass --split FILE, or --all-rollouts "
                "for a student never trained on this campaign"
            )
        split = read_split(split_path)
        heldout, source = split["heldout"], str(split_path)
    trained_on, config_path = None, None
    if student_spec.get("adapter"):
        from pathlib import Path

        config_path = Path(student_spec["adapter"]) / "distill_config.json"
        if config_path.is_file():
            trained_on = json.loads(config_path.read_text(encoding="utf-8"))
    if trained_on is not None and heldout is not None:
        # defence in depth: the split must agree with what training actually used
        leaked = set(heldout) & set(trained_on["training"].get("example_rollouts", []))
        if leaked:
            raise ValueError(
                f"{config_path}: {len(leaked)} rollout(s) of the held-out split were trained on; "
                f"the audit would not be held out"
            )
    teacher_spec = resolve_judge_arg(args.teacher)
    teacher = build_judge(teacher_spec)
    student = build_judge(student_spec)
    report = run_audit(
        teacher,
        spec_hash(judge_identity(teacher, teacher_spec)),
        student,
        spec_hash(judge_identity(student, student_spec)),
        args.rollouts,
        args.out,
        heldout=heldout,
        split_source=source,
        alpha=args.alpha,
        n_boot=args.n_boot,
        seed=args.seed,
        progress=not args.no_progress,
        distill_config=trained_on,
    )
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        from pathlib import Path

        print((Path(args.out) / "report.md").read_text(encoding="utf-8"))
    return 0
