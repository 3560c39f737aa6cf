"""Judge distillation pieces: judge specs, the hash split, the label store's resume, the audit's statistics."""

import hashlib
import json
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kosmos_env.distill.judgespec import parse_judge_arg, resolve_judge_arg
from kosmos_env.distill.metrics import bootstrap_kappa, cohen_kappa, difference_claim, is_bare_json, mcnemar_exact
from kosmos_env.distill.split import bucket, make_split, read_split, write_split
from tests.conftest import requires_extra

GOOD = '{"success": true, "progress": 0.9, "video_ok": true, "reason": "done"}'


# -- judge specs ----------------------------------------------------------------------------
def test_parse_judge_arg_reads_values_as_json_and_rejects_bad_items(tmp_path):
    spec = parse_judge_arg("vlm:model=/models/Cosmos-Reason1-7B,k=3,temperature=0.5,adapter=/a/b")
    assert spec == {"type": "vlm", "model": "/models/Cosmos-Reason1-7B", "k": 3, "temperature": 0.5, "adapter": "/a/b"}
    assert parse_judge_arg("state") == {"type": "state"}
    assert parse_judge_arg('{"type": "vlm", "k": 2}') == {"type": "vlm", "k": 2}
    for bad in ("vlm:k", "vlm:k=1,k=2", ":k=1", "", '{"k": 1}'):
        with pytest.raises(ValueError):
            parse_judge_arg(bad)
    # an adapter folder stands for the judge spec judge-distill saved in it
    (tmp_path / "judge_spec.json").write_text(json.dumps({"type": "vlm", "model": "/s", "adapter": str(tmp_path)}))
    assert resolve_judge_arg(str(tmp_path))["adapter"] == str(tmp_path)


# -- split ----------------------------------------------------------------------------------
def test_split_is_fixed_by_the_rollout_hash_alone(tmp_path):
    hashes = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(200)]
    expected = {h: int(hashlib.sha256(h.encode()).hexdigest(), 16) % 100 for h in hashes}
    assert all(bucket(h) == expected[h] for h in hashes)
    split = make_split(hashes + hashes[:10], heldout_pct=20)  # duplicates merge
    held, train = set(split["heldout"]), set(split["train"])
    assert held | train == set(hashes) and not held & train
    assert held == {h for h in hashes if expected[h] < 20}
    assert 20 <= len(held) <= 60  # about a fifth
    # the same clip is on the same side whatever else is in the label set
    assert set(make_split(hashes[:50], 20)["heldout"]) == held & set(hashes[:50])
    write_split(tmp_path, split)
    assert read_split(tmp_path)["heldout"] == split["heldout"]
    tampered = dict(split, heldout=split["heldout"] + split["train"][:1], train=split["train"][1:])
    write_split(tmp_path, tampered)
    with pytest.raises(ValueError, match="wrong side"):
        read_split(tmp_path)
    with pytest.raises(ValueError):
        make_split(hashes, heldout_pct=0)


# -- statistics -----------------------------------------------------------------------------
def test_kappa_mcnemar_and_bare_json_by_hand():
    a = ["success", "success", "failure", "failure"]
    b = ["success", "failure", "failure", "failure"]
    # p_o = 3/4, p_e = 2/4*1/4 + 2/4*3/4 = 1/2 -> kappa = 0.5
    assert cohen_kappa(a, b) == pytest.approx(0.5)
    assert cohen_kappa(a, a) == pytest.approx(1.0)
    assert cohen_kappa(["success"] * 3, ["success"] * 3) is None  # p_e = 1: undefined
    assert cohen_kappa(["success", "abstained"], ["abstained", "success"]) == pytest.approx(-1.0)
    iv = bootstrap_kappa(a * 5, b * 5, n_boot=300, seed=1)
    assert iv["lower"] <= 0.5 <= iv["upper"] and iv["defined_resamples"] > 250
    assert mcnemar_exact(0, 5) == pytest.approx(2 * 0.5**5)
    assert mcnemar_exact(3, 3) == pytest.approx(1.0) and mcnemar_exact(0, 0) == 1.0
    assert is_bare_json(GOOD) and is_bare_json(f"  {GOOD}\n") and is_bare_json('{"a": 1}')
    for wrapped in (
        f"```json\n{GOOD}\n```",
        f"<answer>{GOOD}</answer>",
        f"<think>x</think>{GOOD}",
        f"Sure: {GOOD}",
        "[1]",
        "{not json}",
        "",
    ):
        assert not is_bare_json(wrapped), wrapped


