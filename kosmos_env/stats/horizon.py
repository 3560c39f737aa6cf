"""Horizon sensitivity: does the ranking survive judging rollouts at truncated horizons?

Input: per-policy scores at each horizon (rows = horizons, columns = policies), e.g. success
judged on the first 40, 80, ... steps of each rollout. Each row is compared with a reference
ranking (given, or the longest horizon's row). World-model rollouts drift with length, so a
short horizon that keeps the ranking is cheaper and safer; this finds where it breaks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from kosmos_env.stats.agreement import Agreement, measure_agreement, meets


@dataclass
class HorizonResult:
    """Agreement per horizon (ascending), and where the ranking breaks.

    ``break_horizon``: scanning from the longest horizon towards shorter ones, the first
    horizon whose agreement fails ``threshold`` (correlations: value < threshold; MMRV:
    value > threshold), i.e. the truncation at which the ranking breaks. None if no horizon
    fails. ``shortest_safe_horizon``: the shortest defined horizon h such that every defined
    horizon >= h passes (None if the longest defined one fails). Undefined stays undefined: a
    horizon whose metric is undefined (e.g. nothing has succeeded yet, so the scores are
    constant) neither passes nor breaks; ``undefined_horizons`` lists them.
    """

    metric: str
    threshold: float
    horizons: list
    agreements: list[Agreement]
    reference_source: str
    break_horizon: object | None
    shortest_safe_horizon: object | None
    undefined_horizons: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "threshold": self.threshold,
            "horizons": list(self.horizons),
            "agreements": [a.to_dict() for a in self.agreements],
            "reference_source": self.reference_source,
            "break_horizon": self.break_horizon,
            "shortest_safe_horizon": self.shortest_safe_horizon,
            "undefined_horizons": list(self.undefined_horizons),
        }


def horizon_agreement(
    scores,
    horizons: Sequence,
    reference: Sequence[float] | None = None,
    *,
    metric: str = "kendall",
    threshold: float = 0.8,
    floor: bool = True,
    seed: int = 0,
) -> HorizonResult:
    """Agreement of each horizon's per-policy scores with ``reference`` (default: the longest
    horizon's scores) and the horizon at which it breaks.

    ``scores`` is (n_horizons × n_policies) aligned with ``horizons`` (any order; sorted here).
    """
    s = np.asarray(scores, dtype=float)
    if s.ndim != 2:
        raise ValueError(f"scores must be 2-D (horizons x policies), got shape {s.shape}")
    if len(horizons) != s.shape[0]:
        raise ValueError(f"{len(horizons)} horizons for {s.shape[0]} score rows")
    if len(set(horizons)) != len(horizons):
        raise ValueError("horizons must be distinct")
    order = np.argsort(np.asarray(horizons, dtype=float), kind="stable")
    hs = [horizons[i] for i in order]
    s = s[order]
    if reference is None:
        ref = s[-1]
        source = f"longest horizon ({hs[-1]})"
    else:
        ref = np.asarray(reference, dtype=float)
        if ref.shape != (s.shape[1],):
            raise ValueError(f"reference has {ref.size} values for {s.shape[1]} policies")
        source = "given reference"
    ags = [measure_agreement(row, ref, metric, floor=floor, seed=seed) for row in s]
    defined = [i for i, a in enumerate(ags) if a.value is not None]
    ok = {i: meets(metric, ags[i].value, threshold) for i in defined}
    brk = next((hs[i] for i in reversed(defined) if not ok[i]), None)
    safe = None
    for i in reversed(defined):
        if not ok[i]:
            break
        safe = hs[i]
    undefined = [hs[i] for i in range(len(hs)) if i not in ok]
    return HorizonResult(metric, threshold, hs, ags, source, brk, safe, undefined)
