"""Judge readiness: does the configured judge tell a real success from its negatives?

Before a campaign trusts a judge's verdicts, the judge watches three videos built from the real
Bridge episode shipped with the package (:mod:`kosmos_env.checks.bridge_reference`, 37 frames of a WidowX
carrying a can to the left):

1. ``real``: the real episode with its own instruction ("move the can to the left") - a real
   success, the judge must say success;
2. ``frozen``: the first frame repeated for the episode's length, same instruction - nothing
   happened, the judge must say not-success;
3. ``mismatched``: the real episode with an instruction it does not fulfil ("put the eggplant
   into the pot"; the eggplant never moves) - the judge must say not-success.

The judge is READY only if all three come out as expected. An abstention counts as not telling
the videos apart (a judge that abstains on everything is not ready). This is a necessary check,
not an accuracy estimate: one episode per case cannot bound a judge's error rate, and a judge
that passes can still be wrong on other scenes. A random model (the tiny test judge) abstains or
guesses, and the check reports it as not ready.

Videos are shown at the env's image size (the frames a campaign's judge would see) and the
episode's 5 fps.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

MISMATCHED_INSTRUCTION = "put the eggplant into the pot"


@dataclass(frozen=True)
class ReadinessCase:
    name: str
    description: str
    instruction: str
    expected_success: bool
    outcome: str = ""  # success / failure / abstained
    score: float = 0.0
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        if self.outcome == "abstained":
            return False
        return (self.outcome == "success") == self.expected_success

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "instruction": self.instruction,
            "expected": "success" if self.expected_success else "not success",
            "outcome": self.outcome,
            "score": self.score,
            "seconds": self.seconds,
            "passed": self.passed,
        }


@dataclass
class ReadinessReport:
    judge: dict[str, Any]
    cases: list[ReadinessCase] = field(default_factory=list)
    image_size: tuple[int, int] = (240, 320)

    @property
    def ready(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "judge": self.judge,
            "image_size": list(self.image_size),
            "cases": [c.to_dict() for c in self.cases],
        }

    def format(self) -> str:
        model = self.judge.get("model") or {}
        where = model.get("path") or model.get("model_id") or ""
        head = f"judge readiness check: judge {self.judge.get('name')}" + (f" ({where})" if where else "")
        lines = [
            head,
            f"  videos: the real Bridge episode (37 frames, 5 fps) and negatives, shown at "
            f"{self.image_size[0]}x{self.image_size[1]}",
        ]
        for c in self.cases:
            mark = (
                "ok"
                if c.passed
                else ("NOT OK (abstained: does not tell them apart)" if c.outcome == "abstained" else "NOT OK")
            )
            lines.append(
                f'  {c.description:<44} "{c.instruction}": {c.outcome:<9} '
                f"(expected {'success' if c.expected_success else 'not success'}) {mark}"
            )
        if self.ready:
            lines.append(
                "READY: the judge calls the real success a success and both negatives not-success "
                "(a necessary check on one episode, not an accuracy estimate)"
            )
        else:
            failed = ", ".join(c.name for c in self.cases if not c.passed)
            lines.append(
                f"NOT READY: the judge does not tell the real episode from its negatives (failed: {failed}); "
                f"do not trust its verdicts in a campaign. Fix: use a capable judge model "
                f"(e.g. nvidia/Cosmos-Reason1-7B weights via judge local_path) or another judge type"
            )
        return "\n".join(lines)


@functools.lru_cache(maxsize=1)
def _real_episode() -> Any:
    """The shipped real episode, decoded once per process (frames are not modified by callers)."""
    from kosmos_env.checks.bridge_reference import load_real_episode

    return load_real_episode()


def readiness_rollouts(image_size: Sequence[int] = (240, 320)) -> list[tuple[ReadinessCase, Any]]:
    """The three (case, rollout) pairs, frames resized (no crop) to ``image_size``."""
    import cv2

    from kosmos_env.checks.bridge_reference import frozen_copy
    from kosmos_env.judges.base import Rollout

    ep = _real_episode()
    h, w = int(image_size[0]), int(image_size[1])
    frames = np.stack([cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in ep.frames])
    actions = np.zeros((len(frames) - 1, 7), np.float32)

    def rollout(video: np.ndarray, instruction: str, kind: str) -> Any:
        return Rollout(
            frames=video,
            instruction=instruction,
            actions=actions,
            fps=ep.fps,
            task="readiness",
            meta={"readiness_case": kind},
        )

    cases = [
        (
            ReadinessCase("real", "real episode, its own instruction", ep.instruction, True),
            rollout(frames, ep.instruction, "real"),
        ),
        (
            ReadinessCase("frozen", "frozen copy (first frame repeated)", ep.instruction, False),
            rollout(frozen_copy(frames), ep.instruction, "frozen"),
        ),
        (
            ReadinessCase("mismatched", "real episode, mismatched instruction", MISMATCHED_INSTRUCTION, False),
            rollout(frames, MISMATCHED_INSTRUCTION, "mismatched"),
        ),
    ]
    return cases


def check_judge(judge: Any, image_size: Sequence[int] = (240, 320), judge_spec: Any = None) -> ReadinessReport:
    """Run the three cases through ``judge`` and say whether it is ready."""
    from dataclasses import replace

    from kosmos_env.judges.base import judge_identity

    report = ReadinessReport(
        judge=judge_identity(judge, judge_spec), image_size=(int(image_size[0]), int(image_size[1]))
    )
    for case, rollout in readiness_rollouts(image_size):
        t0 = time.perf_counter()
        verdict = judge.judge(rollout)
        report.cases.append(
            replace(case, outcome=verdict.outcome, score=float(verdict.score), seconds=time.perf_counter() - t0)
        )
    return report


def run_judge_check(env_id: str | None = None, judge: Any = None, tiny: bool = False, progress: bool = False) -> Any:
    """Build the judge named by ``judge`` (type or JSON spec) or ``env_id``'s spec, then :func:`check_judge`.

    ``tiny`` swaps a VLM judge's model for the tiny random one of :mod:`kosmos_env.testing`.
    ``progress`` checks a progress judge instead (:mod:`kosmos_env.checks.progress_readiness`: the real
    episode's progress must rise, a frozen copy's must not): by default the env's progress step judge
    when its spec has one, else ``vlm_progress`` with its pinned settings.
    """
    from kosmos_env.campaign.design import parse_judge
    from kosmos_env.judges import make_judge
    from kosmos_env.spec import STEP_JUDGE_PINS, load_spec

    spec = load_spec(env_id or "Kosmos-Bridge-v1")
    default = spec.judge
    if progress:
        default = spec.reward.get("step_judge") or {"type": "vlm_progress", **STEP_JUDGE_PINS["vlm_progress"]}
    judge_spec = parse_judge(judge, default)
    if tiny:
        from kosmos_env.testing.tiny_run import tiny_judge_dir, tiny_judge_spec

        kinds = ("vlm_progress",) if progress else ("vlm",)
        if judge_spec.get("type") not in kinds:
            raise ValueError(f"--tiny replaces a {kinds[0]} judge's model; this judge is {judge_spec.get('type')!r}")
        judge_spec = tiny_judge_spec(judge_spec, tiny_judge_dir())
    built = make_judge(dict(judge_spec))
    if progress:
        from kosmos_env.checks.progress_readiness import check_progress_judge

        return check_progress_judge(built, spec.image_size, judge_spec)
    return check_judge(built, spec.image_size, judge_spec)
