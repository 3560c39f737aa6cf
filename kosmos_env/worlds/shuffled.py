"""A world that executes other actions than the commanded ones: the shuffled-command control.

A world model that ignores its conditioning still produces plausible video; an evaluator built
on it would rank policies by something other than what they did. Wrapping any world in
:class:`ShuffledCommandWorld` makes that failure on purpose, so an evaluator (judge, gate, study)
can be shown to notice it. ``make_world`` applies it when a spec's ``world.control`` is
``"shuffled"`` (a different world, so a different spec hash).
"""

from __future__ import annotations

from typing import Any

import numpy as np

CONTROLS = ("shuffled",)


class ShuffledCommandWorld:
    """A world that executes other actions than the commanded ones (a world model ignoring
    its conditioning). The env and its gate see the commanded actions; the world executes
    ``source[t]`` (set per episode with :meth:`set_source`) or, with a ``driver`` policy,
    what that policy does from the world's own observation (a world that shows an expert
    solving the task whatever it is told). Without either it runs online (``history`` mode,
    what ``kosmos-env eval --control shuffled`` uses): each step executes a command drawn
    uniformly from the commands given so far in the episode, so the world's motion is decoupled
    in time from the command. Its frames and log follow what it executed."""

    def __init__(self, inner: Any, driver: Any = None, history: bool = False):
        self.inner = inner
        self.driver = driver
        self.history = history
        self._given: list[np.ndarray] = []
        self._rng = np.random.default_rng(0)
        self.frames_per_action = inner.frames_per_action
        self.calibration = inner.calibration
        self._source: np.ndarray | None = None
        self._obs: dict[str, Any] | None = None
        self._t = 0

    def set_source(self, actions: np.ndarray) -> None:
        self._source = np.asarray(actions, dtype=np.float32)

    def state_space(self):
        return self.inner.state_space()

    def load(self) -> None:
        self.inner.load()

    def reset(self, task, rng):
        self._t = 0
        self._given = []
        start = self.inner.reset(task, rng)
        if self.history:  # drawn after the scene is laid out, so the scene is the unwrapped world's
            self._rng = np.random.default_rng(int(rng.integers(2**31)))
        if self.driver is not None:
            self.driver.reset(task.instruction, seed=0)
            self._obs = {"image": start.frame, "instruction": task.instruction, **start.state}
        return start

    def step(self, actions):
        rows = np.asarray(actions).reshape(-1, 7)
        if self.driver is not None:
            frames, logs, result = [], [], None
            for _ in range(len(rows)):
                executed = np.asarray(self.driver.act(self._obs), dtype=np.float32)[None]
                result = self.inner.step(executed)
                self._obs = dict(self._obs, image=result.frames[-1], **result.state)
                frames.append(result.frames)
                logs.append(result.log)
            log = {k: np.concatenate([entry[k] for entry in logs]) for k in logs[0]}
            return type(result)(frames=np.concatenate(frames), state=result.state, log=log)
        if self.history and self._source is None:
            executed = []
            for row in rows:
                self._given.append(np.asarray(row, dtype=np.float32))
                executed.append(self._given[int(self._rng.integers(len(self._given)))])
            self._t += len(rows)
            return self.inner.step(np.stack(executed))
        if self._source is None:
            raise RuntimeError("ShuffledCommandWorld needs set_source(), a driver or history=True before an episode")
        executed = np.stack([self._source[(self._t + i) % len(self._source)] for i in range(len(rows))])
        self._t += len(rows)
        return self.inner.step(executed)

    def evaluate(self):
        return self.inner.evaluate()

    def close(self) -> None:
        self.inner.close()


def wrap_control(control: str, inner: Any) -> Any:
    """The world ``inner`` under the named control (see :data:`CONTROLS`)."""
    if control != "shuffled":
        raise ValueError(f"unknown world control {control!r}; known: {list(CONTROLS)}")
    return ShuffledCommandWorld(inner, history=True)
