"""`kosmos-env judge-distill`: LoRA-tune a smaller Qwen-VL-family student on a teacher's labels.

The held-out split is fixed by rollout hash before training and written to the adapter
folder (split.json). Checkpoints go to ADAPTER/checkpoints; rerunning the same command resumes
from the last one. The result loads anywhere a judge does:
``--judge vlm:model=STUDENT,adapter=ADAPTER`` (or just the ADAPTER folder in judge-audit).
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    from kosmos_env.distill.train import DEFAULT_TARGETS, DistillConfig

    d = DistillConfig()
    p = sub.add_parser(
        "judge-distill", help="LoRA-distil a teacher judge's labels into a smaller student judge", description=__doc__
    )
    p.add_argument(
        "--teacher-labels", required=True, metavar="LABELS", help="labels folder from kosmos-env judge-label"
    )
    p.add_argument(
        "--student",
        required=True,
        metavar="MODEL",
        help="local folder of the student model (Qwen2.5-VL / Qwen3-VL family)",
    )
    p.add_argument("--out", required=True, metavar="ADAPTER", help="adapter folder (created or resumed)")
    p.add_argument(
        "--rollouts",
        action="append",
        default=[],
        metavar="DIR",
        help="campaign folder(s) to read videos from if they moved since labelling (repeatable)",
    )
    p.add_argument("--teacher-spec-hash", default=None, help="which teacher's labels when the dataset holds several")
    p.add_argument(
        "--heldout-pct",
        type=int,
        default=d.heldout_pct,
        help=f"percent of rollout-hash buckets held out (default {d.heldout_pct})",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--steps", type=int, default=d.steps, help=f"optimizer steps (default {d.steps})")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--grad-accum", type=int, default=d.grad_accum, help="examples per optimizer step")
    p.add_argument("--lora-r", type=int, default=d.lora_r)
    p.add_argument("--lora-alpha", type=float, default=d.lora_alpha)
    p.add_argument("--lora-dropout", type=float, default=d.lora_dropout)
    p.add_argument("--target-modules", default=DEFAULT_TARGETS, help="regex of the modules that get LoRA")
    p.add_argument("--save-every", type=int, default=d.save_every, help="checkpoint every N steps")
    p.add_argument("--dtype", default=d.dtype, help="student weights dtype (auto, float32, bfloat16)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    for key in ("sample-fps", "max-frames", "max-pixels", "min-pixels"):
        p.add_argument(
            f"--{key}",
            type=float if key == "sample-fps" else int,
            default=None,
            help="student frame sampling (default: the teacher's)",
        )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the saved config as JSON")
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from kosmos_env.distill.train import DistillConfig, distill

    config = DistillConfig(
        heldout_pct=args.heldout_pct,
        seed=args.seed,
        steps=args.steps,
        lr=args.lr,
        weight_decay=args.weight_decay,
        grad_accum=args.grad_accum,
        lora_r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=args.target_modules,
        save_every=args.save_every,
        dtype=args.dtype,
    )
    video = {
        "sample_fps": args.sample_fps,
        "max_frames": args.max_frames,
        "max_pixels": args.max_pixels,
        "min_pixels": args.min_pixels,
    }
    saved = distill(
        args.teacher_labels,
        args.student,
        args.out,
        config,
        teacher_spec_hash=args.teacher_spec_hash,
        video=video,
        rollouts=args.rollouts,
        progress=not args.no_progress,
        device=args.device,
    )
    if args.json:
        print(
            json.dumps(
                {k: v for k, v in saved.items() if k != "training"}
                | {"training": {k: v for k, v in saved["training"].items() if k not in ("losses", "example_rollouts")}},
                indent=1,
            )
        )
    else:
        tr, sp = saved["training"], saved["split"]
        print(
            f"judge-distill: {tr['steps']} steps on {tr['examples']} example(s) ({tr['train_abstentions_skipped']} teacher "
            f"abstention(s) skipped), final loss {tr['final_loss']:.4f}; split {sp['train']} train / {sp['heldout']} held out "
            f"-> adapter {args.out} (use --judge {args.out} in judge-audit, or vlm:model={saved['student']['path']},adapter={args.out})"
        )
    return 0
