"""Uniform random actions: the floor every real policy must beat."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kosmos_env.policies.base import Policy

# Default bounds match Kosmos-Tabletop-v1's action box.
_DEFAULT_LOW = (-0.05, -0.05, -0.05, -0.25, -0.25, -0.25, 0.0)
_DEFAULT_HIGH = (0.05, 0.05, 0.05, 0.25, 0.25, 0.25, 1.0)


class RandomPolicy(Policy):
    """Draws each action uniformly from ``[low, high]`` (scaled by ``scale`` about the centre).

    ``chunk`` > 1 returns ``chunk`` actions per call (shape (chunk, 7)), for envs whose spec takes
    chunks (``Kosmos-Bridge-v1``: ``--policy random:chunk=4``).
    """

    name = "random"

    def __init__(
        self, low=_DEFAULT_LOW, high=_DEFAULT_HIGH, scale: float = 1.0, seed: int | None = None, chunk: int = 1
    ):
        self.low = np.asarray(low, dtype=np.float32)
        self.high = np.asarray(high, dtype=np.float32)
        if self.low.shape != (7,) or self.high.shape != (7,):
            raise ValueError("RandomPolicy bounds must have 7 entries")
        if not 0.0 < scale <= 1.0:
            raise ValueError(f"RandomPolicy scale must be in (0, 1], got {scale}")
        self.scale = float(scale)
        if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
            raise ValueError(f"RandomPolicy chunk must be an integer >= 1, got {chunk!r}")
        self.chunk = chunk
        self._rng = np.random.default_rng(seed)

    def reset(self, instruction: str, seed: int | None = None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng(seed)

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        centre = (self.low + self.high) / 2
        half = (self.high - self.low) / 2 * self.scale
        if self.chunk == 1:
            return (centre + self._rng.uniform(-1.0, 1.0, size=7) * half).astype(np.float32)
        return (centre + self._rng.uniform(-1.0, 1.0, size=(self.chunk, 7)) * half).astype(np.float32)

    def config(self) -> dict[str, Any]:
        out = {"low": self.low.tolist(), "high": self.high.tolist(), "scale": self.scale}
        if self.chunk != 1:  # only then, so the content hash of a one-action policy is unchanged
            out["chunk"] = self.chunk
        return out
