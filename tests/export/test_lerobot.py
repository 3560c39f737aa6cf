"""A real (tiny) tabletop campaign and real demonstrations exported as LeRobot datasets, checked
field by field against LeRobot's v3.0 format as LeRobot 0.4.4 writes and reads it: info.json's
keys and features, the parquet columns and their Arrow types, episode and frame bookkeeping,
statistics per feature, and video frames that line up with the rows (counted and timed in the
MP4 itself, decoded with the project's reader). ``test_lerobot_load.py`` loads such a dataset with
LeRobot itself (opt-in)."""

from __future__ import annotations

import json
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kosmos_env.campaign.design import make_config
from kosmos_env.campaign.readonly import ReadOnlyLedger
from kosmos_env.campaign.runner import run_campaign
from kosmos_env.export.lerobot import DatasetSpec, Episode, channel_histogram, image_stats, write_dataset
from kosmos_env.export.sources import campaign_rows, campaign_source, demos_source, export_lerobot
from kosmos_env.tasks import load_suite
from kosmos_env.utils.video import read_video

ENV = "Kosmos-Tabletop-v1"
HORIZON = 5
TASKS = ("carrot_on_plate", "spoon_on_towel")
FPS = 5  # the spec's render_fps
VIDEO_KEY = "observation.images.image"
STATS = {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
# H.264 (yuv420p, crf 20) of frames that were themselves decoded from the campaign's H.264:
# measured 1.4 grey levels mean absolute difference per frame; a frame of another episode or
# another step differs by far more
MAX_MEAN_ABS_DIFF = 3.0


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    config = make_config(
        ENV, ["scripted", "random"], tasks=TASKS, seeds=2, image_size=(64, 64), spec_overrides={"horizon": HORIZON}
    )
    out = tmp_path_factory.mktemp("campaign") / "run"
    run_campaign(config, out, progress=False)
    return out


@pytest.fixture(scope="module")
def stored(campaign):
    """The campaign's episodes as stored: (row, actions, log, frames), in the ledger's order."""
    with ReadOnlyLedger(campaign / "ledger.sqlite") as ledger:
        rows = ledger.episodes("done")
    out = []
    for row in rows:
        actions = np.load(campaign / row["actions"])
        with np.load(campaign / row["log"]) as z:
            log = {k: z[k] for k in z.files}
        out.append((row, actions, log, read_video(campaign / row["video"])))
    return out


@pytest.fixture(scope="module")
def exported(campaign, tmp_path_factory):
    out = tmp_path_factory.mktemp("datasets") / "run"
    report = export_lerobot(campaign_source(campaign), out)
    return out, report


def _table(root: Path, rel: str) -> pa.Table:
    return pq.read_table(root / rel)


def _frame_times(path: Path) -> list[Fraction]:
    """Every video frame's presentation time in seconds, exactly, read from the MP4's packets
    (no B-frames: packet order is presentation order)."""
    import imageio_ffmpeg

    proc = subprocess.run(
        [imageio_ffmpeg.get_ffmpeg_exe(), "-loglevel", "error", "-i", str(path), "-map", "0:v:0", "-c", "copy"]
        + ["-f", "framemd5", "-"],
        capture_output=True,
        text=True,
        check=True,
    )
    base = next(line for line in proc.stdout.splitlines() if line.startswith("#tb 0:")).split(":")[1].strip()
    tb = Fraction(base)
    return [int(line.split(",")[2]) * tb for line in proc.stdout.splitlines() if line and not line.startswith("#")]


def _expected_rows(stored):
    """What the rows must be, built here from the stored artifacts: row t = frame t and the log's
    state after action t-1, with action t (t = 1 .. N-1)."""
    for row, actions, log, frames in stored:
        state = np.concatenate([log["ee_pos"], log["gripper_measured"][:, None]], axis=1)
        yield row, actions[1:], state[:-1], frames[1 : len(actions)]


def test_info_json_is_lerobots_schema(exported, stored):
    out, report = exported
    info = json.loads((out / "meta" / "info.json").read_text())
    assert set(info) == {
        "codebase_version",
        "robot_type",
        "total_episodes",
        "total_frames",
        "total_tasks",
        "chunks_size",
        "data_files_size_in_mb",
        "video_files_size_in_mb",
        "fps",
        "splits",
        "data_path",
        "video_path",
        "features",
    }
    n_frames = sum(len(a) - 1 for _, a, _, _ in stored)
    assert info["codebase_version"] == "v3.0" and info["fps"] == FPS and isinstance(info["fps"], int)
    assert info["total_episodes"] == len(stored) == report.episodes == 8
    assert info["total_frames"] == n_frames == report.frames == 8 * (HORIZON - 1)
    assert info["total_tasks"] == 2 and info["splits"] == {"train": "0:8"}
    assert (info["chunks_size"], info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (1000, 100, 200)
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    assert info["robot_type"] == ENV
    scalar = {"shape": [1], "names": None}
    assert info["features"] == {
        "action": {
            "dtype": "float32",
            "shape": [7],
            "names": ["dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"],
        },
        "observation.state": {"dtype": "float32", "shape": [4], "names": ["ee_x", "ee_y", "ee_z", "gripper"]},
        VIDEO_KEY: {
            "dtype": "video",
            "shape": [64, 64, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": 64,
                "video.width": 64,
                "video.codec": "h264",
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": FPS,
                "video.channels": 3,
                "has_audio": False,
            },
        },
        "timestamp": {"dtype": "float32", **scalar},
        "frame_index": {"dtype": "int64", **scalar},
        "episode_index": {"dtype": "int64", **scalar},
        "index": {"dtype": "int64", **scalar},
        "task_index": {"dtype": "int64", **scalar},
    }
    assert list(info["features"])[-5:] == ["timestamp", "frame_index", "episode_index", "index", "task_index"]


def test_data_rows_are_the_stored_episodes(exported, stored):
    out, _ = exported
    table = _table(out, "data/chunk-000/file-000.parquet")
    # the Arrow types LeRobot's `datasets` features give (checked against a dataset LeRobot wrote)
    assert [(f.name, f.type) for f in table.schema] == [
        ("action", pa.list_(pa.float32(), 7)),
        ("observation.state", pa.list_(pa.float32(), 4)),
        ("timestamp", pa.float32()),
        ("frame_index", pa.int64()),
        ("episode_index", pa.int64()),
        ("index", pa.int64()),
        ("task_index", pa.int64()),
    ]
    data = {name: np.asarray(table[name].to_pylist()) for name in table.column_names}
    assert np.array_equal(data["index"], np.arange(table.num_rows))
    tasks = _table(out, "meta/tasks.parquet")
    task_of = dict(zip(tasks["task_index"].to_pylist(), tasks["__index_level_0__"].to_pylist(), strict=True))
    instructions = {name: t.instruction for name, t in load_suite("tabletop").tasks.items()}
    start = 0
    for e, (row, action, state, _) in enumerate(_expected_rows(stored)):
        rows = slice(start, start + len(action))
        assert np.all(data["episode_index"][rows] == e)
        assert np.array_equal(data["frame_index"][rows], np.arange(len(action)))
        np.testing.assert_array_equal(data["timestamp"][rows], (np.arange(len(action)) / FPS).astype(np.float32))
        np.testing.assert_array_equal(data["action"][rows], action)
        np.testing.assert_array_equal(data["observation.state"][rows], state)
        assert {task_of[i] for i in data["task_index"][rows]} == {instructions[row["task"]]}
        start += len(action)
    assert start == table.num_rows


def test_episodes_metadata_locates_rows_and_frames(exported, stored):
    out, _ = exported
    table = _table(out, "meta/episodes/chunk-000/file-000.parquet")
    types = {f.name: f.type for f in table.schema}
    video = f"videos/{VIDEO_KEY}"
    assert {
        "episode_index": pa.int64(),
        "tasks": pa.list_(pa.string()),
        "length": pa.int64(),
        "data/chunk_index": pa.int64(),
        "data/file_index": pa.int64(),
        "dataset_from_index": pa.int64(),
        "dataset_to_index": pa.int64(),
        f"{video}/chunk_index": pa.int64(),
        f"{video}/file_index": pa.int64(),
        f"{video}/from_timestamp": pa.float64(),
        f"{video}/to_timestamp": pa.float64(),
        "meta/episodes/chunk_index": pa.int64(),
        "meta/episodes/file_index": pa.int64(),
        "stats/action/mean": pa.list_(pa.float64()),
        "stats/action/count": pa.list_(pa.int64()),
        f"stats/{VIDEO_KEY}/mean": pa.list_(pa.list_(pa.list_(pa.float64()))),
        "kosmos/episode_id": pa.string(),
        "kosmos/seed": pa.int64(),
    }.items() <= types.items()
    features = json.loads((out / "meta" / "info.json").read_text())["features"]
    assert {f"stats/{f}/{s}" for f in features for s in STATS} <= set(types)
    episodes = table.to_pylist()
    assert [e["episode_index"] for e in episodes] == list(range(len(stored)))
    instructions = {name: t.instruction for name, t in load_suite("tabletop").tasks.items()}
    at = 0
    for episode, (row, action, _, _) in zip(episodes, _expected_rows(stored), strict=True):
        n = len(action)
        assert episode["length"] == n and episode["tasks"] == [instructions[row["task"]]]
        assert (episode["dataset_from_index"], episode["dataset_to_index"]) == (at, at + n)
        assert episode[f"{video}/from_timestamp"] == pytest.approx(at / FPS, abs=1e-12)
        assert episode[f"{video}/to_timestamp"] == pytest.approx((at + n) / FPS, abs=1e-12)
        assert (episode["data/chunk_index"], episode["data/file_index"], episode[f"{video}/file_index"]) == (0, 0, 0)
        assert episode["kosmos/episode_id"] == row["episode_id"] and episode["kosmos/outcome"] == row["outcome"]
        assert episode["stats/action/count"] == [n]
        np.testing.assert_allclose(episode["stats/action/mean"], action.mean(axis=0), rtol=1e-6)
        at += n


def test_tasks_parquet_reads_back_as_an_index(exported):
    """LeRobot reads meta/tasks.parquet with pandas and takes a task as ``tasks.iloc[i].name``: the
    strings must come back as the index, which pandas' schema metadata says."""
    out, _ = exported
    table = _table(out, "meta/tasks.parquet")
    assert table.column_names == ["task_index", "__index_level_0__"]
    pandas_meta = json.loads(table.schema.metadata[b"pandas"])
    assert pandas_meta["index_columns"] == ["__index_level_0__"]
    assert [c["field_name"] for c in pandas_meta["columns"]] == ["task_index", "__index_level_0__"]
    assert table["task_index"].to_pylist() == [0, 1]
    assert table["__index_level_0__"].to_pylist() == ["put the carrot on the plate", "put the spoon on the towel"]


def test_stats_cover_every_feature_with_lerobots_shapes(exported, stored):
    out, _ = exported
    stats = json.loads((out / "meta" / "stats.json").read_text())
    features = json.loads((out / "meta" / "info.json").read_text())["features"]
    assert set(stats) == set(features)
    shapes = {"action": (7,), "observation.state": (4,), VIDEO_KEY: (3, 1, 1)}
    for name, feature_stats in stats.items():
        assert set(feature_stats) == STATS, name
        for stat, value in feature_stats.items():
            assert np.asarray(value).shape == ((1,) if stat == "count" else shapes.get(name, (1,))), (name, stat)
    expected = list(_expected_rows(stored))
    action = np.concatenate([a for _, a, _, _ in expected])
    frames = np.concatenate([f for _, _, _, f in expected])
    assert stats["action"]["count"] == [len(action)] and stats[VIDEO_KEY]["count"] == [len(frames)]
    np.testing.assert_allclose(stats["action"]["mean"], action.astype(np.float64).mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(stats["action"]["q90"], np.quantile(action.astype(np.float64), 0.9, axis=0))
    pixels = frames.reshape(-1, 3).astype(np.float64) / 255.0
    np.testing.assert_allclose(np.ravel(stats[VIDEO_KEY]["mean"]), pixels.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(np.ravel(stats[VIDEO_KEY]["std"]), pixels.std(axis=0), rtol=1e-9)
    np.testing.assert_allclose(np.ravel(stats[VIDEO_KEY]["q10"]), np.quantile(pixels, 0.1, axis=0), atol=1e-12)
    assert stats["index"]["max"] == [len(action) - 1] and stats["episode_index"]["max"] == [len(stored) - 1]


def test_video_frames_line_up_with_the_rows(exported, stored):
    out, report = exported
    path = out / "videos" / VIDEO_KEY / "chunk-000" / "file-000.mp4"
    assert report.video_files == 1 and report.data_files == 1
    times = _frame_times(path)
    # one frame per row, frame i at exactly i / fps: LeRobot looks frames up by timestamp
    assert times == [Fraction(i, FPS) for i in range(report.frames)]
    decoded = read_video(path)
    source = np.concatenate([f for _, _, _, f in _expected_rows(stored)])
    assert decoded.shape == source.shape
    per_frame = np.abs(decoded.astype(np.int16) - source.astype(np.int16)).mean(axis=(1, 2, 3))
    assert per_frame.max() <= MAX_MEAN_ABS_DIFF, per_frame


def test_files_split_at_their_size_limits(campaign, tmp_path):
    """Limits small enough for one episode per file: every episode in its own data and video file,
    its video starting at 0 s, each file's rows and frames its episode's."""
    out = tmp_path / "split"
    report = export_lerobot(campaign_source(campaign), out, data_file_mb=1e-6, video_file_mb=1e-6)
    assert report.data_files == report.video_files == report.episodes == 8
    info = json.loads((out / "meta" / "info.json").read_text())
    assert (info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (1e-6, 1e-6)
    episodes = _table(out, "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    video = f"videos/{VIDEO_KEY}"
    for e, episode in enumerate(episodes):
        assert (episode["data/file_index"], episode[f"{video}/file_index"]) == (e, e)
        assert episode[f"{video}/from_timestamp"] == 0.0
        data = _table(out, info["data_path"].format(chunk_index=0, file_index=e))
        assert data["episode_index"].to_pylist() == [e] * episode["length"]
        assert data["index"].to_pylist() == list(range(episode["dataset_from_index"], episode["dataset_to_index"]))
        frames = _frame_times(out / info["video_path"].format(video_key=VIDEO_KEY, chunk_index=0, file_index=e))
        assert len(frames) == episode["length"]


def test_filters_pick_policies_and_outcomes(campaign, tmp_path):
    source = campaign_source(campaign, policies=["scripted"])
    report = export_lerobot(source, tmp_path / "scripted")
    episodes = _table(tmp_path / "scripted", "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert report.episodes == 4 and {e["kosmos/policy"] for e in episodes} == {"scripted"}
    with pytest.raises(ValueError, match="no policy 'nope'"):
        campaign_source(campaign, policies=["nope"])
    with pytest.raises(ValueError, match="unknown outcome"):
        campaign_source(campaign, outcomes=["won"])


def test_rows_pair_each_action_with_the_frame_it_was_chosen_on():
    """A world rendering 2 frames per action: frames 0, 2, 4 are the ones actions 0, 1, 2 were
    chosen on; with a robot log, row t holds the log after action t-1 and action t."""
    frames = np.arange(7, dtype=np.uint8)[:, None, None, None] * np.ones((1, 4, 4, 3), np.uint8)
    actions = np.arange(21, dtype=np.float32).reshape(3, 7)
    log = {
        "ee_pos": np.arange(9, dtype=np.float32).reshape(3, 3),
        "gripper_measured": np.array([1, 0.5, 0], np.float32),
    }
    spec = DatasetSpec(fps=5, image_size=(4, 4), camera="image", state_names=("ee_x", "ee_y", "ee_z", "gripper"))
    episode = campaign_rows(frames, actions, log, "do it", spec)
    assert [int(f[0, 0, 0]) for f in episode.frames] == [2, 4]
    np.testing.assert_array_equal(episode.action, actions[1:])
    np.testing.assert_array_equal(episode.state, [[0, 1, 2, 1.0], [3, 4, 5, 0.5]])
    no_log = DatasetSpec(fps=5, image_size=(4, 4), camera="image", state_names=None)
    assert [int(f[0, 0, 0]) for f in campaign_rows(frames, actions, {}, "do it", no_log).frames] == [0, 2, 4]
    with pytest.raises(ValueError, match="6 frames for 3 actions"):
        campaign_rows(frames[:6], actions, log, "do it", spec)


def test_image_stats_are_exact():
    """Histogram statistics equal numpy's on the pixels themselves (quantiles included)."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (5, 6, 8, 3), dtype=np.uint8)
    frames[..., 2] //= 3  # channels with different spreads
    stats = image_stats(channel_histogram(frames), len(frames))
    pixels = frames.reshape(-1, 3).astype(np.float64) / 255.0
    for name, expected in {
        "min": pixels.min(axis=0),
        "max": pixels.max(axis=0),
        "mean": pixels.mean(axis=0),
        "std": pixels.std(axis=0),
        "q01": np.quantile(pixels, 0.01, axis=0),
        "q50": np.quantile(pixels, 0.5, axis=0),
        "q99": np.quantile(pixels, 0.99, axis=0),
    }.items():
        assert stats[name].shape == (3, 1, 1)
        np.testing.assert_allclose(stats[name].ravel(), expected, rtol=1e-12, atol=1e-12, err_msg=name)
    assert stats["count"].tolist() == [5]


def test_demonstrations_export(tmp_path):
    from kosmos_env.policies.checkpoint import unscale_action
    from kosmos_env.training.demos import Demos, record_demos

    path = tmp_path / "demos.npz"
    record_demos(
        ENV,
        policy="scripted:skill=0.5",
        seeds_per_task=1,
        tasks=list(TASKS),
        env_kwargs={"image_size": (64, 64), "horizon": HORIZON},
        out=path,
        progress=False,
    )
    demos = Demos.load(path)
    out = tmp_path / "dataset"
    report = export_lerobot(demos_source(path), out)
    assert report.episodes == 2 and report.frames == len(demos) == 2 * HORIZON
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"]["observation.state"]["names"] == [
        "ee_x",
        "ee_y",
        "ee_z",
        "ee_roll",
        "ee_pitch",
        "ee_yaw",
        "gripper",
    ]
    data = _table(out, "data/chunk-000/file-000.parquet")
    order = np.lexsort((demos.step, demos.episode))  # the file's rows, episode by episode
    np.testing.assert_array_equal(np.asarray(data["observation.state"].to_pylist(), np.float32), demos.state[order])
    low, high = (np.asarray(demos.meta[k], np.float32) for k in ("action_low", "action_high"))
    np.testing.assert_allclose(
        np.asarray(data["action"].to_pylist(), np.float32), unscale_action(demos.action[order], low, high), atol=1e-7
    )
    tasks = _table(out, "meta/tasks.parquet")["__index_level_0__"].to_pylist()
    expected_tasks = [demos.meta["instructions"][i] for i in demos.task[order]]
    assert [tasks[i] for i in data["task_index"].to_pylist()] == expected_tasks
    decoded = read_video(out / "videos" / VIDEO_KEY / "chunk-000" / "file-000.mp4")
    per_frame = np.abs(decoded.astype(np.int16) - demos.image[order].astype(np.int16)).mean(axis=(1, 2, 3))
    assert decoded.shape == demos.image.shape and per_frame.max() <= MAX_MEAN_ABS_DIFF


def test_a_failed_export_leaves_nothing(tmp_path):
    """An episode that does not fit stops the export: no dataset folder, no temporary folder."""
    spec = DatasetSpec(fps=5, image_size=(4, 4), camera="image", state_names=None)
    good = Episode(np.zeros((2, 4, 4, 3), np.uint8), np.zeros((2, 7), np.float32), None, "do it")
    bad = Episode(np.zeros((2, 4, 4, 3), np.uint8), np.full((2, 7), np.nan, np.float32), None, "do it")
    with pytest.raises(ValueError, match="episode 1: actions must be 2 finite 7-D rows"):
        write_dataset(tmp_path / "out", spec, [good, bad])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="camera name"):
        write_dataset(tmp_path / "out", DatasetSpec(5, (4, 4), "a/b", None), [good])
