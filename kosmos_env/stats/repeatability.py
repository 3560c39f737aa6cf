"""Split-half repeatability of a campaign's ranking.

Split the seeds at random into two halves, rank the policies on each half, and correlate the
two rankings; repeat over many random splits. The distribution says how stable the ranking is
under the campaign's own sampling noise. Each half has only half the seeds, so the half-vs-half
correlation understates the full campaign's reliability; the Spearman–Brown prophecy formula
``r_full = 2 r / (1 + r)`` corrects for the doubled length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kosmos_env.stats.agreement import rowwise


def spearman_brown(r, factor: float = 2.0):
    """Spearman–Brown prophecy: reliability of a test ``factor`` times as long, k r / (1 + (k-1) r).

    Undefined at r = -1/(k-1) (r = -1 for the split-half case); that value is returned as -1
    (the formula's sign-preserving bound), NaN stays NaN.
    """
    r = np.asarray(r, dtype=float)
    den = 1.0 + (factor - 1.0) * r
    with np.errstate(invalid="ignore", divide="ignore"):
        out = factor * r / den
    out = np.where(den == 0, -1.0, out)
    return out if out.ndim else float(out)


@dataclass
class SplitHalf:
    """Split-half agreement over random seed splits.

    ``values`` are the raw half-vs-half correlations (NaN where undefined, e.g. a half with all
    policies tied); ``corrected`` their Spearman–Brown versions. Medians and the 5–95 % range
    ignore undefined splits, which ``n_undefined`` counts.
    """

    metric: str
    values: np.ndarray
    corrected: np.ndarray
    median: float | None
    corrected_median: float | None
    q05: float | None
    q95: float | None
    n_splits: int
    n_undefined: int
    half_size: int

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "median": self.median,
            "corrected_median": self.corrected_median,
            "q05": self.q05,
            "q95": self.q95,
            "n_splits": self.n_splits,
            "n_undefined": self.n_undefined,
            "half_size": self.half_size,
        }


def split_half(matrix, *, metric: str = "spearman", n_splits: int = 1000, seed: int = 0) -> SplitHalf:
    """Split-half agreement of the per-policy means over ``n_splits`` random seed splits.

    ``matrix`` is (policies × seeds) (NaN = missing; a policy's half-mean ignores them). With
    an odd number of seeds one random seed sits out of each split. ``metric`` is "spearman",
    "kendall" or "pearson".
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2:
        raise ValueError(f"matrix must be 2-D (policies x seeds), got shape {m.shape}")
    P, S = m.shape
    if P < 2:
        raise ValueError(f"split-half agreement needs at least 2 policies, got {P}")
    if S < 2:
        raise ValueError(f"split-half agreement needs at least 2 seeds, got {S}")
    if n_splits < 1:
        raise ValueError("n_splits must be >= 1")
    h = S // 2
    rng = np.random.default_rng(seed)
    perms = rng.permuted(np.tile(np.arange(S), (n_splits, 1)), axis=1)

    def half_means(idx: np.ndarray) -> np.ndarray:
        sub = m[:, idx]  # (P, n_splits, h)
        cnt = (~np.isnan(sub)).sum(axis=2)
        tot = np.where(np.isnan(sub), 0.0, sub).sum(axis=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (tot / cnt).T  # (n_splits, P), NaN where a policy has no value in the half

    A, B = half_means(perms[:, :h]), half_means(perms[:, h : 2 * h])
    bad = np.isnan(A).any(axis=1) | np.isnan(B).any(axis=1)
    vals = rowwise(metric, np.nan_to_num(A), np.nan_to_num(B))
    vals[bad] = np.nan
    corr = spearman_brown(vals)
    ok = ~np.isnan(vals)

    def stat(x: np.ndarray, f) -> float | None:
        return float(f(x[ok])) if ok.any() else None

    return SplitHalf(
        metric=metric,
        values=vals,
        corrected=corr,
        median=stat(vals, np.median),
        corrected_median=stat(corr, np.median),
        q05=stat(vals, lambda v: np.quantile(v, 0.05)),
        q95=stat(vals, lambda v: np.quantile(v, 0.95)),
        n_splits=n_splits,
        n_undefined=int((~ok).sum()),
        half_size=h,
    )
