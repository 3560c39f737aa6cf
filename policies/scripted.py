"""A scripted pick-and-place policy for the tabletop, from what a policy may see.

It reads only the observation: it finds the object and the target in the first image by
colour (the instruction names them; their colours are in the public task suite), back-projects
their pixels onto the table with the tabletop camera's published calibration, then servoes
the end effector (``obs["ee_pos"]``) through approach, grasp, lift, carry, place and release.

``skill`` in [0, 1] degrades it smoothly: perception error and action noise grow with
``1 - skill`` and the chance of a uniformly random action with ``(1 - skill)**2``. At skill 1
it solves the tasks; at skill 0 every action is random, as for ``RandomPolicy``. Together with ``RandomPolicy`` it gives a known ground-truth ranking.
"""

from __future__ import annotations

import colorsys
from typing import Any, Mapping

import cv2
import numpy as np

from kosmos_env.policies.base import Policy

_MAX_STEP = 0.045  # metres per control step, inside the tabletop's 0.05 action bound
_REACHED = 0.007  # a waypoint is reached within this distance (m)
_CRUISE_Z = 0.10
# how each error source grows with (1 - skill)
_LOCALISATION_STD = 0.02  # m, per axis, drawn once per episode
_ACTION_NOISE_STD = 0.008  # m, per axis, per step


