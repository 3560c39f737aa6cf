"""Run one episode of a policy in an env: the loop every command and campaign shares.

:func:`run_episode` runs an episode start to end. :class:`EpisodeLoop` is the same loop with the
env step taken out, so a caller can step several episodes side by side (the lockstep campaign
worker steps them through one vector env) and still get exactly the single-episode bookkeeping.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class EpisodeResult:
    """What one episode produced: outcome, judgment, timings, and the rollout itself."""

    outcome: str
    judgment: dict[str, Any] | None
    steps: int
    timings: dict[str, float] = field(default_factory=dict)
    gate: dict[str, Any] | None = None
    ground_truth: dict[str, Any] | None = None
    rollout: Any = None
    gate_calls: list[dict[str, Any]] = field(default_factory=list)  # one short verdict per world call


class EpisodeLoop:
    """One episode of ``policy`` in ``env``, stepped from outside.

    Built = ``env`` reset with ``seed`` (and ``task``) and the policy reset with the same seed, so
    a (policy, task, seed) triple always gives the same episode. Then, until :attr:`done`:
    :meth:`next_action` (asks the policy when no planned action is left), the caller steps
    ``env`` with it, :meth:`observe` the step's result. :meth:`result` gives the episode.

    A policy that returns a chunk larger than the env's chunk is consumed one env step at a
    time, in order, before the policy is asked again. A caller that computes the policy's
    output itself (a batched call over several episodes) hands it in with :meth:`plan` when
    :attr:`needs_plan` is true.
    """

    def __init__(self, env, policy, seed: int, task: str | None = None):
        self.env, self.policy = env, policy
        self.base = env.unwrapped
        options = {"task": task} if task is not None else None
        self.obs, _ = env.reset(seed=seed, options=options)
        policy.reset(self.obs["instruction"], seed=seed)
        self.chunk = self.base.kosmos_spec.action_chunk
        self.timings = {"policy": 0.0, "world": 0.0, "gate": 0.0, "judge": 0.0}
        self.pending: list[np.ndarray] = []
        self.steps = 0
        self.info: dict[str, Any] = {}
        self.gate_calls: list[dict[str, Any]] = []
        self.done = False

    @property
    def needs_plan(self) -> bool:
        """True when no planned action is left: the next action needs a policy call on :attr:`obs`."""
        return not self.pending

    def plan(self, output: Any, seconds: float = 0.0) -> None:
        """Queue the policy's output for :attr:`obs` (one action or a chunk); ``seconds`` it took."""
        self.timings["policy"] += seconds
        rows = np.asarray(output, dtype=np.float32).reshape(-1, 7)
        if len(rows) % self.chunk:
            raise ValueError(
                f"policy {self.policy.name!r} returned {len(rows)} actions; the env consumes chunks of {self.chunk}"
            )
        self.pending = [rows[i : i + self.chunk] for i in range(0, len(rows), self.chunk)]

    def next_action(self) -> np.ndarray:
        """The action for the next env step (the policy is asked when nothing is planned)."""
        if not self.pending:
            t0 = time.perf_counter()
            out = self.policy.act(self.obs)
            self.plan(out, time.perf_counter() - t0)
        action = self.pending.pop(0)
        return action[0] if self.chunk == 1 else action

    def observe(self, obs: Any, terminated: bool, truncated: bool, info: dict[str, Any], share: float = 1.0) -> bool:
        """Take in the env step's result; returns :attr:`done`.

        ``share``: the part of the step's measured seconds this episode is charged (1/n when n
        episodes stepped side by side and their times overlap)."""
        self.obs, self.info = obs, info
        for key, seconds in self.base.last_step_timings.items():
            self.timings[key] = self.timings.get(key, 0.0) + seconds * share
        if info.get("gate") is not None:
            g = info["gate"]
            self.gate_calls.append(
                {
                    "step": self.steps,
                    "passed": bool(g.get("passed")),
                    "score": float(g.get("score", 0.0)),
                    "check": g.get("check", ""),
                    "reason": g.get("reason", ""),
                }
            )
        self.steps += 1
        self.done = bool(terminated or truncated)
        if self.done:
            # the policy's episode state is no longer needed (a served policy frees its server session)
            end_episode = getattr(self.policy, "end_episode", None)
            if callable(end_episode):
                end_episode()
        return self.done

    def result(self) -> EpisodeResult:
        info = self.info
        return EpisodeResult(
            outcome=info.get("outcome", "error"),
            judgment=info.get("judgment"),
            steps=self.steps,
            timings=self.timings,
            gate=info.get("gate"),
            ground_truth=info.get("ground_truth"),
            rollout=self.base.rollout(),
            gate_calls=self.gate_calls,
        )


def run_episode(env, policy, seed: int, task: str | None = None) -> EpisodeResult:
    """Reset ``env`` with ``seed`` (and ``task``), run ``policy`` to the end, return the result.

    The policy is reset with the same seed, so a (policy, task, seed) triple always gives the
    same episode (see :class:`EpisodeLoop`).
    """
    loop = EpisodeLoop(env, policy, seed, task)
    while not loop.done:
        obs, _, terminated, truncated, info = env.step(loop.next_action())
        loop.observe(obs, terminated, truncated, info)
    return loop.result()
