"""Progress-judge readiness: does the progress judge's reading rise along a real episode, and stay flat on a
frozen copy?

The progress reward (``reward.mode = "progress"`` with a progress judge such as ``vlm_progress``) pays a
policy for each rise of the judge's progress. Before training trusts it, the judge reads the real Bridge
episode shipped with the package (:mod:`kosmos_env.checks.bridge_reference`: 37 frames of a WidowX
carrying a can to the left) the way the env feeds it: the first frame, then the 36 later frames in chunks
of 4 (one Bridge step each), each chunk scored with the first frame and the episode's instruction.

1. ``real``: the real episode, its own instruction: the progress curve must **rise**;
2. ``frozen``: the first frame repeated (a world that never moved), same instruction: it must **not**.

A curve rises when the Spearman correlation of progress with the chunk index is at least
:data:`MIN_SPEARMAN` and the last reading is at least :data:`MIN_RISE` above the first (over the chunks
the judge answered). A case where the judge abstained on more than half the chunks fails (it does not tell
the episodes apart), as an abstention fails the VLM judge's check. The judge is READY only if both cases
pass. As with the terminal check, this is a necessary check on one episode, not an accuracy estimate.

All chunks of a case go to the judge in one ``score_progress`` call (a batching judge scores them in one
forward pass).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

#: the Spearman correlation of progress with chunk index a rising curve reaches
MIN_SPEARMAN = 0.5
#: how far the last reading of a rising curve is above its first (progress is in [0, 1])
MIN_RISE = 0.2
#: frames per chunk: one Bridge step renders 4 frames
CHUNK_FRAMES = 4


@dataclass(frozen=True)
class ProgressCase:
    """One episode's progress curve (``None`` where the judge abstained) and what it should do."""

    name: str
    description: str
    instruction: str
    expect_rise: bool
    progress: tuple[float | None, ...] = ()
    success: tuple[bool | None, ...] = ()
    seconds: float = 0.0

    @property
    def answered(self) -> list[tuple[int, float]]:
        return [(i, float(p)) for i, p in enumerate(self.progress) if p is not None]

    @property
    def enough_answers(self) -> bool:
        return bool(self.progress) and 2 * len(self.answered) >= len(self.progress)

    @property
    def spearman(self) -> float:
        """Spearman's rho of progress against chunk index over the answered chunks (nan: fewer than 3,
        or a constant curve)."""
        pts = self.answered
        if len(pts) < 3 or len({p for _, p in pts}) < 2:
            return math.nan
        from scipy.stats import spearmanr

        return float(spearmanr([i for i, _ in pts], [p for _, p in pts]).statistic)

    @property
    def rise(self) -> float:
        """Last answered reading minus the first (0 with fewer than two)."""
        pts = self.answered
        return pts[-1][1] - pts[0][1] if len(pts) >= 2 else 0.0

    @property
    def rises(self) -> bool:
        rho = self.spearman
        return self.enough_answers and not math.isnan(rho) and rho >= MIN_SPEARMAN and self.rise >= MIN_RISE

    @property
    def passed(self) -> bool:
        return self.enough_answers and self.rises == self.expect_rise

    def to_dict(self) -> dict[str, Any]:
        rho = self.spearman
        return {
            "name": self.name,
            "description": self.description,
            "instruction": self.instruction,
            "expected": "rises" if self.expect_rise else "does not rise",
            "progress": list(self.progress),
            "success": list(self.success),
            "abstained": len(self.progress) - len(self.answered),
            "spearman": None if math.isnan(rho) else rho,
            "rise": self.rise,
            "rises": self.rises,
            "seconds": self.seconds,
            "passed": self.passed,
        }


