"""Agreement and format statistics for the judge audit (small, explicit formulas).

Verdicts are the three judge outcomes ``success``, ``failure``, ``abstained``: an abstention
is a verdict of its own, so a student that abstains where the teacher decided has changed the
verdict. Cohen's kappa uses the marginals of both raters over the categories either one used.
"""
from __future__ import annotations

import json
import math
from typing import Any, Sequence

import numpy as np

VERDICTS = ("success", "failure", "abstained")


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float | None:
    """(p_o - p_e) / (1 - p_e); None when p_e == 1 (both raters constant on the same category)."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"kappa needs paired verdicts, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        return None
    cats = sorted(set(a) | set(b))
    p_o = sum(x == y for x, y in zip(a, b)) / n
    p_e = sum((a.count(c) / n) * (b.count(c) / n) for c in cats)
    if math.isclose(p_e, 1.0):
        return None
    return (p_o - p_e) / (1.0 - p_e)


def bootstrap_kappa(a: Sequence[str], b: Sequence[str], *, n_boot: int = 2000, alpha: float = 0.05,
                    seed: int = 0) -> dict[str, Any]:
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


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs (1.0 when there are none)."""
    from scipy.stats import binom

    n = int(b) + int(c)
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom.cdf(min(b, c), n, 0.5)))


def is_bare_json(text: str) -> bool:
    """The whole answer, leading/trailing whitespace aside, is exactly one JSON object.

    No reasoning block, ``<answer>`` tag, code fence or prose around it. Schema validity is a
    separate question (a bare object may still lack a field).
    """
    if not isinstance(text, str):
        return False
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return False
    try:
        return isinstance(json.loads(body), dict)
    except (json.JSONDecodeError, RecursionError):
        return False


def difference_claim(lower: float | None, upper: float | None, p_value: float | None, alpha: float,
                     more: str, less: str) -> tuple[str, bool]:
    """The words a paired difference supports: ``more``/``less`` only if the interval excludes 0
    (and, when given, the exact test rejects at ``alpha``); otherwise "no supported difference"."""
    if lower is None or upper is None:
        return "no supported difference (not enough paired data)", False
    test_ok = p_value is None or p_value < alpha
    if lower > 0 and test_ok:
        return more, True
    if upper < 0 and test_ok:
        return less, True
    return "no supported difference", False
