"""Label -> distil -> audit end to end on CPU: a real tabletop campaign, tiny Qwen2.5-VL teacher and student.

The teacher is a tiny random Qwen2.5-VL taught in a few seconds to answer in the judge's JSON
(success for one instruction, failure for the other) so its labels are decided; the student
is a smaller config of the same family (one text layer, its output head scaled up as a
pretrained model's would be, so LoRA alone can fit answers). Every step goes through the CLI
and the real loading code (models saved to disk, loaded with local_files_only). Slow only
because of the campaign and the two tiny trainings: ~35 s on a loaded 2-core machine.
"""

import json
import math
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch

from kosmos_env.cli import main
from kosmos_env.testing import qwen_tiny
from tests.conftest import requires_extra

pytestmark = requires_extra("models")  # tiny Qwen2.5-VL teacher and student, LoRA by peft
TASKS = ("carrot_on_plate", "spoon_on_towel")
ANSWERS = {
    "carrot_on_plate": '{"success": true, "progress": 0.9, "video_ok": true, "reason": "done"}',
    "spoon_on_towel": '{"success": false, "progress": 0.1, "video_ok": true, "reason": "no"}',
}
VIDEO = "max_frames=4,max_pixels=3136,min_pixels=784"
STEPS = "40"


@pytest.fixture
def one_thread():
    # a tiny model on a loaded 2-core machine runs many times faster on one thread
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _teach_teacher(path, campaign_dir):
    """Full fine-tune a tiny Qwen2.5-VL to answer ANSWERS[task] on this campaign's clips; save it."""
    from kosmos_env.distill.rollouts import load_campaign, load_rollout
    from kosmos_env.judges.vlm import VLMJudge

    model, tok = qwen_tiny.build_qwen2_5_vl(seed=1)
    judge = VLMJudge(model=model, tokenizer=tok, k=1, min_valid=1, max_frames=4, max_pixels=3136, min_pixels=784)
    camp = load_campaign(campaign_dir)
    batches = []
    # taught on every clip of the campaign, not one per task: labelling then asks about clips the
    # teacher has seen, so whether its answers are decided does not hinge on how a tiny random
    # model generalises to unseen video (which differs in the last bits between CPUs)
    for ref in camp.rollouts:
        task = ref.task
        item = judge._inputs(load_rollout(camp, ref))
        target = tok(ANSWERS[task] + "<|im_end|>", add_special_tokens=False)["input_ids"]
        ids = torch.tensor([list(item["ids"]) + target])
        labels = ids.clone()
        labels[0, : len(item["ids"])] = -100
        batches.append(
            {
                "input_ids": ids,
                "attention_mask": torch.ones_like(ids),
                "labels": labels,
                "mm_token_type_ids": (ids == model.config.video_token_id).int() * 2,
                "pixel_values_videos": torch.from_numpy(item["patches"]),
                "video_grid_thw": torch.tensor([item["grid"]]),
                "second_per_grid_ts": torch.tensor([item["second_per_grid"]]),
            }
        )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    worst = float("inf")
    for epoch in range(150):
        losses = []
        for batch in batches:
            loss = model(**batch).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        worst = max(losses)
        if worst < 0.02:  # every clip's answer learnt, not only the last one seen
            break
    model.eval()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return worst


