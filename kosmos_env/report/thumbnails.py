"""Small animated GIF thumbnails of sampled rollouts, made from the campaign's MP4 artifacts.

Episodes are picked deterministically: for every policy, the first success and the first
failure in (task, seed, repeat) order whose video exists. GIFs keep at most ``max_frames``
evenly spaced frames and are never upscaled (the page scales them with CSS), so a thumbnail
of a 64×64 rollout stays a few kilobytes.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from kosmos_env.report.bundle import Bundle

MAX_FRAMES = 32
MAX_SIDE = 160
FRAME_MS = 120
COLORS = 64


@dataclass
class Thumbnail:
    """One sampled rollout: which episode, and its GIF bytes (None with ``problem`` if the
    video could not be read)."""

    policy: str
    task: str
    seed: int
    repeat: int
    outcome: str
    episode_id: str
    video: str
    gif: bytes | None
    frames: int
    problem: str | None = None


def pick_episodes(bundle: Bundle, outcomes=("success", "failure")) -> list[dict]:
    """For each policy (bundle order) and each of ``outcomes``, the first episode in
    (task, seed, repeat) order that has a video artifact on disk."""
    picked = []
    order = {t: i for i, t in enumerate(bundle.tasks)}
    rows = sorted(bundle.rows, key=lambda r: (order.get(r["task"], len(order)), r["seed"], r["repeat"]))
    for p in bundle.policies:
        for o in outcomes:
            for r in rows:
                if r["policy"] == p and r["outcome"] == o:
                    path = bundle.artifact(r, "video")
                    if path is not None and path.is_file():
                        picked.append(r)
                        break
    return picked


def gif_bytes(
    frames: np.ndarray,
    max_frames: int = MAX_FRAMES,
    max_side: int = MAX_SIDE,
    frame_ms: int = FRAME_MS,
    colors: int = COLORS,
) -> bytes:
    """Encode (T, H, W, 3) uint8 frames as a looping animated GIF."""
    from PIL import Image

    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or not len(frames):
        raise ValueError(f"frames must be non-empty (T, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    idx = np.unique(np.linspace(0, len(frames) - 1, min(max_frames, len(frames))).round().astype(int))
    h, w = frames.shape[1:3]
    scale = min(1.0, max_side / max(h, w))
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    picked = []
    for i in idx:
        im = Image.fromarray(frames[i])
        if scale < 1.0:
            im = im.resize(size, Image.Resampling.BILINEAR)
        picked.append(im)
    # one palette for the whole clip (from a strip of all frames), no dithering: no flicker
    # between frames and much better LZW compression than a fresh dithered palette per frame
    strip = Image.new("RGB", (size[0], size[1] * len(picked)))
    for k, im in enumerate(picked):
        strip.paste(im, (0, size[1] * k))
    palette = strip.quantize(colors=colors, method=Image.Quantize.MEDIANCUT)
    images = [im.quantize(palette=palette, dither=Image.Dither.NONE) for im in picked]
    buf = io.BytesIO()
    # hold the last frame so the outcome is visible before the loop restarts
    durations = [frame_ms] * (len(images) - 1) + [frame_ms * 8]
    images[0].save(
        buf,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=durations,
        loop=0,
        optimize=False,
        disposal=1,
    )
    return buf.getvalue()


def make_thumbnails(bundle: Bundle) -> list[Thumbnail]:
    """GIFs of the episodes :func:`pick_episodes` chooses; unreadable videos are kept with a
    ``problem`` so the report can say so."""
    from kosmos_env.utils.video import read_video

    out = []
    for r in pick_episodes(bundle):
        path = bundle.artifact(r, "video")
        gif, n, problem = None, 0, None
        try:
            frames = read_video(path)
            n = len(frames)
            gif = gif_bytes(frames)
        except (OSError, RuntimeError, ValueError, StopIteration) as exc:
            problem = f"could not read {r['artifacts']['video']}: {exc or type(exc).__name__}"
        out.append(
            Thumbnail(
                r["policy"],
                r["task"],
                r["seed"],
                r["repeat"],
                r["outcome"],
                r["episode_id"],
                r["artifacts"]["video"],
                gif,
                n,
                problem,
            )
        )
    return out
