"""Helpers for the vector-env tests: seeded in-bounds actions and one sub-env's share of a batched
observation or info dict."""

from __future__ import annotations

import numpy as np


def seeded_actions(space, n_steps: int, seed: int) -> list[np.ndarray]:
    """A fixed, seeded action sequence inside the bounds (small moves, gripper open or closed)."""
    rng = np.random.default_rng(seed)
    low, high = space.low, space.high
    out = []
    for _ in range(n_steps):
        a = (rng.uniform(low, high) * 0.5).astype(np.float32)
        a[..., 6] = rng.integers(0, 2, size=a[..., 6].shape)
        out.append(a)
    return out


def obs_of(obs: dict, i: int) -> dict:
    """Env ``i``'s observation out of a batched observation dict."""
    return {k: v[i] for k, v in obs.items()}


def info_of(batched: dict, i: int) -> dict:
    """Env ``i``'s entry of a dict gymnasium stacked from sub-env infos (nested dicts, whatever their keys)."""
    out = {}
    for k, v in batched.items():
        if isinstance(k, str) and k.startswith("_"):
            continue
        mask = batched.get(f"_{k}")
        if mask is not None and not mask[i]:
            continue  # key absent from this env's info
        out[k] = info_of(v, i) if isinstance(v, dict) else (None if v is None else v[i])
    return out
