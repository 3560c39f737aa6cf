"""Episodes written as a LeRobot dataset: LeRobot's format at codebase version ``v3.0`` (LeRobot 0.4).

What LeRobot's ``LeRobotDataset`` reads (facts from LeRobot 0.4.4, ``lerobot/datasets/utils.py``,
``lerobot_dataset.py``, ``compute_stats.py`` and ``video_utils.py``; the code here is our own)::

    meta/info.json                             codebase_version, fps, features (dtype, shape, names),
                                               totals, file size limits, data_path / video_path templates
    meta/stats.json                            per feature: min, max, mean, std, count, q01 q10 q50 q90 q99
    meta/tasks.parquet                         the task strings (a pandas index) and their task_index
    meta/episodes/chunk-000/file-000.parquet   one row per episode: episode_index, tasks, length, where its
                                               rows are (data/chunk_index, data/file_index,
                                               dataset_from_index, dataset_to_index) and its frames
                                               (videos/<key>/chunk_index, file_index, from_timestamp,
                                               to_timestamp), its stats (stats/<feature>/<stat>)
    data/chunk-000/file-000.parquet            one row per frame: the vector features, timestamp,
                                               frame_index, episode_index, index, task_index
    videos/<key>/chunk-000/file-000.mp4        the camera's frames, episode after episode

Episodes share files: a data or video file is closed when the next episode would take it past its
size limit (recorded in info.json; LeRobot's defaults, 100 MB of data and 200 MB of video, unless
asked), the next file index follows, and every 1000 files open a new chunk. LeRobot finds frame
``i`` of an episode at ``from_timestamp + i / fps`` in the episode's video file and refuses a
frame that is more than 1e-4 s away, so the videos are constant frame rate with every frame at
exactly ``index / fps``: each episode is encoded on its own (H.264, yuv420p, no B-frames, a
keyframe every 2 frames as LeRobot's encoder sets it, so a random frame decodes from at most one
frame back) and the episodes of one file are joined by stream copy, without re-encoding.

Statistics are LeRobot's set, computed over every frame (LeRobot samples images and averages
per-episode quantiles; here the quantiles are exact: pixel values are 8-bit, so per-channel
histograms give them exactly). Images are in [0, 1], per channel, shaped (3, 1, 1).

The dataset is written into a temporary folder beside ``out`` and renamed into place at the end:
an export that fails leaves no half-written dataset, and an existing non-empty folder is never
written into.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from kosmos_env.utils.fileio import current_umask

CODEBASE_VERSION = "v3.0"
#: the LeRobot release whose source these facts were read from
LEROBOT_VERSION_READ = "0.4.4"
CHUNKS_SIZE = 1000  # files per chunk folder
DATA_FILE_MB = 100  # LeRobot's default size limits
VIDEO_FILE_MB = 200
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE + ".parquet"
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
#: the frame bookkeeping every LeRobot dataset has, after its own features
DEFAULT_FEATURES = {
    "timestamp": "float32",
    "frame_index": "int64",
    "episode_index": "int64",
    "index": "int64",
    "task_index": "int64",
}
# H.264 settings: constant quality, every 2nd frame a keyframe, no B-frames (frames leave the
# decoder in presentation order, each at exactly index / fps)
VIDEO_CODEC, VIDEO_PIX_FMT, VIDEO_GOP, VIDEO_CRF = "h264", "yuv420p", 2, 20
#: the env contract's action fields, in order (kosmos_env.actions.ACTION_FIELDS)
ACTION_NAMES = ("dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper")


@dataclass
class Episode:
    """One episode as rows: row ``t`` is what was observed (``frames[t]``, ``state[t]``) and the
    action taken on it (``action[t]``)."""

    frames: np.ndarray  # (T, H, W, 3) uint8
    action: np.ndarray  # (T, 7) float32, the env contract
    state: np.ndarray | None  # (T, D) float32, or None where the source has no state
    task: str  # the instruction, LeRobot's task string
    #: extra per-episode columns of meta/episodes (same keys for every episode), e.g. "kosmos/seed"
    columns: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class DatasetSpec:
    """What every episode of one dataset shares."""

    fps: int
    image_size: tuple[int, int]  # (height, width)
    camera: str  # the video feature is observation.images.<camera>
    state_names: tuple[str, ...] | None  # None: no observation.state
    robot_type: str | None = None
    #: written to meta/kosmos_export.json (where the episodes came from, how rows were built)
    provenance: Mapping[str, Any] = field(default_factory=dict)

    @property
    def video_key(self) -> str:
        return f"observation.images.{self.camera}"


@dataclass
class ExportReport:
    out: str
    episodes: int = 0
    frames: int = 0
    tasks: int = 0
    data_files: int = 0
    video_files: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check_out_folder(out: str | os.PathLike) -> Path:
    """``out`` as a Path, if a dataset may be written there (absent, or an empty folder)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty folder: export into a new folder (nothing is overwritten)")
    return out


