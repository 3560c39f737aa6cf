"""Stored rollouts of a campaign bundle, as the judge sees them.

A campaign folder (``kosmos-env eval --out DIR``) holds ``results.json`` with one row per
finished episode and a content-addressed artifact store (video .mp4, actions .npy, robot log
.npz). A rollout's *hash* is the sha256 of its video file (the artifact's name, checked against
the bytes when the video is read), so the same clip has the same key in every campaign and in
every split. Episodes without a video (``--no-video`` campaigns, errors) cannot be judged by a
VLM and are skipped with a count.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from kosmos_env.utils.video import read_video_fps  # noqa: F401  (its home is kosmos_env.utils.video)


@dataclass(frozen=True)
class RolloutRef:
    """One judgeable episode of a campaign: where its files are and what is known about it."""

    rollout_hash: str
    episode_id: str
    policy: str
    task: str
    seed: int
    repeat: int
    instruction: str
    video: str  # path relative to the campaign folder
    actions: str | None
    log: str | None
    ground_truth: bool | None  # the simulator's verdict (tabletop state judge), None if unknown
    campaign_id: str
    env_spec_hash: str


@dataclass(frozen=True)
class Campaign:
    """The judgeable rollouts of one campaign folder."""

    root: Path
    campaign_id: str
    env_id: str
    env_spec_hash: str
    rollouts: tuple[RolloutRef, ...]
    skipped: Mapping[str, int]  # reason -> episodes left out


def load_campaign(root: str | os.PathLike) -> Campaign:
    """Read ``results.json`` of a campaign folder into :class:`RolloutRef` rows (sorted by episode id)."""
    root = Path(root)
    path = root / "results.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{root} is not a campaign folder: {path} is missing (run kosmos-env eval --out {root})"
        )
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if data.get("schema") != "kosmos-env/results":
        raise ValueError(f"{path} is not a kosmos-env results bundle (schema {data.get('schema')!r})")
    campaign = data.get("campaign", {})
    suite = _suite(campaign.get("spec", {}))
    refs: list[RolloutRef] = []
    skipped: dict[str, int] = {}
    for row in data.get("per_episode", []):
        video = (row.get("artifacts") or {}).get("video")
        if row.get("outcome") == "error":
            skipped["error"] = skipped.get("error", 0) + 1
            continue
        if not video:
            skipped["no video"] = skipped.get("no video", 0) + 1
            continue
        task = row["task"]
        if suite is not None and task not in suite.tasks:
            raise ValueError(f"episode {row['episode_id']!r} has task {task!r}, not in suite {suite.name!r}")
        refs.append(
            RolloutRef(
                rollout_hash=Path(video).stem.lower(),
                episode_id=str(row["episode_id"]),
                policy=str(row["policy"]),
                task=task,
                seed=int(row["seed"]),
                repeat=int(row.get("repeat", 0)),
                instruction=suite.tasks[task].instruction if suite is not None else task,
                video=video,
                actions=(row.get("artifacts") or {}).get("actions"),
                log=(row.get("artifacts") or {}).get("log"),
                ground_truth=_ground_truth(row),
                campaign_id=str(campaign.get("id", "")),
                env_spec_hash=str(campaign.get("spec_hash", "")),
            )
        )
    refs.sort(key=lambda r: r.episode_id)
    return Campaign(
        root=root,
        campaign_id=str(campaign.get("id", "")),
        env_id=str(campaign.get("env_id", "")),
        env_spec_hash=str(campaign.get("spec_hash", "")),
        rollouts=tuple(refs),
        skipped=skipped,
    )


def _suite(spec: Mapping[str, Any]):
    from kosmos_env.tasks import load_suite

    name = (spec.get("tasks") or {}).get("suite")
    return load_suite(name) if name else None


def _ground_truth(row: Mapping[str, Any]) -> bool | None:
    """The simulator's verdict: ``ground_truth.success``, else the state judge's decided verdict."""
    gt = row.get("ground_truth")
    if isinstance(gt, Mapping) and isinstance(gt.get("success"), bool):
        return gt["success"]
    if row.get("judge") == "state" and isinstance(row.get("success"), bool):
        return row["success"]
    return None


def rollout_from_video(path: str | os.PathLike, instruction: str, rollout_hash: str, task: str = ""):
    """A video-only :class:`~kosmos_env.judges.base.Rollout` (what a VLM judge looks at), hash-checked."""
    from kosmos_env.judges.base import Rollout

    frames, fps, digest = read_video_fps(path)
    if digest != rollout_hash:
        raise ValueError(f"video {path} does not match its rollout hash {rollout_hash[:12]}... (got {digest[:12]}...)")
    n = len(frames) - 1
    return Rollout(
        frames=frames,
        instruction=instruction,
        actions=np.zeros((n, 7), np.float32),
        fps=fps,
        task=task,
        meta={"rollout_hash": rollout_hash},
    )


def load_rollout(campaign: Campaign, ref: RolloutRef):
    """The :class:`~kosmos_env.judges.base.Rollout` a judge sees for ``ref`` (video checked by hash)."""
    from kosmos_env.judges.base import Rollout

    frames, fps, digest = read_video_fps(campaign.root / ref.video)
    if digest != ref.rollout_hash:
        raise ValueError(
            f"video {ref.video} does not match its content hash (got {digest[:12]}...): the bundle is corrupt"
        )
    actions = np.zeros((0, 7), np.float32)
    if ref.actions:
        actions = np.load(campaign.root / ref.actions, allow_pickle=False)
    log: dict[str, np.ndarray] = {}
    if ref.log:
        with np.load(campaign.root / ref.log, allow_pickle=False) as z:
            log = {k: z[k] for k in z.files}
    gt = None if ref.ground_truth is None else {"success": ref.ground_truth}
    return Rollout(
        frames=frames,
        instruction=ref.instruction,
        actions=actions,
        fps=fps,
        task=ref.task,
        log=log,
        ground_truth=gt,
        meta={"episode_id": ref.episode_id, "rollout_hash": ref.rollout_hash},
    )
