"""Judges: score a finished rollout (state oracle, robot log, VLM, quorum, veto).

Imported as ``kosmos_env.judges``. Heavy judges (VLM) import transformers only when built.
"""

from __future__ import annotations

from typing import Any, Mapping

from kosmos_env.judges.base import PENDING, Judge, Judgment, Rollout, judge_many

# judge "type" -> "module:Class"; the class is built with the remaining spec fields as kwargs
JUDGES = {
    "state": "kosmos_env.judges.state:StateJudge",
    "vlm": "kosmos_env.judges.vlm:VLMJudge",
    "robot_log": "kosmos_env.judges.robot_log:RobotLogJudge",
    "action_only": "kosmos_env.judges.action_only:ActionOnlyJudge",
    # logistic regression on command-stream features, fitted on simulator episodes (training seeds)
    "action_learned": "kosmos_env.judges.action_learned:LearnedActionJudge",
    "veto": "kosmos_env.judges.combine:VetoJudge",
    "fusion": "kosmos_env.judges.combine:FusionJudge",
    "optimistic": "kosmos_env.judges.combine:OptimisticJudge",
    # frame classifier trained on simulator frames; the learned tabletop world's vision judge
    "vision_frame": "kosmos_env.judges.vision_frame:FrameVisionJudge",
    # task progress in [0, 1] and a success flag per episode's latest chunk (a Qwen-VL model): the
    # step judge of reward.mode "progress" on worlds the frame classifier cannot read (Bridge)
    "vlm_progress": "kosmos_env.judges.vlm_progress:VLMProgressJudge",
}


def make_judge(spec: "str | Mapping[str, Any] | Judge", **overrides: Any) -> Judge:
    """Build a judge from a name (``"state"``), a spec mapping (``{"type": "vlm", ...}``) or pass one through."""
    if isinstance(spec, str):
        spec = {"type": spec}
    elif not isinstance(spec, Mapping):
        if isinstance(spec, Judge):
            return spec
        raise TypeError(f"a judge must be a name, a mapping with 'type', or a Judge; got {type(spec).__name__}")
    params = dict(spec)
    params.update(overrides)
    kind = params.pop("type", None)
    cls = resolve_judge(kind)
    _check_settings(cls, kind, params)
    return cls(**params)


def _check_settings(cls: type, kind: str, params: Mapping[str, Any]) -> None:
    """Name unknown judge settings in one line (a bare TypeError from the constructor would not)."""
    import inspect

    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):  # a builtin or C-level signature: let the constructor decide
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return  # the judge validates its own extra settings
    known = [n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(
            f"unknown setting(s) {unknown} for judge type {kind!r}; it takes "
            f"{', '.join(known) if known else 'no settings'}"
        )


def resolve_judge(kind: str) -> type:
    """The judge class of ``kind`` (built-in or a ``kosmos_env.judges`` plug-in), checked before it is called."""
    from kosmos_env.plugins import implements, resolve_class

    if not isinstance(kind, str):
        raise ValueError(f"a judge spec needs a string 'type'; known: {sorted(JUDGES)}")
    # judge types are names only: a spec never imports a module:attr of its own choosing
    return resolve_class("judge", kind, JUDGES, implements(Judge), names_only=True)


__all__ = ["Judge", "Judgment", "Rollout", "PENDING", "JUDGES", "make_judge", "judge_many", "resolve_judge"]