def test_difference_claim_needs_an_interval_that_excludes_zero():
    assert difference_claim(0.1, 0.4, 0.01, 0.05, "more", "less") == ("more", True)
    assert difference_claim(-0.4, -0.1, 0.01, 0.05, "more", "less") == ("less", True)
    assert difference_claim(-0.1, 0.4, 0.01, 0.05, "more", "less") == ("no supported difference", False)
    # the interval alone is not enough when the exact test does not reject
    assert difference_claim(0.2, 1.0, 0.25, 0.05, "more", "less") == ("no supported difference", False)
    assert difference_claim(None, None, None, 0.05, "more", "less")[1] is False


def _rows(n, student_right, teacher_right, student_valid=3, teacher_valid=1):
    """Synthetic audit rows: ground truth success everywhere; who is right decides the verdicts."""
    rows = []
    for i in range(n):
        h = f"{i:064x}"
        for role, right, valid in (
            ("student", student_right(i), student_valid),
            ("teacher", teacher_right(i), teacher_valid),
        ):
            verdict = "success" if right else "failure"
            raws = [GOOD] * valid + ["<think>hm</think> yes"] * (3 - valid)
            rows.append(
                {
                    "rollout_hash": h,
                    "episode_id": str(i),
                    "policy": "p",
                    "task": "t",
                    "role": role,
                    "spec_hash": role,
                    "model_id": role,
                    "success": right,
                    "verdict": verdict,
                    "score": float(right),
                    "n_valid": valid,
                    "k": 3,
                    "valid_votes": valid,
                    "bare_votes": sum(is_bare_json(r) for r in raws),
                    "votes": "[]",
                    "raw_answers": json.dumps(raws),
                    "generated_tokens": json.dumps([70 if role == "student" else 200] * 3),
                    "seconds": 1.0 if role == "student" else 3.0,
                    "generate_seconds": 0.5 if role == "student" else 2.5,
                    "ground_truth": True,
                }
            )
    return rows


def test_report_separates_engineering_from_quality_and_claims_only_supported_differences():
    from kosmos_env.distill.audit import compute_report, render_markdown

    # engineering gains, identical verdicts: no quality claim
    rep = compute_report(_rows(30, lambda i: i % 2 == 0, lambda i: i % 2 == 0), n_boot=500)
    eng, q = rep["engineering"], rep["quality"]
    assert eng["student"]["schema_valid"]["k"] == 90 and eng["teacher"]["schema_valid"]["k"] == 30
    assert eng["student"]["bare_json"]["k"] == 90 and eng["teacher"]["bare_json"]["k"] == 30
    assert eng["paired_difference"]["bare_json"]["claim"] == "student higher than teacher"
    assert eng["paired_difference"]["generated_tokens"]["claim"] == "student fewer than teacher"
    assert eng["speedup_decode"] == pytest.approx(5.0)
    assert q["teacher_agreement"]["verdicts_changed"] == 0 and q["teacher_agreement"]["kappa"] == pytest.approx(1.0)
    assert q["ground_truth"]["paired_difference"]["claim"] == "no supported difference"
    md = render_markdown(rep)
    assert md.index("## Engineering") < md.index("## Judging quality")
    assert "No claim that the student is a better (or worse) judge" in md
    # a real, large quality difference is claimed ...
    rep = compute_report(_rows(40, lambda i: True, lambda i: i % 2 == 0), n_boot=500)
    gd = rep["quality"]["ground_truth"]["paired_difference"]
    assert gd["claim"] == "student agrees with ground truth more than teacher" and gd["supported"]
    assert gd["only_student_right"] == 20 and gd["only_teacher_right"] == 0
    assert rep["quality"]["teacher_agreement"]["verdicts_changed"] == 20
    assert "No claim that the student is a better" not in render_markdown(rep)
    # ... but not from four rollouts, even if all four favour the student
    rep = compute_report(_rows(4, lambda i: True, lambda i: False), n_boot=500)
    gd = rep["quality"]["ground_truth"]["paired_difference"]
    assert gd["lower"] > 0 and gd["mcnemar_exact_p"] > 0.05 and gd["claim"] == "no supported difference"
    bare = rep["engineering"]["paired_difference"]["bare_json"]  # same rule for engineering differences
    assert bare["lower"] > 0 and bare["sign_test_p"] == pytest.approx(0.125) and not bare["supported"]


