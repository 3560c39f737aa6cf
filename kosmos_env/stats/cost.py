"""Cost sweep: how cheap can the evaluator get before its ranking drifts?

Given results at several settings (fewer denoising steps, lower resolution, fewer seeds, ...),
each with per-policy scores and a cost per rollout, compare every setting's ranking with the
most expensive setting's and pick the cheapest one whose agreement stays within a tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from kosmos_env.stats.agreement import Agreement, measure_agreement, passes


@dataclass(frozen=True)
class Setting:
    """One evaluator configuration: ``scores`` is a per-policy sequence or {policy: score}."""

    name: str
    scores: object
    cost: float


@dataclass
class CostSweep:
    """Rows sorted by cost ascending: (name, cost, Agreement, passes).

    ``reference`` names the most expensive setting; ``cheapest_ok`` the cheapest setting whose
    agreement with it is within ``tolerance`` of perfect (correlations >= 1 - tolerance, MMRV
    <= tolerance). The reference itself always qualifies, so cheapest_ok is never None.
    """

    metric: str
    tolerance: float
    reference: str
    rows: list[tuple[str, float, Agreement, bool]]
    cheapest_ok: str

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "tolerance": self.tolerance,
            "reference": self.reference,
            "cheapest_ok": self.cheapest_ok,
            "rows": [{"name": n, "cost": c, "agreement": a.to_dict(), "passes": p} for n, c, a, p in self.rows],
        }


def _as_setting(s) -> Setting:
    if isinstance(s, Setting):
        return s
    if isinstance(s, Mapping):
        try:
            return Setting(str(s["name"]), s["scores"], float(s["cost"]))
        except KeyError as exc:
            raise ValueError(f"a cost-sweep setting needs name, scores and cost; missing {exc}") from None
    if isinstance(s, (tuple, list)) and len(s) == 3:
        return Setting(str(s[0]), s[1], float(s[2]))
    raise ValueError(f"cannot read a cost-sweep setting from {s!r}")


def _vector(scores, policies: list | None) -> np.ndarray:
    if isinstance(scores, Mapping):
        if policies is None:
            raise ValueError("internal: policy order missing")
        missing = [p for p in policies if p not in scores]
        if missing:
            raise ValueError(f"setting lacks scores for policies {missing}")
        return np.array([float(scores[p]) for p in policies])
    return np.asarray(scores, dtype=float).ravel()


def cost_sweep(
    settings: Sequence, *, metric: str = "kendall", tolerance: float = 0.1, floor: bool = True, seed: int = 0
) -> CostSweep:
    """Agreement of each setting with the most expensive one, and the cheapest that passes.

    If several settings share the highest cost, the first listed is the reference.
    """
    sts = [_as_setting(s) for s in settings]
    if len(sts) < 1:
        raise ValueError("cost sweep needs at least one setting")
    if len({s.name for s in sts}) != len(sts):
        raise ValueError("setting names must be distinct")
    if any(not np.isfinite(s.cost) or s.cost < 0 for s in sts):
        raise ValueError("costs must be finite and >= 0")
    ref = max(sts, key=lambda s: s.cost)  # first of the maxima
    policies = list(ref.scores.keys()) if isinstance(ref.scores, Mapping) else None
    ref_vec = _vector(ref.scores, policies)
    rows = []
    for s in sorted(sts, key=lambda s: s.cost):
        vec = _vector(s.scores, policies)
        if vec.shape != ref_vec.shape:
            raise ValueError(f"setting {s.name!r} has {vec.size} policy scores, reference has {ref_vec.size}")
        a = measure_agreement(vec, ref_vec, metric, floor=floor, seed=seed)
        rows.append((s.name, s.cost, a, s is ref or passes(metric, a.value, tolerance)))
    cheapest = next(name for name, _, _, ok in rows if ok)
    return CostSweep(metric, tolerance, ref.name, rows, cheapest)
