"""The gate's decision on one world call (:class:`GateVerdict`), as the env reports and stores it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class GateVerdict:
    """The gate's decision on one world call.

    ``score`` in [0, 1] is the call's worst motion-consistency score (1 = the visible motion
    matches the command; computed for every frame, also where nothing is demanded).
    ``frames`` lists the offending frames' indices within the call, ``episode_frames`` the same
    as indices into the episode's frames (0 = the reset frame).
    """

    passed: bool
    score: float
    reason: str
    check: str = ""
    frames: list[int] = field(default_factory=list)
    episode_frames: list[int] = field(default_factory=list)
    thresholds: dict[str, Any] = field(default_factory=dict)
    segments: list[dict[str, Any]] = field(default_factory=list)
    episode: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": bool(self.passed),
            "score": float(self.score),
            "reason": self.reason,
            "check": self.check,
            "frames": list(self.frames),
            "episode_frames": list(self.episode_frames),
            "thresholds": dict(self.thresholds),
            "segments": [dict(s) for s in self.segments],
            "episode": dict(self.episode),
        }
