"""Run one episode of a policy in an env: the loop every command and campaign shares."""
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


def run_episode(env, policy, seed: int, task: str | None = None) -> EpisodeResult:
    """Reset ``env`` with ``seed`` (and ``task``), run ``policy`` to the end, return the result.

    The policy is reset with the same seed, so a (policy, task, seed) triple always gives the
    same episode. A policy that returns a chunk larger than the env's chunk is consumed one env
    step at a time, in order, before the policy is asked again.
    """
    base = env.unwrapped
    options = {"task": task} if task is not None else None
    obs, _ = env.reset(seed=seed, options=options)
    policy.reset(obs["instruction"], seed=seed)
    chunk = base.kosmos_spec.action_chunk
    timings = {"policy": 0.0, "world": 0.0, "gate": 0.0, "judge": 0.0}
    pending: list[np.ndarray] = []
    steps = 0
    info: dict[str, Any] = {}
    gate_calls: list[dict[str, Any]] = []
    done = False
    while not done:
        if not pending:
            t0 = time.perf_counter()
            out = np.asarray(policy.act(obs), dtype=np.float32)
            timings["policy"] += time.perf_counter() - t0
            rows = out.reshape(-1, 7)
            if len(rows) % chunk:
                raise ValueError(f"policy {policy.name!r} returned {len(rows)} actions; the env consumes chunks of {chunk}")
            pending = [rows[i: i + chunk] for i in range(0, len(rows), chunk)]
        action = pending.pop(0)
        obs, _, terminated, truncated, info = env.step(action[0] if chunk == 1 else action)
        for key, seconds in base.last_step_timings.items():
            timings[key] = timings.get(key, 0.0) + seconds
        if info.get("gate") is not None:
            g = info["gate"]
            gate_calls.append({"step": steps, "passed": bool(g.get("passed")), "score": float(g.get("score", 0.0)),
                               "check": g.get("check", ""), "reason": g.get("reason", "")})
        steps += 1
        done = terminated or truncated
    return EpisodeResult(
        outcome=info.get("outcome", "error"),
        judgment=info.get("judgment"),
        steps=steps,
        timings=timings,
        gate=info.get("gate"),
        ground_truth=info.get("ground_truth"),
        rollout=base.rollout(),
        gate_calls=gate_calls,
    )
