"""The action-only judge: a baseline that reads the policy's commands and nothing else.

No frame, no world, no measured gripper. The end-effector position is integrated from the
commanded deltas with the workspace clipping the tabletop applies (start at ``home_tcp``), and the
gripper is taken to be *holding* whenever it is commanded closed, as if every grasp closed on the
object. That synthetic log goes through the robot-log judge's rules
(:func:`kosmos_env.judges.robot_log.analyse_log`), so the verdict is "the commands traced a
pick, lift, carry and release".

Why it exists: any evaluator of the tabletop must beat it. Where a world ranks policies no
better than this judge, the world adds nothing the action stream did not already say; a policy
whose gripper closes beside the object, or that places on the wrong target, fools this judge and
must not fool a world that models the scene.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from kosmos_env.judges.base import Judgment, Rollout
from kosmos_env.judges.robot_log import LogThresholds, analyse_log

# the tabletop's defaults (Kosmos-Tabletop-v1's world.home_tcp and world.workspace)
DEFAULT_HOME = (0.3, 0.0, 0.15)
DEFAULT_WORKSPACE = ((0.1, 0.6), (-0.3, 0.3), (0.004, 0.3))
HELD_OPENING = 0.5  # the synthetic measured opening while commanded closed: "something between the fingers"


def action_log(
    actions: np.ndarray, home: Sequence[float] = DEFAULT_HOME, workspace: Sequence[Sequence[float]] = DEFAULT_WORKSPACE
) -> dict[str, np.ndarray]:
    """The robot log the commands alone imply: integrated, clipped positions after every action,
    the commanded gripper, and a measured gripper that holds whenever the command is closed."""
    a = np.asarray(actions, dtype=np.float64).reshape(-1, 7)
    ws = np.asarray(workspace, dtype=np.float64)
    if ws.shape != (3, 2):
        raise ValueError(f"workspace must be 3 (low, high) pairs, got shape {ws.shape}")
    pos = np.asarray(home, dtype=np.float64).copy()
    ee = np.empty((len(a), 3))
    for t, act in enumerate(a):
        pos = np.clip(pos + act[:3], ws[:, 0], ws[:, 1])
        ee[t] = pos
    cmd = np.clip(a[:, 6], 0.0, 1.0)
    measured = np.where(cmd < 0.5, np.maximum(cmd, HELD_OPENING), cmd)
    return {"ee_pos": ee, "gripper_cmd": cmd, "gripper_measured": measured}


class ActionOnlyJudge:
    """Judge a rollout from ``rollout.actions`` alone (see the module docstring).

    ``home`` and ``workspace`` default to the tabletop's; the robot-log thresholds can be pinned
    like the robot-log judge's (``{"type": "action_only", "lift_height": 0.03}``).
    """

    name = "action_only"
    model_id = "action-only-v1"

    def __init__(
        self,
        home: Sequence[float] = DEFAULT_HOME,
        workspace: Sequence[Sequence[float]] = DEFAULT_WORKSPACE,
        **thresholds: Any,
    ):
        unknown = set(thresholds) - set(LogThresholds.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown action-only judge setting(s) {sorted(unknown)}")
        self.home = tuple(float(x) for x in home)
        self.workspace = tuple(tuple(float(x) for x in pair) for pair in workspace)
        if len(self.home) != 3 or len(self.workspace) != 3 or any(len(p) != 2 for p in self.workspace):
            raise ValueError("home must be 3 numbers and workspace 3 (low, high) pairs")
        self.thresholds = LogThresholds(**thresholds)

    @classmethod
    def from_world(cls, world: dict[str, Any], **thresholds: Any) -> "ActionOnlyJudge":
        """Take home and workspace from an env spec's ``world`` section."""
        return cls(world.get("home_tcp", DEFAULT_HOME), world.get("workspace", DEFAULT_WORKSPACE), **thresholds)

    def judge(self, rollout: Rollout) -> Judgment:
        start = time.perf_counter()
        ev = analyse_log(action_log(rollout.actions, self.home, self.workspace), self.thresholds)
        parts = [k for k in ("held", "lifted", "carried", "released") if getattr(ev, k)]
        return Judgment(
            success=ev.success,
            score=ev.score,
            rationale=f"{'success' if ev.success else 'failure'} from the commands alone: events {parts or ['none']}",
            judge=self.name,
            model_id=self.model_id,
            seconds=time.perf_counter() - start,
            extras=ev.to_dict(),
        )