# -- label store and resume, with a real (tiny, random) VLM judge ---------------------------
def _bundle(root, n=4, size=32, frames=5):
    """A minimal results bundle (the schema kosmos-env eval writes) with random-frame MP4s."""
    from kosmos_env.campaign.artifacts import ArtifactStore
    from kosmos_env.spec import load_spec

    store = ArtifactStore(root)
    rows = []
    rng = np.random.default_rng(0)
    for i in range(n):
        _, video, _ = store.put_video(rng.integers(0, 255, (frames, size, size, 3), dtype=np.uint8), 5.0)
        rows.append(
            {
                "episode_id": f"p|carrot_on_plate|{i}|0",
                "policy": "p",
                "task": "carrot_on_plate",
                "seed": i,
                "repeat": 0,
                "outcome": "success" if i % 2 else "failure",
                "success": bool(i % 2),
                "judge": "state",
                "ground_truth": {"success": bool(i % 2)},
                "artifacts": {"video": video, "actions": None, "log": None},
            }
        )
    rows.append(
        {
            "episode_id": "p|carrot_on_plate|9|0",
            "policy": "p",
            "task": "carrot_on_plate",
            "seed": 9,
            "repeat": 0,
            "outcome": "failure",
            "success": False,
            "judge": "state",
            "artifacts": {"video": None},
        }
    )
    spec = load_spec("Kosmos-Tabletop-v1").to_dict()
    (root / "results.json").write_text(
        json.dumps(
            {
                "schema": "kosmos-env/results",
                "schema_version": 1,
                "campaign": {"id": "c-test", "env_id": spec["id"], "spec_hash": "x", "spec": spec},
                "per_episode": rows,
            }
        )
    )
    return rows


@pytest.fixture(scope="module")
def tiny_judge():
    import torch

    from kosmos_env.judges.vlm import VLMJudge
    from kosmos_env.testing import qwen_tiny

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tok = qwen_tiny.build_qwen2_5_vl()
    yield VLMJudge(
        model=model,
        tokenizer=tok,
        k=2,
        min_valid=1,
        max_new_tokens=3,
        max_frames=2,
        max_pixels=784,
        min_pixels=784,
        batch_size=2,
    )
    torch.set_num_threads(before)


@requires_extra("models")  # a tiny random Qwen2.5-VL judge
def test_labels_resume_without_redoing_or_losing_rows(tmp_path, tiny_judge):
    pytest.importorskip("pyarrow")
    from kosmos_env.distill.judgespec import judge_identity
    from kosmos_env.distill.labels import LabelStore, label_campaign, labels_sha256

    camp = tmp_path / "camp"
    camp.mkdir()
    rows = _bundle(camp)
    identity = judge_identity(tiny_judge, {"type": "vlm"})
    labels = tmp_path / "labels"
    first = label_campaign(tiny_judge, identity, camp, labels, limit=2, progress=False)
    assert first["labelled"] == 2 and first["skipped"] == {"no video": 1}
    store = LabelStore(labels)
    done = store.read()
    assert len(done) == 2 and len(store.parts()) == 1
    (labels / ".tmp-part-killed.parquet").write_bytes(b"half a file")  # a run killed mid-write
    second = label_campaign(tiny_judge, identity, camp, labels, progress=False)
    assert second["already"] == 2 and second["labelled"] == 2
    all_rows = store.read()
    assert len(all_rows) == 4
    assert {r["rollout_hash"] for r in all_rows} == {os.path.basename(r["artifacts"]["video"])[:-4] for r in rows[:4]}
    kept = {r["rollout_hash"]: r for r in all_rows}
    assert all(kept[r["rollout_hash"]]["raw_answers"] == r["raw_answers"] for r in done)  # first labels untouched
    for r in all_rows:
        raws, toks = json.loads(r["raw_answers"]), json.loads(r["generated_tokens"])
        assert len(raws) == len(toks) == 2 and all(1 <= t <= 3 for t in toks)
        assert r["prompt_sha256"] and r["verdict"] in ("success", "failure", "abstained")
        assert r["ground_truth"] is (r["seed"] % 2 == 1)
    # a third run has nothing left to do; a racing duplicate part is read once
    assert label_campaign(tiny_judge, identity, camp, labels, progress=False)["labelled"] == 0
    store.append(all_rows[:1])
    assert len(store.read()) == 4 and labels_sha256(store.read()) == labels_sha256(all_rows)
    # a video whose bytes do not match its hash is refused
    video = camp / rows[0]["artifacts"]["video"]
    video.write_bytes(video.read_bytes()[:-10])
    with pytest.raises(ValueError, match="hash"):
        label_campaign(tiny_judge, {"other": 1}, camp, tmp_path / "labels2", progress=False)


