"""The null world: a baseline world that models nothing.

It takes its first frame (and the robot's starting state) from a real world's ``reset`` (the
same scene the world under test starts from) and then never consults that world again: every
frame it returns is a copy of the first one (``copy the first frame``), the end-effector pose is
integrated from the commands with the workspace clipping, and the measured gripper follows the
command with nothing ever between the fingers. In closed loop the last frame a world was given
*is* the first one, so copy-the-last-frame coincides with it here; as an open-loop frame
predictor, copy-last-frame is the baseline of the frame-error table instead.

It runs through the same env, policies and judges as the world under test, so its agreement
with the truth is what an evaluator gets from the commands and the opening frame alone
(``mode="first"``, the copy-first-frame world). ``mode="blank"`` is the null world proper: every
frame, the first included, is uniform grey, so a policy and a frame judge see no scene at all and
an evaluator gets the commands alone.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kosmos_env.utils.rotations import euler_to_matrix, matrix_to_euler
from kosmos_env.worlds.base import WorldReset, WorldStep

NULL_MODES = ("first", "blank")
BLANK_LEVEL = 128  # mode "blank": every frame, the first included, is this uniform grey


class NullWorld:
    """Wraps a world for its first frame only; see the module docstring.

    ``world`` is the spec's ``world`` section (for ``home_tcp``, ``workspace``, ``max_tilt``).
    """

    def __init__(self, inner: Any, world: Mapping[str, Any], mode: str = "first"):
        if mode not in NULL_MODES:
            raise ValueError(f"null world mode must be one of {NULL_MODES}, got {mode!r}")
        self.inner = inner
        self.mode = mode
        self.frames_per_action = int(getattr(inner, "frames_per_action", 1))
        self.calibration = getattr(inner, "calibration", None)
        self.home = np.asarray(world["home_tcp"], dtype=np.float64)
        self.workspace = np.asarray(world["workspace"], dtype=np.float64)
        self.max_tilt = float(world.get("max_tilt", np.pi))
        self._first: np.ndarray | None = None

    def state_space(self):
        return self.inner.state_space()

    def load(self) -> None:
        self.inner.load()

    def reset(self, task: Any, rng: np.random.Generator) -> WorldReset:
        start = self.inner.reset(task, rng)
        self._first = np.asarray(start.frame).copy()
        if self.mode == "blank":  # not even the opening scene: the world shows nothing at all
            self._first = np.full_like(self._first, BLANK_LEVEL)
        self._pos = np.asarray(start.state.get("ee_pos", self.home), dtype=np.float64).copy()
        self._rot = euler_to_matrix(np.asarray(start.state.get("ee_euler", np.zeros(3)), dtype=np.float64))
        self._gripper = float(np.asarray(start.state.get("gripper", [1.0])).reshape(-1)[0])
        return WorldReset(frame=self._first.copy(), state=self._state())

    def step(self, actions: np.ndarray) -> WorldStep:
        if self._first is None:
            raise RuntimeError("NullWorld.step before reset")
        ee, cmd = [], []
        for a in np.asarray(actions, dtype=np.float64).reshape(-1, 7):
            self._pos = np.clip(self._pos + a[:3], self.workspace[:, 0], self.workspace[:, 1])
            euler = matrix_to_euler(euler_to_matrix(a[3:6]) @ self._rot)
            euler[:2] = np.clip(euler[:2], -self.max_tilt, self.max_tilt)
            self._rot = euler_to_matrix(euler)
            self._gripper = float(np.clip(a[6], 0.0, 1.0))
            ee.append(self._pos.astype(np.float32))
            cmd.append(self._gripper)
        n = len(ee)
        frames = np.repeat(self._first[None], n * self.frames_per_action, axis=0)
        log = {
            "ee_pos": np.asarray(ee, dtype=np.float32),
            "gripper_cmd": np.asarray(cmd, dtype=np.float32),
            # nothing is ever between the fingers: the opening follows the command
            "gripper_measured": np.asarray(cmd, dtype=np.float32),
        }
        return WorldStep(frames=frames, state=self._state(), log=log)

    def evaluate(self) -> None:
        return None

    def close(self) -> None:
        self.inner.close()

    def _state(self) -> dict[str, np.ndarray]:
        return {
            "ee_pos": self._pos.astype(np.float32),
            "ee_euler": matrix_to_euler(self._rot).astype(np.float32),
            "gripper": np.array([self._gripper], dtype=np.float32),
        }
