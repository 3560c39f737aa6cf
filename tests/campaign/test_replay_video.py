"""`kosmos-env verify --replay` checks a stored video by decoding it against the replay's lossless frames
within the stated tolerance (kosmos_env.utils.video.MIN_LUMA_PSNR_DB), not by re-encoding and
comparing bytes (issue 42, item 3): an honest PyAV video passes, so does a video of the ffmpeg
writer campaigns used before (other bytes, same frames), and another episode's video does not."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from kosmos_env import cli
from kosmos_env.campaign import verify_campaign
from kosmos_env.campaign.artifacts import ArtifactStore
from kosmos_env.campaign.bundle import write_bundle
from tests.support.campaign import tabletop_eval_argv


@pytest.fixture(scope="module")
def video_campaign(tmp_path_factory) -> Path:
    """Two scripted episodes (64x64) with their videos, run through the real CLI."""
    out = tmp_path_factory.mktemp("video-replay") / "camp"
    assert cli.main(tabletop_eval_argv(out, ["scripted:skill=1.0"], seeds=2, video=True)) == 0
    return out


def _copy(campaign: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(campaign, tmp_path / "c"))


def _sql(out: Path, sql: str, *params) -> list[tuple]:
    con = sqlite3.connect(out / "ledger.sqlite")
    try:
        rows = con.execute(sql, params).fetchall()
        con.commit()
        return rows
    finally:
        con.close()


def test_an_honest_video_replays_within_the_tolerance(tmp_path, video_campaign):
    out = _copy(video_campaign, tmp_path)
    assert all(v for (v,) in _sql(out, "SELECT video FROM episodes"))
    report = verify_campaign(out, replay="all", rerun_policies=False)
    assert report.ok, report.problems
    assert report.checked["replayed"] == 2


def test_another_episodes_video_is_caught_by_the_replay(tmp_path, video_campaign):
    out = _copy(video_campaign, tmp_path)
    (a, video_a), (b, video_b) = _sql(out, "SELECT episode_id, video FROM episodes ORDER BY ord")
    assert video_a != video_b
    _sql(out, "UPDATE episodes SET video = ? WHERE episode_id = ?", video_b, a)
    _sql(out, "UPDATE episodes SET video = ? WHERE episode_id = ?", video_a, b)
    write_bundle(out)  # the forger rebuilds the bundle: every hash agrees
    assert verify_campaign(out).ok
    report = verify_campaign(out, replay="all", rerun_policies=False)
    for eid in (a, b):
        assert any(
            p.startswith(f"{eid}: replay: its stored video is not the replay's frames") and "luma PSNR" in p
            for p in report.problems
        ), report.problems


def test_a_video_of_the_ffmpeg_writer_before_still_replays(tmp_path, video_campaign):
    """A campaign stored before PyAV: its video has other bytes (another encoder) but the same frames."""
    import gymnasium

    from kosmos_env.policies import make_policy
    from kosmos_env.rollouts import run_episode
    from kosmos_env.utils.video import write_mp4

    out = _copy(video_campaign, tmp_path)
    eid, env_seed, task, stored = _sql(out, "SELECT episode_id, env_seed, task, video FROM episodes ORDER BY ord")[0]
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=[64, 64])
    try:
        frames = run_episode(env, make_policy("scripted", skill=1.0), env_seed, task).rollout.frames
        fps = float(env.unwrapped.kosmos_spec.render_fps * env.unwrapped.world.frames_per_action)
    finally:
        env.close()
    old = tmp_path / "old.mp4"
    write_mp4(old, frames, fps, encoder="ffmpeg")
    sha, rel, size = ArtifactStore(out).put_file(old, "mp4")
    assert rel != stored  # other bytes than the PyAV video of the same frames
    _sql(out, "UPDATE episodes SET video = ? WHERE episode_id = ?", rel, eid)
    _sql(
        out, "INSERT INTO artifacts (sha256, relpath, size, kind, created) VALUES (?, ?, ?, 'video', 0)", sha, rel, size
    )
    write_bundle(out)
    report = verify_campaign(out, replay="all", rerun_policies=False)
    assert report.ok, report.problems
    assert np.asarray(frames).shape[1:] == (64, 64, 3)
