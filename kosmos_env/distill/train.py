"""LoRA distillation of a VLM judge: (video, pinned prompt) -> the teacher's bare JSON answer.

The student is a smaller Qwen-VL-family model loaded exactly as the VLM judge loads it (from
disk only), and its inputs are built by the judge's own code path
(:meth:`VLMJudge._inputs`: frame sampling, patches, chat template), so what it is trained on
is what it sees when it judges. Only LoRA matrices on the language model's attention and MLP
projections are trained (peft); the vision tower and the base weights stay frozen.

Order of operations, on purpose:

1. read the teacher labels and fix the held-out split by rollout hash
   (:mod:`~kosmos_env.distill.split`) before anything else; write it to the adapter folder;
2. train only on rollouts of the train side whose teacher judgment was decided (an abstention
   has no answer to learn); the target is the teacher's winning vote as bare JSON;
3. checkpoint every ``save_every`` steps (adapter, optimizer, RNG; temp folder + rename) and
   resume from the last checkpoint when rerun with the same configuration;
4. save the adapter plus ``distill_config.json`` (teacher labels' sha256, split, hyperparameters,
   losses) and ``judge_spec.json`` (how to use the student as a judge).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kosmos_env.utils.fileio import atomic_write

DISTILL_SCHEMA = "kosmos-env/judge-distill"
CONFIG_FILE = "distill_config.json"
JUDGE_SPEC_FILE = "judge_spec.json"
# LoRA on the language model's projections only (the vision tower stays frozen)
DEFAULT_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
VIDEO_KEYS = ("sample_fps", "max_frames", "max_pixels", "min_pixels")
# the teacher's sampling settings the student judge keeps (so the audit compares like with like)
JUDGING_KEYS = ("k", "min_valid", "temperature", "top_p", "max_new_tokens", "seed")


@dataclass(frozen=True)
class DistillConfig:
    """Hyperparameters. Everything here enters the run's identity (a resume must match it)."""

    heldout_pct: int = 20
    seed: int = 0
    steps: int = 200
    lr: float = 2e-4
    weight_decay: float = 0.0
    grad_accum: int = 1
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    target_modules: str = DEFAULT_TARGETS
    save_every: int = 50
    keep_checkpoints: int = 2
    dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.steps < 1 or self.grad_accum < 1 or self.save_every < 1 or self.keep_checkpoints < 1:
            raise ValueError("steps, grad_accum, save_every and keep_checkpoints must be >= 1")
        if self.lr <= 0 or self.lora_r < 1 or self.lora_alpha <= 0 or not 0 <= self.lora_dropout < 1:
            raise ValueError("need lr > 0, lora_r >= 1, lora_alpha > 0 and 0 <= lora_dropout < 1")


def select_teacher(
    rows: Sequence[Mapping[str, Any]], spec_hash: str | None = None
) -> tuple[str, list[Mapping[str, Any]]]:
    """The rows of one teacher identity (the only one, or ``spec_hash`` / a unique prefix of it)."""
    hashes = sorted({r["spec_hash"] for r in rows})
    if not hashes:
        raise ValueError("the teacher labels are empty: run kosmos-env judge-label first")
    if spec_hash:
        hashes = [h for h in hashes if h.startswith(spec_hash)]
        if len(hashes) != 1:
            raise ValueError(f"teacher spec hash {spec_hash!r} matches {len(hashes)} label sets")
    elif len(hashes) > 1:
        raise ValueError(
            f"the labels hold {len(hashes)} teacher identities {[h[:12] for h in hashes]}; pick one with --teacher-spec-hash"
        )
    return hashes[0], [r for r in rows if r["spec_hash"] == hashes[0]]