def features(spec: DatasetSpec) -> dict[str, dict[str, Any]]:
    """info.json's ``features``: ours first, then LeRobot's frame bookkeeping."""
    height, width = spec.image_size
    out: dict[str, dict[str, Any]] = {
        "action": {"dtype": "float32", "shape": [len(ACTION_NAMES)], "names": list(ACTION_NAMES)},
    }
    if spec.state_names is not None:
        out["observation.state"] = {
            "dtype": "float32",
            "shape": [len(spec.state_names)],
            "names": list(spec.state_names),
        }
    out[spec.video_key] = {
        "dtype": "video",
        "shape": [height, width, 3],
        "names": ["height", "width", "channels"],
        "info": {
            "video.height": height,
            "video.width": width,
            "video.codec": VIDEO_CODEC,
            "video.pix_fmt": VIDEO_PIX_FMT,
            "video.is_depth_map": False,
            "video.fps": spec.fps,
            "video.channels": 3,
            "has_audio": False,
        },
    }
    for name, dtype in DEFAULT_FEATURES.items():
        out[name] = {"dtype": dtype, "shape": [1], "names": None}
    return out


def write_dataset(
    out: str | os.PathLike,
    spec: DatasetSpec,
    episodes: Iterable[Episode],
    *,
    data_file_mb: float = DATA_FILE_MB,
    video_file_mb: float = VIDEO_FILE_MB,
) -> ExportReport:
    """Write ``episodes`` (in order: episode_index 0, 1, ...) as a LeRobot dataset at ``out``.

    ``out`` must not exist or be an empty folder. Raises ValueError for an episode that does not
    fit ``spec`` and when there is no episode at all."""
    out = check_out_folder(out)
    if not re.fullmatch(r"[A-Za-z0-9_-]+", spec.camera):
        raise ValueError(
            f"camera name {spec.camera!r}: use letters, digits, '_' or '-' (the feature is observation.images.<camera>)"
        )
    if spec.fps < 1 or int(spec.fps) != spec.fps:
        raise ValueError(f"LeRobot datasets have a whole number of frames per second, not {spec.fps}")
    height, width = spec.image_size
    if height % 2 or width % 2:
        raise ValueError(f"frames of {height}x{width} pixels: LeRobot's yuv420p videos need even sizes")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp's 0700 would make the dataset private
    try:
        report = _Writer(tmp, spec, data_file_mb, video_file_mb).write(episodes)
        if out.exists():
            out.rmdir()  # empty (checked above): the rename below needs it gone
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report.out = str(out)
    return report


