"""The judge contract: a finished rollout in, a :class:`Judgment` out.

Abstention (``success is None``) is a first-class outcome: reports count it separately and
never fold it silently into successes or failures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np


@dataclass
class Rollout:
    """Everything a judge may look at, from one finished episode.

    ``frames`` (T, H, W, 3) uint8 holds the initial frame and every frame generated after it.
    ``actions`` (N, 7) are the env-contract actions that were executed. ``log`` is the robot's
    own log, one row per action (``ee_pos`` (N, 3), ``gripper_cmd`` (N,), ``gripper_measured``
    (N,)) where the world has one. ``ground_truth`` is the world's ``evaluate()`` at the end
    where the world is a simulator, else ``None``.
    """

    frames: np.ndarray
    instruction: str
    actions: np.ndarray
    fps: float
    task: str = ""
    log: Mapping[str, np.ndarray] = field(default_factory=dict)
    ground_truth: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def truncated(self, steps: int) -> "Rollout":
        """The same rollout cut after ``steps`` actions (frames scaled by frames per action).

        Ground truth is dropped: it describes the end of the full rollout only.
        """
        n = len(self.actions)
        steps = max(0, min(steps, n))
        per_action = (len(self.frames) - 1) // n if n else 1
        return dataclasses.replace(
            self,
            frames=self.frames[: 1 + steps * per_action],
            actions=self.actions[:steps],
            log={k: np.asarray(v)[:steps] for k, v in self.log.items()},
            ground_truth=None,
        )


@dataclass(frozen=True)
class Judgment:
    """A judge's verdict on one rollout.

    ``success`` is True, False or None (abstained). ``score`` is in [0, 1]. ``votes`` holds the
    individual samples of a quorum judge (parsed fields or the parse error, per vote).
    """

    success: bool | None
    score: float
    rationale: str = ""
    votes: tuple[Mapping[str, Any], ...] = ()
    judge: str = ""
    model_id: str = ""
    prompt_sha256: str = ""
    seconds: float = 0.0
    extras: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.success not in (True, False, None):
            raise ValueError(f"Judgment.success must be True, False or None, got {self.success!r}")
        if not (0.0 <= float(self.score) <= 1.0):
            raise ValueError(f"Judgment.score must be in [0, 1], got {self.score!r}")

    @property
    def abstained(self) -> bool:
        return self.success is None

    @property
    def outcome(self) -> str:
        return "abstained" if self.success is None else ("success" if self.success else "failure")

    def to_dict(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "score": float(self.score),
            "rationale": self.rationale,
            "votes": [dict(v) for v in self.votes],
            "judge": self.judge,
            "model_id": self.model_id,
            "prompt_sha256": self.prompt_sha256,
            "seconds": float(self.seconds),
            "abstained": self.abstained,
            "extras": dict(self.extras),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Judgment":
        return cls(
            success=data.get("success"),
            score=float(data.get("score", 0.0)),
            rationale=str(data.get("rationale", "")),
            votes=tuple(data.get("votes", ())),
            judge=str(data.get("judge", "")),
            model_id=str(data.get("model_id", "")),
            prompt_sha256=str(data.get("prompt_sha256", "")),
            seconds=float(data.get("seconds", 0.0)),
            extras=dict(data.get("extras", {})),
        )


PENDING = {
    "pending": True,
    "success": None,
    "score": 0.0,
    "rationale": "judging deferred to the campaign's judge stage",
}


@runtime_checkable
class Judge(Protocol):
    """Scores finished rollouts. ``name`` identifies the judge in ledgers and reports."""

    name: str

    def judge(self, rollout: Rollout) -> Judgment: ...


@runtime_checkable
class StepJudge(Protocol):
    """A judge that can also score single frames while an episode runs (the env's ``progress`` reward).

    ``score_frames(frames, task)`` returns the probability that ``task`` is solved in each frame
    (n, H, W, 3) uint8; it reads nothing but those pixels and the task name. ``frame_size`` is the
    (height, width) it reads (``None``: any) and ``tasks`` the task names it knows (``None``: any).
    """

    name: str
    frame_size: tuple[int, int] | None
    tasks: tuple[str, ...] | None

    def score_frames(self, frames: np.ndarray, task: str) -> np.ndarray: ...


@dataclass(frozen=True)
class ProgressScore:
    """A progress judge's reading of one chunk: task progress in [0, 1] and whether the task is done.

    ``progress is None`` means the judge abstained (its answer could not be parsed); ``success`` is
    then ``None`` too. ``raw`` keeps the model's answer (empty for judges that have none).
    """

    progress: float | None
    success: bool | None
    raw: str = ""

    def __post_init__(self) -> None:
        if self.progress is None:
            if self.success is not None:
                raise ValueError("an abstaining ProgressScore (progress None) has success None too")
        elif not (0.0 <= float(self.progress) <= 1.0):
            raise ValueError(f"ProgressScore.progress must be in [0, 1] or None, got {self.progress!r}")
        if self.success not in (True, False, None):
            raise ValueError(f"ProgressScore.success must be True, False or None, got {self.success!r}")

    @property
    def abstained(self) -> bool:
        return self.progress is None


@runtime_checkable
class ProgressJudge(Protocol):
    """Scores task progress while an episode runs, several episodes at once (one per sub-env).

    ``score_progress(chunks, instructions, tasks, first_frames=None)`` takes, per episode, the frames
    of its latest chunk (n_i, H, W, 3) uint8, its instruction, its task name and optionally the
    episode's first frame, and returns one :class:`ProgressScore` per episode, in order. It reads
    nothing but those pixels and words; a batching judge scores all episodes in one forward pass.
    ``frame_size`` is the (height, width) it reads (``None``: any) and ``tasks`` the task names it
    knows (``None``: any).
    """

    name: str
    frame_size: tuple[int, int] | None
    tasks: tuple[str, ...] | None

    def score_progress(
        self,
        chunks: Sequence[np.ndarray],
        instructions: Sequence[str],
        tasks: Sequence[str],
        first_frames: Sequence[np.ndarray | None] | None = None,
    ) -> list[ProgressScore]: ...


def progress_first_frames(
    chunks: Sequence[Any],
    instructions: Sequence[str],
    tasks: Sequence[str],
    first_frames: Sequence[np.ndarray | None] | None,
) -> list[np.ndarray | None]:
    """The argument check every :meth:`ProgressJudge.score_progress` makes: one instruction, one task and
    (when given) one first frame per chunk. Returns the first frames, one per chunk (None where absent)."""
    n = len(chunks)
    if len(instructions) != n or len(tasks) != n:
        raise ValueError(
            f"score_progress needs one instruction and one task per chunk: got {n} chunks, "
            f"{len(instructions)} instructions and {len(tasks)} tasks"
        )
    if first_frames is None:
        return [None] * n
    if len(first_frames) != n:
        raise ValueError(f"score_progress got {n} chunks and {len(first_frames)} first frames")
    return list(first_frames)


def judge_identity(judge: Any, spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a judge is, for provenance: its name and class, the settings it was built from (its own
    ``spec`` property when it has one, else the given spec mapping) and, for model judges, the model
    that actually runs (``model_identity``: path or repo, revision, weights sha256)."""
    cls = type(judge)
    ident: dict[str, Any] = {
        "name": str(getattr(judge, "name", cls.__name__)),
        "class": f"{cls.__module__}.{cls.__qualname__}",
    }
    own = getattr(judge, "spec", None)
    if isinstance(own, Mapping):
        ident["spec"] = dict(own)
    elif spec is not None:
        ident["spec"] = dict(spec)
    model = getattr(judge, "model_identity", None)
    if isinstance(model, Mapping):
        ident["model"] = dict(model)
    return ident


def judge_many(judge: Judge, rollouts: Sequence[Rollout]) -> list[Judgment]:
    """Judge several rollouts, batched when the judge offers ``judge_batch``."""
    batch = getattr(judge, "judge_batch", None)
    if callable(batch):
        return list(batch(rollouts))
    return [judge.judge(r) for r in rollouts]