def video_settings(teacher_rows: Sequence[Mapping[str, Any]], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The student's frame sampling: the teacher's (from its label spec) unless overridden."""
    judge = json.loads(teacher_rows[0]["judge_spec"]).get("judge", {})
    out = {k: judge[k] for k in VIDEO_KEYS if judge.get(k) is not None}
    out.update({k: v for k, v in overrides.items() if v is not None})
    unknown = sorted(set(out) - set(VIDEO_KEYS))
    if unknown:
        raise ValueError(f"unknown video setting(s) {unknown}; known: {list(VIDEO_KEYS)}")
    return out


def distill(
    labels_dir: str | os.PathLike,
    student: str | os.PathLike,
    out: str | os.PathLike,
    config: DistillConfig = DistillConfig(),
    *,
    teacher_spec_hash: str | None = None,
    video: Mapping[str, Any] | None = None,
    rollouts: Sequence[str | os.PathLike] = (),
    progress: bool = True,
    device: str | None = None,
) -> dict[str, Any]:
    """Train a LoRA adapter for ``student`` on the teacher labels; returns the saved config dict.

    ``rollouts`` are campaign folders to read videos from when they moved since labelling
    (matched by campaign id); otherwise each row's ``campaign_dir`` is used.
    """
    import torch

    from kosmos_env.distill.judgespec import identity_hash
    from kosmos_env.hashing import folder_sha256
    from kosmos_env.distill.labels import LabelStore, labels_sha256
    from kosmos_env.distill.split import make_split, write_split
    from kosmos_env.judges.vlm import VLMJudge

    student = os.fspath(student)
    if not os.path.isdir(student):
        raise FileNotFoundError(
            f"student model folder {student!r} does not exist (save the student with save_pretrained first)"
        )
    out = Path(out)
    rows = LabelStore(labels_dir).read()
    shash, rows = select_teacher(rows, teacher_spec_hash)
    labels_hash = labels_sha256(rows)
    # 1. the split, by rollout hash, before anything is trained
    split = make_split([r["rollout_hash"] for r in rows], config.heldout_pct)
    train_set = set(split["train"])
    examples = [r for r in rows if r["rollout_hash"] in train_set and r["answer_json"]]
    no_target = sum(1 for r in rows if r["rollout_hash"] in train_set and not r["answer_json"])
    if not examples:
        raise ValueError(
            f"no training example: of {len(train_set)} train rollouts none has a decided teacher answer "
            f"({no_target} abstentions); a teacher that only abstains cannot be distilled"
        )
    vs = video_settings(rows, video or {})
    student_sha = folder_sha256(student)
    # steps and checkpoint cadence do not change the trajectory up to a step (no schedule), so a
    # run may be resumed with more steps; everything else must match
    trajectory = {k: v for k, v in asdict(config).items() if k not in ("steps", "save_every", "keep_checkpoints")}
    identity = {
        "labels_sha256": labels_hash,
        "teacher_spec_hash": shash,
        "student_sha256": student_sha,
        "hyperparameters": trajectory,
        "video": vs,
        "split": identity_hash(split),
    }
    run_hash = identity_hash(identity)
    out.mkdir(parents=True, exist_ok=True)
    write_split(out, split)

    judge = VLMJudge(model=student, k=1, min_valid=1, dtype=config.dtype, device=device, **vs)
    tokenizer = judge.tokenizer
    end_id = _end_token(tokenizer)
    roots = _campaign_roots(rollouts)

    def example(i: int) -> dict[str, Any]:
        row = examples[i]
        item = judge._inputs(_row_rollout(row, roots))
        target = list(tokenizer(row["answer_json"], add_special_tokens=False)["input_ids"]) + [end_id]
        return {**item, "target": target}

    cache: dict[int, dict[str, Any]] = {}
    cache_all = len(examples) <= 256

    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    torch.manual_seed(config.seed)
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.target_modules,
        bias="none",
    )
    model = get_peft_model(judge.model, lora)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"the LoRA target pattern {config.target_modules!r} matched no module of the student")
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    ckpt_root = out / "checkpoints"
    step, losses = _resume(ckpt_root, run_hash, model, optimizer)
    if step > config.steps:
        raise ValueError(f"{ckpt_root} already holds step {step} > --steps {config.steps}; use a new --out folder")
    t0 = time.perf_counter()
    model.train()
    from tqdm.auto import tqdm

    with tqdm(total=config.steps, initial=step, desc="judge-distill", unit="step", disable=not progress) as bar:
        while step < config.steps:
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for a in range(config.grad_accum):
                i = _example_index(step * config.grad_accum + a, len(examples), config.seed)
                item = cache.get(i) or example(i)
                if cache_all:
                    cache[i] = item
                loss = _loss(model, judge, item) / config.grad_accum
                loss.backward()
                total += float(loss.detach())
            optimizer.step()
            step += 1
            losses.append(total)
            bar.update(1)
            bar.set_postfix(loss=f"{total:.4f}")
            if step % config.save_every == 0 or step == config.steps:
                _save_checkpoint(ckpt_root, step, run_hash, model, optimizer, losses, config.keep_checkpoints)
    model.eval()
    model.save_pretrained(str(out))  # adapter_model.safetensors + adapter_config.json
    n_lora = sum(t.numel() for t in get_peft_model_state_dict(model).values())
    teacher_judge = json.loads(rows[0]["judge_spec"]).get("judge", {})
    judging = {k: teacher_judge[k] for k in JUDGING_KEYS if teacher_judge.get(k) is not None}
    judge_spec = {"type": "vlm", "model": os.path.abspath(student), "adapter": str(out.resolve()), **judging, **vs}
    saved = {
        "schema": DISTILL_SCHEMA,
        "schema_version": 1,
        "run_hash": run_hash,
        "teacher_labels": {
            "path": str(Path(labels_dir).resolve()),
            "sha256": labels_hash,
            "spec_hash": shash,
            "rows": len(rows),
            "model_id": rows[0]["model_id"],
            "model": rows[0]["model"],
        },
        "student": {"path": os.path.abspath(student), "folder_sha256": student_sha, "family": judge.family},
        "split": {
            "file": "split.json",
            "rule": split["rule"],
            "heldout_pct": split["heldout_pct"],
            "train": len(split["train"]),
            "heldout": len(split["heldout"]),
            "sha256": identity_hash(split),
        },
        "hyperparameters": asdict(config),
        "video": vs,
        "training": {
            "examples": len(examples),
            "train_abstentions_skipped": no_target,
            "steps": step,
            "lora_parameters": int(n_lora),
            "losses": losses,
            "final_loss": losses[-1] if losses else None,
            "seconds_this_run": time.perf_counter() - t0,
            "example_rollouts": sorted({r["rollout_hash"] for r in examples}),
        },
        "judge_spec": judge_spec,
    }
    _write_json(out / CONFIG_FILE, saved)
    _write_json(out / JUDGE_SPEC_FILE, judge_spec)
    return saved


def _end_token(tokenizer: Any) -> int:
    """The token that ends an assistant turn (``<|im_end|>`` for the Qwen family)."""
    tid = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(tid, int) and tid != getattr(tokenizer, "unk_token_id", None):
        return tid
    if tokenizer.eos_token_id is None:
        raise ValueError("the student's tokenizer has no end-of-turn token")
    return int(tokenizer.eos_token_id)


def _example_index(micro: int, n: int, seed: int) -> int:
    """Example for micro-step ``micro``: a seeded permutation per epoch (recomputable on resume)."""
    epoch, pos = divmod(micro, n)
    return int(np.random.default_rng([seed, epoch]).permutation(n)[pos])


def _loss(model: Any, judge: Any, item: Mapping[str, Any]):
    """Cross-entropy on the answer tokens only (prompt and video tokens are masked with -100)."""
    import torch

    ids = torch.tensor([list(item["ids"]) + list(item["target"])], dtype=torch.long)
    labels = ids.clone()
    labels[0, : len(item["ids"])] = -100
    mm = torch.zeros_like(ids, dtype=torch.int32)
    mm[ids == judge._video_token_id] = 2
    mm[ids == judge._image_token_id] = 1
    device = judge.model.device
    dtype = next(judge.model.parameters()).dtype
    kwargs = {
        "input_ids": ids.to(device),
        "attention_mask": torch.ones_like(ids).to(device),
        "labels": labels.to(device),
        "mm_token_type_ids": mm.to(device),
        "pixel_values_videos": torch.from_numpy(item["patches"]).to(device, dtype),
        "video_grid_thw": torch.tensor([item["grid"]], dtype=torch.long, device=device),
    }
    if judge.family == "qwen2_5_vl":
        kwargs["second_per_grid_ts"] = torch.tensor([item["second_per_grid"]], dtype=torch.float32, device=device)
    return model(**kwargs).loss


def _campaign_roots(folders: Sequence[str | os.PathLike]) -> dict[str, str]:
    from kosmos_env.distill.rollouts import load_campaign

    return {c.campaign_id: str(c.root.resolve()) for c in (load_campaign(f) for f in folders)}


def _row_rollout(row: Mapping[str, Any], roots: Mapping[str, str]):
    from kosmos_env.distill.rollouts import rollout_from_video

    root = roots.get(row["campaign_id"], row.get("campaign_dir") or "")
    path = os.path.join(root, row["video"])
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"video {row['video']} of campaign {row['campaign_id']} is not under {root!r}; "
            f"pass the campaign folder with --rollouts"
        )
    return rollout_from_video(path, row["instruction"], row["rollout_hash"], row["task"])


def _write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=1, default=str))


# -- checkpoints ---------------------------------------------------------------------------
def _checkpoints(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("step-*") if (p / "state.json").is_file())


def _save_checkpoint(
    root: Path, step: int, run_hash: str, model: Any, optimizer: Any, losses: list[float], keep: int
) -> Path:
    """Adapter, optimizer and RNG state in ``step-NNNNNNN`` (written to a temp folder, then renamed)."""
    import torch

    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:07d}"
    tmp = root / f".tmp-step-{step:07d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    model.save_pretrained(str(tmp))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state()}, tmp / "rng.pt")
    _write_json(tmp / "state.json", {"step": step, "run_hash": run_hash, "losses": losses})
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in _checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _resume(root: Path, run_hash: str, model: Any, optimizer: Any) -> tuple[int, list[float]]:
    """Load the last checkpoint of this run; (0, []) when there is none. A different run refuses."""
    ckpts = _checkpoints(root)
    if not ckpts:
        return 0, []
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    last = ckpts[-1]
    state = json.loads((last / "state.json").read_text(encoding="utf-8"))
    if state.get("run_hash") != run_hash:
        raise ValueError(
            f"{root} holds checkpoints of another configuration (labels, student, split or hyperparameters "
            f"differ); use a new --out folder or delete {root}"
        )
    set_peft_model_state_dict(model, load_file(str(last / "adapter_model.safetensors")))
    optimizer.load_state_dict(torch.load(last / "optimizer.pt", weights_only=True))
    torch.set_rng_state(torch.load(last / "rng.pt", weights_only=True)["torch"])
    return int(state["step"]), list(state["losses"])