def test_distill_refuses_a_teacher_that_only_abstained(tmp_path):
    pytest.importorskip("pyarrow")
    from kosmos_env.distill.labels import COLUMNS, LabelStore
    from kosmos_env.distill.train import distill

    store = LabelStore(tmp_path / "labels")
    store.init()
    row = {c: None for c in COLUMNS}
    row.update(
        rollout_hash="a" * 64,
        spec_hash="s" * 64,
        seed=0,
        repeat=0,
        score=0.0,
        n_valid=0,
        k=3,
        judge_spec=json.dumps({"judge": {"k": 3}}),
        verdict="abstained",
        seconds=0.0,
        generate_seconds=0.0,
    )
    store.append([row, dict(row, rollout_hash="b" * 64)])
    (tmp_path / "student").mkdir()
    with pytest.raises(ValueError, match="only abstains"):
        distill(tmp_path / "labels", tmp_path / "student", tmp_path / "adapter", progress=False)
    with pytest.raises(FileNotFoundError, match="student model folder"):
        distill(tmp_path / "labels", tmp_path / "nowhere", tmp_path / "adapter", progress=False)


@requires_extra("models")  # transformers and peft
def test_vlm_judge_applies_a_lora_adapter_and_pins_it_in_its_spec(tmp_path, tiny_judge):
    import peft
    import torch

    from kosmos_env.judges import make_judge
    from kosmos_env.judges.base import Rollout
    from kosmos_env.testing import qwen_tiny

    model, tok = qwen_tiny.build_qwen2_5_vl(seed=5)
    model.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft.get_peft_model(model, lora).save_pretrained(str(tmp_path / "adapter"))
    small = {"k": 1, "min_valid": 1, "max_new_tokens": 2, "max_frames": 2, "max_pixels": 784, "min_pixels": 784}
    base = make_judge({"type": "vlm", "model": str(tmp_path / "base"), **small})
    tuned = make_judge({"type": "vlm", "model": str(tmp_path / "base"), "adapter": str(tmp_path / "adapter"), **small})
    assert "adapter_sha256" not in base.spec and len(tuned.spec["adapter_sha256"]) == 64
    r = Rollout(
        frames=np.zeros((3, 32, 32, 3), np.uint8),
        instruction="put the carrot on the plate",
        actions=np.zeros((2, 7), np.float32),
        fps=5.0,
    )
    item = base._inputs(r)
    ids = torch.tensor([item["ids"]])
    feed = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": (ids == base._video_token_id).int() * 2,
        "pixel_values_videos": torch.from_numpy(item["patches"]),
        "video_grid_thw": torch.tensor([item["grid"]]),
        "second_per_grid_ts": torch.tensor([item["second_per_grid"]]),
    }
    feed = {k: v.to(base.model.device) for k, v in feed.items()}
    with torch.no_grad():
        assert not torch.allclose(base.model(**feed).logits[0, -1], tuned.model(**feed).logits[0, -1])
    assert tuned.judge(r).extras["generated_tokens"][0] <= 2
    with pytest.raises(FileNotFoundError, match="adapter_config"):
        make_judge({"type": "vlm", "model": str(tmp_path / "base"), "adapter": str(tmp_path), **small})
