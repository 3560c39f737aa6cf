"""Rank agreement between an evaluator's per-policy numbers and a reference.

Four metrics: Pearson, Spearman, Kendall tau-b and MMRV (mean maximum rank violation). Each
public function returns an :class:`Agreement` that carries the value *and* its value under a
random ranking (the expectation over all permutations of the evaluator values: exact for
small n, seeded Monte Carlo above), so a number always comes with its floor. A metric that is
undefined for the input (e.g. Pearson of a constant vector) has ``value=None`` and a
``reason``; it is never silently reported as 0 or 1.

Everything is vectorised over rows of a 2-D evaluator array so the random floor (thousands of
permutations) costs one numpy pass.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy.stats import rankdata

METRICS = ("pearson", "spearman", "kendall", "mmrv")
# MMRV is a violation (0 = perfect); the correlations are agreements (1 = perfect).
HIGHER_IS_BETTER = {"pearson": True, "spearman": True, "kendall": True, "mmrv": False}

MMRV_WEIGHTS = ("reference", "evaluator")
MMRV_TIES = ("greater", "less", "strict")

EXACT_FLOOR_MAX_N = 8  # 8! = 40,320 permutations: exact enumeration is still cheap
FLOOR_SAMPLES = 10_000  # Monte Carlo permutations above EXACT_FLOOR_MAX_N
_CHUNK = 4096


@dataclass(frozen=True)
class Agreement:
    """One agreement number with its random-ranking floor.

    ``value`` is None when the metric is undefined for the input; ``reason`` then says why.
    ``random_floor`` is the metric's expectation when the evaluator values are randomly
    permuted across policies (None when undefined); ``floor_method`` is "exact" or
    "monte-carlo(N, seed=S)".
    """

    metric: str
    value: float | None
    random_floor: float | None
    n: int
    reason: str | None = None
    floor_method: str | None = None
    convention: str | None = None

    @property
    def defined(self) -> bool:
        return self.value is not None

    @property
    def higher_is_better(self) -> bool:
        return HIGHER_IS_BETTER[self.metric]

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "value": self.value,
            "random_floor": self.random_floor,
            "n": self.n,
            "reason": self.reason,
            "floor_method": self.floor_method,
            "convention": self.convention,
        }


# ----------------------------------------------------------------------------- row kernels
# Each kernel takes E of shape (k, n) (k evaluator vectors) and r of shape (n,) and returns k
# values, NaN where the metric is undefined for that row.


def _pearson_rows(E: np.ndarray, r: np.ndarray) -> np.ndarray:
    Ec = E - E.mean(axis=1, keepdims=True)
    rc = r - r.mean()
    num = Ec @ rc
    den = np.sqrt((Ec * Ec).sum(axis=1)) * math.sqrt(float(rc @ rc))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / den
    out = np.where(den > 0, out, np.nan)
    return np.clip(out, -1.0, 1.0)


def _spearman_rows(E: np.ndarray, r: np.ndarray) -> np.ndarray:
    # average ranks for ties (the usual Spearman convention, as scipy.stats.spearmanr)
    return _pearson_rows(rankdata(E, axis=1), rankdata(r))


def _kendall_rows(E: np.ndarray, r: np.ndarray) -> np.ndarray:
    n = r.shape[0]
    iu = np.triu_indices(n, k=1)
    sr = np.sign(r[:, None] - r[None, :])[iu]  # (pairs,)
    se = np.sign(E[:, :, None] - E[:, None, :])[:, iu[0], iu[1]]  # (k, pairs)
    s = se @ sr
    n0 = n * (n - 1) / 2
    ties_e = (se == 0).sum(axis=1)
    ties_r = float((sr == 0).sum())
    den = np.sqrt((n0 - ties_e) * (n0 - ties_r))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = s / den
    return np.where(den > 0, out, np.nan)


def _mmrv_rows(E: np.ndarray, r: np.ndarray, weight: str, ties: str) -> np.ndarray:
    if ties == "greater":
        oe = E[:, :, None] > E[:, None, :]
        orr = r[:, None] > r[None, :]
        disagree = oe != orr[None]
    elif ties == "less":
        oe = E[:, :, None] >= E[:, None, :]
        orr = r[:, None] >= r[None, :]
        disagree = oe != orr[None]
    else:  # strict: only pairs ordered strictly, and oppositely, on both sides
        disagree = (np.sign(E[:, :, None] - E[:, None, :]) * np.sign(r[:, None] - r[None, :])[None]) < 0
    if weight == "reference":
        w = np.abs(r[:, None] - r[None, :])[None]
    else:
        w = np.abs(E[:, :, None] - E[:, None, :])
    return np.where(disagree, w, 0.0).max(axis=2).mean(axis=1)


def _kernel(metric: str, weight: str = "reference", ties: str = "greater") -> Callable:
    if metric == "pearson":
        return _pearson_rows
    if metric == "spearman":
        return _spearman_rows
    if metric == "kendall":
        return _kendall_rows
    if metric == "mmrv":
        return lambda E, r: _mmrv_rows(E, r, weight, ties)
    raise ValueError(f"unknown agreement metric {metric!r}; choose one of {METRICS}")


# ----------------------------------------------------------------------------- helpers


def _as_pair(evaluator: Sequence[float], reference: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    e = np.asarray(evaluator, dtype=float).ravel()
    r = np.asarray(reference, dtype=float).ravel()
    if e.shape != r.shape:
        raise ValueError(f"evaluator has {e.size} values but reference has {r.size}; they must pair up per policy")
    if e.size == 0:
        raise ValueError("agreement needs at least one policy")
    if not (np.all(np.isfinite(e)) and np.all(np.isfinite(r))):
        raise ValueError("evaluator and reference values must be finite numbers (no NaN/inf)")
    return e, r


def random_floor(
    evaluator: Sequence[float],
    reference: Sequence[float],
    metric: str,
    *,
    weight: str = "reference",
    ties: str = "greater",
    n_samples: int = FLOOR_SAMPLES,
    seed: int = 0,
    exact_max_n: int = EXACT_FLOOR_MAX_N,
) -> tuple[float | None, str]:
    """Expectation of ``metric`` when the evaluator values are randomly permuted over policies.

    Exact (all n! permutations) when n <= ``exact_max_n``; otherwise the mean over
    ``n_samples`` uniformly random permutations drawn with ``seed``. Returns (floor, method);
    floor is None when the metric is undefined under every permutation (e.g. constant
    evaluator for Pearson). Correlations have floor 0 by symmetry; MMRV's floor depends on the
    data and is the number that matters.
    """
    e, r = _as_pair(evaluator, reference)
    kern = _kernel(metric, weight, ties)
    n = e.size
    total, count = 0.0, 0
    if n <= exact_max_n:
        method = "exact"
        perms = itertools.permutations(range(n))
        while True:
            block = np.array(list(itertools.islice(perms, _CHUNK)), dtype=np.intp)
            if block.size == 0:
                break
            vals = kern(e[block], r)
            ok = ~np.isnan(vals)
            total += float(vals[ok].sum())
            count += int(ok.sum())
    else:
        method = f"monte-carlo({n_samples}, seed={seed})"
        rng = np.random.default_rng(seed)
        done = 0
        while done < n_samples:
            k = min(_CHUNK, n_samples - done)
            idx = rng.permuted(np.tile(np.arange(n), (k, 1)), axis=1)
            vals = kern(e[idx], r)
            ok = ~np.isnan(vals)
            total += float(vals[ok].sum())
            count += int(ok.sum())
            done += k
    return (total / count if count else None), method


def _result(
    metric: str,
    e: np.ndarray,
    r: np.ndarray,
    value: float,
    reason: str | None,
    floor: bool,
    convention: str | None,
    weight: str = "reference",
    ties: str = "greater",
    n_samples: int = FLOOR_SAMPLES,
    seed: int = 0,
) -> Agreement:
    fl, method = (None, None)
    if floor:
        fl, method = random_floor(e, r, metric, weight=weight, ties=ties, n_samples=n_samples, seed=seed)
        if fl is not None and abs(fl) < 1e-12:
            fl = 0.0  # exact symmetric floors (correlations) come back as +-1e-17 round-off
    if np.isnan(value):
        return Agreement(metric, None, fl, e.size, reason, method, convention)
    return Agreement(metric, float(value), fl, e.size, None, method, convention)


def _constant_reason(e: np.ndarray, r: np.ndarray, what: str) -> str:
    if e.size < 2:
        return f"{what} needs at least 2 policies (got {e.size})"
    sides = [name for name, v in (("evaluator", e), ("reference", r)) if np.all(v == v[0])]
    return f"{what} is undefined: the {' and '.join(sides)} values are constant (zero variance)"


# ----------------------------------------------------------------------------- public metrics


def pearson(evaluator, reference, *, floor: bool = True, n_samples: int = FLOOR_SAMPLES, seed: int = 0) -> Agreement:
    """Pearson correlation of the evaluator's per-policy numbers with the reference's.

    Undefined (value None, with a reason) when either side is constant or n < 2.
    """
    e, r = _as_pair(evaluator, reference)
    v = _pearson_rows(e[None], r)[0] if e.size >= 2 else np.nan
    reason = _constant_reason(e, r, "Pearson correlation") if np.isnan(v) else None
    return _result("pearson", e, r, v, reason, floor, None, n_samples=n_samples, seed=seed)


def spearman(evaluator, reference, *, floor: bool = True, n_samples: int = FLOOR_SAMPLES, seed: int = 0) -> Agreement:
    """Spearman rank correlation (Pearson of average ranks; ties get their mean rank)."""
    e, r = _as_pair(evaluator, reference)
    v = _spearman_rows(e[None], r)[0] if e.size >= 2 else np.nan
    reason = _constant_reason(e, r, "Spearman correlation") if np.isnan(v) else None
    return _result("spearman", e, r, v, reason, floor, "average ranks for ties", n_samples=n_samples, seed=seed)


def kendall(evaluator, reference, *, floor: bool = True, n_samples: int = FLOOR_SAMPLES, seed: int = 0) -> Agreement:
    """Kendall tau-b: (concordant - discordant) / sqrt((n0 - ties_e)(n0 - ties_r)), n0 = n(n-1)/2."""
    e, r = _as_pair(evaluator, reference)
    v = _kendall_rows(e[None], r)[0] if e.size >= 2 else np.nan
    reason = _constant_reason(e, r, "Kendall tau-b") if np.isnan(v) else None
    return _result("kendall", e, r, v, reason, floor, "tau-b", n_samples=n_samples, seed=seed)


def mmrv(
    evaluator,
    reference,
    weight: str = "reference",
    ties: str = "greater",
    *,
    floor: bool = True,
    n_samples: int = FLOOR_SAMPLES,
    seed: int = 0,
) -> Agreement:
    """Mean maximum rank violation, with its convention named explicitly.

    For each policy i, take the largest weight |x_i - x_j| over the policies j whose order the
    evaluator gets wrong, then average over i (0 = perfect ranking; lower is better).
    ``weight`` chooses x: "reference" (the gap in the reference numbers, as SIMPLER does) or
    "evaluator" (the gap in the evaluator's numbers).

    ``ties`` says what "gets the order wrong" means when values tie:

    * ``"greater"`` (default; SIMPLER's released code): the pair is wrong when
      ``(evaluator_i > evaluator_j) != (reference_i > reference_j)``, comparisons built from
      the strict "greater" test. An evaluator tie makes ``evaluator_i > evaluator_j`` False
      for both orders, so a pair that the reference orders but the evaluator ties is a
      violation charged to the policy with the *greater* reference value (its row of the max).
    * ``"less"``: the pair is wrong when ``(evaluator_i >= evaluator_j) != (reference_i >=
      reference_j)``, i.e. comparisons built from "not less". An evaluator tie makes
      ``evaluator_i >= evaluator_j`` True for both orders, so the violation is charged to the
      policy with the *lesser* reference value.
    * ``"strict"``: only pairs ordered strictly on both sides, and in opposite directions,
      are violations; a tie on either side is never a violation.

    Example: evaluator [0, 0, 0] vs reference [0.1, 0.2, 0.5]: "greater" charges 0 / 0.1 /
    0.4 to the three policies (mean 0.1667), "less" charges 0.4 / 0.3 / 0 (mean 0.2333),
    "strict" charges nothing (0).
    """
    if weight not in MMRV_WEIGHTS:
        raise ValueError(f"mmrv weight must be one of {MMRV_WEIGHTS}, got {weight!r}")
    if ties not in MMRV_TIES:
        raise ValueError(f"mmrv ties must be one of {MMRV_TIES}, got {ties!r}")
    e, r = _as_pair(evaluator, reference)
    v = _mmrv_rows(e[None], r, weight, ties)[0]
    return _result("mmrv", e, r, v, None, floor, f"weight={weight}, ties={ties}", weight, ties, n_samples, seed)


def measure_agreement(evaluator, reference, metric: str = "kendall", **kwargs) -> Agreement:
    """Dispatch by metric name ("pearson", "spearman", "kendall" or "mmrv")."""
    fns = {"pearson": pearson, "spearman": spearman, "kendall": kendall, "mmrv": mmrv}
    if metric not in fns:
        raise ValueError(f"unknown agreement metric {metric!r}; choose one of {METRICS}")
    return fns[metric](evaluator, reference, **kwargs)


def all_agreements(
    evaluator,
    reference,
    *,
    mmrv_weight: str = "reference",
    mmrv_ties: str = "greater",
    floor: bool = True,
    n_samples: int = FLOOR_SAMPLES,
    seed: int = 0,
) -> dict[str, Agreement]:
    """All four metrics for one (evaluator, reference) pair, keyed by metric name."""
    kw = dict(floor=floor, n_samples=n_samples, seed=seed)
    return {
        "pearson": pearson(evaluator, reference, **kw),
        "spearman": spearman(evaluator, reference, **kw),
        "kendall": kendall(evaluator, reference, **kw),
        "mmrv": mmrv(evaluator, reference, mmrv_weight, mmrv_ties, **kw),
    }


def passes(metric: str, value: float | None, tolerance: float) -> bool:
    """Whether an agreement value is within ``tolerance`` of perfect.

    Correlations pass when value >= 1 - tolerance; MMRV passes when value <= tolerance.
    An undefined value (None) never passes.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if HIGHER_IS_BETTER[metric]:
        return value >= 1.0 - tolerance
    return value <= tolerance


def meets(metric: str, value: float | None, threshold: float) -> bool:
    """Whether an agreement value is on the good side of an absolute ``threshold``.

    Correlations: value >= threshold. MMRV: value <= threshold. Undefined never meets.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return value >= threshold if HIGHER_IS_BETTER[metric] else value <= threshold


def rowwise(metric: str, A, B) -> np.ndarray:
    """``metric`` ("pearson", "spearman" or "kendall") between matching rows of two (k, n)
    arrays; NaN where undefined. Used for split-half and bootstrap distributions."""
    A = np.asarray(A, dtype=float)
    B = np.asarray(B, dtype=float)
    if A.shape != B.shape or A.ndim != 2:
        raise ValueError(f"rowwise needs two (k, n) arrays of equal shape, got {A.shape} and {B.shape}")
    if metric == "spearman":
        A, B = rankdata(A, axis=1), rankdata(B, axis=1)
    if metric in ("pearson", "spearman"):
        Ac = A - A.mean(axis=1, keepdims=True)
        Bc = B - B.mean(axis=1, keepdims=True)
        den = np.sqrt((Ac * Ac).sum(axis=1) * (Bc * Bc).sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (Ac * Bc).sum(axis=1) / den
        return np.clip(np.where(den > 0, out, np.nan), -1.0, 1.0)
    if metric == "kendall":
        n = A.shape[1]
        iu = np.triu_indices(n, k=1)
        sa = np.sign(A[:, :, None] - A[:, None, :])[:, iu[0], iu[1]]
        sb = np.sign(B[:, :, None] - B[:, None, :])[:, iu[0], iu[1]]
        n0 = n * (n - 1) / 2
        den = np.sqrt((n0 - (sa == 0).sum(axis=1)) * (n0 - (sb == 0).sum(axis=1)))
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (sa * sb).sum(axis=1) / den
        return np.where(den > 0, out, np.nan)
    raise ValueError(f"rowwise supports pearson, spearman, kendall; got {metric!r}")