class ScriptedPolicy(Policy):
    """Colour-segmentation + waypoint servoing policy for ``Kosmos-Tabletop-*``."""

    name = "scripted"

    def __init__(self, skill: float = 1.0, seed: int | None = None, env_id: str = "Kosmos-Tabletop-v1"):
        if not 0.0 <= float(skill) <= 1.0:
            raise ValueError(f"skill must be in [0, 1], got {skill}")
        from kosmos_env.spec import load_spec
        from kosmos_env.tasks import load_suite

        self.skill = float(skill)
        self.env_id = env_id
        spec = load_spec(env_id)
        self._camera = spec.world["camera"]
        self._bounds = (spec.action_low_array, spec.action_high_array)
        self._tasks = {t.instruction.lower(): t for t in load_suite(spec.tasks["suite"]).tasks.values()}
        self._calibrations: dict[tuple[int, int], Any] = {}
        self._rng = np.random.default_rng(seed)
        self._task = None

    def config(self) -> dict[str, Any]:
        return {"skill": self.skill, "env_id": self.env_id}

    def reset(self, instruction: str, seed: int | None = None) -> None:
        key = instruction.strip().lower()
        if key not in self._tasks:
            raise ValueError(
                f"ScriptedPolicy does not know the instruction {instruction!r}; it knows {sorted(self._tasks)}"
            )
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._task = self._tasks[key].params
        self._plan: list[tuple[np.ndarray | None, float, int]] | None = None
        self._phase = 0
        self._phase_steps = 0
        err = 1.0 - self.skill
        self._object_error = self._rng.normal(0.0, _LOCALISATION_STD * err, size=2)
        self._target_error = self._rng.normal(0.0, _LOCALISATION_STD * err, size=2)
        self._yaw_error = self._rng.normal(0.0, 0.3 * err)
        self._yaw = 0.0

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        if self._task is None:
            raise RuntimeError("call reset(instruction) before act()")
        if "ee_pos" not in obs:
            raise ValueError("ScriptedPolicy needs obs['ee_pos'] (a tabletop observation)")
        ee = np.asarray(obs["ee_pos"], dtype=np.float64)
        if self._plan is None:
            self._plan = self._make_plan(np.asarray(obs["image"]), ee)
        action = self._servo(ee)
        if "ee_euler" in obs:  # turn the wrist so the fingers close across the object
            yaw_error = self._yaw - float(np.asarray(obs["ee_euler"])[2])
            action[5] = np.clip(yaw_error, -0.2, 0.2)
        err = 1.0 - self.skill
        if err > 0:
            action[:3] += self._rng.normal(0.0, _ACTION_NOISE_STD * err, size=3)
            action[3:6] += self._rng.normal(0.0, 0.03 * err, size=3)
            # quadratic: occasional slips at mid skill, a random policy at skill 0
            if self._rng.random() < err**2:
                low, high = self._bounds
                planned_gripper = action[6]
                action = self._rng.uniform(low, high)
                if self._rng.random() >= err**2:  # mostly a wrong move, rarely a dropped grasp
                    action[6] = planned_gripper
        low, high = self._bounds
        return np.clip(action, low, high).astype(np.float32)

    # -- perception -----------------------------------------------------------------------
    def locate(self, image: np.ndarray, rgba, height: float) -> tuple[np.ndarray, float] | None:
        """Where the thing coloured ``rgba`` lies on the plane z = ``height``: (xy, yaw).

        ``yaw`` is the direction of the footprint's long side (mod pi), from the minimum-area
        rectangle around the back-projected pixels; the gripper aligns with it to grasp across.
        """
        hsv = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2HSV).astype(np.int16)
        hue = int(round(colorsys.rgb_to_hsv(*rgba[:3])[0] * 180)) % 180
        diff = np.abs(hsv[..., 0] - hue)
        diff = np.minimum(diff, 180 - diff)
        mask = (diff <= 10) & (hsv[..., 1] > 100) & (hsv[..., 2] > 40)
        if mask.sum() < 3:
            return None
        vs, us = np.nonzero(mask)
        size = image.shape[:2]
        if size not in self._calibrations:
            from kosmos_env.utils.camera import look_at_calibration

            # the spec's published camera (world.camera), not the world's code: policies never import worlds
            self._calibrations[size] = look_at_calibration(self._camera, size)
        points = self._calibrations[size].backproject_to_plane(np.c_[us + 0.5, vs + 0.5], height)[:, :2]
        (_, _), (w, h), angle = cv2.minAreaRect(points.astype(np.float32))
        yaw = np.deg2rad(angle if w >= h else angle + 90.0)
        yaw = (yaw + np.pi / 2) % np.pi - np.pi / 2  # the gripper is symmetric: fold into [-pi/2, pi/2)
        return points.mean(axis=0), float(yaw)

    # -- planning -------------------------------------------------------------------------
    def _make_plan(self, image: np.ndarray, ee: np.ndarray):
        from kosmos_env.tasks.shapes import object_half_height, target_top  # heights from the task's public params

        obj, target = self._task["object"], self._task["target"]
        obj_half = object_half_height(obj)
        # back-project onto the plane through each thing's centre: its visible pixels (top and
        # sides) straddle that height, so the estimate is not pulled toward the camera
        obj_seen = self.locate(image, obj["rgba"], obj_half)
        target_seen = self.locate(image, target["rgba"], object_half_height(target))
        if obj_seen is None or target_seen is None:  # not visible: nothing sensible to do but wait
            return []
        obj_xy = obj_seen[0] + self._object_error
        target_xy = target_seen[0] + self._target_error
        self._yaw = obj_seen[1] + self._yaw_error
        grasp_z = max(obj_half, 0.008)
        place_z = target_top(target) + obj_half + 0.015
        open_, closed = 1.0, 0.0
        # (waypoint or None to stay, gripper command, steps to dwell once reached)
        return [
            (np.array([*obj_xy, _CRUISE_Z]), open_, 0),
            (np.array([*obj_xy, grasp_z]), open_, 0),
            (None, closed, 2),
            (np.array([*obj_xy, _CRUISE_Z]), closed, 0),
            (np.array([*target_xy, _CRUISE_Z]), closed, 0),
            (np.array([*target_xy, place_z]), closed, 0),
            (None, open_, 2),
            (np.array([*target_xy, _CRUISE_Z + 0.02]), open_, 0),
        ]

    def _servo(self, ee: np.ndarray) -> np.ndarray:
        action = np.zeros(7)
        if not self._plan or self._phase >= len(self._plan):
            action[6] = 1.0  # done (or nothing seen): hold still, open
            return action
        waypoint, gripper, dwell = self._plan[self._phase]
        action[6] = gripper
        self._phase_steps += 1
        if waypoint is None:
            if self._phase_steps >= dwell:
                self._next_phase()
            return action
        delta = waypoint - ee
        dist = np.linalg.norm(delta)
        if dist > _MAX_STEP:
            delta *= _MAX_STEP / dist
        action[:3] = delta
        # advance once this step will reach the waypoint, or give up on it after a while
        if dist - np.linalg.norm(delta) < _REACHED or self._phase_steps > 12:
            self._next_phase()
        return action

    def _next_phase(self) -> None:
        self._phase += 1
        self._phase_steps = 0