class _Writer:
    """Streams episodes into one dataset folder (one episode's frames in memory at a time)."""

    def __init__(self, root: Path, spec: DatasetSpec, data_file_mb: float, video_file_mb: float):
        if not (data_file_mb > 0 and video_file_mb > 0):
            raise ValueError("file size limits must be positive")
        self.root, self.spec = root, spec
        self.data_limit, self.video_limit = data_file_mb * 2**20, video_file_mb * 2**20
        self.data_file_mb, self.video_file_mb = data_file_mb, video_file_mb
        self.features = features(spec)
        self.scratch = root / ".episodes"
        self.scratch.mkdir()
        self.tasks: dict[str, int] = {}
        self.episode_rows: list[dict[str, Any]] = []
        self.columns: tuple[str, ...] | None = None
        # the open data file: its (chunk, file), tables, bytes
        self.data_at, self.data_tables, self.data_bytes, self.data_files = (0, 0), [], 0, 0
        # the open video file: its (chunk, file), episode videos, bytes, frames so far
        self.video_at, self.video_parts, self.video_bytes, self.video_frames, self.video_files = (0, 0), [], 0, 0, 0
        self.frames_total = 0
        # whole-dataset statistics: vectors kept (small), images as per-channel histograms
        self.vectors: dict[str, list[np.ndarray]] = {}
        self.histogram = np.zeros((3, 256), np.int64)

    def write(self, episodes: Iterable[Episode]) -> ExportReport:
        for episode in episodes:
            self._add(episode)
        if not self.episode_rows:
            raise ValueError("no episode to export (every episode was left out)")
        self._close_data()
        self._close_video()
        shutil.rmtree(self.scratch)
        self._write_meta()
        return ExportReport(
            out=str(self.root),
            episodes=len(self.episode_rows),
            frames=self.frames_total,
            tasks=len(self.tasks),
            data_files=self.data_files,
            video_files=self.video_files,
        )

    # -- one episode ------------------------------------------------------------------------
    def _add(self, ep: Episode) -> None:
        index = len(self.episode_rows)
        frames, action, state = self._checked(ep, index)
        n = len(frames)
        task_index = self.tasks.setdefault(ep.task, len(self.tasks))
        # feature name -> its n rows
        columns = self._columns(action, state, n, index, self.frames_total, task_index)
        episode_video = self.scratch / f"episode-{index:06d}.mp4"
        encode_video(episode_video, frames, self.spec.fps)
        histogram = channel_histogram(frames)

        table = _data_table(columns, self.features)
        if self.data_tables and self.data_bytes + table.nbytes >= self.data_limit:
            self._close_data()
        size = episode_video.stat().st_size
        if self.video_parts and self.video_bytes + size >= self.video_limit:
            self._close_video()
        self.data_tables.append(table)
        self.data_bytes += table.nbytes
        from_ts = self.video_frames / self.spec.fps
        self.video_parts.append(episode_video)
        self.video_bytes += size
        self.video_frames += n

        stats = {name: vector_stats(values) for name, values in columns.items()}
        stats[self.spec.video_key] = image_stats(histogram, n)
        key = self.spec.video_key
        row: dict[str, Any] = {
            "episode_index": index,
            "tasks": [ep.task],
            "length": n,
            "data/chunk_index": self.data_at[0],
            "data/file_index": self.data_at[1],
            "dataset_from_index": self.frames_total,
            "dataset_to_index": self.frames_total + n,
            f"videos/{key}/chunk_index": self.video_at[0],
            f"videos/{key}/file_index": self.video_at[1],
            f"videos/{key}/from_timestamp": from_ts,
            f"videos/{key}/to_timestamp": from_ts + n / self.spec.fps,
        }
        for name, feature_stats in stats.items():
            for stat, value in feature_stats.items():
                row[f"stats/{name}/{stat}"] = value.tolist()
        row["meta/episodes/chunk_index"] = 0
        row["meta/episodes/file_index"] = 0
        row.update(ep.columns)
        self.episode_rows.append(row)

        for name, values in columns.items():
            self.vectors.setdefault(name, []).append(values)
        self.histogram += histogram
        self.frames_total += n

    def _checked(self, ep: Episode, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        where = f"episode {index}"
        frames = np.asarray(ep.frames)
        height, width = self.spec.image_size
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[1:] != (height, width, 3):
            raise ValueError(
                f"{where}: frames must be (T, {height}, {width}, 3) uint8, got {frames.shape} {frames.dtype}"
            )
        n = len(frames)
        if n == 0:
            raise ValueError(f"{where} has no frames")
        action = np.asarray(ep.action, dtype=np.float32)
        if action.shape != (n, len(ACTION_NAMES)) or not np.all(np.isfinite(action)):
            raise ValueError(f"{where}: actions must be {n} finite 7-D rows, got {action.shape}")
        state = None
        if self.spec.state_names is not None:
            state = None if ep.state is None else np.asarray(ep.state, dtype=np.float32)
            dim = len(self.spec.state_names)
            if state is None or state.shape != (n, dim) or not np.all(np.isfinite(state)):
                got = None if state is None else state.shape
                raise ValueError(f"{where}: states must be {n} finite {dim}-D rows, got {got}")
        if not isinstance(ep.task, str) or not ep.task.strip():
            raise ValueError(f"{where} has no task string (its instruction)")
        keys = tuple(ep.columns)
        if self.columns is None:
            self.columns = keys
        elif keys != self.columns:
            raise ValueError(f"{where}: its episode columns {list(keys)} differ from the first's {list(self.columns)}")
        return frames, action, state

    def _columns(
        self, action: np.ndarray, state: np.ndarray | None, n: int, episode_index: int, first: int, task_index: int
    ) -> dict[str, np.ndarray]:
        frame_index = np.arange(n, dtype=np.int64)
        out = {"action": action}
        if state is not None:
            out["observation.state"] = state
        out["timestamp"] = (frame_index / self.spec.fps).astype(np.float32)
        out["frame_index"] = frame_index
        out["episode_index"] = np.full(n, episode_index, np.int64)
        out["index"] = first + frame_index
        out["task_index"] = np.full(n, task_index, np.int64)
        return out

    # -- files --------------------------------------------------------------------------------
    def _close_data(self) -> None:
        if not self.data_tables:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        chunk, file = self.data_at
        path = self.root / DATA_PATH.format(chunk_index=chunk, file_index=file)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables(self.data_tables), path, compression="snappy")
        self.data_files += 1
        self.data_at, self.data_tables, self.data_bytes = _next_file(chunk, file), [], 0

    def _close_video(self) -> None:
        if not self.video_parts:
            return
        chunk, file = self.video_at
        path = self.root / VIDEO_PATH.format(video_key=self.spec.video_key, chunk_index=chunk, file_index=file)
        path.parent.mkdir(parents=True, exist_ok=True)
        join_videos(self.video_parts, path)
        self.video_files += 1
        self.video_at, self.video_parts, self.video_bytes, self.video_frames = _next_file(chunk, file), [], 0, 0

    def _write_meta(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        meta = self.root / "meta"
        path = self.root / EPISODES_PATH.format(chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(self.episode_rows), path, compression="snappy")
        pq.write_table(tasks_table(list(self.tasks)), meta / "tasks.parquet")
        stats = {name: vector_stats(np.concatenate(parts)) for name, parts in self.vectors.items()}
        stats[self.spec.video_key] = image_stats(self.histogram, self.frames_total)
        _write_json(meta / "stats.json", {k: {s: v.tolist() for s, v in st.items()} for k, st in stats.items()})
        n_episodes = len(self.episode_rows)
        info = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": self.spec.robot_type,
            "total_episodes": n_episodes,
            "total_frames": self.frames_total,
            "total_tasks": len(self.tasks),
            "chunks_size": CHUNKS_SIZE,
            "data_files_size_in_mb": self.data_file_mb,
            "video_files_size_in_mb": self.video_file_mb,
            "fps": int(self.spec.fps),
            "splits": {"train": f"0:{n_episodes}"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH,
            "features": self.features,
        }
        _write_json(meta / "info.json", info)
        from kosmos_env import __version__

        provenance = {
            "written_by": f"kosmos-env {__version__}",
            "format": f"LeRobot dataset {CODEBASE_VERSION} (as LeRobot {LEROBOT_VERSION_READ} reads it)",
            **dict(self.spec.provenance),
        }
        _write_json(meta / "kosmos_export.json", provenance)


def _next_file(chunk: int, file: int) -> tuple[int, int]:
    """The (chunk, file) after this one: CHUNKS_SIZE files per chunk."""
    return (chunk + 1, 0) if file == CHUNKS_SIZE - 1 else (chunk, file + 1)


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=4, ensure_ascii=False) + "\n", encoding="utf-8")


