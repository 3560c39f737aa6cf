"""MP4 writing for rollouts (H.264 through the ffmpeg binary that imageio-ffmpeg ships)."""

from __future__ import annotations

import os

import numpy as np


def write_mp4(path: str | os.PathLike, frames: np.ndarray, fps: float) -> None:
    """Write (T, H, W, 3) uint8 frames as an H.264 MP4 that browsers play (yuv420p)."""
    import imageio_ffmpeg

    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be (T, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    height, width = frames.shape[1:3]
    # yuv420p needs even sizes; pad by edge replication rather than resampling
    pad_h, pad_w = height % 2, width % 2
    if pad_h or pad_w:
        frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    writer = imageio_ffmpeg.write_frames(
        str(path),
        (frames.shape[2], frames.shape[1]),
        fps=float(fps),
        codec="libx264",
        pix_fmt_out="yuv420p",
        macro_block_size=1,
        quality=7,
        ffmpeg_log_level="error",
        output_params=["-movflags", "+faststart"],
    )
    writer.send(None)
    for frame in frames:
        writer.send(np.ascontiguousarray(frame))
    writer.close()


def read_video(path: str | os.PathLike) -> np.ndarray:
    """Read every frame of a video as (T, H, W, 3) uint8 (tests and the judge-label stage)."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    frames = [np.frombuffer(buf, dtype=np.uint8).reshape(height, width, 3) for buf in reader]
    return np.stack(frames) if frames else np.zeros((0, height, width, 3), np.uint8)


def read_video_fps(path: str | os.PathLike) -> tuple[np.ndarray, float, str]:
    """(frames (T, H, W, 3) uint8, fps from the container, sha256 of the file bytes)."""
    import imageio_ffmpeg

    from kosmos_env.hashing import sha256_file

    digest = sha256_file(path)
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    frames = [np.frombuffer(buf, dtype=np.uint8).reshape(height, width, 3) for buf in reader]
    if not frames:
        raise ValueError(f"video {path} has no frames")
    return np.stack(frames), float(meta["fps"]), digest
