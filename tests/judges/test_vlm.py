"""The VLM judge's real generate path on tiny random Qwen2.5-VL / Qwen3-VL models built offline."""

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="needs the models extra (pip install -e '.[models]')")

from kosmos_env.judges import make_judge  # noqa: E402
from kosmos_env.judges.base import Rollout  # noqa: E402
from kosmos_env.judges.vlm import LOCAL_PATH_ENV, VLMJudge  # noqa: E402
from kosmos_env.judges.vlm_prompt import PROMPT_SHA256  # noqa: E402
from kosmos_env.judges.vlm_video import VideoSettings, patchify_video, sample_indices, video_placeholder  # noqa: E402
from kosmos_env.testing import qwen_tiny  # noqa: E402
from kosmos_env.worlds.base import MissingWeightsError  # noqa: E402

SMALL = {"max_pixels": 56 * 56, "min_pixels": 28 * 28, "max_new_tokens": 16}


def feed(judge, item, extra_ids=()):
    ids = torch.tensor([list(item["ids"]) + list(extra_ids)])
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": (ids == judge.model.config.video_token_id).int() * 2,
        "pixel_values_videos": torch.from_numpy(item["patches"]),
        "video_grid_thw": torch.tensor([item["grid"]]),
        "second_per_grid_ts": torch.tensor([item["second_per_grid"]]),
    }


def rollout(n=9, seed=0, instruction="put the carrot on the plate"):
    rng = np.random.default_rng(seed)
    return Rollout(
        frames=rng.integers(0, 255, (n, 64, 64, 3), dtype=np.uint8),
        instruction=instruction,
        actions=np.zeros((n - 1, 7), np.float32),
        fps=5.0,
    )


@pytest.fixture(scope="module")
def qwen25():
    return qwen_tiny.build_qwen2_5_vl()


def test_random_qwen2_5_vl_abstains_with_recorded_votes(qwen25):
    model, tok = qwen25
    judge = make_judge(
        {"type": "vlm", "k": 3, "min_valid": 2, "prompt_sha256": PROMPT_SHA256, **SMALL}, model=model, tokenizer=tok
    )
    j = judge.judge(rollout())
    # random weights emit random bytes: never a success, always an abstention with reasons
    assert j.success is None and j.abstained and j.score == 0.0
    assert len(j.votes) == 3 and all(not v["valid"] and v["error"] for v in j.votes)
    assert j.prompt_sha256 == PROMPT_SHA256 and j.judge == "vlm"
    # 9 frames at 5 fps shown at 4 fps: 7 frames (last one in), padded to 8, 2 per temporal patch
    assert j.extras["frames_shown"] == 7 and j.extras["video_grid_thw"][0] == 4
    assert j.seconds > 0


def test_sampling_is_seeded_and_the_video_conditions_the_answer(qwen25):
    model, tok = qwen25
    a = VLMJudge(model=model, tokenizer=tok, k=2, min_valid=1, seed=3, **SMALL)
    b = VLMJudge(model=model, tokenizer=tok, k=2, min_valid=1, seed=3, **SMALL)
    c = VLMJudge(model=model, tokenizer=tok, k=2, min_valid=1, seed=4, **SMALL)
    raw = lambda j: [v["raw"] for v in j.votes]  # noqa: E731
    ra, rb, rc = raw(a.judge(rollout())), raw(b.judge(rollout())), raw(c.judge(rollout()))
    assert ra == rb and ra != rc
    assert ra[0] != ra[1]  # k samples differ from each other
    # different videos give different next-token logits: the frames reach the model
    with torch.no_grad():
        la = model(**feed(a, a._inputs(rollout(seed=0)))).logits[0, -1]
        lb = model(**feed(a, a._inputs(rollout(seed=1)))).logits[0, -1]
    assert not torch.allclose(la, lb)
    # the global torch RNG is left alone
    torch.manual_seed(0)
    x = torch.rand(1)
    torch.manual_seed(0)
    a.judge(rollout())
    assert torch.rand(1) == x


def test_batch_of_rollouts_in_one_forward_pass(qwen25):
    model, tok = qwen25
    judge = VLMJudge(model=model, tokenizer=tok, k=2, min_valid=1, batch_size=3, **SMALL)
    out = judge.judge_batch(
        [rollout(9), rollout(13, seed=2), rollout(5, seed=3, instruction="stack the green block on the yellow block")]
    )
    assert len(out) == 3
    assert [j.extras["frames_shown"] for j in out] == [len(sample_indices(n, 5.0, 4.0, 32)) for n in (9, 13, 5)]
    assert all(j.success in (None, True, False) and len(j.votes) == 2 for j in out)
    for j in out:  # anything that is not an abstention must come from schema-valid votes
        assert j.success is None or j.extras["n_valid"] >= 1


