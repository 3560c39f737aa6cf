"""An exported campaign loaded by LeRobot itself (``LeRobotDataset``, LeRobot 0.4.4), frame by frame,
with both of its video backends; and the files compared with a dataset LeRobot's own writer makes
for the same features.

LeRobot cannot share this environment (its releases pin older torch), so it runs in a virtualenv of
its own, built by ``scripts/build_lerobot_venv.sh`` with ``LEROBOT_VERSION=0.4.4
TORCH_VERSION=2.10.0`` (minutes; downloads from PyPI) and cached under ``~/.cache/kosmos-env/``.
The tests run only when asked: ``KOSMOS_LEROBOT_TESTS=1`` with that environment present (or
``KOSMOS_LEROBOT_DATASET_VENV`` pointing at one), or ``KOSMOS_BUILD_LEROBOT_VENV=1`` to build it
first; otherwise they skip and say so. Nothing of kosmos-env is installed there: the LeRobot side
(``lerobot_side.py``) reads only the dataset folder. LeRobot's torchcodec backend needs FFmpeg's
shared libraries on the machine; where they are missing only the pyav backend is checked.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from kosmos_env.campaign.design import make_config
from kosmos_env.campaign.runner import run_campaign
from kosmos_env.export.sources import campaign_source, export_lerobot
from kosmos_env.utils.video import read_video
from tests.support.paths import ROOT

LEROBOT_VERSION = os.environ.get("LEROBOT_DATASET_VERSION", "0.4.4")
TORCH_VERSION = os.environ.get("LEROBOT_DATASET_TORCH_VERSION", "2.10.0")
VENV = Path(
    os.environ.get("KOSMOS_LEROBOT_DATASET_VENV")
    or Path.home() / ".cache" / "kosmos-env" / f"lerobot-venv-{LEROBOT_VERSION}-torch{TORCH_VERSION}"
)
PY = VENV / "bin" / "python"
SIDE = ROOT / "tests" / "export" / "lerobot_side.py"
HORIZON = 4
# see test_lerobot.py: a re-encoded H.264 frame is within this mean absolute difference of its source
MAX_MEAN_ABS_DIFF = 3.0

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lerobot_python():
    if os.environ.get("KOSMOS_LEROBOT_TESTS") != "1" and os.environ.get("KOSMOS_BUILD_LEROBOT_VENV") != "1":
        pytest.skip(
            "LeRobot-in-its-own-environment tests run on request: KOSMOS_LEROBOT_TESTS=1 (needs the environment "
            f"LEROBOT_VERSION={LEROBOT_VERSION} TORCH_VERSION={TORCH_VERSION} scripts/build_lerobot_venv.sh "
            f"builds at {VENV})"
        )
    if not ((VENV / ".complete").is_file() and PY.is_file()):
        if os.environ.get("KOSMOS_BUILD_LEROBOT_VENV") != "1":
            pytest.skip(
                f"no LeRobot {LEROBOT_VERSION} environment at {VENV}: build it with LEROBOT_VERSION={LEROBOT_VERSION} "
                f"TORCH_VERSION={TORCH_VERSION} scripts/build_lerobot_venv.sh (minutes, needs PyPI) or set "
                "KOSMOS_BUILD_LEROBOT_VENV=1; CI does not build it"
            )
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "build_lerobot_venv.sh")],
            check=True,
            timeout=3600,
            env=dict(
                os.environ,
                KOSMOS_LEROBOT_VENV=str(VENV),
                LEROBOT_VERSION=LEROBOT_VERSION,
                TORCH_VERSION=TORCH_VERSION,
            ),
        )
    return PY


def _side(python, *args, timeout=900):
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH="")
    proc = subprocess.run(
        [str(python), str(SIDE), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    config = make_config(
        "Kosmos-Tabletop-v1",
        ["scripted"],
        tasks=["carrot_on_plate", "spoon_on_towel"],
        seeds=2,
        image_size=(64, 64),
        spec_overrides={"horizon": HORIZON},
    )
    run = tmp_path_factory.mktemp("campaign") / "run"
    run_campaign(config, run, progress=False)
    out = tmp_path_factory.mktemp("datasets") / "run"
    export_lerobot(campaign_source(run), out)
    return out


def test_lerobot_loads_the_export_frame_by_frame(lerobot_python, dataset, tmp_path):
    info = json.loads((dataset / "meta" / "info.json").read_text())
    episodes = pq.read_table(dataset / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    first_of_second = episodes[1]["dataset_from_index"]
    indices = [0, first_of_second - 1, first_of_second, info["total_frames"] - 1]
    _side(lerobot_python, "load", dataset, tmp_path / "items.npz", ",".join(map(str, indices)))
    with np.load(tmp_path / "items.npz") as z:
        report = json.loads(str(z["report"]))
        arrays = {k: z[k] for k in z.files if k != "report"}
    assert report["pyav"]["ok"], report["pyav"]
    backends = ["pyav"]
    if report["torchcodec"]["ok"]:
        backends.append("torchcodec")
    else:  # only a machine without FFmpeg's shared libraries may lack it
        assert "libtorchcodec" in report["torchcodec"]["error"] or "FFmpeg" in report["torchcodec"]["error"], report

    data = pq.read_table(dataset / "data/chunk-000/file-000.parquet")
    tasks = pq.read_table(dataset / "meta/tasks.parquet")["__index_level_0__"].to_pylist()
    camera = "observation.images.image"
    source = read_video(dataset / "videos" / camera / "chunk-000" / "file-000.mp4")
    for backend in backends:
        got = report[backend]
        assert (got["len"], got["episodes"], got["fps"], got["camera"]) == (info["total_frames"], 4, 5, camera)
        for n, i in enumerate(indices):
            row = {k: v[i].as_py() for k, v in zip(data.column_names, data.columns, strict=True)}
            np.testing.assert_array_equal(arrays[f"{backend}/action"][n], np.float32(row["action"]))
            np.testing.assert_array_equal(
                arrays[f"{backend}/observation.state"][n], np.float32(row["observation.state"])
            )
            assert arrays[f"{backend}/index"][n] == i and arrays[f"{backend}/episode_index"][n] == row["episode_index"]
            assert arrays[f"{backend}/frame_index"][n] == row["frame_index"]
            assert got["tasks"][n] == tasks[row["task_index"]]
            image = arrays[f"{backend}/{camera}"][n]  # (3, H, W) float in [0, 1]
            assert image.shape == (3, 64, 64)
            diff = np.abs(np.round(image.transpose(1, 2, 0) * 255) - source[i].astype(np.float64)).mean()
            assert diff <= MAX_MEAN_ABS_DIFF, (backend, i, diff)
        # the frame before an episode's first frame is padding, not the previous episode's last
        assert got["window_image_pad"] == [True, False] and got["window_action_pad"] == [False, False]


def test_the_files_match_what_lerobot_writes(lerobot_python, dataset, tmp_path):
    """LeRobot's own writer, given the same features and fps, writes the same columns with the same
    Arrow types, the same info.json keys and features, the same statistics."""
    _side(lerobot_python, "reference", dataset / "meta" / "info.json", tmp_path / "reference", tmp_path / "ref.json")
    ref = json.loads((tmp_path / "ref.json").read_text())

    def schema(rel):
        return [[f.name, str(f.type)] for f in pq.read_schema(dataset / rel)]

    assert schema("data/chunk-000/file-000.parquet") == ref["data"]
    ours = dict(map(tuple, schema("meta/episodes/chunk-000/file-000.parquet")))
    theirs = dict(map(tuple, ref["episodes"]))
    assert {k: ours.get(k) for k in theirs} == theirs
    assert set(ours) - set(theirs) == {k for k in ours if k.startswith("kosmos/")}
    tasks = pq.read_schema(dataset / "meta/tasks.parquet")
    assert tasks.names == ref["tasks_columns"]
    assert json.loads(tasks.metadata[b"pandas"])["index_columns"] == ref["tasks_index_columns"]
    info = json.loads((dataset / "meta" / "info.json").read_text())
    assert sorted(info) == ref["info_keys"] and info["features"] == ref["features"]
    stats = json.loads((dataset / "meta" / "stats.json").read_text())
    assert {k: sorted(v) for k, v in stats.items()} == ref["stats"]
