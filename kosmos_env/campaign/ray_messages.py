"""What the Ray executor's actors and driver send each other: typed, picklable records.

An actor never raises for an episode or a rollout it was given: every answer is one of these
records, so the driver has one place that reads answers (:meth:`RayDriver._collect`) and
Ray's own exceptions mean only one thing there, that the actor process or the transport
failed. :class:`Fatal` is the answer of an actor that cannot go on (its worker or judge did
not start, a policy's content hash changed): the driver hands back the work it held for that
actor and stops the campaign with the error.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from kosmos_env.campaign.design import EpisodeKey


@dataclass(frozen=True)
class Artifact:
    """One artifact file an actor wrote, with its bytes (the driver's store may be on another node)."""

    sha256: str
    rel: str  # content-addressed path in the store, e.g. "ab/abcd....mp4"
    size: int
    kind: str  # "video", "actions", "log", ...
    data: bytes

    def entry(self) -> tuple[str, str, int, str]:
        """The ledger's artifact entry (sha256, path, size, kind)."""
        return (self.sha256, self.rel, self.size, self.kind)


@dataclass(frozen=True)
class PolicyRegistration:
    """A policy content hash an actor's runner registered; the driver applies it to the ledger
    (which refuses a hash that changed) before recording the episode."""

    label: str
    content_hash: str
    hub_model_id: str | None
    worker: str


@dataclass(frozen=True)
class EpisodeEnded:
    """One episode an actor finished: its ledger record and artifacts, or its failure."""

    key: EpisodeKey
    record: dict[str, Any] | None = None
    artifacts: tuple[Artifact, ...] = ()
    error: str | None = None  # the traceback text of a failed episode
    infrastructure: bool = False  # the failure is the machine's, not the policy's (never final)

    @classmethod
    def failed(cls, key: EpisodeKey, exc: BaseException) -> "EpisodeEnded":
        text, infrastructure = describe_failure(exc)
        return cls(key, error=text, infrastructure=infrastructure)


@dataclass(frozen=True)
class RolloutReply:
    """A rollout actor's answer: the episodes that ended (one for a single episode; any number of
    lockstep lanes) and the policy registrations made meanwhile."""

    ended: tuple[EpisodeEnded, ...]
    policies: tuple[PolicyRegistration, ...] = ()


@dataclass(frozen=True)
class JudgeReady:
    """A judge actor loaded its judge; ``batch``: rollouts per claim (the judge's own batch size
    unless ``--judge-batch`` was given)."""

    batch: int


@dataclass(frozen=True)
class Verdict:
    """The judge's verdict on one rollout, or why it could not judge it."""

    judgment: dict[str, Any] | None = None
    error: str | None = None
    infrastructure: bool = False


@dataclass(frozen=True)
class JudgeReply:
    """A judge actor's answer for one batch: a verdict per rollout, in order."""

    verdicts: tuple[Verdict, ...]
    seconds: float
    identity: dict[str, Any]
    name: str
    loads: dict[str, Any] = field(default_factory=dict)  # the judge's build, filed with the first episode
    policies: tuple[PolicyRegistration, ...] = ()  # none: judges register no policy


@dataclass(frozen=True)
class Fatal:
    """An actor that cannot go on; the campaign stops with ``error``."""

    error: str
    traceback: str = ""

    @classmethod
    def of(cls, what: str, exc: BaseException) -> "Fatal":
        """``what`` (e.g. "worker could not start") followed by the exception, with its traceback."""
        prefix = f"{what}: " if what else ""
        return cls(
            f"{prefix}{type(exc).__name__}: {exc}",
            "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        )


def describe_failure(exc: BaseException) -> tuple[str, bool]:
    """A failure as the ledger records it: the traceback text, and whether it is infrastructure."""
    from kosmos_env.campaign.failures import is_infrastructure_failure

    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), is_infrastructure_failure(exc)
