"""Weights & Biases logging for evaluation campaigns and for users' own loops.

:class:`WandbLogger` has three calls:

- ``start(config)``: opens the run; ``config`` becomes the run config (the env spec, its hash,
  the campaign design);
- ``log_episode(row, video=None)``: one episode (a results.json ``per_episode`` row, or any
  mapping with policy, task, seed, outcome, ...). Sampled episodes (the first
  ``videos_per_policy`` of each policy that come with a video) also log their rollout as a
  ``wandb.Video`` under ``rollouts/<policy>``; ``video`` is an MP4 path or (T, H, W, 3) uint8
  frames (written to MP4 with :func:`kosmos_env.utils.video.write_mp4`);
- ``finish(per_policy_summary=None)``: logs the episode table (policy, task, seed, repeat,
  outcome, success, score, judge, judgment rationale, gate, steps, stage timings, video) and a
  per-policy table, writes per-policy numbers to the run summary (``<policy>/success_rate``,
  ``<policy>/wilson_95_lo``, ...), and closes the run. Without a summary it is computed from the
  logged rows (Wilson intervals, as everywhere in kosmos-env).

:func:`log_bundle` logs a finished campaign folder through the same three calls.
:class:`LedgerFeed` is what ``kosmos-env eval --wandb`` uses: the main process reads the
campaign ledger whenever the progress display refreshes and logs each episode as soon as it is
recorded (plus running ``progress/*`` scalars), so the dashboard fills while the campaign runs
and workers in other processes (pool, Ray) never need a W&B handle.

Everything works with ``WANDB_MODE=offline`` (or ``mode="offline"``): the run directory then holds
``files/media/table/episodes_*.table.json``, ``files/media/table/policies_*.table.json`` and the
sampled videos under ``files/media/videos/rollouts/``; ``wandb sync`` uploads it later. In run-file
tables W&B stores media cells as placeholders; the full table (videos included) is in the run's
table artifact. ``wandb`` is imported only when a logger starts (optional extra ``wandb``).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

EPISODE_COLUMNS = [
    "episode_id",
    "policy",
    "task",
    "seed",
    "repeat",
    "outcome",
    "success",
    "score",
    "judge",
    "judgment",
    "gate",
    "steps",
    "t_policy",
    "t_world",
    "t_gate",
    "t_judge",
    "t_io",
    "t_total",
    "video_file",
    "video",
]
POLICY_COLUMNS = [
    "policy",
    "n",
    "successes",
    "failures",
    "discarded",
    "abstained",
    "errors",
    "success_rate",
    "wilson_95_lo",
    "wilson_95_hi",
    "worst_case_95_lo",
    "worst_case_95_hi",
]


class WandbLogger:
    """Log episodes, rollout videos and per-policy summaries to one W&B run (see module doc)."""

    def __init__(
        self,
        project: str = "kosmos-env",
        *,
        entity: str | None = None,
        name: str | None = None,
        group: str | None = None,
        tags: list[str] | None = None,
        mode: str | None = None,
        dir: str | os.PathLike | None = None,
        videos_per_policy: int = 4,
        fps: float = 5.0,
    ):
        if videos_per_policy < 0:
            raise ValueError(f"videos_per_policy must be >= 0, got {videos_per_policy}")
        if mode is not None and mode not in ("online", "offline", "disabled"):
            raise ValueError(f"mode must be 'online', 'offline' or 'disabled', got {mode!r}")
        self.project, self.entity, self.name, self.group = project, entity, name, group
        self.tags = list(tags or [])
        self.mode = mode
        self.dir = None if dir is None else str(dir)
        self.videos_per_policy = int(videos_per_policy)
        self.fps = float(fps)
        self.run = None
        self._rows: list[list[Any]] = []
        self._outcomes: dict[str, list[str]] = {}
        self._videos: dict[str, int] = {}
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._wandb = None

    # ------------------------------------------------------------------ the three calls
    def start(self, config: Mapping[str, Any]) -> Any:
        """Open the run with ``config`` as its config; returns the wandb Run."""
        if self.run is not None:
            raise RuntimeError("WandbLogger.start() was already called; use one logger per run")
        try:
            import wandb
        except ImportError as exc:
            raise RuntimeError("W&B logging needs the wandb package: pip install 'kosmos-env[wandb]'") from exc
        self._wandb = wandb
        # read WANDB_DIR / WANDB_MODE now and pass them explicitly: wandb caches its settings from the
        # first init of the process, so later changes to the environment would otherwise be ignored
        run_dir = self.dir or os.environ.get("WANDB_DIR") or None
        mode = self.mode or (
            os.environ.get("WANDB_MODE") if os.environ.get("WANDB_MODE") in ("online", "offline", "disabled") else None
        )
        if run_dir is not None:
            os.makedirs(run_dir, exist_ok=True)
        self.run = wandb.init(
            project=self.project,
            entity=self.entity,
            name=self.name,
            group=self.group,
            tags=self.tags or None,
            dir=run_dir,
            mode=mode,
            job_type="eval",
            config=dict(config),
            reinit="create_new",
        )
        self._tmp = tempfile.TemporaryDirectory(prefix="kosmos-wandb-")
        return self.run

    def log_episode(self, row: Mapping[str, Any], video: str | os.PathLike | np.ndarray | None = None) -> bool:
        """Add one episode; returns True when its video was logged (it was in the sample)."""
        if self.run is None:
            raise RuntimeError("call WandbLogger.start(config) before log_episode()")
        policy = str(row.get("policy"))
        outcome = row.get("outcome")
        self._outcomes.setdefault(policy, []).append(outcome)
        media, video_file = None, None
        if video is not None and self._videos.get(policy, 0) < self.videos_per_policy:
            path = self._video_path(video)
            caption = f"{policy} | {row.get('task')} | seed {row.get('seed')} | {outcome}"
            media = self._wandb.Video(str(path), caption=caption, format="mp4")
            self.run.log({f"rollouts/{_slug(policy)}": media})
            self._videos[policy] = self._videos.get(policy, 0) + 1
            video_file = row.get("artifacts", {}).get("video") if isinstance(row.get("artifacts"), Mapping) else None
            video_file = video_file or os.path.basename(str(path))
        t = row.get("timings") or {}
        judgment = row.get("judgment") or {}
        self._rows.append(
            [
                row.get("episode_id"),
                policy,
                row.get("task"),
                row.get("seed"),
                row.get("repeat"),
                outcome,
                row.get("success"),
                row.get("score"),
                row.get("judge"),
                judgment.get("rationale") if isinstance(judgment, Mapping) else _js(judgment),
                _js(row.get("gate")),
                row.get("steps"),
                *(t.get(k) for k in ("policy", "world", "gate", "judge", "io", "total")),
                video_file,
                media,
            ]
        )
        return media is not None

    def finish(self, per_policy_summary: Mapping[str, Mapping[str, Any]] | None = None) -> str:
        """Log the tables and summaries, close the run; returns the run's local directory."""
        if self.run is None:
            raise RuntimeError("call WandbLogger.start(config) before finish()")
        from kosmos_env.campaign.bundle import summarize_counts

        wandb = self._wandb
        summary = (
            dict(per_policy_summary)
            if per_policy_summary is not None
            else {label: summarize_counts(outcomes) for label, outcomes in self._outcomes.items()}
        )
        table = wandb.Table(columns=EPISODE_COLUMNS, data=self._rows, allow_mixed_types=True)
        prow = []
        for label, s in summary.items():
            wl, wh = s.get("wilson_95") or (None, None)
            cl, ch = s.get("worst_case_95") or (None, None)
            prow.append(
                [
                    label,
                    s.get("n"),
                    s.get("successes"),
                    s.get("failures"),
                    s.get("discarded"),
                    s.get("abstained"),
                    s.get("errors"),
                    s.get("success_rate"),
                    wl,
                    wh,
                    cl,
                    ch,
                ]
            )
            for key, value in zip(POLICY_COLUMNS[1:], prow[-1][1:], strict=True):
                self.run.summary[f"{label}/{key}"] = value
        self.run.log(
            {"episodes": table, "policies": wandb.Table(columns=POLICY_COLUMNS, data=prow, allow_mixed_types=True)}
        )
        run_dir = os.path.dirname(self.run.dir) if self.run.dir else ""
        self.run.finish()
        self.run = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return run_dir

    # ------------------------------------------------------------------ helpers
    def _video_path(self, video: str | os.PathLike | np.ndarray) -> Path:
        if isinstance(video, (str, os.PathLike)):
            path = Path(video)
            if not path.is_file():
                raise FileNotFoundError(f"video {path} does not exist")
            return path
        from kosmos_env.utils.video import write_mp4

        frames = np.asarray(video)
        path = Path(self._tmp.name) / f"rollout-{len(self._rows)}.mp4"
        write_mp4(path, frames, self.fps)
        return path