@dataclass
class ProgressReport:
    judge: dict[str, Any]
    cases: list[ProgressCase] = field(default_factory=list)
    image_size: tuple[int, int] = (240, 320)

    @property
    def ready(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "mode": "progress",
            "judge": self.judge,
            "image_size": list(self.image_size),
            "criteria": {"min_spearman": MIN_SPEARMAN, "min_rise": MIN_RISE, "chunk_frames": CHUNK_FRAMES},
            "cases": [c.to_dict() for c in self.cases],
        }

    def format(self) -> str:
        model = self.judge.get("model") or {}
        where = model.get("path") or model.get("model_id") or ""
        lines = [
            f"progress judge readiness check: judge {self.judge.get('name')}" + (f" ({where})" if where else ""),
            f"  the real Bridge episode (first frame, then 9 chunks of {CHUNK_FRAMES} frames, 5 fps) and a frozen "
            f"copy, shown at {self.image_size[0]}x{self.image_size[1]}; a curve rises when Spearman(progress, "
            f"chunk) >= {MIN_SPEARMAN} and last - first >= {MIN_RISE}",
        ]
        for c in self.cases:
            curve = " ".join("-" if p is None else f"{p:.2f}" for p in c.progress)
            rho = c.spearman
            if not c.enough_answers:
                mark = "NOT OK (abstained on most chunks: does not tell them apart)"
            else:
                mark = "ok" if c.passed else "NOT OK"
            lines.append(
                f'  {c.description:<36} "{c.instruction}": progress [{curve}] '
                f"(Spearman {'n/a' if math.isnan(rho) else f'{rho:+.2f}'}, rise {c.rise:+.2f}; expected "
                f"{'rises' if c.expect_rise else 'does not rise'}) {mark}"
            )
        if self.ready:
            lines.append(
                "READY: the judge's progress rises along the real episode and not along the frozen copy "
                "(a necessary check on one episode, not an accuracy estimate)"
            )
        else:
            failed = ", ".join(c.name for c in self.cases if not c.passed)
            lines.append(
                f"NOT READY: the judge's progress does not tell the real episode from a frozen copy (failed: "
                f"{failed}); do not train on its reward. Fix: use a capable judge model (e.g. "
                f"nvidia/Cosmos-Reason1-7B weights via the judge's local_path) or another step judge"
            )
        return "\n".join(lines)


@functools.lru_cache(maxsize=1)
def _real_episode() -> Any:
    """The shipped real episode, decoded once per process (callers do not modify its frames)."""
    from kosmos_env.checks.bridge_reference import load_real_episode

    return load_real_episode()


def episode_chunks(frames: np.ndarray, chunk: int = CHUNK_FRAMES) -> list[np.ndarray]:
    """The frames after the first, in consecutive chunks of ``chunk`` (a short last one kept)."""
    rest = frames[1:]
    return [rest[i : i + chunk] for i in range(0, len(rest), chunk)]


def progress_cases(image_size: Sequence[int] = (240, 320)) -> list[tuple[ProgressCase, np.ndarray]]:
    """The (case, frames) pairs: the real episode and its frozen copy, resized (no crop) to ``image_size``."""
    import cv2

    from kosmos_env.checks.bridge_reference import frozen_copy

    ep = _real_episode()
    h, w = int(image_size[0]), int(image_size[1])
    frames = np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in ep.frames])
    return [
        (ProgressCase("real", "real episode, its own instruction", ep.instruction, True), frames),
        (ProgressCase("frozen", "frozen copy (first frame repeated)", ep.instruction, False), frozen_copy(frames)),
    ]


def check_progress_judge(judge: Any, image_size: Sequence[int] = (240, 320), judge_spec: Any = None) -> ProgressReport:
    """Score both cases' chunks with ``judge`` (one ``score_progress`` call per case) and say whether it is ready."""
    from dataclasses import replace

    from kosmos_env.judges.base import judge_identity

    if not callable(getattr(judge, "score_progress", None)):
        raise ValueError(
            f"judge {getattr(judge, 'name', type(judge).__name__)!r} scores no task progress (no score_progress); "
            f"the progress check needs a progress judge such as 'vlm_progress'"
        )
    report = ProgressReport(
        judge=judge_identity(judge, judge_spec), image_size=(int(image_size[0]), int(image_size[1]))
    )
    for case, frames in progress_cases(image_size):
        chunks = episode_chunks(frames)
        t0 = time.perf_counter()
        scores = judge.score_progress(
            chunks,
            [case.instruction] * len(chunks),
            ["readiness"] * len(chunks),
            first_frames=[frames[0]] * len(chunks),
        )
        if len(scores) != len(chunks):
            raise RuntimeError(f"progress judge returned {len(scores)} scores for {len(chunks)} chunks")
        report.cases.append(
            replace(
                case,
                progress=tuple(None if s.progress is None else float(s.progress) for s in scores),
                success=tuple(s.success for s in scores),
                seconds=time.perf_counter() - t0,
            )
        )
    return report
