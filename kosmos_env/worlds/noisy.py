"""A world whose dynamics are off by a known amount: graded execution noise, the fidelity ladder's
middle rungs.

A fidelity ladder needs worlds of *graded*, known fidelity between the simulator and a world that
carries nothing. :class:`NoisyDynamicsWorld` wraps any world (the simulator included) and executes
a perturbed version of every command: Gaussian noise on the translation and rotation deltas, with a
standard deviation of ``level`` times the action bound, and the gripper command flipped with
probability ``flip_per_level * level`` per step. ``level = 0`` is the wrapped world exactly. The
env, its gate and its judges see the commanded actions; frames and the robot log follow what the
world executed, as a world model whose action conditioning is imprecise would.

The noise is drawn from a generator seeded by the episode's own ``rng`` after the wrapped world
has laid out its scene, so the scene is the unwrapped world's and a rerun is bit for bit the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: the tabletop's action bounds (Kosmos-Tabletop-v1's spec): metres per step, radians per step
TRANSLATION_BOUND_M = 0.05
ROTATION_BOUND_RAD = 0.25
#: gripper flips per step per unit of level (level 1: one step in ten executes the other gripper command)
FLIP_PER_LEVEL = 0.1


class NoisyDynamicsWorld:
    """``inner`` executing each command with noise of the given ``level`` (>= 0; 0: no noise)."""

    def __init__(self, inner: Any, level: float, flip_per_level: float = FLIP_PER_LEVEL):
        level = float(level)
        if not np.isfinite(level) or level < 0:
            raise ValueError(f"dynamics-noise level must be a finite number >= 0, got {level!r}")
        self.inner = inner
        self.level = level
        self.flip = min(1.0, flip_per_level * level)
        self.frames_per_action = inner.frames_per_action
        self.calibration = inner.calibration
        self._rng = np.random.default_rng(0)

    def __repr__(self) -> str:
        return f"NoisyDynamicsWorld(level={self.level}, flip={self.flip}, inner={type(self.inner).__name__})"

    def state_space(self):
        return self.inner.state_space()

    def load(self) -> None:
        self.inner.load()

    def reset(self, task, rng):
        start = self.inner.reset(task, rng)
        self._rng = np.random.default_rng(int(rng.integers(2**31)))  # after the scene: the scene is unchanged
        return start

    def perturb(self, actions: np.ndarray) -> np.ndarray:
        """The executed actions for ``actions`` (k, 7); draws from this episode's noise generator."""
        rows = np.array(actions, dtype=np.float64).reshape(-1, 7)
        if self.level == 0:
            return rows.astype(np.float32)
        k = len(rows)
        rows[:, :3] += self._rng.normal(0.0, self.level * TRANSLATION_BOUND_M, size=(k, 3))
        rows[:, 3:6] += self._rng.normal(0.0, self.level * ROTATION_BOUND_RAD, size=(k, 3))
        flips = self._rng.random(k) < self.flip
        rows[flips, 6] = 1.0 - rows[flips, 6]
        return rows.astype(np.float32)

    def step(self, actions):
        return self.inner.step(self.perturb(actions))

    def evaluate(self):
        return self.inner.evaluate()

    def close(self) -> None:
        self.inner.close()
