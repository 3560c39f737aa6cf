"""The policy contract: ``reset(instruction)`` then ``act(obs)`` once per control step.

A policy returns actions in the env's contract (``[dx, dy, dz, droll, dpitch, dyaw,
gripper]``, base-frame deltas, gripper 1 = open): an adapter converts from its model's own
convention and declares which one that was in ``action_convention``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import Any, Mapping, Sequence

import numpy as np

from kosmos_env.hashing import canonical_hash


class Policy(ABC):
    """Base class of every policy adapter."""

    #: short name used in ledgers and reports
    name: str = "policy"
    #: the convention of the model's raw output, converted to the env contract by the adapter
    action_convention: str = "env: base-frame deltas [dx,dy,dz,droll,dpitch,dyaw] + gripper (1 = open)"
    #: separate instances keep separate episode states, so several episodes can run side by side
    #: with one instance each (``kosmos-env eval --lockstep N``). False where every instance drives
    #: one shared state (a served policy: all clients of a server reset and step the same policy).
    side_by_side: bool = True

    def reset(self, instruction: str, seed: int | None = None) -> None:
        """Start an episode; ``seed`` seeds any randomness the policy has."""

    @abstractmethod
    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        """Return one action (7,) or a chunk (k, 7), float32, in the env's contract."""

    @classmethod
    def act_many(cls, policies: Sequence["Policy"], observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        """``act`` of each instance on its observation, each instance in its own episode (lockstep).

        This default asks the instances one by one. A policy whose model takes a batch overrides
        it with one batched call over the instances' observations and episode states; it must
        return exactly what each ``act`` would have returned.
        """
        return [p.act(o) for p, o in zip(policies, observations, strict=True)]

    def config(self) -> dict[str, Any]:
        """JSON-able settings that identify this policy (hashed into results)."""
        return {}

    def content_hash(self) -> str:
        """sha256 of the policy's class and config (adapters with weights hash those instead)."""
        payload = {"class": f"{type(self).__module__}.{type(self).__qualname__}", "config": self.config()}
        return policy_hash(payload)

    def end_episode(self) -> None:
        """The episode is over (the env terminated or truncated it): release what it held. The
        rollout loop calls it; a served policy ends its server session here so another client's
        episode can have the slot at once. Default: nothing."""

    def close(self) -> None:
        """Release resources (servers, GPU memory)."""

    @classmethod
    def content_hash_from_files(cls, **kwargs: Any) -> str | None:
        """``cls(**kwargs).content_hash()`` computed from the settings and checkpoint files alone,
        without building the policy (no weights loaded, no checkpoint code run); None where the
        class cannot (then building it is its only hash: fine for adapters that load nothing).
        Adapters that load checkpoints override this (see :func:`kosmos_env.policies.policy_hash_from_files`)."""
        return None


def as_action_rows(action: Any) -> np.ndarray:
    """A policy's output as a (k, 7) float32 array: (7,) becomes one row; anything else raises."""
    rows = np.asarray(action, dtype=np.float32)
    if rows.shape == (7,):
        return rows[None]
    if rows.ndim == 2 and rows.shape[1] == 7 and rows.shape[0] >= 1:
        return rows
    raise ValueError(f"a policy must return one action (7,) or a chunk (k, 7), got shape {rows.shape}")


class ActionQueue:
    """FIFO of planned actions: ``extend`` with a chunk, ``pop`` one (or ``take`` k) at a time."""

    def __init__(self) -> None:
        self._rows: deque[np.ndarray] = deque()

    def __len__(self) -> int:
        return len(self._rows)

    def clear(self) -> None:
        self._rows.clear()

    def extend(self, chunk: Any) -> None:
        self._rows.extend(as_action_rows(chunk))

    def pop(self) -> np.ndarray:
        if not self._rows:
            raise IndexError("the action queue is empty")
        return self._rows.popleft()

    def take(self, k: int) -> np.ndarray:
        if k > len(self._rows):
            raise IndexError(f"the action queue holds {len(self._rows)} actions, {k} asked for")
        return np.stack([self._rows.popleft() for _ in range(k)])


class ChunkedPolicy(Policy):
    """Feeds a chunk-returning policy to an env that consumes ``chunk`` actions per step.

    The inner policy's chunk of k actions is queued; each ``act`` hands the env the next
    ``chunk`` of them ((7,) when ``chunk == 1``, else (chunk, 7)) and re-plans (calls the inner
    policy on the current observation) when the queue runs short. ``execute`` caps how many
    actions of each planned chunk are used before re-planning (Octo executes 4 of its chunk;
    ``None`` uses them all). ``reset`` clears the queue.
    """

    def __init__(self, policy: Policy, chunk: int = 1, execute: int | None = None):
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        if execute is not None and execute < 1:
            raise ValueError(f"execute must be >= 1 or None, got {execute}")
        self.policy, self.chunk, self.execute = policy, int(chunk), execute
        self.name = policy.name
        self.action_convention = policy.action_convention
        self.side_by_side = policy.side_by_side
        self.queue = ActionQueue()
        self.plans = 0  # how many times the inner policy was called this episode

    def reset(self, instruction: str, seed: int | None = None) -> None:
        self.queue.clear()
        self.plans = 0
        self.policy.reset(instruction, seed=seed)

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        while len(self.queue) < self.chunk:
            rows = as_action_rows(self.policy.act(obs))
            self.queue.extend(rows[: self.execute] if self.execute else rows)
            self.plans += 1
        out = self.queue.take(self.chunk)
        return out[0] if self.chunk == 1 else out

    def config(self) -> dict[str, Any]:
        return self.policy.config()

    def content_hash(self) -> str:
        # how a chunk is consumed can change results, so it is part of the identity
        if self.execute is None:
            return self.policy.content_hash()
        payload = {"inner": self.policy.content_hash(), "execute": self.execute}
        return policy_hash(payload)

    def end_episode(self) -> None:
        self.policy.end_episode()

    def close(self) -> None:
        self.policy.close()


def policy_hash(payload: Any, default: Any = None) -> str:
    """A policy content hash: the sha256 of ``payload``'s canonical JSON in the form policy hashes
    were first published in (``", "``/``": "`` separators, NaN kept; see
    :func:`kosmos_env.hashing.canonical_json`). ``default=str`` writes paths and dtypes as text."""
    return canonical_hash(payload, spaced=True, allow_nan=True, default=default)
