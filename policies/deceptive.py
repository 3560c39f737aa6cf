"""Deceptive scripted policies: command streams that look like success but fail in the scene.

They separate an evaluator that models the world from one that reads the actions. Each runs the
scripted pick-and-place (:class:`~kosmos_env.policies.scripted.ScriptedPolicy`, same perception
and servoing) and, in a share ``rate`` of episodes (drawn per episode from the policy's seeded
generator), changes the plan so that the commands still trace grasp, lift, carry and release:

- ``grasp_miss``: the gripper descends and closes 8 cm beside the object, then carries the
  empty hand to the target and opens. Only the scene (the object never moved; the fingers closed
  fully) shows the failure.
- ``wrong_target``: the object is grasped and carried, but placed on the point mirrored through
  the object (away from the target). The robot log shows a perfect pick and place; only where the
  object ends up tells.
- ``knock_away``: the closed gripper first sweeps low through the object, pushing it aside, then
  runs the normal plan at the object's *original* place: an empty grasp, carried and released.

An action-only judge calls all three a success; the simulator does not. ``rate`` in [0, 1]
sets the share of deceived episodes, so the true success is about (1 - rate) times the scripted
policy's at ``skill``, and closely spaced ``rate`` values give closely spaced true success.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kosmos_env.policies.scripted import ScriptedPolicy

MODES = ("grasp_miss", "wrong_target", "knock_away")
MISS_OFFSET = 0.08  # m beside the object: outside the open fingers' reach
PUSH_REACH = 0.09  # m either side of the object along the sweep
_LOW = (0.1, 0.6), (-0.27, 0.27)  # keep waypoints inside the tabletop workspace


def _inside(xy: np.ndarray) -> np.ndarray:
    return np.array([np.clip(xy[0], *_LOW[0]), np.clip(xy[1], *_LOW[1])])


class DeceptivePolicy(ScriptedPolicy):
    """Scripted pick-and-place whose plan is altered in a share ``rate`` of episodes (module doc)."""

    name = "deceptive"

    def __init__(
        self,
        mode: str = "grasp_miss",
        rate: float = 1.0,
        skill: float = 1.0,
        seed: int | None = None,
        env_id: str = "Kosmos-Tabletop-v1",
    ):
        if mode not in MODES:
            raise ValueError(f"deceptive mode must be one of {MODES}, got {mode!r}")
        if not 0.0 <= float(rate) <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {rate}")
        super().__init__(skill=skill, seed=seed, env_id=env_id)
        self.mode = mode
        self.rate = float(rate)
        self.deceiving = False

    def config(self) -> dict[str, Any]:
        return {**super().config(), "mode": self.mode, "rate": self.rate}

    def reset(self, instruction: str, seed: int | None = None) -> None:
        super().reset(instruction, seed)
        # its own generator, so the scripted part draws exactly what ScriptedPolicy would
        draw = np.random.default_rng(None if seed is None else [int(seed), 7]).random()
        self.deceiving = draw < self.rate

    def _make_plan(self, image: np.ndarray, ee: np.ndarray):
        plan = super()._make_plan(image, ee)
        if not plan or not self.deceiving:
            return plan
        obj_xy = plan[1][0][:2].copy()
        target_xy = plan[5][0][:2].copy()
        away = obj_xy - target_xy
        away = away / (np.linalg.norm(away) + 1e-9)
        side = np.array([-away[1], away[0]])  # across the object-to-target line
        if self.mode == "grasp_miss":
            miss = _inside(obj_xy + MISS_OFFSET * side)
            for i in (0, 1, 3):
                plan[i] = (np.array([*miss, plan[i][0][2]]), plan[i][1], plan[i][2])
        elif self.mode == "wrong_target":
            wrong = _inside(obj_xy + (obj_xy - target_xy))
            for i in (4, 5, 7):
                plan[i] = (np.array([*wrong, plan[i][0][2]]), plan[i][1], plan[i][2])
        else:  # knock_away: sweep the closed gripper low through the object, then the normal plan
            low = plan[1][0][2] + 0.01
            start = _inside(obj_xy - PUSH_REACH * side)
            end = _inside(obj_xy + PUSH_REACH * side)
            cruise = plan[0][0][2]
            sweep = [
                (np.array([*start, cruise]), 0.0, 0),
                (np.array([*start, low]), 0.0, 0),
                (np.array([*end, low]), 0.0, 0),
                (np.array([*end, cruise]), 1.0, 0),
            ]
            plan = sweep + plan
        return plan