def _student(path):
    """A smaller config of the same family (1 text layer, narrower MLP), saved with the shared tokenizer."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    model, tok = qwen_tiny.build_qwen2_5_vl(seed=2)
    config = model.config
    config.text_config.num_hidden_layers = 1
    config.text_config.intermediate_size = 48
    if getattr(config.text_config, "layer_types", None):
        config.text_config.layer_types = config.text_config.layer_types[:1]
    torch.manual_seed(2)
    student = Qwen2_5_VLForConditionalGeneration(config).eval()
    with torch.no_grad():
        # a random init's logits are nearly flat (lm_head std 0.02) and LoRA cannot move the frozen
        # head, so no LoRA could fit any answer; a pretrained model's logit scale is far larger
        student.lm_head.weight.mul_(25.0)
    student.generation_config = model.generation_config
    student.save_pretrained(path)
    tok.save_pretrained(path)
    return sum(p.numel() for p in student.parameters()), sum(p.numel() for p in model.parameters())


def _wilson(k, n, z=1.959963984540054):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def _kappa(a, b):
    cats = set(a) | set(b)
    n = len(a)
    po = sum(x == y for x, y in zip(a, b, strict=True)) / n
    pe = sum((a.count(c) / n) * (b.count(c) / n) for c in cats)
    return None if pe == 1 else (po - pe) / (1 - pe)


@pytest.mark.slow
def test_label_distil_audit_end_to_end(tmp_path, one_thread, capsys):
    import pyarrow.parquet as pq

    from kosmos_env.distill.labels import LabelStore
    from kosmos_env.distill.split import bucket, read_split
    from kosmos_env.judges import make_judge

    camp = tmp_path / "campaign"
    assert (
        main(
            [
                "eval",
                "--env",
                "Kosmos-Tabletop-v1",
                "--policy",
                "scripted:skill=1.0",
                "--policy",
                "random",
                "--tasks",
                *TASKS,
                "--seeds",
                "2",
                "--out",
                str(camp),
                "--image-size",
                "64",
                "64",
                "--no-progress",
            ]
        )
        == 0
    )
    results = json.loads((camp / "results.json").read_text())
    hashes = {os.path.basename(r["artifacts"]["video"])[:-4] for r in results["per_episode"]}
    assert len(results["per_episode"]) == 8 and len(hashes) == 8
    # a held-out share that leaves both sides non-empty for this campaign's clips (hash buckets)
    pct = next(p for p in range(20, 81) if 2 <= sum(bucket(h) < p for h in hashes) <= 4)

    teacher, student = tmp_path / "teacher", tmp_path / "student"
    assert _teach_teacher(teacher, camp) < 0.05
    n_student, n_teacher = _student(student)
    assert n_student < n_teacher

    # 1. label (in two runs: the second resumes and labels only the rest)
    labels = tmp_path / "labels"
    # a low temperature: the labels are the taught answers on any CPU, yet k votes are still sampled
    spec = f"vlm:model={teacher},k=3,min_valid=2,max_new_tokens=80,temperature=0.1,{VIDEO}"
    assert (
        main(
            [
                "judge-label",
                "--judge",
                spec,
                "--rollouts",
                str(camp),
                "--out",
                str(labels),
                "--limit",
                "3",
                "--no-progress",
            ]
        )
        == 0
    )
    assert len(LabelStore(labels).read()) == 3
    capsys.readouterr()
    assert (
        main(["judge-label", "--judge", spec, "--rollouts", str(camp), "--out", str(labels), "--no-progress", "--json"])
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["already"] == 3 and summary["labelled"] == 5 and summary["total"] == 8
    rows = LabelStore(labels).read()
    assert len(rows) == 8 and {r["rollout_hash"] for r in rows} == hashes
    assert all(r["prompt_sha256"] and len(json.loads(r["raw_answers"])) == 3 for r in rows)
    decided = [r for r in rows if r["answer_json"]]
    assert len(decided) >= 6, [r["rationale"] for r in rows]
    for r in decided:  # the taught teacher answers per instruction
        assert json.loads(r["answer_json"])["success"] is (r["task"] == "carrot_on_plate")
    for r in rows:  # byte-level tokenizer: a clean answer is one token per byte plus <|im_end|>
        for raw, n_tok, vote in zip(
            json.loads(r["raw_answers"]), json.loads(r["generated_tokens"]), json.loads(r["votes"]), strict=True
        ):
            if vote["valid"]:
                assert n_tok == len(raw.encode()) + 1

    # 2. distil (in two runs: the second resumes from the step-8 checkpoint)
    adapter = tmp_path / "adapter"
    args = [
        "judge-distill",
        "--teacher-labels",
        str(labels),
        "--student",
        str(student),
        "--out",
        str(adapter),
        "--heldout-pct",
        str(pct),
        "--lr",
        "1e-2",
        "--lora-r",
        "16",
        "--save-every",
        "8",
        "--seed",
        "3",
        "--no-progress",
    ]
    assert main(args + ["--steps", "8"]) == 0
    first = json.loads((adapter / "distill_config.json").read_text())
    from safetensors.torch import load_file

    at8 = load_file(str(adapter / "adapter_model.safetensors"))
    assert main(args + ["--steps", STEPS]) == 0
    cfg = json.loads((adapter / "distill_config.json").read_text())
    losses = cfg["training"]["losses"]
    assert len(losses) == int(STEPS) and losses[:8] == first["training"]["losses"]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])  # the student learns the teacher's answers
    # resuming is exact: an uninterrupted run gives the same adapter at step 8 and the same losses after it
    fresh = tmp_path / "adapter_fresh"
    assert main([a if a != str(adapter) else str(fresh) for a in args] + ["--steps", "12"]) == 0
    fresh_losses = json.loads((fresh / "distill_config.json").read_text())["training"]["losses"]
    b = load_file(str(tmp_path / "adapter_fresh" / "checkpoints" / "step-0000008" / "adapter_model.safetensors"))
    assert set(at8) == set(b)
    if torch.cuda.is_available():  # GPU kernels need not be bit-reproducible
        assert fresh_losses == pytest.approx(losses[:12], rel=1e-3)
        assert all(torch.allclose(at8[k], b[k], atol=1e-5) for k in at8)
    else:
        assert fresh_losses == losses[:12] and all(torch.equal(at8[k], b[k]) for k in at8)
    assert cfg["teacher_labels"]["sha256"] and cfg["split"]["heldout_pct"] == pct
    split = read_split(adapter)
    held, train = set(split["heldout"]), set(split["train"])
    assert held and train and not held & train and held | train == hashes
    assert all(bucket(h) < pct for h in held) and all(bucket(h) >= pct for h in train)
    # held-out rollouts never appear in training (by hash)
    assert not held & set(cfg["training"]["example_rollouts"])
    assert set(cfg["training"]["example_rollouts"]) <= train

    # the adapter loads back as a judge, and changes the student's outputs
    base = make_judge(
        {
            "type": "vlm",
            "model": str(student),
            "k": 1,
            "min_valid": 1,
            "max_pixels": 3136,
            "min_pixels": 784,
            "max_frames": 4,
        }
    )
    tuned = make_judge(
        {
            "type": "vlm",
            "model": str(student),
            "adapter": str(adapter),
            "k": 1,
            "min_valid": 1,
            "max_pixels": 3136,
            "min_pixels": 784,
            "max_frames": 4,
        }
    )
    assert len(tuned.spec["adapter_sha256"]) == 64 and "adapter_sha256" not in base.spec
    from peft import get_peft_model_state_dict

    saved = load_file(str(adapter / "adapter_model.safetensors"))
    loaded = get_peft_model_state_dict(tuned.model)
    assert set(saved) == set(loaded) and len(saved) > 0
    assert all(torch.equal(loaded[name].cpu(), tensor.cpu()) for name, tensor in saved.items())
    assert any(float(t.abs().sum()) > 0 for n, t in saved.items() if "lora_B" in n)  # trained, not the zero init
    # a rerun with other hyperparameters refuses to mix with these checkpoints
    capsys.readouterr()
    assert main(args[:-1] + ["--steps", STEPS, "--lr", "1e-3", "--no-progress"]) == 2
    assert "checkpoints of another configuration" in capsys.readouterr().err

    # 3. audit, held-out only
    report_dir = tmp_path / "audit"
    assert (
        main(
            [
                "judge-audit",
                "--teacher",
                spec,
                "--student",
                str(adapter),
                "--rollouts",
                str(camp),
                "--out",
                str(report_dir),
                "--no-progress",
                "--n-boot",
                "500",
            ]
        )
        == 0
    )
    report = json.loads((report_dir / "report.json").read_text())
    md = (report_dir / "report.md").read_text()
    judg = pq.read_table(report_dir / "judgments.parquet").to_pylist()
    T = {r["rollout_hash"]: r for r in judg if r["role"] == "teacher"}
    S = {r["rollout_hash"]: r for r in judg if r["role"] == "student"}
    assert set(T) == set(S) == held  # exactly the held-out clips
    assert report["rollouts"] == len(held) and report["inputs"]["heldout_only"]
    assert report["inputs"]["excluded_not_heldout"] == 8 - len(held)
    assert report["inputs"]["distilled_from"] == {
        "labels_sha256": cfg["teacher_labels"]["sha256"],
        "teacher_spec_hash": rows[0]["spec_hash"],
        "same_teacher": True,
    }

    # recompute the audit's numbers from the saved judgments, independently
    keys = sorted(held)
    tv, sv = [T[k]["verdict"] for k in keys], [S[k]["verdict"] for k in keys]
    n = len(keys)
    agree = sum(a == b for a, b in zip(tv, sv, strict=True))
    ta = report["quality"]["teacher_agreement"]
    assert ta["raw_agreement"]["k"] == agree and ta["raw_agreement"]["n"] == n
    lo, hi = _wilson(agree, n)
    assert ta["raw_agreement"]["lower"] == pytest.approx(lo) and ta["raw_agreement"]["upper"] == pytest.approx(hi)
    k = _kappa(sv, tv)
    assert (ta["kappa"] is None) == (k is None) and (k is None or ta["kappa"] == pytest.approx(k))
    assert ta["verdicts_changed"] == n - agree
    for role, rows_ in (("teacher", T), ("student", S)):
        votes = [v for r in rows_.values() for v in json.loads(r["votes"])]
        raws = [t for r in rows_.values() for t in json.loads(r["raw_answers"])]
        toks = [t for r in rows_.values() for t in json.loads(r["generated_tokens"])]
        eng = report["engineering"][role]
        assert eng["schema_valid"]["k"] == sum(v["valid"] for v in votes) and eng["schema_valid"]["n"] == len(votes)
        bare = sum(1 for t in raws if t.strip().startswith("{") and t.strip().endswith("}") and _is_obj(t))
        assert eng["bare_json"]["k"] == bare
        assert eng["mean_generated_tokens"] == pytest.approx(np.mean(toks))
        assert eng["mean_generate_seconds_per_rollout"] == pytest.approx(
            np.mean([r["generate_seconds"] for r in rows_.values()])
        )
        gt_ok = sum((r["verdict"] == ("success" if r["ground_truth"] else "failure")) for r in rows_.values())
        assert report["quality"]["ground_truth"][role]["k"] == gt_ok
    # ground truth is the tabletop state judge of each episode
    truth = {
        os.path.basename(r["artifacts"]["video"])[:-4]: r["ground_truth"]["success"] for r in results["per_episode"]
    }
    assert all(T[k]["ground_truth"] is truth[k] for k in keys)
    # the teacher answers bare JSON, so its engineering numbers are real
    assert report["engineering"]["teacher"]["schema_valid"]["k"] > 0
    # the report keeps engineering and quality apart and claims only what its intervals support
    assert "## Engineering" in md and "## Judging quality" in md
    gd = report["quality"]["ground_truth"]["paired_difference"]
    if not (gd["lower"] > 0 or gd["upper"] < 0) or gd["mcnemar_exact_p"] >= 0.05:
        assert gd["claim"] == "no supported difference" and "no supported difference" in md
        assert "No claim that the student is a better (or worse) judge" in md


def _is_obj(text):
    try:
        return isinstance(json.loads(text.strip()), dict)
    except json.JSONDecodeError:
        return False
