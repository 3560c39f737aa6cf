"""Re-judging: another judge over a finished campaign's stored rollouts, no rollout regenerated.

``kosmos-env judge RUN --judge SPEC`` reads each judged episode's stored artifacts (video,
actions, robot log) and the simulator's recorded evaluation back from the campaign folder,
rebuilds the :class:`~kosmos_env.judges.base.Rollout` the judge sees, judges the rollouts in
batches (``judge_batch`` where the judge has one; every video is decoded once) and files the
verdicts under the judge's identity in the ledger's ``judgments`` table
(:mod:`kosmos_env.campaign.judgments`), next to the campaign's own judgment, which is never
changed.

Before anything is written: the judge must load (a judge that cannot, e.g. missing weights,
is one clear error) and the campaign must pass ``kosmos-env verify`` (every artifact's bytes
match its hash), so a verdict is never filed against a rollout that is not the one recorded.
Judged episodes are those the campaign judged itself (success, failure, abstained); gate
discards and errors have nothing to judge. A run killed at any point is resumed by running the
same command again: only episodes without this judge's verdict are judged.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from kosmos_env.campaign import judgments as judgment_table
from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger, make_owner

JUDGED_OUTCOMES = ("success", "failure", "abstained")


@dataclass
class RejudgeReport:
    judge_id: str
    label: str
    judged_now: int = 0
    already_judged: int = 0
    eligible: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    # measured, not assumed: episode attempts and stored artifacts added while re-judging
    rollouts_generated: int = 0
    artifacts_added: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def load_judge(spec: Mapping[str, Any], **runtime: Any):
    """Build the judge, turning any failure to load it into one clear ``ValueError``."""
    from kosmos_env.judges import make_judge

    try:
        return make_judge(dict(spec), **runtime)
    except Exception as exc:  # missing weights, bad settings, an unknown type: all the user's to fix
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"judge {judgment_table.judge_label(spec)} could not be loaded ({type(exc).__name__}: {first}); "
            "nothing was judged"
        ) from None


def rejudge(
    out_dir: str | os.PathLike,
    spec: Mapping[str, Any],
    *,
    batch_size: int = 8,
    judge: Any = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> RejudgeReport:
    """Judge every judged episode of the campaign in ``out_dir`` with ``spec`` (see the module docstring).

    ``judge`` is a ready judge object for ``spec`` (tests, warm processes); ``on_batch(done,
    total)`` is called after each recorded batch.
    """
    from kosmos_env.campaign.verify import verify_campaign

    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    out = Path(out_dir)
    if not (out / LEDGER_NAME).is_file():
        raise FileNotFoundError(f"{out} is not a campaign folder (no {LEDGER_NAME})")
    t0 = time.perf_counter()
    built = judge is None
    judge = judge if judge is not None else load_judge(spec)
    load = time.perf_counter() - t0 if built else 0.0  # filed as this judge's model load when it judges anything
    t0 = time.perf_counter()
    verified = verify_campaign(out)
    if not verified.ok:
        raise ValueError(
            f"campaign {out} fails verification ({len(verified.problems)} problem(s); first: "
            f"{verified.problems[0]}); nothing was re-judged: run kosmos-env verify {out}"
        )
    judge_id = judgment_table.judge_identity(spec)
    report = RejudgeReport(judge_id=judge_id, label=judgment_table.judge_label(spec))
    owner = make_owner("judge")
    with Ledger(out / LEDGER_NAME, create=False) as ledger:
        attempts_before, artifacts_before = len(ledger.attempts()), len(ledger.artifacts())
        config = ledger.config()
        done = ledger.episodes("done")
        rows = [r for r in done if r["outcome"] in JUDGED_OUTCOMES]
        for r in done:
            if r["outcome"] not in JUDGED_OUTCOMES:
                report.skipped[r["outcome"]] = report.skipped.get(r["outcome"], 0) + 1
        report.eligible = len(rows)
        seen = judgment_table.judged_episode_ids(ledger, judge_id)
        todo = [r for r in rows if r["episode_id"] not in seen]
        report.already_judged = len(rows) - len(todo)
        if todo:
            judgment_table.ensure_table(ledger)
            if built:
                judgment_table.record_load(ledger, judge_id, load)
        reader = StoredRollouts(out, config)
        from kosmos_env.judges import judge_many

        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            rollouts = [reader.rollout(r) for r in batch]
            verdicts = judge_many(judge, rollouts)
            report.judged_now += judgment_table.record(
                ledger,
                judge_id,
                spec,
                owner,
                [(r["episode_id"], v.to_dict()) for r, v in zip(batch, verdicts, strict=True)],
            )
            if on_batch:
                on_batch(report.already_judged + start + len(batch), len(rows))
        report.rollouts_generated = len(ledger.attempts()) - attempts_before
        report.artifacts_added = len(ledger.artifacts()) - artifacts_before
    report.seconds = time.perf_counter() - t0
    return report


class StoredRollouts:
    """Rebuilds the Rollout of a recorded episode from the campaign folder (no world is run)."""

    def __init__(self, root: Path, config: Any):
        from kosmos_env.spec import load_spec
        from kosmos_env.tasks import load_suite

        self.root = root
        # the frozen overrides are spec fields (image_size, horizon, tasks, ...) as eval applied them
        overrides = {k: v for k, v in dict(config.spec_overrides).items() if k not in ("env_spec", "world_kwargs")}
        spec = load_spec(config.env_id).with_overrides(**overrides)
        self.suite = load_suite(spec.tasks["suite"])
        self.fps = float(spec.render_fps)

    def rollout(self, row: Mapping[str, Any]):
        """``row``: an episode row, or a judge-stage queue row (its ``frames`` artifact holds the
        exact frames the env produced and ``fps`` their rate; they take precedence over the MP4)."""
        from kosmos_env.utils.video import read_video_fps
        from kosmos_env.judges.base import Rollout

        task = row["task"]
        if task not in self.suite.tasks:
            raise ValueError(f"episode {row['episode_id']} has task {task!r}, not in suite {self.suite.name!r}")
        fps = float(row["fps"]) if row.get("fps") else self.fps
        if row.get("frames"):
            frames = _stored_frames(self.root, row["frames"], row["episode_id"])
        elif row.get("video"):
            frames, fps, digest = read_video_fps(self.root / row["video"])
            if digest != Path(row["video"]).stem.lower():
                raise ValueError(f"video {row['video']} of {row['episode_id']} does not match its hash")
        else:
            frames = np.zeros((0, 1, 1, 3), np.uint8)
        actions = np.zeros((0, 7), np.float32)
        if row.get("actions"):
            actions = np.load(self.root / row["actions"], allow_pickle=False)
        log: dict[str, np.ndarray] = {}
        if row.get("log"):
            with np.load(self.root / row["log"], allow_pickle=False) as z:
                log = {k: z[k] for k in z.files}
        return Rollout(
            frames=frames,
            instruction=self.suite.tasks[task].instruction,
            actions=actions,
            fps=fps,
            task=task,
            log=log,
            ground_truth=row.get("ground_truth"),
            meta={"episode_id": row["episode_id"], "policy": row["policy"], "seed": row["seed"]},
        )


def _stored_frames(root: Path, relpath: str, episode_id: str) -> np.ndarray:
    """The lossless frames artifact of a rolled-out episode, checked against its content hash."""
    from kosmos_env.hashing import sha256_file

    path = root / relpath
    if sha256_file(path) != Path(relpath).name.split(".")[0].lower():
        raise ValueError(f"frames {relpath} of {episode_id} do not match their hash")
    with np.load(path, allow_pickle=False) as z:
        frames = z["frames"]
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames {relpath} of {episode_id} are not (T, H, W, 3) uint8")
    return frames
