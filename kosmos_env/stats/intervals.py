"""Confidence intervals for success rates, for rates with discarded/abstained episodes, and
paired bootstrap (by seed) for differences between policies and for rankings.

Why the discard handling: an episode the gate discards (the world model broke) or the judge
abstains on is neither a success nor a failure. Dropping it silently biases the rate if
discards correlate with the policy, so besides the raw rate over decided episodes we report
the worst-case bounds: every undecided episode counted as a failure vs as a success. The width
of those bounds equals the undecided rate, which makes the cost of discards visible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
from scipy.stats import beta, norm, rankdata

OUTCOMES = ("success", "failure", "discarded", "abstained", "error")


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided interval at confidence ``1 - alpha``."""

    estimate: float | None
    lower: float
    upper: float
    alpha: float
    method: str

    @property
    def width(self) -> float:
        return self.upper - self.lower

    def to_dict(self) -> dict:
        return {
            "estimate": self.estimate,
            "lower": self.lower,
            "upper": self.upper,
            "alpha": self.alpha,
            "method": self.method,
        }


def _check_counts(k: int, n: int, alpha: float) -> None:
    if int(k) != k or int(n) != n:
        raise ValueError(f"successes and trials must be whole numbers, got k={k}, n={n}")
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= successes <= trials, got k={k}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def wilson(k: int, n: int, alpha: float = 0.05) -> Interval:
    """Wilson score interval (no continuity correction) for k successes in n trials.

    With n = 0 there is no information: estimate None, interval [0, 1].
    """
    _check_counts(k, n, alpha)
    if n == 0:
        return Interval(None, 0.0, 1.0, alpha, "wilson")
    z = float(norm.ppf(1 - alpha / 2))
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, max(0.0, center - half), min(1.0, center + half), alpha, "wilson")


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> Interval:
    """Clopper–Pearson ("exact") interval from beta quantiles; conservative coverage."""
    _check_counts(k, n, alpha)
    if n == 0:
        return Interval(None, 0.0, 1.0, alpha, "clopper-pearson")
    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return Interval(k / n, lo, hi, alpha, "clopper-pearson")


def rate_interval(k: int, n: int, alpha: float = 0.05, method: str = "wilson") -> Interval:
    """``wilson`` or ``clopper-pearson`` by name."""
    if method == "wilson":
        return wilson(k, n, alpha)
    if method in ("clopper-pearson", "exact"):
        return clopper_pearson(k, n, alpha)
    raise ValueError(f"unknown interval method {method!r}; use 'wilson' or 'clopper-pearson'")


# ----------------------------------------------------------------------------- undecided episodes


@dataclass(frozen=True)
class RateSummary:
    """Success rate of one policy with undecided episodes made visible.

    ``raw`` is successes / (successes + failures) with its interval. ``worst_case`` holds the
    bounds [s / N, (s + u) / N] over all N episodes when the u undecided ones (discarded +
    abstained + error) are all failures vs all successes; its width equals ``undecided_rate``.
    ``worst_case_ci`` widens those bounds by sampling error: the lower interval bound of the
    all-failures case to the upper bound of the all-successes case. ``discard_bounds`` and
    ``abstain_bounds`` do the same for one kind of undecided episode at a time (the other kinds
    left out of the denominator).
    """

    counts: dict
    raw: Interval
    worst_case: tuple[float, float] | None
    worst_case_ci: tuple[float, float] | None
    discard_bounds: tuple[float, float] | None
    abstain_bounds: tuple[float, float] | None
    undecided_rate: float | None
    discard_rate: float | None
    abstain_rate: float | None

    def to_dict(self) -> dict:
        return {
            "counts": dict(self.counts),
            "raw": self.raw.to_dict(),
            "worst_case": self.worst_case,
            "worst_case_ci": self.worst_case_ci,
            "discard_bounds": self.discard_bounds,
            "abstain_bounds": self.abstain_bounds,
            "undecided_rate": self.undecided_rate,
            "discard_rate": self.discard_rate,
            "abstain_rate": self.abstain_rate,
        }


def count_outcomes(outcomes: Iterable[str]) -> dict:
    """Count outcome labels; anything outside :data:`OUTCOMES` is a ValueError."""
    counts = {o: 0 for o in OUTCOMES}
    for o in outcomes:
        if o not in counts:
            raise ValueError(f"unknown outcome {o!r}; expected one of {OUTCOMES}")
        counts[o] += 1
    return counts


def _bounds(s: int, extra: int, total: int) -> tuple[float, float] | None:
    return None if total == 0 else (s / total, (s + extra) / total)


def summarize_rate(outcomes: Iterable[str] | dict, alpha: float = 0.05, method: str = "wilson") -> RateSummary:
    """Summarise a policy's outcomes (a list of labels, or a dict of counts).

    Errors (infrastructure failures) are undecided like discards and abstentions: they count
    in the worst-case bounds and the undecided rate, never as policy failures.
    """
    c = dict(count_outcomes([])) | dict(outcomes) if isinstance(outcomes, dict) else count_outcomes(outcomes)
    unknown = set(c) - set(OUTCOMES)
    if unknown:
        raise ValueError(f"unknown outcome(s) {sorted(unknown)}; expected {OUTCOMES}")
    s, f, d, a, e = (int(c[o]) for o in OUTCOMES)
    if min(s, f, d, a, e) < 0:
        raise ValueError(f"outcome counts must be >= 0, got {c}")
    u = d + a + e
    total = s + f + u
    raw = rate_interval(s, s + f, alpha, method)
    wc_ci = None
    if total:
        wc_ci = (rate_interval(s, total, alpha, method).lower, rate_interval(s + u, total, alpha, method).upper)
    return RateSummary(
        counts={o: int(c[o]) for o in OUTCOMES},
        raw=raw,
        worst_case=_bounds(s, u, total),
        worst_case_ci=wc_ci,
        discard_bounds=_bounds(s, d, s + f + d),
        abstain_bounds=_bounds(s, a, s + f + a),
        undecided_rate=u / total if total else None,
        discard_rate=d / total if total else None,
        abstain_rate=a / total if total else None,
    )


