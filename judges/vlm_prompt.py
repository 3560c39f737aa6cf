"""The VLM judge's pinned prompt. Its sha256 is part of every env spec that uses the judge.

Changing one character of the system text, the user template or the answer schema changes
:data:`PROMPT_SHA256`; an env spec that pins the old hash then refuses to build the judge, so
a prompt change always means a new env version.
"""

from __future__ import annotations

from kosmos_env.hashing import canonical_hash

PROMPT_VERSION = "kosmos-judge-v1"

SYSTEM_PROMPT = (
    "You are a strict evaluator of robot manipulation videos. You watch a video of a robot arm "
    "with a parallel gripper and decide whether it completed the instruction by the last frame. "
    "Judge only what is visible. If the video itself is broken (objects appear, vanish or change "
    "shape, the arm teleports, frames are frozen or garbled), say so."
)

USER_TEMPLATE = (
    'Instruction given to the robot: "{instruction}"\n'
    "Did the robot complete the instruction by the end of the video?\n"
    "Answer with exactly one JSON object and nothing else, with these fields:\n"
    '{{"success": true or false, "progress": a number from 0 to 1 (how much of the task was done), '
    '"video_ok": true or false (false if the video itself is broken), '
    '"reason": one sentence of visual evidence}}'
)

ANSWER_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["success", "progress", "video_ok", "reason"],
    "properties": {
        "success": {"type": "boolean"},
        "progress": {"type": "number", "minimum": 0, "maximum": 1},
        "video_ok": {"type": "boolean"},
        "reason": {"type": "string", "minLength": 1},
    },
}


def prompt_sha256() -> str:
    """sha256 over the canonical JSON of version, system text, user template and answer schema."""
    return canonical_hash(
        {"version": PROMPT_VERSION, "system": SYSTEM_PROMPT, "user": USER_TEMPLATE, "schema": ANSWER_SCHEMA}
    )


PROMPT_SHA256 = prompt_sha256()


def render_user_text(instruction: str) -> str:
    """The user turn's text for one instruction (the video goes before it in the message)."""
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError("the VLM judge needs a non-empty instruction")
    return USER_TEMPLATE.format(instruction=instruction.strip().replace('"', "'"))
