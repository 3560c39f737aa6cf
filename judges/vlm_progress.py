"""The VLM progress judge: a Qwen-VL-family model reads the latest chunk of each episode and says how far
the task has got (progress in [0, 1]) and whether it is done, for a per-chunk training reward.

It implements :class:`~kosmos_env.judges.base.ProgressJudge`, the step judge behind
``reward.mode = "progress"`` on worlds the frame classifier cannot read (``Kosmos-Bridge-v1``). Per
episode the model sees the episode's first frame as an image (``first_frame=True``, the default: the
judge can tell what has changed since the start) and the latest chunk's frames as a video, with the
instruction, under a pinned prompt (:mod:`~kosmos_env.judges.vlm_progress_prompt`, whose sha256 the
env spec carries). All episodes of a call are decoded in one left-padded batch through one
``generate`` call (one forward pass over the batch per new token), so a vector env's N sub-envs cost
one model call per step, not N.

Decoding is greedy: the same frames and instruction give the same answer, so a reward is a function of
what the world produced. An answer that does not parse (:func:`parse_progress_answer`) is an
abstention, ``ProgressScore(None, None, raw)``: the env then keeps the previous potential and counts it.

Model loading, video layout and identity are the VLM judge's (:mod:`~kosmos_env.judges.qwen_vl`,
:mod:`~kosmos_env.judges.vlm_video`); by default the same pinned model (``nvidia/Cosmos-Reason1-7B`` at
revision ``main``), read from the same place (``local_path``, ``$KOSMOS_VLM_JUDGE_PATH`` or the Hugging
Face cache), so one download serves both judges. ``trust_remote_code`` stays off unless the person
running the command allows it.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from kosmos_env.judges.answer import AnswerError
from kosmos_env.judges.base import Judgment, ProgressScore, Rollout, progress_first_frames
from kosmos_env.judges.qwen_vl import LOCAL_PATH_ENV, QwenVLModel
from kosmos_env.judges.vlm_progress_prompt import PROMPT_SHA256, SYSTEM_PROMPT, parse_progress_answer, render_user_text
from kosmos_env.judges.vlm_video import (
    VIDEO_BLOCK,
    group_timestamps,
    patchify_video,
    sample_indices,
    video_placeholder,
)

IMAGE_BLOCK = "<|vision_start|><|image_pad|><|vision_end|>"
DEFAULT_MODEL_ID = "nvidia/Cosmos-Reason1-7B"
#: the registered Bridge spec's VLM judge revision (no commit hash could be established for it either)
DEFAULT_REVISION = "main"
#: the raw answer kept per score (the env's info and a judgment's extras stay small)
MAX_RAW_CHARS = 2000


class VLMProgressJudge(QwenVLModel):
    """Progress in [0, 1] and a success flag per episode's latest chunk (see the module docstring).

    Spec fields (keyword arguments): ``model_id``, ``revision``, ``local_path``, ``fps`` (frame rate of
    the chunks, default 5 as Bridge renders), ``max_frames`` (frames of a chunk shown, thinned uniformly
    with the last one kept, default 8), ``first_frame`` (show the episode's first frame, default True),
    ``max_new_tokens`` (default 64), ``max_pixels`` / ``min_pixels`` (per-frame pixel budget),
    ``prompt_sha256`` (must equal :data:`PROMPT_SHA256` when given), ``device``, ``dtype``,
    ``trust_remote_code`` (default False). Runtime objects (not spec): ``model``, ``tokenizer``,
    ``processor``; ``model`` may also be a folder or a model id, as for the VLM judge.
    """

    name = "vlm_progress"
    label = "VLM progress judge"
    local_path_env = LOCAL_PATH_ENV
    frame_size: tuple[int, int] | None = None  # any frame size (resized to the pixel budget)
    tasks: tuple[str, ...] | None = None  # any task: the instruction says what to look for

    def __init__(
        self,
        model_id: str = DEFAULT_MODEL_ID,
        revision: str | None = DEFAULT_REVISION,
        local_path: str | None = None,
        fps: float = 5.0,
        max_frames: int = 8,
        first_frame: bool = True,
        max_new_tokens: int = 64,
        max_pixels: int | None = None,
        min_pixels: int | None = None,
        prompt_sha256: str | None = None,
        device: str | None = None,
        dtype: str = "auto",
        trust_remote_code: bool = False,
        model: Any = None,
        tokenizer: Any = None,
        processor: Any = None,
    ):
        if prompt_sha256 is not None and prompt_sha256 != PROMPT_SHA256:
            raise ValueError(
                f"the spec pins VLM progress judge prompt {str(prompt_sha256)[:12]}..., but this code's prompt is "
                f"{PROMPT_SHA256[:12]}...: the spec belongs to another version of the judge"
            )
        if not fps > 0 or max_frames < 1 or max_new_tokens < 1:
            raise ValueError(
                f"need fps > 0, max_frames >= 1, max_new_tokens >= 1; got {fps}, {max_frames}, {max_new_tokens}"
            )
        if not isinstance(first_frame, bool):
            raise ValueError(f"first_frame must be true or false, got {first_frame!r}")
        self.model_id, self.revision = model_id, revision
        self.fps, self.max_frames, self.first_frame = float(fps), int(max_frames), first_frame
        self.max_new_tokens = int(max_new_tokens)
        from kosmos_env.plugins import check_remote_code

        # a spec, registration or bundle may ask; only the person running the command can allow it
        self.trust_remote_code = check_remote_code(bool(trust_remote_code), f"judge {self.name}")
        self._attach_model(model, tokenizer, processor, local_path, device, dtype, None, min_pixels, max_pixels)
        #: ``generate`` calls made so far (one per :meth:`score_progress` call), and rows decoded
        self.calls = 0
        self.rows = 0

    @property
    def spec(self) -> dict[str, Any]:
        """The settings that can change a score (for env specs and ledgers)."""
        return {
            "type": self.name,
            "model_id": self.model_id,
            "revision": self.revision,
            "family": self.family,
            "fps": self.fps,
            "max_frames": self.max_frames,
            "first_frame": self.first_frame,
            "max_new_tokens": self.max_new_tokens,
            "min_pixels": self.video.min_pixels,
            "max_pixels": self.video.max_pixels,
            "prompt_sha256": PROMPT_SHA256,
            "decoding": "greedy",
        }

    # -- the progress contract ----------------------------------------------------------------
    def score_progress(
        self,
        chunks: Sequence[np.ndarray],
        instructions: Sequence[str],
        tasks: Sequence[str],
        first_frames: Sequence[np.ndarray | None] | None = None,
    ) -> list[ProgressScore]:
        """One :class:`ProgressScore` per episode, all episodes decoded in one ``generate`` call."""
        first_frames = progress_first_frames(chunks, instructions, tasks, first_frames)
        n = len(chunks)
        if n == 0:
            return []
        items = [
            self._inputs(chunk, instruction, first if self.first_frame else None, self.fps)
            for chunk, instruction, first in zip(chunks, instructions, first_frames, strict=True)
        ]
        texts = self._generate(items)
        return [_score(text) for text in texts]

    # -- the judge contract (a finished rollout: its frames after the first, against the first) -------
    def judge(self, rollout: Rollout) -> Judgment:
        return self.judge_batch([rollout])[0]

    def judge_batch(self, rollouts: Sequence[Rollout]) -> list[Judgment]:
        """Score each rollout's frames after its first (thinned to ``max_frames``) in one ``generate``
        call; the verdict is the judge's success flag, the score its progress (0 on abstention)."""
        if not rollouts:
            return []
        t0 = time.perf_counter()
        items = []
        for r in rollouts:
            frames = np.asarray(r.frames)
            chunk = frames[1:] if len(frames) > 1 else frames
            items.append(self._inputs(chunk, r.instruction, frames[0] if self.first_frame else None, float(r.fps)))
        texts = self._generate(items)
        seconds = (time.perf_counter() - t0) / len(rollouts)
        identity = self.model_identity
        out = []
        for item, text in zip(items, texts, strict=True):
            score = _score(text)
            if score.abstained:
                rationale = f"abstain: {item_error(text)}"
            else:
                rationale = f"progress {score.progress:.2f}, {'success' if score.success else 'not success'}"
            out.append(
                Judgment(
                    success=score.success,
                    score=0.0 if score.progress is None else float(score.progress),
                    rationale=rationale,
                    judge=self.name,
                    model_id=self.model_id + (f"@{self.revision}" if self.revision else ""),
                    prompt_sha256=PROMPT_SHA256,
                    seconds=seconds,
                    extras={
                        "progress": score.progress,
                        "raw_answers": [score.raw],
                        "frames_shown": item["frames_shown"],
                        "first_frame_shown": item["image"] is not None,
                        "family": self.family,
                        "batch_rollouts": len(rollouts),
                        "model": identity,
                    },
                )
            )
        return out

    # -- inputs and decoding --------------------------------------------------------------------
    def _inputs(self, chunk: Any, instruction: str, first: Any, fps: float) -> dict[str, Any]:
        """Token ids, video patches and (with a first frame) image patches for one episode."""
        frames = np.asarray(chunk)
        if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or len(frames) < 1:
            raise ValueError(f"a chunk must be (n >= 1, H, W, 3) uint8 frames, got {frames.shape} {frames.dtype}")
        idx = sample_indices(len(frames), fps, fps, self.max_frames)
        patches, grid = patchify_video(frames[idx], self.video)
        # the shown frames' rate: a thinned chunk is shown at a lower rate than it was rendered
        step = (idx[-1] - idx[0]) / (len(idx) - 1) if len(idx) > 1 else 1.0
        shown_fps = fps / step
        image = None
        content: list[dict[str, Any]] = []
        if first is not None:
            first = np.asarray(first)
            if first.ndim != 3 or first.shape[-1] != 3 or first.dtype != np.uint8:
                raise ValueError(f"a first frame must be (H, W, 3) uint8, got {first.shape} {first.dtype}")
            image = patchify_video(first[None], self.video)  # an image is a one-frame video, repeated in time
            content.append({"type": "image"})
        content += [{"type": "video"}, {"type": "text", "text": render_user_text(instruction, image is not None)}]
        messages = [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
            {"role": "user", "content": content},
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if text.count(VIDEO_BLOCK) != 1 or text.count(IMAGE_BLOCK) != (image is not None):
            raise ValueError(
                f"the chat template must render one video placeholder {VIDEO_BLOCK!r} and "
                f"{int(image is not None)} image placeholder(s) {IMAGE_BLOCK!r}"
            )
        merge = self.video.merge_size
        if image is not None:
            gt, gh, gw = image[1]
            text = text.replace(
                IMAGE_BLOCK, "<|vision_start|>" + "<|image_pad|>" * (gt * gh * gw // merge**2) + "<|vision_end|>"
            )
        timestamps = None
        if self.family == "qwen3_vl":
            timestamps = group_timestamps(idx, fps, self.video.temporal_patch_size)
        text = text.replace(VIDEO_BLOCK, video_placeholder(self.family, grid, merge, timestamps))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        n_video = sum(1 for t in ids if t == self._video_token_id)
        if n_video != grid[0] * grid[1] * grid[2] // merge**2:
            raise RuntimeError(
                f"tokenised prompt has {n_video} video tokens, the video needs {int(np.prod(grid)) // merge**2}"
            )
        return {
            "ids": ids,
            "patches": patches,
            "grid": grid,
            "image": image,
            "frames_shown": len(idx),
            "second_per_grid": self.video.temporal_patch_size / shown_fps,
        }

    def _generate(self, items: Sequence[dict[str, Any]]) -> list[str]:
        """Greedy answers for all items from one ``generate`` call over a left-padded batch."""
        import torch

        pad_id, input_ids, attention, mm_types = self._left_padded(items)
        width = input_ids.shape[1]
        device = self.model.device
        dtype = next(self.model.parameters()).dtype
        kwargs: dict[str, Any] = {
            "pixel_values_videos": torch.from_numpy(np.concatenate([r["patches"] for r in items])).to(device, dtype),
            "video_grid_thw": torch.tensor([r["grid"] for r in items], dtype=torch.long, device=device),
        }
        if self.family == "qwen2_5_vl":
            kwargs["second_per_grid_ts"] = torch.tensor(
                [r["second_per_grid"] for r in items], dtype=torch.float32, device=device
            )
        # images in row order, as the model places them on the image tokens of the batch
        images = [r["image"] for r in items if r["image"] is not None]
        if images:
            kwargs["pixel_values"] = torch.from_numpy(np.concatenate([p for p, _ in images])).to(device, dtype)
            kwargs["image_grid_thw"] = torch.tensor([g for _, g in images], dtype=torch.long, device=device)
        with torch.inference_mode():
            generated = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                mm_token_type_ids=mm_types.to(device),
                do_sample=False,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=pad_id,
                **kwargs,
            )
        self.calls += 1
        self.rows += len(items)
        return self.tokenizer.batch_decode(generated[:, width:], skip_special_tokens=True)


def _score(text: str) -> ProgressScore:
    """An answer as a score: parsed, or an abstention that keeps the raw text."""
    raw = str(text)[:MAX_RAW_CHARS]
    try:
        answer = parse_progress_answer(text)
    except AnswerError:
        return ProgressScore(None, None, raw)
    return ProgressScore(answer.progress, answer.success, raw)


def item_error(text: str) -> str:
    """Why an answer did not parse (empty when it did)."""
    try:
        parse_progress_answer(text)
    except AnswerError as exc:
        return str(exc)
    return ""
