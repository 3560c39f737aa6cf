"""Video input for the Qwen-VL family, computed here so the judge's input is pinned.

transformers' Qwen video processors need torchvision and change defaults between releases
(frame sampling, per-frame pixel caps). The judge's input is part of a versioned env spec, so
this module computes it itself with numpy and Pillow, following the layout the models expect
(read from transformers 5.x ``Qwen2VLVideoProcessor.patchify`` and the Qwen processors'
placeholder expansion):

1. :func:`sample_indices`: frames at a stated fps, always keeping the last frame (where a
   task's success is visible), capped at ``max_frames`` by uniform thinning.
2. :func:`patchify_video`: resize every frame to a multiple of ``patch_size * merge_size``
   within a pixel budget (bicubic), scale to [0, 1], normalise, pad the frame count to a
   multiple of ``temporal_patch_size`` by repeating the last frame, and flatten to
   ``(grid_t * grid_h * grid_w, 3 * temporal_patch_size * patch_size**2)`` patches in the
   merge-window order the vision tower expects.
3. :func:`video_placeholder`: the token text that replaces the chat template's
   ``<|vision_start|><|video_pad|><|vision_end|>`` (Qwen2.5-VL: one pad token per merged
   patch; Qwen3-VL: per temporal group a ``<t seconds>`` stamp and its own vision block).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

VIDEO_BLOCK = "<|vision_start|><|video_pad|><|vision_end|>"


@dataclass(frozen=True)
class VideoSettings:
    """Vision-input settings. Patch geometry comes from the model's vision config."""

    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    image_mean: tuple[float, float, float] = (0.48145466, 0.4578275, 0.40821073)  # OpenAI CLIP
    image_std: tuple[float, float, float] = (0.26862954, 0.26130258, 0.27577711)
    min_pixels: int = 128 * 28 * 28
    max_pixels: int = 448 * 448

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


# family defaults (Qwen2.5-VL: CLIP statistics, 14 px patches; Qwen3-VL: 0.5/0.5, 16 px patches)
FAMILY_SETTINGS = {
    "qwen2_5_vl": VideoSettings(),
    "qwen3_vl": VideoSettings(
        patch_size=16, image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5), min_pixels=128 * 32 * 32
    ),
}


def sample_indices(n_frames: int, source_fps: float, target_fps: float, max_frames: int) -> np.ndarray:
    """Indices of the frames seen by the judge: ``target_fps`` over the video, last frame always in."""
    if n_frames < 1:
        raise ValueError("the rollout has no frames to judge")
    if source_fps <= 0 or target_fps <= 0:
        raise ValueError(f"fps must be > 0, got source {source_fps}, target {target_fps}")
    if max_frames < 2:
        raise ValueError(f"max_frames must be >= 2, got {max_frames}")
    duration = (n_frames - 1) / source_fps
    times = np.arange(0.0, duration + 1e-9, 1.0 / target_fps)
    idx = np.unique(np.minimum(np.round(times * source_fps).astype(np.int64), n_frames - 1))
    if idx[-1] != n_frames - 1:
        idx = np.append(idx, n_frames - 1)
    if len(idx) > max_frames:
        keep = np.unique(np.round(np.linspace(0, len(idx) - 1, max_frames)).astype(np.int64))
        idx = idx[keep]
    return idx


def smart_size(height: int, width: int, s: VideoSettings) -> tuple[int, int]:
    """Qwen's resize rule: multiples of ``factor``, area within [min_pixels, max_pixels], aspect kept."""
    f = s.factor
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"frame aspect ratio {height}x{width} is too extreme for the vision tower")
    h = max(f, round(height / f) * f)
    w = max(f, round(width / f) * f)
    if h * w > s.max_pixels:
        beta = math.sqrt(height * width / s.max_pixels)
        h = max(f, math.floor(height / beta / f) * f)
        w = max(f, math.floor(width / beta / f) * f)
    elif h * w < s.min_pixels:
        beta = math.sqrt(s.min_pixels / (height * width))
        h = math.ceil(height * beta / f) * f
        w = math.ceil(width * beta / f) * f
    return h, w


