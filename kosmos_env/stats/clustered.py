"""Bootstrap intervals for statistics of observations that come in clusters: the steps of episodes.

Why a cluster bootstrap: the steps of one episode are not independent draws (one scene, one
policy, one trajectory), so resampling steps would count forty steps of one episode as forty
pieces of evidence and give intervals that are far too narrow. :func:`cluster_bootstrap` resamples
whole clusters with replacement and recomputes the statistic on each resample (the cluster, or
block, bootstrap; percentile interval). A paired comparison (a judge against a baseline on the
same episodes) passes the *difference* of two statistics, so both are computed on the same
resampled episodes and what the episodes share cancels; every call with the same seed and cluster
count draws the same resamples, so intervals reported side by side are paired too.

A resample is given to the statistic as *multiplicities*: how many times each cluster was drawn
(a resample's statistics do not depend on the order its clusters were drawn in). That lets a
statistic run on many resamples at once: each observation weighs as many times as its cluster was
drawn, and :func:`weighted_spearman` / :func:`weighted_auroc` are exactly Spearman and the AUROC of
the resample written out in full (a drawn-twice episode's steps appear twice, tied), computed from
one sort. Thousands of resamples of tens of thousands of steps take seconds, not minutes.

A resample on which the statistic is undefined (NaN, e.g. a correlation of a constant) is left
out of the interval and counted (``n_undefined``); a statistic undefined on the data itself has
no estimate and a ``reason``. Nothing here is ever reported as 0 when it is undefined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy.stats import rankdata

#: resamples evaluated per call of the statistic (bounds memory: block x observations floats)
BLOCK = 100


@dataclass(frozen=True)
class ClusterEstimate:
    """A statistic on all clusters with its percentile interval over cluster resamples."""

    estimate: float | None
    lower: float | None
    upper: float | None
    n_clusters: int
    n_boot: int
    n_undefined: int
    alpha: float
    reason: str | None = None

    def to_dict(self) -> dict:
        return {
            "estimate": self.estimate,
            "lower": self.lower,
            "upper": self.upper,
            "n_clusters": self.n_clusters,
            "n_boot": self.n_boot,
            "n_undefined": self.n_undefined,
            "alpha": self.alpha,
            "method": "cluster bootstrap (resampling whole clusters), percentile interval",
            "reason": self.reason,
        }


def resample_counts(n_clusters: int, n_boot: int, seed: int = 0) -> np.ndarray:
    """(n_boot, n_clusters) multiplicities: row b counts how often each cluster was drawn when
    ``n_clusters`` clusters were drawn with replacement (each row sums to ``n_clusters``)."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_clusters, size=(n_boot, n_clusters))
    flat = (draws + n_clusters * np.arange(n_boot)[:, None]).ravel()
    return np.bincount(flat, minlength=n_boot * n_clusters).reshape(n_boot, n_clusters).astype(float)


