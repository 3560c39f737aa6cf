"""The VLM progress judge's pinned prompt and the strict parsing of its answer.

Its sha256 (:data:`PROMPT_SHA256`) is written into every env spec whose ``reward.step_judge`` is a
``vlm_progress`` judge (:data:`kosmos_env.spec.STEP_JUDGE_PINS` carries a copy, checked by a test), so a
change of one character of the system text, either user template or the answer schema is a new spec
hash, and a spec that pins the old hash refuses to build the judge.

The model sees, per episode, the episode's first frame as an image (where the judge is given one) and
the latest chunk's frames as a video, and answers with one JSON object::

    {"progress": 0..1, "success": true|false}

Parsing is as strict as the VLM judge's (:mod:`~kosmos_env.judges.answer`: only a ``<think>`` block,
an ``<answer>`` wrapper and a code fence are stripped; exactly these keys and types), plus one
consistency rule: ``success`` true with ``progress`` below 0.5, or ``progress`` 1 with ``success``
false, contradicts itself and is a parse failure. A failure is an abstention, never a guessed number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kosmos_env.hashing import canonical_hash
from kosmos_env.judges.answer import AnswerError, read_answer_object

PROMPT_VERSION = "kosmos-progress-v1"

SYSTEM_PROMPT = (
    "You are a strict evaluator of robot manipulation. You see a robot arm with a parallel gripper "
    "working on an instruction and say how much of the instruction it has completed so far. Judge "
    "only what is visible in the last frame of the video."
)

#: with the episode's first frame (an image) before the latest frames (a video)
USER_TEMPLATE_WITH_START = (
    'Instruction given to the robot: "{instruction}"\n'
    "The image shows the scene when the robot started. The video shows the robot's latest moments.\n"
    "How much of the instruction has the robot completed by the last frame of the video?\n"
    "Answer with exactly one JSON object and nothing else, with these fields:\n"
    '{{"progress": a number from 0 to 1 (0: nothing done yet, 1: the instruction is fully completed), '
    '"success": true or false (true only if the instruction is completed in the last frame)}}'
)

#: without the first frame (a caller that has none)
USER_TEMPLATE = (
    'Instruction given to the robot: "{instruction}"\n'
    "The video shows the robot's latest moments.\n"
    "How much of the instruction has the robot completed by the last frame of the video?\n"
    "Answer with exactly one JSON object and nothing else, with these fields:\n"
    '{{"progress": a number from 0 to 1 (0: nothing done yet, 1: the instruction is fully completed), '
    '"success": true or false (true only if the instruction is completed in the last frame)}}'
)

ANSWER_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["progress", "success"],
    "properties": {
        "progress": {"type": "number", "minimum": 0, "maximum": 1},
        "success": {"type": "boolean"},
    },
    "consistency": "success true needs progress >= 0.5; progress 1 needs success true",
}

ANSWER_FIELDS = ("progress", "success")
#: below this a claimed success contradicts the claimed progress
MIN_SUCCESS_PROGRESS = 0.5


def prompt_sha256() -> str:
    """sha256 over the canonical JSON of version, system text, both user templates and the answer schema."""
    return canonical_hash(
        {
            "version": PROMPT_VERSION,
            "system": SYSTEM_PROMPT,
            "user_with_start": USER_TEMPLATE_WITH_START,
            "user": USER_TEMPLATE,
            "schema": ANSWER_SCHEMA,
        }
    )


PROMPT_SHA256 = prompt_sha256()


def render_user_text(instruction: str, with_start: bool) -> str:
    """The user turn's text (the image and video go before it in the message)."""
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError("the VLM progress judge needs a non-empty instruction")
    template = USER_TEMPLATE_WITH_START if with_start else USER_TEMPLATE
    return template.format(instruction=instruction.strip().replace('"', "'"))


@dataclass(frozen=True)
class ProgressAnswer:
    """One schema-valid, self-consistent answer."""

    progress: float
    success: bool


def parse_progress_answer(text: str) -> ProgressAnswer:
    """Parse one answer strictly; raise :class:`~kosmos_env.judges.answer.AnswerError` naming the problem."""
    data = read_answer_object(text, ANSWER_FIELDS)
    progress, success = data["progress"], data["success"]
    if isinstance(progress, bool) or not isinstance(progress, (int, float)) or not math.isfinite(progress):
        raise AnswerError(f"'progress' must be a number in [0, 1], got {progress!r}")
    if not 0.0 <= progress <= 1.0:
        raise AnswerError(f"'progress' must be in [0, 1], got {progress}")
    if not isinstance(success, bool):
        raise AnswerError(f"'success' must be true or false, got {success!r}")
    if success and progress < MIN_SUCCESS_PROGRESS:
        raise AnswerError(f"'success' true contradicts 'progress' {progress} (below {MIN_SUCCESS_PROGRESS})")
    if progress == 1.0 and not success:
        raise AnswerError("'progress' 1 (fully completed) contradicts 'success' false")
    return ProgressAnswer(progress=float(progress), success=success)
