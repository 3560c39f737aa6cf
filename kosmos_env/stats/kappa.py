"""Cohen's kappa between two raters' categorical verdicts, with a percentile bootstrap interval.

Used wherever two judges are compared on the same rollouts (the judge audit, re-judging a
campaign). Kappa uses the marginals of both raters over the categories either one used.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float | None:
    """(p_o - p_e) / (1 - p_e); None when p_e == 1 (both raters constant on the same category)."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"kappa needs paired verdicts, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        return None
    cats = sorted(set(a) | set(b))
    p_o = sum(x == y for x, y in zip(a, b, strict=True)) / n
    p_e = sum((a.count(c) / n) * (b.count(c) / n) for c in cats)
    if math.isclose(p_e, 1.0):
        return None
    return (p_o - p_e) / (1.0 - p_e)


def bootstrap_kappa(
    a: Sequence[str], b: Sequence[str], *, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> dict[str, Any]:
    """Percentile interval of kappa, resampling rollouts (pairs); resamples where kappa is undefined are dropped."""
    a, b = np.asarray(list(a), dtype=object), np.asarray(list(b), dtype=object)
    n = len(a)
    if n == 0:
        return {"lower": None, "upper": None, "defined_resamples": 0, "n_boot": n_boot}
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_boot):
        idx = rng.integers(0, n, n)
        k = cohen_kappa(a[idx].tolist(), b[idx].tolist())
        if k is not None:
            values.append(k)
    if not values:
        return {"lower": None, "upper": None, "defined_resamples": 0, "n_boot": n_boot}
    lo, hi = np.quantile(values, [alpha / 2, 1 - alpha / 2])
    return {"lower": float(lo), "upper": float(hi), "defined_resamples": len(values), "n_boot": n_boot}
