"""Minimum detectable difference (MDD): the smallest success-rate gap the campaign can see.

All formulas use the normal approximation with a two-sided test at level ``alpha`` and the
stated ``power``: MDD = (z_{1-alpha/2} + z_{power}) * SE, where SE is the standard error of
the estimated gap.

* paired (same seeds for both policies): SE = sd(per-seed differences) / sqrt(n_seeds);
* unpaired two-proportion with n episodes per policy at success rate p: SE = sqrt(2 p (1-p) / n);
* by resampling: SE is the spread of the mean difference over seed resamples of a given size
  (with replacement), which also shows how the MDD shrinks with more seeds.

``separable_pairs`` answers the practical question: which policy pairs in *this* campaign
differ significantly (paired t-test on per-seed differences, Holm-corrected by default).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.stats import norm
from scipy.stats import t as t_dist


def _z_sum(alpha: float, power: float) -> float:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power}")
    return float(norm.ppf(1 - alpha / 2) + norm.ppf(power))


class NotEstimable(ValueError):
    """An MDD the data cannot estimate (zero variance): report the design's resolution instead of 0."""


def design_resolution(n_units: int) -> float:
    """The smallest success-rate difference a design with ``n_units`` paired binary episodes per
    policy can express at all: 1 / n. The honest answer where the variance (hence the MDD) is
    not estimable."""
    if n_units < 1:
        raise ValueError(f"n_units must be >= 1, got {n_units}")
    return 1.0 / n_units