def cluster_bootstrap(
    statistic: Callable[[np.ndarray], np.ndarray],
    n_clusters: int,
    *,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> ClusterEstimate:
    """The statistic on all clusters, with a ``1 - alpha`` percentile interval over ``n_boot``
    cluster resamples (:func:`resample_counts` with ``seed``: the same call gives the same interval).

    ``statistic(counts)`` takes multiplicities (k, n_clusters) and returns k values (NaN where
    undefined); the estimate is its value at all-ones counts.
    """
    return cluster_bootstrap_many(
        lambda counts: np.asarray(statistic(counts), dtype=float).reshape(-1, 1),
        n_clusters,
        ["value"],
        n_boot=n_boot,
        alpha=alpha,
        seed=seed,
    )["value"]


def cluster_bootstrap_many(
    statistic: Callable[[np.ndarray], np.ndarray],
    n_clusters: int,
    names: Sequence[str],
    *,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, ClusterEstimate]:
    """Several statistics on the same resamples at once: ``statistic(counts)`` returns (k, m), one
    column per name. Statistics that share work (ranks of a common variable) compute it once, and
    a difference of two columns, given as its own column, is paired with them."""
    if n_clusters < 1:
        raise ValueError(f"a cluster bootstrap needs at least one cluster, got {n_clusters}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    m = len(names)
    observed = np.asarray(statistic(np.ones((1, n_clusters))), dtype=float).reshape(1, m)[0]
    counts = resample_counts(n_clusters, n_boot, seed)
    boots = np.concatenate(
        [np.asarray(statistic(counts[i : i + BLOCK]), dtype=float).reshape(-1, m) for i in range(0, n_boot, BLOCK)]
    )
    out = {}
    for j, name in enumerate(names):
        value = float(observed[j])
        if not np.isfinite(value):
            out[name] = ClusterEstimate(None, None, None, n_clusters, n_boot, n_boot, alpha, "undefined on these data")
            continue
        finite = boots[:, j][np.isfinite(boots[:, j])]
        undefined = int(n_boot - finite.size)
        if finite.size == 0:
            out[name] = ClusterEstimate(
                value, None, None, n_clusters, n_boot, undefined, alpha, "undefined on every resample"
            )
            continue
        lo, hi = np.quantile(finite, [alpha / 2, 1 - alpha / 2])
        out[name] = ClusterEstimate(value, float(lo), float(hi), n_clusters, n_boot, undefined, alpha)
    return out


def weighted_mean(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Mean of per-cluster ``values`` over each resample (k, n_clusters), clusters with a NaN value
    left out; NaN where no drawn cluster has a value."""
    values = np.asarray(values, dtype=float)
    defined = np.isfinite(values)
    num = counts @ np.where(defined, values, 0.0)
    den = counts @ defined.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def weighted_ranks(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Average ranks (from 1, ties sharing their mean rank) of ``x`` (n,) in each weighted sample
    ``weights`` (k, n): observation i stands for ``weights[b, i]`` tied copies of itself, so this is
    ``scipy.stats.rankdata`` of the sample written out in full (zero-weight observations get the
    rank they would have, and weigh nothing)."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    group = np.empty(len(x), dtype=np.intp)  # the tie group of each observation, in x's order
    group[order] = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(xs)]))
    group_w = np.add.reduceat(np.asarray(weights, dtype=float)[:, order], starts, axis=1)
    before = np.cumsum(group_w, axis=1) - group_w
    return (before + (group_w + 1.0) / 2.0)[:, group]


def weighted_pearson(a: np.ndarray, b: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Pearson correlation of rows of ``a`` and ``b`` (k, n) under ``weights`` (k, n); NaN where
    either side is constant (a variance within rounding of zero) in that row."""
    w = np.asarray(weights, dtype=float)
    total = w.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        da = a - (w * a).sum(axis=1, keepdims=True) / total
        db = b - (w * b).sum(axis=1, keepdims=True) / total
        wda = w * da
        va, vb = (wda * da).sum(axis=1), (w * db * db).sum(axis=1)
        out = (wda * db).sum(axis=1) / np.sqrt(va * vb)
        scale = (np.abs(a).max(axis=1) * np.abs(b).max(axis=1)) * total[:, 0]
    return np.where((va * vb > 0) & (np.sqrt(va * vb) > 1e-12 * scale), np.clip(out, -1.0, 1.0), np.nan)


def weighted_spearman(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Spearman correlation (average ranks for ties) of each weighted sample (k, n) of the pairs
    (x, y), over the pairs where both are finite; NaN where fewer than two observations weigh
    anything or either side is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    keep = np.isfinite(x) & np.isfinite(y)
    x, y, w = x[keep], y[keep], w[:, keep]
    if x.size < 2:
        return np.full(w.shape[0], np.nan)
    return weighted_pearson(weighted_ranks(x, w), weighted_ranks(y, w), w)


def weighted_auroc(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUROC of ``scores`` for boolean ``labels`` (ties count half) in each weighted sample (k, n),
    over finite scores; NaN where either class weighs nothing."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    keep = np.isfinite(scores)
    scores, labels, w = scores[keep], labels[keep], w[:, keep]
    n_pos, n_neg = w[:, labels].sum(axis=1), w[:, ~labels].sum(axis=1)
    if scores.size == 0:
        return np.full(w.shape[0], np.nan)
    ranks = weighted_ranks(scores, w)
    u = (w[:, labels] * ranks[:, labels]).sum(axis=1) - n_pos * (n_pos + 1) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n_pos > 0) & (n_neg > 0), u / (n_pos * n_neg), np.nan)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties) over the pairs where both are finite;
    NaN when fewer than two such pairs or either side is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 2:
        return float("nan")
    rx, ry = rankdata(x[keep]), rankdata(y[keep])
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = float(np.sqrt((rx @ rx) * (ry @ ry)))
    return float(np.clip((rx @ ry) / den, -1.0, 1.0)) if den > 0 else float("nan")


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for boolean ``labels`` (ties count half), over finite
    scores; NaN when either class is empty."""
    scores = np.asarray(scores, dtype=float)
    return float(weighted_auroc(scores, labels, np.ones((1, scores.size)))[0])
