"""The MP4 writer (issue 42, item 3): in-process PyAV H.264 that browsers play, decoded back within the
stated tolerance, odd and tiny sizes padded as before, the same bytes for the same frames (so the
content-addressed store keeps one copy), failures that leave nothing under a hash name, and videos
of the ffmpeg-subprocess writer before it still read and pass the same check."""

from __future__ import annotations

import os

import av
import numpy as np
import pytest

from kosmos_env.campaign.artifacts import ArtifactStore
from kosmos_env.hashing import sha256_file
from kosmos_env.utils import video
from kosmos_env.utils.video import MIN_LUMA_PSNR_DB, decode_problems, luma_psnr, read_video, read_video_fps, write_mp4


def scene(frames: int = 12, height: int = 64, width: int = 64, seed: int = 0) -> np.ndarray:
    """Rollout-like frames: a shaded table, two coloured blocks, one of them moving (uint8, fixed seed)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    table = np.stack([90 + 60 * y / max(height, 1), 110 + 40 * x / max(width, 1), 70 + 0 * x], axis=-1)
    out = np.empty((frames, height, width, 3), np.uint8)
    still = rng.integers(0, max(1, min(height, width) // 2), size=2)
    for t in range(frames):
        img = table.copy()
        img[still[0] : still[0] + height // 4, still[1] : still[1] + width // 4] = (200, 40, 40)
        top, left = (t * height) // (2 * frames), (t * width) // (3 * frames) + width // 3
        img[top : top + height // 5, left : left + width // 5] = (40, 60, 210)
        out[t] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def test_the_writer_makes_a_browser_playable_h264_mp4(tmp_path):
    frames = scene()
    path = tmp_path / "a.mp4"
    write_mp4(path, frames, 5.0)
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        assert stream.codec_context.pix_fmt == "yuv420p"
        assert (stream.width, stream.height) == (64, 64)
        assert stream.average_rate == 5
    raw = path.read_bytes()
    assert 0 <= raw.find(b"moov") < raw.find(b"mdat"), "faststart: the index must come before the media data"


def test_decoded_frames_match_count_size_and_tolerance(tmp_path):
    frames = scene(frames=15, height=128, width=128)
    path = tmp_path / "a.mp4"
    write_mp4(path, frames, 7.5)
    decoded, fps, digest = read_video_fps(path)
    assert decoded.shape == frames.shape and fps == 7.5 and digest == sha256_file(path)
    assert decode_problems(decoded, frames) == []
    assert luma_psnr(decoded, frames).min() >= MIN_LUMA_PSNR_DB
    # the PyAV decoder reads it too, to the same frame count
    with av.open(str(path)) as container:
        assert sum(1 for _ in container.decode(video=0)) == len(frames)


@pytest.mark.parametrize("height,width", [(1, 1), (2, 2), (3, 5), (17, 16), (63, 65)])
def test_odd_and_tiny_sizes_are_padded_to_even_by_their_edge(tmp_path, height, width):
    frames = scene(frames=4, height=height, width=width, seed=height * 100 + width)
    path = tmp_path / "odd.mp4"
    write_mp4(path, frames, 5.0)
    decoded = read_video(path)
    assert decoded.shape == (4, height + height % 2, width + width % 2, 3)
    assert decode_problems(decoded, frames) == []
    if height % 2:  # the padded row repeats the last one (within compression), it is not black
        assert np.abs(decoded[:, -1].astype(int) - decoded[:, -2].astype(int)).mean() < 12


def test_the_same_frames_give_the_same_bytes_and_one_stored_file(tmp_path):
    frames = scene()
    write_mp4(tmp_path / "a.mp4", frames, 5.0)
    write_mp4(tmp_path / "b.mp4", frames, 5.0)
    assert (tmp_path / "a.mp4").read_bytes() == (tmp_path / "b.mp4").read_bytes()
    store = ArtifactStore(tmp_path / "run")
    sha, rel, size = store.put_video(frames, 5.0)
    assert store.put_video(frames, 5.0) == (sha, rel, size)
    assert rel == f"artifacts/sha256/{sha[:2]}/{sha}.mp4" and sha256_file(store.path(rel)) == sha
    assert store.path(rel).stat().st_size == size
    other = store.put_video(scene(seed=1), 5.0)
    assert other[0] != sha
    assert store.files() == sorted([rel, other[1]])
    assert not [p for p in store.base.rglob(".tmp-*")], "no temporary file is left behind"


def test_a_failed_write_leaves_nothing_under_a_hash_name(tmp_path, monkeypatch):
    store = ArtifactStore(tmp_path / "run")
    with pytest.raises(ValueError, match=r"\(T, H, W, 3\) uint8"):
        store.put_video(np.zeros((3, 8, 8), np.uint8), 5.0)
    with pytest.raises(ValueError, match="at least one frame"):
        store.put_video(np.zeros((0, 8, 8, 3), np.uint8), 5.0)

    def dies_half_way(path, frames, fps):  # the encoder writes part of a file, then fails (disk full, a kill)
        with open(path, "wb") as fh:
            fh.write(b"\x00\x00\x00\x18ftypisom" + bytes(100))
        raise OSError("no space left on device")

    monkeypatch.setattr(video, "write_mp4", dies_half_way)
    with pytest.raises(OSError, match="no space left"):
        store.put_video(scene(), 5.0)
    assert store.files() == []
    assert not [p for p in (tmp_path / "run").rglob("*") if p.is_file()], "the half-written file must be gone"


def test_bad_arguments_are_refused_in_one_line(tmp_path):
    frames = scene(frames=2)
    with pytest.raises(ValueError, match="unknown video encoder 'x265': use one of pyav, ffmpeg"):
        write_mp4(tmp_path / "a.mp4", frames, 5.0, encoder="x265")
    with pytest.raises(ValueError, match="fps must be a positive number"):
        write_mp4(tmp_path / "a.mp4", frames, 0.0)
    assert not (tmp_path / "a.mp4").exists()


def test_the_check_tells_another_video_apart(tmp_path):
    frames, other = scene(frames=10, seed=0), scene(frames=10, seed=3)
    write_mp4(tmp_path / "a.mp4", frames, 5.0)
    decoded = read_video(tmp_path / "a.mp4")
    assert decode_problems(decoded, frames) == []
    (found,) = decode_problems(decoded, other)
    assert "dB (luma PSNR) from the frame encoded" in found
    assert decode_problems(decoded[:-1], frames) == ["it decodes to 9 frames, not 10"]
    assert decode_problems(decoded[:, :32], frames) == ["its frames decode at 64x32, not 64x64"]


def test_videos_of_the_ffmpeg_writer_before_still_read_and_pass(tmp_path):
    """Campaigns stored before PyAV hold videos of the ffmpeg subprocess: they decode the same way and
    stay within the tolerance (and the two writers' decoded frames are close to each other)."""
    frames = scene(frames=9, height=33, width=48)
    write_mp4(tmp_path / "old.mp4", frames, 5.0, encoder="ffmpeg")
    write_mp4(tmp_path / "new.mp4", frames, 5.0, encoder="pyav")
    old, new = read_video(tmp_path / "old.mp4"), read_video(tmp_path / "new.mp4")
    assert old.shape == new.shape == (9, 34, 48, 3)
    assert decode_problems(old, frames) == [] and decode_problems(new, frames) == []
    assert luma_psnr(new, old[:, :33]).min() >= MIN_LUMA_PSNR_DB
    assert os.path.getsize(tmp_path / "new.mp4") < 2 * os.path.getsize(tmp_path / "old.mp4")
