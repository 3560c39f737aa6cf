"""Strict parsing of a VLM judge's answer, and the quorum rule over several answers.

The judge asks for one JSON object::

    {"success": true|false, "progress": 0..1, "video_ok": true|false, "reason": "..."}

``success`` is the verdict, ``progress`` how far the task got, ``video_ok`` whether the video
itself is intact (no morphing objects, teleporting arm, frozen or garbled frames: a generated
video that is broken cannot be judged), ``reason`` one sentence of evidence.

Parsing is strict on purpose. Only the usual wrappers are stripped (a ``<think>...</think>``
block, an ``<answer>...</answer>`` block as Cosmos-Reason emits, Markdown code fences,
surrounding whitespace); what remains must be exactly one JSON object with exactly these keys
and types. Anything else is a parse failure, never a guess: a random or confused model must
end as an abstention, not as a success read out of stray text.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

ANSWER_FIELDS = ("success", "progress", "video_ok", "reason")
MAX_REASON_CHARS = 2000
# a failure's score stays below 0.5 and a success's at or above it, whatever progress is claimed
FAILURE_SCORE_CAP = 0.49

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)


class AnswerError(ValueError):
    """The model's answer does not follow the schema (the message says how)."""


@dataclass(frozen=True)
class Answer:
    """One schema-valid answer."""

    success: bool
    progress: float
    video_ok: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "progress": self.progress, "video_ok": self.video_ok, "reason": self.reason}


def strip_wrappers(text: str) -> str:
    """Remove a reasoning block, an ``<answer>`` wrapper and a code fence; nothing else."""
    if not isinstance(text, str):
        raise AnswerError(f"answer must be text, got {type(text).__name__}")
    body = _THINK.sub("", text).strip()
    if "<think>" in body.lower():
        raise AnswerError("unterminated <think> block (the answer was cut off)")
    answers = _ANSWER.findall(body)
    if len(answers) > 1:
        raise AnswerError(f"{len(answers)} <answer> blocks; expected at most one")
    if answers:
        body = answers[0].strip()
    fence = _FENCE.match(body)
    if fence:
        body = fence.group(1).strip()
    return body


def read_answer_object(text: str, fields: Sequence[str]) -> dict[str, Any]:
    """The answer's one JSON object with exactly ``fields`` (wrappers stripped, no duplicate keys, no
    NaN/Infinity); :class:`AnswerError` naming the first problem. Shared by every judge's parser."""
    body = strip_wrappers(text)
    if not body:
        raise AnswerError("empty answer")
    try:
        data = json.loads(body, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise AnswerError(f"not a single JSON object: {exc.msg} at char {exc.pos}") from None
    if not isinstance(data, dict):
        raise AnswerError(f"answer must be a JSON object, got {type(data).__name__}")
    missing = [k for k in fields if k not in data]
    if missing:
        raise AnswerError(f"missing field(s) {missing}")
    extra = sorted(set(data) - set(fields))
    if extra:
        raise AnswerError(f"unexpected field(s) {extra}")
    return data


def parse_answer(text: str) -> Answer:
    """Parse one answer strictly; raise :class:`AnswerError` naming the problem."""
    data = read_answer_object(text, ANSWER_FIELDS)
    success, progress, video_ok, reason = (data[k] for k in ANSWER_FIELDS)
    if not isinstance(success, bool):
        raise AnswerError(f"'success' must be true or false, got {success!r}")
    if not isinstance(video_ok, bool):
        raise AnswerError(f"'video_ok' must be true or false, got {video_ok!r}")
    if isinstance(progress, bool) or not isinstance(progress, (int, float)) or not math.isfinite(progress):
        raise AnswerError(f"'progress' must be a number in [0, 1], got {progress!r}")
    if not 0.0 <= progress <= 1.0:
        raise AnswerError(f"'progress' must be in [0, 1], got {progress}")
    if not isinstance(reason, str) or not reason.strip():
        raise AnswerError("'reason' must be a non-empty string")
    if len(reason) > MAX_REASON_CHARS:
        raise AnswerError(f"'reason' is longer than {MAX_REASON_CHARS} characters")
    return Answer(success=success, progress=float(progress), video_ok=video_ok, reason=reason.strip())


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise AnswerError(f"duplicate field(s) {dupes}")
    return dict(pairs)


def _reject_constant(name: str):
    raise AnswerError(f"{name} is not allowed in an answer")


@dataclass(frozen=True)
class QuorumResult:
    """The outcome of the quorum rule over k samples."""

    success: bool | None
    score: float
    rationale: str
    votes: tuple[Mapping[str, Any], ...]
    n_valid: int
    n_success: int
    n_broken_video: int


def quorum(texts: Sequence[str], min_valid: int) -> QuorumResult:
    """Majority vote over the samples that parse; abstain on a tie or when fewer than ``min_valid`` parse.

    A vote that says the video itself is broken (``video_ok`` false) counts as valid but votes
    neither way: a broken video is not evidence of success or failure. If such votes are the
    majority of the valid ones, the judge abstains. ``score`` is the mean ``progress`` of the
    votes on the winning side, clipped to >= 0.5 for a success and <= 0.49 for a failure so a
    success never scores below a failure (0 on abstention).
    """
    if min_valid < 1:
        raise ValueError(f"min_valid must be >= 1, got {min_valid}")
    votes: list[dict[str, Any]] = []
    answers: list[Answer] = []
    for text in texts:
        try:
            ans = parse_answer(text)
        except AnswerError as exc:
            votes.append({"valid": False, "error": str(exc), "raw": str(text)[:500]})
            continue
        answers.append(ans)
        votes.append({"valid": True, **ans.to_dict()})
    n_valid = len(answers)
    usable = [a for a in answers if a.video_ok]
    n_broken = n_valid - len(usable)
    n_yes = sum(a.success for a in usable)
    n_no = len(usable) - n_yes
    tally = f"{n_valid}/{len(texts)} answers valid, {n_yes} success, {n_no} failure, {n_broken} broken video"
    if n_valid < min_valid:
        return QuorumResult(
            None,
            0.0,
            f"abstain: fewer than {min_valid} valid answers ({tally})",
            tuple(votes),
            n_valid,
            n_yes,
            n_broken,
        )
    if 2 * n_broken > n_valid:
        return QuorumResult(
            None, 0.0, f"abstain: the video looks broken ({tally})", tuple(votes), n_valid, n_yes, n_broken
        )
    if n_yes == n_no:
        return QuorumResult(None, 0.0, f"abstain: tie ({tally})", tuple(votes), n_valid, n_yes, n_broken)
    success = n_yes > n_no
    side = [a for a in usable if a.success == success]
    score = sum(a.progress for a in side) / len(side)
    # keep success and failure on opposite sides of 0.5 whatever progress the model claims
    score = max(score, 0.5) if success else min(score, FAILURE_SCORE_CAP)
    reason = side[0].reason
    return QuorumResult(
        success,
        float(score),
        f"{'success' if success else 'failure'} by majority ({tally}): {reason}",
        tuple(votes),
        n_valid,
        n_yes,
        n_broken,
    )
