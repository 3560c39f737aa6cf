"""W&B logging in offline mode: the run directory holds the episode table, the per-policy table and
the sampled rollout videos. Everything stays in tmp_path (WANDB_DIR and W&B's data/cache dirs)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kosmos_env.publish.wandb_logger import EPISODE_COLUMNS, WandbLogger, log_bundle
from tests.conftest import requires_extra
from tests.support.publish_bundles import campaign

pytestmark = requires_extra("wandb")


@pytest.fixture
def offline(tmp_path, monkeypatch):
    for var, sub in (
        ("WANDB_DIR", "wandb"),
        ("WANDB_DATA_DIR", "data"),
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_ARTIFACT_DIR", "artifacts"),
    ):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return tmp_path / "wandb"


def _table(run_dir: Path, name: str) -> dict:
    (path,) = (run_dir / "files" / "media" / "table").glob(f"{name}_*.table.json")
    return json.loads(path.read_text())


def test_log_bundle_offline_writes_table_videos_and_summaries(tmp_path_factory, offline):
    camp = campaign(tmp_path_factory, "a")
    results = json.loads((camp / "results.json").read_text())
    run_dir = Path(log_bundle(camp, videos_per_policy=1, dir=offline))
    assert run_dir.is_dir() and offline in run_dir.parents and run_dir.name.startswith("offline-run-")
    episodes = _table(run_dir, "episodes")
    assert episodes["columns"] == EPISODE_COLUMNS
    assert len(episodes["data"]) == len(results["per_episode"]) == 6
    col = {c: i for i, c in enumerate(episodes["columns"])}
    logged = {(r[col["policy"]], r[col["seed"]]): r for r in episodes["data"]}
    for row in results["per_episode"]:
        got = logged[(row["policy"], row["seed"])]
        assert got[col["outcome"]] == row["outcome"] and got[col["task"]] == row["task"]
        assert got[col["t_total"]] == pytest.approx(row["timings"]["total"])
        assert got[col["judgment"]] == row["judgment"]["rationale"]
    # one sampled video per policy, copied into the run directory
    videos = sorted((run_dir / "files" / "media" / "videos" / "rollouts").glob("*.mp4"))
    assert len(videos) == 2 and all(v.stat().st_size > 1000 for v in videos)
    assert sum(r[col["video_file"]] is not None for r in episodes["data"]) == 2
    policies = _table(run_dir, "policies")
    rates = {r[0]: r[policies["columns"].index("success_rate")] for r in policies["data"]}
    assert rates == {k: v["success_rate"] for k, v in results["aggregated"]["per_policy"].items()}


def test_user_loop_with_frames_and_computed_summary(offline):
    """A user's own loop: frames instead of files, and finish() computes the per-policy summary."""
    rng = np.random.default_rng(0)
    logger = WandbLogger(project="kosmos-test", dir=offline, videos_per_policy=2, fps=5)
    logger.start({"spec": {"id": "Kosmos-Tabletop-v1"}, "spec_hash": "abc"})
    outcomes = ["success", "failure", "discarded"]
    sampled = []
    for i, outcome in enumerate(outcomes):
        frames = rng.integers(0, 255, size=(6, 32, 32, 3), dtype=np.uint8)
        row = {
            "episode_id": f"p|t|{i}|0",
            "policy": "mine",
            "task": "t",
            "seed": i,
            "repeat": 0,
            "outcome": outcome,
            "success": {"success": True, "failure": False}.get(outcome),
            "timings": {"total": 0.1 * i},
        }
        sampled.append(logger.log_episode(row, frames))
    assert sampled == [True, True, False]  # two videos per policy
    run_dir = Path(logger.finish())
    episodes = _table(run_dir, "episodes")
    assert [r[episodes["columns"].index("outcome")] for r in episodes["data"]] == outcomes
    assert len(list((run_dir / "files" / "media" / "videos" / "rollouts").glob("*.mp4"))) == 2
    policies = _table(run_dir, "policies")
    row = dict(zip(policies["columns"], policies["data"][0], strict=True))
    assert row["policy"] == "mine" and row["n"] == 3 and row["success_rate"] == 0.5 and row["discarded"] == 1
    assert 0 < row["wilson_95_lo"] < 0.5 < row["wilson_95_hi"] < 1


def test_logger_misuse_is_a_clear_error(offline):
    logger = WandbLogger(dir=offline)
    with pytest.raises(RuntimeError, match="start"):
        logger.log_episode({"policy": "x"})
    with pytest.raises(ValueError, match="videos_per_policy"):
        WandbLogger(videos_per_policy=-1)


def test_eval_with_wandb_flag_logs_the_campaign_offline(offline, tmp_path):
    from kosmos_env.cli import main

    out = tmp_path / "camp"
    rc = main(
        [
            "eval",
            "--env",
            "Kosmos-Tabletop-v1",
            "--policy",
            "random",
            "--policy",
            "scripted:skill=1.0",
            "--tasks",
            "carrot_on_plate",
            "--seeds",
            "1",
            "--out",
            str(out),
            "--no-progress",
            "--wandb",
            "kosmos-ci",
        ]
    )
    assert rc == 0
    (run_dir,) = (offline / "wandb").glob("offline-run-*")
    episodes = _table(run_dir, "episodes")
    assert sorted(r[episodes["columns"].index("policy")] for r in episodes["data"]) == ["random", "scripted:skill=1.0"]
    assert len(list((run_dir / "files" / "media" / "videos" / "rollouts").glob("*.mp4"))) == 2
    config = run_dir / "files" / "config.yaml"
    if config.is_file():  # offline runs write the config file on finish in recent wandb versions
        assert "spec_hash" in config.read_text()