def campaign_config(results: Mapping[str, Any]) -> dict[str, Any]:
    """The run config for a campaign: env id, spec (as config) and hash, and the design."""
    c = results["campaign"]
    return {
        "env_id": c["env_id"],
        "spec_hash": c["spec_hash"],
        "spec": c["spec"],
        "campaign_id": c["id"],
        "policies": [p["label"] for p in c["policies"]],
        "tasks": c["tasks"],
        "seeds": c["seeds"],
        "repeats": c["repeats"],
        "judge": c["judge"],
        "spec_overrides": c.get("spec_overrides") or {},
        "package_version": results.get("package_version"),
    }


def log_bundle(bundle_dir: str | os.PathLike, logger: WandbLogger | None = None, **logger_kwargs: Any) -> str:
    """Log a finished campaign folder (results.json plus its videos) as one W&B run.

    The run is named after the campaign unless ``name`` is given; returns the run directory.
    """
    root = Path(bundle_dir)
    results = json.loads((root / "results.json").read_text(encoding="utf-8"))
    if logger is None:
        logger_kwargs.setdefault("name", f"{results['campaign']['env_id']}-{results['campaign']['id']}")
        logger_kwargs.setdefault("fps", float(results["campaign"].get("spec", {}).get("render_fps", 5.0)))
        logger = WandbLogger(**logger_kwargs)
    logger.start(campaign_config(results))
    root_r = root.resolve()
    for row in results["per_episode"]:
        rel = (row.get("artifacts") or {}).get("video")
        video = None
        if rel:
            path = (root / rel).resolve()
            if root_r in path.parents and path.is_file():  # never follow a path out of the campaign folder
                video = path
        logger.log_episode(row, video)
    return logger.finish(results["aggregated"]["per_policy"])