def patchify_video(frames: np.ndarray, s: VideoSettings) -> tuple[np.ndarray, tuple[int, int, int]]:
    """``(T, H, W, 3)`` uint8 frames -> (patches float32, (grid_t, grid_h, grid_w))."""
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be (T, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    h, w = smart_size(frames.shape[1], frames.shape[2], s)
    resized = resize_frames(frames, h, w)
    tp, p, m = s.temporal_patch_size, s.patch_size, s.merge_size
    if pad := -len(resized) % tp:
        resized = np.concatenate([resized, np.repeat(resized[-1:], pad, axis=0)])
    t = len(resized)
    gt, gh, gw = t // tp, h // p, w // p
    # the patch layout is rearranged on the uint8 frames (a quarter of the bytes to move), then
    # scaled and normalised per channel; elementwise, so the values equal normalise-then-rearrange
    x = resized.reshape(gt, tp, gh // m, m, p, gw // m, m, p, 3)
    # (gt, gh/m, gw/m, m, m, C, tp, p, p): merge windows contiguous, as the vision tower expects
    x = np.ascontiguousarray(x.transpose(0, 2, 5, 3, 6, 8, 1, 4, 7)).reshape(gt * gh * gw, 3, tp * p * p)
    video = x.astype(np.float32) / 255.0
    video = (video - np.asarray(s.image_mean, np.float32)[:, None]) / np.asarray(s.image_std, np.float32)[:, None]
    return video.reshape(gt * gh * gw, 3 * tp * p * p), (gt, gh, gw)


def resize_frames(frames: np.ndarray, h: int, w: int) -> np.ndarray:
    """``(T, H, W, 3)`` uint8 frames resized to ``(T, h, w, 3)`` by Pillow's bicubic filter, each frame
    exactly as ``Image.fromarray(frame).resize((w, h), Image.BICUBIC)`` gives it, in two Pillow calls.

    Pillow resamples separably: a horizontal pass into an 8-bit image, then a vertical pass, and
    a resize that keeps one dimension runs only the other pass. A horizontal pass maps each row
    on its own and a vertical pass each column, so the frames stacked on top of each other are
    resized in width in one call, then laid side by side and resized in height in another:
    the same two passes with the same coefficients as one frame at a time, without a Pillow
    call (and its copies) per frame.
    """
    from PIL import Image

    t, height, width, _ = frames.shape
    x = np.ascontiguousarray(frames)
    if w != width:
        x = np.asarray(Image.fromarray(x.reshape(t * height, width, 3)).resize((w, t * height), Image.BICUBIC))
        x = x.reshape(t, height, w, 3)
    if h != height:
        side_by_side = np.ascontiguousarray(x.transpose(1, 0, 2, 3)).reshape(height, t * w, 3)
        x = np.asarray(Image.fromarray(side_by_side).resize((t * w, h), Image.BICUBIC))
        x = x.reshape(h, t, w, 3).transpose(1, 0, 2, 3)
    return x


def video_placeholder(
    family: str, grid: tuple[int, int, int], merge_size: int, timestamps: list[float] | None = None
) -> str:
    """The text that replaces :data:`VIDEO_BLOCK` for one video."""
    gt, gh, gw = grid
    per_frame = gh * gw // (merge_size**2)
    if family == "qwen2_5_vl":
        return "<|vision_start|>" + "<|video_pad|>" * (gt * per_frame) + "<|vision_end|>"
    if family == "qwen3_vl":
        if timestamps is None or len(timestamps) != gt:
            raise ValueError(f"Qwen3-VL needs one timestamp per temporal group ({gt}), got {timestamps}")
        return "".join(
            f"<{ts:.1f} seconds><|vision_start|>" + "<|video_pad|>" * per_frame + "<|vision_end|>" for ts in timestamps
        )
    raise ValueError(f"unknown model family {family!r}; known: qwen2_5_vl, qwen3_vl")


def group_timestamps(indices: np.ndarray, source_fps: float, temporal_patch_size: int) -> list[float]:
    """Mean time (s) of the first and last frame in each temporal group (Qwen3-VL's stamps)."""
    idx = list(np.asarray(indices).tolist())
    if pad := -len(idx) % temporal_patch_size:
        idx += [idx[-1]] * pad
    times = [i / source_fps for i in idx]
    return [(times[i] + times[i + temporal_patch_size - 1]) / 2 for i in range(0, len(times), temporal_patch_size)]