def _data_table(columns: Mapping[str, np.ndarray], feature_spec: Mapping[str, Mapping[str, Any]]):
    """One episode's rows as an Arrow table: vectors as fixed-size float32 lists (what LeRobot's
    ``datasets`` features make of a (D,) float32 feature), the rest as scalars of their dtype."""
    import pyarrow as pa

    arrays, names = [], []
    for name, values in columns.items():
        dtype = pa.from_numpy_dtype(np.dtype(feature_spec[name]["dtype"]))
        if values.ndim == 2:
            flat = pa.array(np.ascontiguousarray(values, dtype=values.dtype).reshape(-1), type=dtype)
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, values.shape[1]))
        else:
            arrays.append(pa.array(values, type=dtype))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def tasks_table(tasks: Sequence[str]):
    """meta/tasks.parquet as LeRobot writes it with pandas (``DataFrame({"task_index": ...},
    index=tasks).to_parquet``): the task strings are the index, which pandas stores as the column
    ``__index_level_0__`` and names in the schema's ``pandas`` metadata, so that ``pd.read_parquet``
    gives them back as the index (LeRobot reads a task as ``tasks.iloc[task_index].name``)."""
    import pyarrow as pa

    table = pa.table(
        {
            "task_index": pa.array(range(len(tasks)), type=pa.int64()),
            "__index_level_0__": pa.array(list(tasks), type=pa.string()),
        }
    )

    def column(name, field_name, pandas_type, numpy_type, metadata=None):
        return dict(name=name, field_name=field_name, pandas_type=pandas_type, numpy_type=numpy_type, metadata=metadata)

    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [column(None, None, "unicode", "object", {"encoding": "UTF-8"})],
        "columns": [
            column("task_index", "task_index", "int64", "int64"),
            column(None, "__index_level_0__", "unicode", "object"),
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        # pandas 2's layout of this metadata; pandas 3 (LeRobot 0.4.4's environment) reads it too
        "pandas_version": "2.2.3",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


# -- statistics ----------------------------------------------------------------------------------
def vector_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's statistics of a feature over its rows: per dimension for (N, D), shape (1,) for (N,)."""
    values = np.asarray(values)
    rows = values.reshape(len(values), -1).astype(np.float64)
    stats = {
        "min": values.min(axis=0).reshape(-1),
        "max": values.max(axis=0).reshape(-1),
        "mean": rows.mean(axis=0),
        "std": rows.std(axis=0),
        "count": np.array([len(values)], np.int64),
    }
    quantiles = np.quantile(rows, QUANTILES, axis=0)
    for key, q in zip(QUANTILE_KEYS, quantiles, strict=True):
        stats[key] = q
    return stats


def channel_histogram(frames: np.ndarray) -> np.ndarray:
    """(3, 256) counts of each 8-bit value per colour channel over all pixels of ``frames``."""
    pixels = np.asarray(frames, np.uint8).reshape(-1, 3)
    return np.stack([np.bincount(pixels[:, c], minlength=256) for c in range(3)]).astype(np.int64)


def image_stats(histogram: np.ndarray, n_images: int) -> dict[str, np.ndarray]:
    """LeRobot's image statistics from per-channel histograms: values in [0, 1], shaped (3, 1, 1);
    ``count`` is the number of images."""
    levels = np.arange(256, dtype=np.float64) / 255.0
    counts = histogram.astype(np.float64)
    total = counts.sum(axis=1)
    mean = counts @ levels / total
    std = np.sqrt(np.maximum((counts * (levels[None, :] - mean[:, None]) ** 2).sum(axis=1) / total, 0.0))
    present = histogram > 0
    lowest = np.argmax(present, axis=1)
    highest = 255 - np.argmax(present[:, ::-1], axis=1)
    stats = {
        "min": lowest / 255.0,
        "max": highest / 255.0,
        "mean": mean,
        "std": std,
    }
    stats = {k: v.reshape(3, 1, 1) for k, v in stats.items()}
    stats["count"] = np.array([n_images], np.int64)
    for key, q in zip(QUANTILE_KEYS, QUANTILES, strict=True):
        stats[key] = np.array([_histogram_quantile(h, q) for h in histogram]).reshape(3, 1, 1) / 255.0
    return stats


def _histogram_quantile(counts: np.ndarray, q: float) -> float:
    """The ``q`` quantile of the values 0..255 counted in ``counts``, as ``np.quantile`` gives it
    on the values themselves (linear interpolation between order statistics)."""
    cumulative = np.cumsum(counts)
    position = q * (cumulative[-1] - 1)
    below = math.floor(position)
    low = int(np.searchsorted(cumulative, below, side="right"))
    high = int(np.searchsorted(cumulative, min(below + 1, cumulative[-1] - 1), side="right"))
    return low + (position - below) * (high - low)


# -- video ---------------------------------------------------------------------------------------
def encode_video(path: Path, frames: np.ndarray, fps: int) -> None:
    """(T, H, W, 3) uint8 frames as an H.264 MP4 at ``fps``, frame ``i`` at exactly ``i / fps``."""
    n, height, width = frames.shape[:3]
    raw = f"-f rawvideo -pix_fmt rgb24 -s {width}x{height} -r {int(fps)} -i -".split()
    h264 = f"-an -c:v libx264 -pix_fmt {VIDEO_PIX_FMT} -crf {VIDEO_CRF} -g {VIDEO_GOP} -bf 0".split()
    _ffmpeg(
        [*raw, *h264, "-movflags", "+faststart", str(path)],
        np.ascontiguousarray(frames).tobytes(),
        f"encoding {n} frames",
    )


def join_videos(parts: Sequence[Path], out: Path) -> None:
    """The videos ``parts`` (same codec, size and rate), one after another, as ``out``: a stream
    copy (no re-encoding), each part starting where the previous one ends."""
    if len(parts) == 1:
        os.replace(parts[0], out)
        return
    listing = parts[0].parent / "join.ffconcat"
    # names relative to the list's folder: no quoting of the user's paths is needed
    listing.write_text("ffconcat version 1.0\n" + "".join(f"file '{p.name}'\n" for p in parts), encoding="utf-8")
    concat = ["-f", "concat", "-safe", "0", "-i", str(listing), "-c", "copy", "-movflags", "+faststart", str(out)]
    _ffmpeg(concat, None, f"joining {len(parts)} episode videos")
    listing.unlink()
    for part in parts:
        part.unlink()


def _ffmpeg(args: list[str], stdin: bytes | None, doing: str) -> None:
    """Run the ffmpeg binary imageio-ffmpeg ships (a core dependency) with ``args``."""
    import imageio_ffmpeg

    command = [imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-loglevel", "error", *args]
    proc = subprocess.run(command, input=stdin, capture_output=True, timeout=3600)
    if proc.returncode != 0:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        raise RuntimeError(f"ffmpeg failed {doing} ({tail[0]})")