class LedgerFeed:
    """Log a running campaign's episodes to W&B as the ledger records them (see module doc).

    ``poll()`` is cheap and throttled to ``min_interval`` seconds; the run opens on the first
    poll that finds the ledger. ``finish(results)`` logs what is left and closes the run with the
    campaign's per-policy summary.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        logger: WandbLogger | None = None,
        min_interval: float = 1.0,
        **logger_kwargs: Any,
    ):
        self.out_dir = Path(out_dir)
        self.logger = logger
        self.logger_kwargs = logger_kwargs
        self.min_interval = float(min_interval)
        self.logged: set[str] = set()
        self._last = float("-inf")
        self._ledger = None
        self._outcomes: dict[str, list[str]] = {}

    def _open(self) -> bool:
        from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger

        if self._ledger is not None:
            return True
        if not (self.out_dir / LEDGER_NAME).is_file():
            return False
        self._ledger = Ledger(self.out_dir / LEDGER_NAME, create=False)
        config = self._ledger.config()
        meta = self._ledger.meta()
        if self.logger is None:
            kwargs = dict(self.logger_kwargs)
            kwargs.setdefault("name", f"{config.env_id}-{meta['campaign_id']}")
            kwargs.setdefault("fps", float(dict(config.spec).get("render_fps", 5.0)))
            self.logger = WandbLogger(**kwargs)
        from kosmos_env import __version__

        self.logger.start(
            {
                "env_id": config.env_id,
                "spec_hash": config.spec_hash,
                "spec": dict(config.spec),
                "campaign_id": meta["campaign_id"],
                "policies": [p.label for p in config.policies],
                "tasks": list(config.tasks),
                "seeds": list(config.seeds),
                "repeats": config.repeats,
                "judge": dict(config.judge),
                "spec_overrides": dict(config.spec_overrides),
                "package_version": __version__,
            }
        )
        return True

    def poll(self, force: bool = False) -> int:
        """Log the episodes recorded since the last poll; returns how many were logged now."""
        import time

        from kosmos_env.campaign.bundle import episode_entry

        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return 0
        self._last = now
        if not self._open():
            return 0
        new = [r for r in self._ledger.episodes("done") if r["episode_id"] not in self.logged]
        new.sort(key=lambda r: (r["finished"] or 0.0, r["ord"]))
        root = self.out_dir.resolve()
        for r in new:
            row = episode_entry(r)
            video = None
            if r.get("video"):
                path = (self.out_dir / r["video"]).resolve()
                if root in path.parents and path.is_file():
                    video = path
            self.logger.log_episode(row, video)
            self.logged.add(r["episode_id"])
            outs = self._outcomes.setdefault(row["policy"], [])
            outs.append(row["outcome"])
            decided = sum(o in ("success", "failure") for o in outs)
            scalars = {"progress/episodes_done": len(self.logged)}
            if decided:
                scalars[f"success_so_far/{_slug(row['policy'])}"] = outs.count("success") / decided
            self.logger.run.log(scalars)
        return len(new)

    def finish(self, results: Mapping[str, Any] | None = None) -> str | None:
        """Log the rest and close the run (None if it never opened: the ledger never appeared)."""
        try:
            self.poll(force=True)
            if self.logger is None or self.logger.run is None:
                return None
            return self.logger.finish(None if results is None else results["aggregated"]["per_policy"])
        finally:
            if self._ledger is not None:
                self._ledger.close()
                self._ledger = None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "policy"


def _js(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)