def mdd_from_se(se: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """(z_{1-alpha/2} + z_power) * se."""
    return _z_sum(alpha, power) * float(se)


def mdd_paired(diffs: Sequence[float], alpha: float = 0.05, power: float = 0.8) -> float:
    """MDD of a paired comparison from the per-seed differences' own variance (NaN dropped)."""
    d = np.asarray(diffs, dtype=float)
    d = d[~np.isnan(d)]
    if d.size < 2:
        raise ValueError(f"paired MDD needs at least 2 per-seed differences, got {d.size}")
    sd = d.std(ddof=1)
    if sd == 0:
        # the normal approximation has nothing to work with; a 0 here would claim a perfect design
        raise NotEstimable(
            f"paired MDD is not estimable: the {d.size} per-seed differences have no spread "
            f"(all equal {d[0]:+g}); the design's resolution is 1/{d.size} = {1 / d.size:.3g}"
        )
    return mdd_from_se(sd / math.sqrt(d.size), alpha, power)


def mdd_two_proportion(p: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Unpaired MDD for two policies with ``n`` episodes each around success rate ``p``."""
    if not 0 <= p <= 1:
        raise ValueError(f"success rate p must be in [0, 1], got {p}")
    if n < 1:
        raise ValueError(f"episodes per policy n must be >= 1, got {n}")
    if p in (0.0, 1.0):
        raise NotEstimable(
            f"unpaired MDD is not estimable at success rate {p:g} (zero variance); "
            f"the design's resolution is 1/{n} = {1 / n:.3g}"
        )
    return mdd_from_se(math.sqrt(2 * p * (1 - p) / n), alpha, power)


def mdd_resampled(
    diffs: Sequence[float],
    sizes: Sequence[int] | None = None,
    *,
    n_resamples: int = 2000,
    alpha: float = 0.05,
    power: float = 0.8,
    seed: int = 0,
) -> dict[int, float]:
    """MDD at several numbers of seeds by resampling the per-seed differences.

    For each size m (default: n/4, n/2, 3n/4, n), draw ``n_resamples`` sets of m differences
    with replacement, take the standard deviation of their means as the SE, and return
    {m: MDD}. At m = n this is the bootstrap counterpart of :func:`mdd_paired`. No size may
    exceed the n differences there are: an MDD at 2n seeds would be a projection of a campaign
    that was not run, drawn as if measured (a curve to 96 units under a 48-unit campaign).
    """
    d = np.asarray(diffs, dtype=float)
    d = d[~np.isnan(d)]
    if d.size < 2:
        raise ValueError(f"resampled MDD needs at least 2 per-seed differences, got {d.size}")
    if sizes is None:
        sizes = sorted({max(2, d.size // 4), max(2, d.size // 2), max(2, 3 * d.size // 4), d.size})
    beyond = [int(m) for m in sizes if m > d.size]
    if beyond:
        raise ValueError(
            f"resampled MDD sizes {beyond} exceed the {d.size} per-seed differences the campaign has; "
            f"give sizes up to {d.size} (a larger campaign is measured by running it)"
        )
    if d.std() == 0:
        raise NotEstimable("resampled MDD is not estimable: the per-seed differences have no spread")
    rng = np.random.default_rng(seed)
    out = {}
    for m in sizes:
        if m < 1:
            raise ValueError(f"resample sizes must be >= 1, got {m}")
        means = d[rng.integers(0, d.size, size=(n_resamples, int(m)))].mean(axis=1)
        out[int(m)] = mdd_from_se(means.std(ddof=1), alpha, power)
    return out


@dataclass(frozen=True)
class PairTest:
    a: str
    b: str
    mean_diff: float
    n: int
    p_value: float
    separated: bool
    mdd: float | None


def _paired_p(d: np.ndarray) -> float:
    n = d.size
    mean = d.mean()
    sd = d.std(ddof=1) if n > 1 else 0.0
    if sd == 0:
        return 0.0 if mean != 0 and n > 1 else 1.0
    t = mean / (sd / math.sqrt(n))
    return float(2 * t_dist.sf(abs(t), df=n - 1))


def separable_pairs(
    matrix, policies: Sequence[str] | None = None, *, alpha: float = 0.05, power: float = 0.8, correction: str = "holm"
) -> tuple[list[PairTest], float]:
    """Paired t-test for every policy pair on the seeds both have; returns (tests, fraction separated).

    ``correction`` is "holm" (family-wise error <= alpha over all pairs) or "none". A pair
    whose differences are all equal and non-zero counts as separated (p = 0); all-zero as not.
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2 or m.shape[0] < 2:
        raise ValueError(f"need a (policies x seeds) matrix with >= 2 policies, got shape {m.shape}")
    names = list(policies) if policies is not None else [f"policy_{i}" for i in range(m.shape[0])]
    if correction not in ("holm", "none"):
        raise ValueError(f"correction must be 'holm' or 'none', got {correction!r}")
    raw = []
    for i, j in itertools.combinations(range(m.shape[0]), 2):
        d = m[i] - m[j]
        d = d[~np.isnan(d)]
        if d.size == 0:
            raise ValueError(f"policies {names[i]!r} and {names[j]!r} share no seed")
        try:
            mdd = mdd_paired(d, alpha, power) if d.size >= 2 else None
        except NotEstimable:
            mdd = None  # zero spread: no MDD, never a 0 that reads as "detects everything"
        raw.append((i, j, float(d.mean()), int(d.size), _paired_p(d), mdd))
    k = len(raw)
    reject = [False] * k
    if correction == "none":
        reject = [r[4] <= alpha for r in raw]
    else:  # Holm step-down
        for rank, idx in enumerate(sorted(range(k), key=lambda q: raw[q][4])):
            if raw[idx][4] <= alpha / (k - rank):
                reject[idx] = True
            else:
                break
    tests = [
        PairTest(names[i], names[j], md, n, p, rej, mdd) for (i, j, md, n, p, mdd), rej in zip(raw, reject, strict=True)
    ]
    return tests, (sum(reject) / k if k else 0.0)


@dataclass
class DetectableSummary:
    """Campaign-level MDD: median paired MDD over pairs, unpaired MDD at the pooled rate, the
    resampling curve for the median-variance pair, and the fraction of separable pairs.

    Pairs whose per-seed differences have no spread have no MDD (``n_pairs_not_estimable``
    counts them); ``paired_mdd_median`` is over the others and None when none is estimable.
    ``resolution`` (1 / seeds) is the smallest difference the design can express: where an MDD
    is not estimable, that, not 0, is what the design can claim."""

    paired_mdd_median: float | None
    unpaired_mdd: float | None
    pooled_rate: float
    n_seeds: int
    resampled: dict
    fraction_separable: float
    pairs: list[PairTest]
    alpha: float
    power: float
    n_pairs_not_estimable: int = 0
    resolution: float | None = None

    def to_dict(self) -> dict:
        return {
            "paired_mdd_median": self.paired_mdd_median,
            "unpaired_mdd": self.unpaired_mdd,
            "n_pairs_not_estimable": self.n_pairs_not_estimable,
            "resolution": self.resolution,
            "pooled_rate": self.pooled_rate,
            "n_seeds": self.n_seeds,
            "resampled": self.resampled,
            "fraction_separable": self.fraction_separable,
            "alpha": self.alpha,
            "power": self.power,
            "pairs": [p.__dict__ for p in self.pairs],
        }


def detectable_summary(
    matrix,
    policies: Sequence[str] | None = None,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    correction: str = "holm",
    seed: int = 0,
) -> DetectableSummary:
    """Everything above for one (policies × seeds) success (or score) matrix."""
    m = np.asarray(matrix, dtype=float)
    names = list(policies) if policies is not None else [f"policy_{i}" for i in range(m.shape[0])]
    tests, frac = separable_pairs(m, names, alpha=alpha, power=power, correction=correction)
    mdds = [t.mdd for t in tests if t.mdd is not None]
    pooled = float(np.nanmean(m))
    n_seeds = int(np.median((~np.isnan(m)).sum(axis=1)))
    resampled: dict = {}
    if mdds:
        order = np.argsort(mdds)
        pick = [t for t in tests if t.mdd is not None][int(order[len(order) // 2])]
        ia, ib = names.index(pick.a), names.index(pick.b)
        resampled = mdd_resampled(m[ia] - m[ib], alpha=alpha, power=power, seed=seed)
    try:
        unpaired = mdd_two_proportion(pooled, n_seeds, alpha, power) if n_seeds >= 1 else None
    except NotEstimable:
        unpaired = None
    return DetectableSummary(
        paired_mdd_median=float(np.median(mdds)) if mdds else None,
        unpaired_mdd=unpaired,
        pooled_rate=pooled,
        n_seeds=n_seeds,
        resampled=resampled,
        fraction_separable=frac,
        pairs=tests,
        alpha=alpha,
        power=power,
        n_pairs_not_estimable=sum(t.mdd is None for t in tests),
        resolution=design_resolution(n_seeds) if n_seeds >= 1 else None,
    )