# ----------------------------------------------------------------------------- paired bootstrap


@dataclass(frozen=True)
class BootstrapDiff:
    """Paired bootstrap of mean(a) - mean(b) over seeds (percentile interval)."""

    estimate: float
    lower: float
    upper: float
    prob_a_better: float
    n_pairs: int
    n_boot: int
    alpha: float

    @property
    def collapsed(self) -> bool:
        """Zero width: every resample gave the same mean difference (e.g. all pairs discordant the
        same way). That is too few distinct pairs, not certainty: show the paired verdict's
        interval (:func:`kosmos_env.stats.verdict.paired_verdict`) or say "not estimable" instead."""
        return abs(self.upper - self.lower) < 1e-12

    def to_dict(self) -> dict:
        return self.__dict__.copy() | {"collapsed": self.collapsed}


def _paired(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=float).ravel()
    b = np.asarray(b, dtype=float).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired inputs need equal length, got {a.size} and {b.size}")
    keep = ~(np.isnan(a) | np.isnan(b))
    if not keep.any():
        raise ValueError("no seed has a value for both policies (all pairs contain NaN)")
    return a[keep], b[keep]


def paired_bootstrap_diff(
    a: Sequence[float], b: Sequence[float], *, n_boot: int = 5000, alpha: float = 0.05, seed: int = 0
) -> BootstrapDiff:
    """Difference of two policies' mean scores, resampling seeds (pairs) with replacement.

    ``a[i]`` and ``b[i]`` must come from the same seed (same initial state); pairs with a NaN
    on either side are dropped. ``prob_a_better`` is the bootstrap share with mean(a) > mean(b)
    (ties count half).
    """
    a, b = _paired(a, b)
    d = a - b
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(n_boot, d.size))
    boots = d[idx].mean(axis=1)
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    prob = float((boots > 0).mean() + 0.5 * (boots == 0).mean())
    return BootstrapDiff(float(d.mean()), float(lo), float(hi), prob, int(d.size), n_boot, alpha)


@dataclass
class BootstrapRanking:
    """Rank uncertainty of P policies from resampling seeds (columns) of a success matrix.

    Rank 1 is best; ties share the average rank. ``rank_interval[p]`` is the percentile
    interval of policy p's rank, ``prob_best[p]`` the share of resamples where it ranks first
    (shared firsts split), and ``win_prob[i, j]`` the share where mean_i > mean_j (ties half).
    """

    policies: list[str]
    means: np.ndarray
    ranks: np.ndarray
    rank_interval: np.ndarray
    prob_best: np.ndarray
    win_prob: np.ndarray
    n_boot: int
    alpha: float
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "policies": list(self.policies),
            "means": self.means.tolist(),
            "ranks": self.ranks.tolist(),
            "rank_interval": self.rank_interval.tolist(),
            "prob_best": self.prob_best.tolist(),
            "win_prob": self.win_prob.tolist(),
            "n_boot": self.n_boot,
            "alpha": self.alpha,
        }


def bootstrap_ranking(
    matrix, policies: Sequence[str] | None = None, *, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> BootstrapRanking:
    """Paired bootstrap of the ranking: resample seeds (columns) jointly for all policies.

    ``matrix`` is (policies × seeds), NaN where a policy has no value for a seed (that seed
    then simply does not count for that policy in a resample). A policy whose resample is all
    NaN ranks last in that resample.
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2 or m.shape[0] < 1 or m.shape[1] < 1:
        raise ValueError(f"matrix must be 2-D (policies x seeds) and non-empty, got shape {m.shape}")
    P, S = m.shape
    names = list(policies) if policies is not None else [f"policy_{i}" for i in range(P)]
    if len(names) != P:
        raise ValueError(f"{len(names)} policy names for {P} matrix rows")
    if np.all(np.isnan(m), axis=1).any():
        raise ValueError("every policy needs at least one non-NaN value")
    rng = np.random.default_rng(seed)
    means = np.nanmean(m, axis=1)
    ranks = rankdata(-means)
    boot_means = np.empty((n_boot, P))
    for b0 in range(0, n_boot, 512):
        nb = min(512, n_boot - b0)
        idx = rng.integers(0, S, size=(nb, S))
        sub = m[:, idx]  # (P, nb, S)
        vals = np.where(np.isnan(sub), 0.0, sub).sum(axis=2)
        cnt = (~np.isnan(sub)).sum(axis=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            bm = (vals / cnt).T
        boot_means[b0 : b0 + nb] = np.where(cnt.T > 0, bm, -np.inf)
    boot_ranks = rankdata(-boot_means, axis=1)
    rank_iv = np.quantile(boot_ranks, [alpha / 2, 1 - alpha / 2], axis=0).T
    best = boot_means == boot_means.max(axis=1, keepdims=True)
    prob_best = (best / best.sum(axis=1, keepdims=True)).mean(axis=0)
    gt = (boot_means[:, :, None] > boot_means[:, None, :]).mean(axis=0)
    eq = (boot_means[:, :, None] == boot_means[:, None, :]).mean(axis=0)
    win = gt + 0.5 * eq
    np.fill_diagonal(win, np.nan)
    return BootstrapRanking(names, means, ranks, rank_iv, prob_best, win, n_boot, alpha)
