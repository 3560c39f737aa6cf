"""Runs inside LeRobot's own virtualenv (scripts/build_lerobot_venv.sh with LEROBOT_VERSION=0.4.4),
never in the main one; needs LeRobot and numpy, nothing of kosmos_env.

``python tests/export/lerobot_side.py load DATASET OUT.npz I,J,...``: opens DATASET with
``LeRobotDataset`` once per video backend (pyav, torchcodec) and writes, per backend, whether it
loaded, the dataset's length, episodes and fps, and the items at indices I, J, ... (image, action,
state, task, bookkeeping), plus a ``delta_timestamps`` window at the first index.
``python tests/export/lerobot_side.py reference INFO.json ROOT OUT.json``: writes a small dataset
with LeRobot's own writer, with the features and fps of INFO.json, and reports its files' schemas,
so the main side can compare them with what kosmos-env writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def load(dataset: str, out: str, indices: str) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    wanted = [int(i) for i in indices.split(",")]
    arrays: dict[str, np.ndarray] = {}
    report: dict[str, object] = {}
    for backend in ("pyav", "torchcodec"):
        try:
            ds = LeRobotDataset("local/kosmos-export", root=dataset, video_backend=backend)
            items = [ds[i] for i in wanted]
            camera = ds.meta.video_keys[0]
            window = LeRobotDataset(
                "local/kosmos-export",
                root=dataset,
                video_backend=backend,
                delta_timestamps={camera: [-1 / ds.fps, 0.0], "action": [0.0, 1 / ds.fps]},
            )[wanted[0]]
        except Exception as exc:  # reported, judged on the main side
            report[backend] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}
            continue
        report[backend] = {
            "ok": True,
            "len": len(ds),
            "episodes": ds.num_episodes,
            "fps": ds.fps,
            "camera": camera,
            "tasks": [it["task"] for it in items],
            "window_image_pad": window[f"{camera}_is_pad"].tolist(),
            "window_action_pad": window["action_is_pad"].tolist(),
        }
        for key in ("action", "observation.state", "timestamp", "frame_index", "episode_index", "index", camera):
            arrays[f"{backend}/{key}"] = np.stack([it[key].numpy() for it in items])
    np.savez(out, report=np.array(json.dumps(report)), **arrays)


def reference(info_path: str, root: str, out: str) -> None:
    import pyarrow.parquet as pq
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    info = json.loads(Path(info_path).read_text())
    defaults = ("timestamp", "frame_index", "episode_index", "index", "task_index")
    features = {
        k: {key: (tuple(v) if key == "shape" else v) for key, v in f.items() if key != "info"}
        for k, f in info["features"].items()
        if k not in defaults
    }
    ds = LeRobotDataset.create("local/reference", fps=info["fps"], features=features, root=root, vcodec="h264")
    rng = np.random.default_rng(0)
    for episode in range(2):
        for _ in range(3):
            frame = {"task": f"task {episode}"}
            for key, f in features.items():
                if f["dtype"] == "video":
                    frame[key] = rng.integers(0, 256, f["shape"], dtype=np.uint8)
                else:
                    frame[key] = rng.random(f["shape"], dtype=np.float32)
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()
    root_path = Path(root)

    def schema(rel: str) -> list[list[str]]:
        return [[f.name, str(f.type)] for f in pq.read_schema(root_path / rel)]

    tasks = pq.read_schema(root_path / "meta/tasks.parquet")
    written = json.loads((root_path / "meta/info.json").read_text())
    report = {
        "data": schema("data/chunk-000/file-000.parquet"),
        "episodes": schema("meta/episodes/chunk-000/file-000.parquet"),
        "tasks_columns": tasks.names,
        "tasks_index_columns": json.loads(tasks.metadata[b"pandas"])["index_columns"],
        "info_keys": sorted(written),
        "features": written["features"],
        "stats": {k: sorted(v) for k, v in json.loads((root_path / "meta/stats.json").read_text()).items()},
    }
    Path(out).write_text(json.dumps(report))


if __name__ == "__main__":
    {"load": load, "reference": reference}[sys.argv[1]](*sys.argv[2:])