@pytest.mark.slow
def test_overfit_tiny_model_yields_a_schema_valid_success():
    """Teach a tiny Qwen2.5-VL one answer; the judge must then read it as a validated success."""
    model, tok = qwen_tiny.build_qwen2_5_vl(seed=1)
    answer = '{"success": true, "progress": 0.9, "video_ok": true, "reason": "on plate"}'
    judge = VLMJudge(
        model=model,
        tokenizer=tok,
        k=3,
        min_valid=2,
        temperature=0.05,
        max_new_tokens=80,
        **{k: v for k, v in SMALL.items() if k != "max_new_tokens"},
    )
    r = rollout(5)
    item = judge._inputs(r)
    target = tok(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
    batch = feed(judge, item, target)
    labels = batch["input_ids"].clone()
    labels[0, : len(item["ids"])] = -100
    batch["labels"] = labels
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(400):  # converges in ~120 steps (~4 s on an idle 2-core CPU)
        loss = model(**batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.005:
            break
    assert loss.item() < 0.05
    model.eval()
    j = judge.judge(r)
    assert j.success is True, j.votes
    assert j.extras["n_valid"] >= 2 and j.score == pytest.approx(0.9)
    assert "on plate" in j.rationale


def test_tiny_qwen3_vl_generate_path():
    model, tok = qwen_tiny.build_qwen3_vl()
    judge = VLMJudge(
        model=model, tokenizer=tok, k=2, min_valid=2, max_pixels=64 * 64, min_pixels=32 * 32, max_new_tokens=12
    )
    assert judge.family == "qwen3_vl" and judge.video.patch_size == 16
    item = judge._inputs(rollout(9))
    text = tok.decode(item["ids"])
    # frames 0,1,2,4,5,6,8 of a 5 fps video, grouped in pairs (last one repeated): 0.1, 0.6, 1.1, 1.6 s
    assert text.count("<|vision_start|>") == item["grid"][0] == 4
    assert all(f"<{t} seconds>" in text for t in ("0.1", "0.6", "1.1", "1.6"))
    j = judge.judge(rollout(9))
    assert j.success is None and len(j.votes) == 2


def test_missing_weights_error_says_what_to_download(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv(LOCAL_PATH_ENV, raising=False)
    with pytest.raises(MissingWeightsError) as err:
        VLMJudge(model_id="nvidia/Cosmos-Reason1-7B", revision="abc123")
    msg = str(err.value)
    assert "nvidia/Cosmos-Reason1-7B" in msg and "hf download nvidia/Cosmos-Reason1-7B --revision abc123" in msg
    assert "local_path" in msg and LOCAL_PATH_ENV in msg
    with pytest.raises(MissingWeightsError, match="not on disk"):
        VLMJudge(local_path=str(tmp_path / "nowhere"))


def test_spec_pins_the_prompt_and_refuses_a_mismatch(qwen25):
    model, tok = qwen25
    judge = VLMJudge(model=model, tokenizer=tok, **SMALL)
    assert judge.spec["prompt_sha256"] == PROMPT_SHA256 and judge.spec["sample_fps"] == 4.0
    assert judge.trust_remote_code is False
    with pytest.raises(ValueError, match="another version"):
        VLMJudge(model=model, tokenizer=tok, prompt_sha256="0" * 64)
    with pytest.raises(ValueError, match="min_valid"):
        VLMJudge(model=model, tokenizer=tok, k=3, min_valid=4)


def test_frame_sampling_keeps_the_last_frame_and_the_cap():
    assert sample_indices(9, 5.0, 4.0, 32).tolist() == [0, 1, 2, 4, 5, 6, 8]
    idx = sample_indices(41, 5.0, 4.0, 32)
    assert idx[0] == 0 and idx[-1] == 40 and np.all(np.diff(idx) > 0)
    capped = sample_indices(200, 10.0, 4.0, 8)
    assert len(capped) == 8 and capped[0] == 0 and capped[-1] == 199
    assert sample_indices(1, 5.0, 4.0, 8).tolist() == [0]
    with pytest.raises(ValueError):
        sample_indices(0, 5.0, 4.0, 8)


def test_patch_layout_matches_merge_windows():
    s = VideoSettings(
        patch_size=2,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=(0, 0, 0),
        image_std=(1, 1, 1),
        min_pixels=16,
        max_pixels=64,
    )
    frames = np.zeros((3, 4, 4, 3), np.uint8)
    frames[..., 0] = np.arange(16, dtype=np.uint8).reshape(4, 4) * 10  # red encodes the pixel index
    patches, grid = patchify_video(frames, s)
    assert grid == (2, 2, 2) and patches.shape == (8, 3 * 2 * 2 * 2)
    first = patches[0].reshape(3, 2, 2, 2)[0, 0] * 255  # channel red, first frame of the group
    np.testing.assert_allclose(first, [[0, 10], [40, 50]], atol=1e-3)  # top-left 2x2 patch
    second = patches[1].reshape(3, 2, 2, 2)[0, 0] * 255  # next patch of the same merge window: to the right
    np.testing.assert_allclose(second, [[20, 30], [60, 70]], atol=1e-3)
    assert video_placeholder("qwen2_5_vl", grid, 2).count("<|video_pad|>") == 2


@pytest.mark.parametrize(
    "shape,size",
    [
        ((5, 64, 64), (112, 112)),
        ((4, 48, 80), (56, 84)),
        ((3, 120, 90), (56, 42)),
        ((2, 30, 40), (30, 84)),
        ((1, 64, 64), (28, 64)),
        ((3, 32, 32), (32, 32)),
    ],
)
def test_resize_frames_equals_pillow_frame_by_frame(shape, size):
    # upscaling, downscaling, one side only, none: each frame as Pillow resizes it on its own
    from PIL import Image

    from kosmos_env.judges.vlm_video import resize_frames

    frames = np.random.default_rng(sum(shape)).integers(0, 256, shape + (3,), dtype=np.uint8)
    h, w = size
    reference = np.stack([np.asarray(Image.fromarray(f).resize((w, h), Image.BICUBIC)) for f in frames])
    out = resize_frames(frames, h, w)
    assert out.shape == reference.shape and out.dtype == np.uint8
    assert np.array_equal(out, reference)
