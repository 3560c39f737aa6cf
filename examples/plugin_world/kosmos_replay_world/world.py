"""``ReplayWorld``: frames come from a recording, never from the actions.

Why it is useful: it is an *open-loop control*. Every policy sees exactly the same video, so

- a judge that scores policies differently on it is reacting to something other than the world
  (its own noise, or the instruction), and its true positive rate here must be zero: the
  recording does not show any task of the suite being done;
- the action-consistency gate, which should flag worlds whose frames ignore the commands, can
  be tested on real motion that no command produced (a gate without a direction check passes
  it; one with a robot log or calibration should not).

The recording is the real Bridge episode Kosmos-Env ships (``world.episode = "real"``) or one
of its derived negatives (``"frozen"``, ``"panned"``, ``"shuffled"``, see
:mod:`kosmos_env.checks.bridge_reference`). Each action advances the recording by one frame; past the
last frame the last frame is held. There is no simulator state: :meth:`evaluate` reports what
the recording shows, the same for every policy.

It implements the ``kosmos_env.worlds.WorldModel`` protocol method by method: Kosmos-Env checks
that before it builds the class.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kosmos_env.worlds.base import WorldReset, WorldStep

EPISODES = ("real", "frozen", "panned", "shuffled")


class ReplayWorld:
    """Plays ``spec.world["episode"]`` back at the spec's image size, one frame per action."""

    frames_per_action = 1
    calibration = None  # a recording of an unknown camera: the gate runs calibration-free

    def __init__(self, spec: Any, **kwargs: Any):
        params: Mapping[str, Any] = spec.world
        unknown = set(params) - {"type", "episode", "seed", "start"}
        if unknown:
            raise ValueError(f"replay world: unknown world field(s) {sorted(unknown)}; known: episode, seed, start")
        self.episode = params.get("episode", "real")
        if self.episode not in EPISODES:
            raise ValueError(f"replay world: world.episode must be one of {EPISODES}, got {self.episode!r}")
        self.seed = int(params.get("seed", 0))
        # first frame shown (the real recording's first two frames are the same picture)
        self.start = params.get("start", 0)
        if not isinstance(self.start, int) or isinstance(self.start, bool) or self.start < 0:
            raise ValueError(f"replay world: world.start must be an integer >= 0, got {self.start!r}")
        self.image_size = tuple(spec.image_size)
        self._frames: np.ndarray | None = None
        self._t = 0

    def state_space(self) -> Mapping[str, Any]:
        return {}

    def load(self) -> None:
        if self._frames is not None:
            return
        import cv2

        from kosmos_env.checks.bridge_reference import load_real_episode, negative

        recording = load_real_episode()
        if self.episode != "real":
            recording = negative(self.episode, recording, seed=self.seed)
        if self.start >= len(recording.frames) - 1:
            raise ValueError(
                f"replay world: world.start = {self.start} leaves no frame to play "
                f"(the recording has {len(recording.frames)})"
            )
        height, width = self.image_size
        self._frames = np.stack(
            [cv2.resize(f, (width, height), interpolation=cv2.INTER_AREA) for f in recording.frames[self.start :]]
        ).astype(np.uint8)

    def reset(self, task: Any, rng: np.random.Generator) -> WorldReset:
        self.load()
        self._t = 0
        return WorldReset(frame=self._frames[0].copy())

    def step(self, actions: np.ndarray) -> WorldStep:
        if self._frames is None:
            raise RuntimeError("reset() the replay world before step()")
        out = []
        for _ in range(len(np.atleast_2d(actions))):  # the actions' values are ignored: that is the point
            self._t = min(self._t + 1, len(self._frames) - 1)
            out.append(self._frames[self._t])
        return WorldStep(frames=np.stack(out))

    def evaluate(self) -> dict[str, Any]:
        # the recording shows a can moved to the left, none of the suite's tasks: no policy succeeds here
        return {
            "success": False,
            "reason": f"open-loop replay of the {self.episode} Bridge recording: the policy's actions had no effect",
            "frame": int(self._t),
        }

    def close(self) -> None:
        self._frames = None
