"""A tiny Qwen2.5-VL taught one progress answer, saved to a folder, for tests of the progress reward.

A randomly initialised model never writes a parseable answer (it abstains on every chunk), so the
mechanics of a *parsed* progress reading (reward, success, patience) need a model that answers. This
one is trained, on two random chunks at the tiny Bridge test geometry (48x64 frames, 4 per chunk, with a
first frame), to say :data:`ANSWER`; the tiny model's answer barely depends on its pixels, so it says the
same for any chunk of that geometry. The real generate path runs: nothing about the judge is replaced.
Built once per test process (about 5-15 s on a loaded 2-core machine).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile

import numpy as np

ANSWER = '{"progress": 0.75, "success": true}'
PROGRESS, SUCCESS = 0.75, True
#: the tiny frames' pixel budget the judge must be built with (the geometry the model was taught on)
SMALL = {"max_pixels": 56 * 56, "min_pixels": 28 * 28}
MODEL_ID = "kosmos-env/tiny-progress-qwen2.5-vl"
INSTRUCTION = "move the can to the left"


@functools.lru_cache(maxsize=1)
def taught_progress_dir() -> str:
    """Folder of the taught model (with its tokenizer and chat template), built once per process."""
    import torch

    from kosmos_env.judges.vlm_progress import VLMProgressJudge
    from kosmos_env.testing import qwen_tiny

    torch.manual_seed(0)
    model, tok = qwen_tiny.build_qwen2_5_vl(seed=1)
    judge = VLMProgressJudge(model=model, tokenizer=tok, model_id=MODEL_ID, revision=None, **SMALL)
    rng = np.random.default_rng(0)
    items = [
        judge._inputs(
            rng.integers(0, 255, (4, 48, 64, 3), dtype=np.uint8),
            INSTRUCTION,
            rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
            5.0,
        )
        for _ in range(2)
    ]
    target = tok(ANSWER + "<|im_end|>", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([it["ids"] + target for it in items])
    labels = ids.clone()
    labels[:, : len(items[0]["ids"])] = -100  # only the answer is taught
    mm = torch.zeros_like(ids, dtype=torch.int32)
    mm[ids == model.config.video_token_id] = 2
    mm[ids == model.config.image_token_id] = 1
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": mm,
        "labels": labels,
        "pixel_values_videos": torch.from_numpy(np.concatenate([it["patches"] for it in items])),
        "video_grid_thw": torch.tensor([it["grid"] for it in items]),
        "second_per_grid_ts": torch.tensor([it["second_per_grid"] for it in items]),
        "pixel_values": torch.from_numpy(np.concatenate([it["image"][0] for it in items])),
        "image_grid_thw": torch.tensor([it["image"][1] for it in items]),
    }
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(400):  # converges in about 90 steps
        loss = model(**batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.005:
            break
    if loss.item() >= 0.05:
        raise RuntimeError(f"the tiny progress model did not learn its answer (loss {loss.item():.3f})")
    path = tempfile.mkdtemp(prefix="kosmos-tiny-progress-")
    atexit.register(shutil.rmtree, path, True)
    model.eval().save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


def taught_judge_spec(**overrides) -> dict:
    """A ``vlm_progress`` step-judge spec that loads the taught model."""
    return {
        "type": "vlm_progress",
        "local_path": taught_progress_dir(),
        "model_id": MODEL_ID,
        "revision": None,
        "max_new_tokens": 40,
        **SMALL,
        **overrides,
    }
