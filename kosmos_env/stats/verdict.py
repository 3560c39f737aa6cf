"""One verdict for a pair of policies, from one pre-chosen rule whose interval also decides.

Why this module exists: a page that shows a bootstrap interval, a paired t-test and an
anytime-valid A/B side by side invites a reader to pick whichever agrees with them, and the
bootstrap collapses to a zero-width "[1.000, 1.000]" when every pair is discordant the same way.
Here one rule gives the interval *and* the decision ("the interval excludes 0"), so the headline
can never disagree with the interval printed beside it.

* ``measure="success"`` (0/1 per pair): Tango's asymptotic score interval for the difference of
  paired proportions (T. Tango, Stat. Med. 17:891-908, 1998; formula as restated by Fagerland,
  Lydersen & Laake, Stat. Med. 33:2850-2875, 2014; checked in tests/stats/test_verdict.py against
  the worked examples of Tango 1998, Agresti & Min 2005 and Fagerland et al. 2014). It is a
  test-inversion interval, so at 12/12 vs 0/12 the upper end is 1 and the lower end stays well
  below 1, and with no discordant pair at all it still has width (no false certainty).
* ``measure="success"`` with fractions (success per seed averaged over repeats): the 2x2 table of
  paired outcomes no longer exists, so the adjusted interval below is used, and named.
* ``measure="score"`` (judge scores in [0, 1]): the Agresti-Min adjusted Wald interval
  generalised to fractional scores (A. Agresti & Y. Min, Stat. Med. 24:729-740, 2005): the
  per-pair differences are augmented with pseudo-pairs of total weight 2 (weight 1/2 at +1,
  1/2 at -1, 1 at 0, i.e. half a pseudo-count in each cell of the 2x2 table) and a normal
  interval is drawn around the augmented mean. For 0/1 scores this *is* the published
  Agresti-Min interval (near-nominal coverage for paired proportions); for fractional scores
  the pseudo-pairs carry variance, so the interval never collapses to zero width however
  uniform the scores are. A t interval alone collapses on constant differences, and an
  empirical-Bernstein interval at a dozen pairs is so wide (Maurer & Pontil's range term is 7 ln(4/alpha)/(3(n-1)) of the range)
  that even 12/12 vs 0/12 would read "undecided".

The decision is always "the interval excludes 0": ``a_better`` if its lower end is above 0,
``b_better`` if its upper end is below 0, ``undecided`` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.stats import norm

from kosmos_env.stats.numbers import signed_estimate

MEASURES = ("success", "score")
OUTCOMES = ("a_better", "b_better", "undecided")
TANGO_METHOD = "Tango score interval for paired proportions"
SCORE_METHOD = "Agresti-Min adjusted interval for paired mean scores"
SUCCESS_AVG_METHOD = "Agresti-Min adjusted interval for paired success averaged over repeats"
POWER = 0.8  # the power at which "more pairs needed" is estimated


@dataclass(frozen=True)
class Verdict:
    """The verdict for policy ``a`` vs policy ``b`` on ``measure`` over ``n_pairs`` paired seeds."""

    a: str
    b: str
    outcome: str  # "a_better" | "b_better" | "undecided"
    measure: str  # "success" | "score"
    n_pairs: int
    difference: float  # mean of a - b over pairs
    interval: tuple[float, float]  # from the same rule that decides
    method: str
    more_pairs_needed: int | None
    alpha: float = 0.05

    @property
    def measure_words(self) -> str:
        return "success" if self.measure == "success" else "judge score"

    @property
    def level(self) -> str:
        return f"{100 * (1 - self.alpha):g}%"

    def interval_text(self, digits: int = 2) -> str:
        # one helper for every signed number: an upper end of -0.0036 reads "-0.004", never "+0.00"
        lo, hi = self.interval
        return signed_estimate(self.difference, lo, hi, digits)

    def headline(self) -> str:
        what = self.measure_words
        if self.n_pairs == 0:
            return f"No paired seeds yet between {self.a} and {self.b} on {what}: nothing to compare"
        pairs = f"{self.n_pairs} paired seed{'s' if self.n_pairs != 1 else ''}"
        if self.outcome == "a_better":
            return f"{self.a} better than {self.b} on {what}: {self.interval_text()} over {pairs} ({self.method})"
        if self.outcome == "b_better":
            return f"{self.b} better than {self.a} on {what}: {self.interval_text()} over {pairs} ({self.method})"
        if self.more_pairs_needed is not None:
            need = f"need about {self.more_pairs_needed} more pairs"
        elif self.difference == 0:
            need = "no observed difference to detect"
        else:
            need = "more pairs needed not estimable"
        return (
            f"No detectable difference yet between {self.a} and {self.b} on {what}: "
            f"{self.interval_text()} over {pairs} ({need}; {self.method})"
        )

    def to_dict(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "outcome": self.outcome,
            "measure": self.measure,
            "n_pairs": self.n_pairs,
            "difference": self.difference,
            "interval": [self.interval[0], self.interval[1]],
            "method": self.method,
            "more_pairs_needed": self.more_pairs_needed,
            "alpha": self.alpha,
            "headline": self.headline(),
        }


# --- success: Tango's score interval -------------------------------------------------------


def _tango_z(delta0: float, n12: float, n21: float, n: float) -> float:
    """Tango's score statistic at the hypothesised difference ``delta0``.

    ``n12`` = pairs where A succeeded and B failed, ``n21`` = the reverse. The nuisance
    probability P(A fails, B succeeds) is replaced by its maximum-likelihood estimate under the
    constraint difference = delta0 (the positive root of a quadratic).
    """
    A = 2.0 * n
    B = -n12 - n21 + (2.0 * n - n12 + n21) * delta0
    C = -n21 * delta0 * (1.0 - delta0)
    disc = max(B * B - 4.0 * A * C, 0.0)
    p21 = max((math.sqrt(disc) - B) / (2.0 * A), 0.0)
    num = n12 - n21 - n * delta0
    var = n * (2.0 * p21 + delta0 * (1.0 - delta0))
    if var <= 0.0:
        # 0/0 only where the data sit exactly on delta0 (e.g. all pairs discordant one way and
        # delta0 = +-1): that value is then fully consistent with the data.
        return 0.0 if abs(num) < 1e-12 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def _root(f, lo: float, hi: float, iters: int = 200) -> float:
    # Plain bisection: Tango's statistic is monotone decreasing in delta0, and bisection cannot
    # jump over the 0/0 points at +-1 the way a secant step could.
    flo = f(lo)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        fm = f(mid)
        if (fm > 0) == (flo > 0):
            lo, flo = mid, fm
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def tango_interval(n12: int, n21: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Tango's (1998) asymptotic score interval for P(A succeeds) - P(B succeeds), paired.

    ``n12``: pairs where only A succeeded, ``n21``: pairs where only B succeeded, ``n``: all pairs.
    The interval is every delta0 in [-1, 1] the score test at level ``alpha`` does not reject.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if n12 < 0 or n21 < 0 or n12 + n21 > n:
        raise ValueError(f"need 0 <= discordant counts and n12 + n21 <= n, got n12={n12}, n21={n21}, n={n}")
    if n == 0:
        return (-1.0, 1.0)
    z = float(norm.ppf(1 - alpha / 2))
    est = (n12 - n21) / n
    eps = 1e-12
    # Lower end: where Z(delta0) falls to +z, searched on [-1, est]; upper: where it falls to -z.
    if _tango_z(-1.0 + eps, n12, n21, n) <= z:
        lower = -1.0
    else:
        lower = _root(lambda d: _tango_z(d, n12, n21, n) - z, -1.0 + eps, est)
    if _tango_z(1.0 - eps, n12, n21, n) >= -z:
        upper = 1.0
    else:
        upper = _root(lambda d: _tango_z(d, n12, n21, n) + z, est, 1.0 - eps)
    return (max(-1.0, lower), min(1.0, upper))


def _pairs_needed_success(p12: float, p21: float, alpha: float, power: float = POWER) -> float | None:
    # Connor (1987, Biometrics 43:207-211) sample size for McNemar's test, with the observed
    # discordant proportions as the planning values.
    delta = p12 - p21
    psi = p12 + p21
    if delta == 0 or psi <= 0:
        return None
    za, zb = float(norm.ppf(1 - alpha / 2)), float(norm.ppf(power))
    return (za * math.sqrt(psi) + zb * math.sqrt(max(psi - delta * delta, 0.0))) ** 2 / (delta * delta)


# --- score: Agresti-Min adjusted interval on fractional differences -------------------------


def adjusted_score_interval(d: Sequence[float], alpha: float = 0.05) -> tuple[float, float, float]:
    """Agresti-Min adjusted interval for the mean paired difference ``d`` (each in [-1, 1]).

    Returns ``(adjusted_mean, lower, upper)``. Pseudo-pairs: weight 1/2 at +1, 1/2 at -1, 1 at 0.
    """
    d = np.asarray(d, dtype=float)
    n = d.size
    z = float(norm.ppf(1 - alpha / 2))
    vals = np.concatenate([d, [1.0, -1.0, 0.0]])
    w = np.concatenate([np.ones(n), [0.5, 0.5, 1.0]])
    tot = n + 2.0
    mean = float(np.sum(w * vals) / tot)
    var = float(np.sum(w * (vals - mean) ** 2) / tot)
    half = z * math.sqrt(var / tot)
    return mean, max(-1.0, mean - half), min(1.0, mean + half)


def _pairs_needed_score(d: np.ndarray, alpha: float, power: float = POWER) -> float | None:
    # Normal-approximation sample size for a paired mean, with the variance floored by the same
    # pseudo-pairs as the interval (so a constant difference does not claim 1 pair suffices).
    n = d.size
    delta = float(d.mean()) if n else 0.0
    if delta == 0:
        return None
    vals = np.concatenate([d, [1.0, -1.0, 0.0]])
    w = np.concatenate([np.ones(n), [0.5, 0.5, 1.0]])
    m = float(np.sum(w * vals) / (n + 2.0))
    var = float(np.sum(w * (vals - m) ** 2) / (n + 2.0))
    za, zb = float(norm.ppf(1 - alpha / 2)), float(norm.ppf(power))
    return (za + zb) ** 2 * var / (delta * delta)


# --- the verdict ----------------------------------------------------------------------------


def _as_pairs(a, b, measure: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(a, dtype=float).ravel()
    y = np.asarray(b, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"paired verdict needs one value per pair for both policies, got {x.size} and {y.size}")
    # A pair with a missing side (NaN: episode not run, discarded or abstained) is not a pair.
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    if np.any(np.isinf(x)) or np.any(np.isinf(y)):
        raise ValueError("paired verdict: values must be finite")
    if np.any((x < 0) | (x > 1)) or np.any((y < 0) | (y > 1)):
        raise ValueError(f"paired verdict on {measure}: values must lie in [0, 1]")
    return x, y


def _binary(x: np.ndarray, y: np.ndarray) -> bool:
    return bool(np.all((x == 0) | (x == 1)) and np.all((y == 0) | (y == 1)))


def paired_verdict(
    a, b, *, names: tuple[str, str] = ("A", "B"), measure: str = "success", alpha: float = 0.05
) -> Verdict:
    """The verdict on ``a`` vs ``b`` (one value per paired seed, same order), from one rule.

    ``measure="success"``: 0/1 outcomes, Tango's score interval (per-seed success averaged over
    repeats, i.e. fractions, use the Agresti-Min adjusted interval). ``measure="score"``: judge
    scores in [0, 1], the Agresti-Min adjusted interval. Pairs with a NaN on either side are dropped.
    The outcome is "the interval excludes 0"; ``more_pairs_needed`` is, when undecided, about how
    many more pairs would detect the observed difference with 80% power (None when decided, or
    when no difference was observed).
    """
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {MEASURES}, got {measure!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if len(names) != 2:
        raise ValueError(f"names must be two display names, got {names!r}")
    na, nb = str(names[0]), str(names[1])
    x, y = _as_pairs(a, b, measure)
    n = int(x.size)
    level = f"{100 * (1 - alpha):g}%"
    # Success per seed is 0/1 with one repeat (Tango); with repeats averaged per seed it is a
    # fraction, and the paired 2x2 table no longer exists, so the adjusted rule takes over.
    tango = measure == "success" and _binary(x, y)
    if tango:
        method = f"{TANGO_METHOD}, {level}"
    elif measure == "success":
        method = f"{SUCCESS_AVG_METHOD}, {level}"
    else:
        method = f"{SCORE_METHOD}, {level}"
    if n == 0:
        return Verdict(na, nb, "undecided", measure, 0, 0.0, (-1.0, 1.0), method, None, alpha)
    d = x - y
    diff = float(d.mean())
    if tango:
        n12 = int(np.sum((x == 1) & (y == 0)))
        n21 = int(np.sum((x == 0) & (y == 1)))
        lo, hi = tango_interval(n12, n21, n, alpha)
        need = _pairs_needed_success(n12 / n, n21 / n, alpha)
    else:
        _, lo, hi = adjusted_score_interval(d, alpha)
        need = _pairs_needed_score(d, alpha)
    if lo > 0:
        outcome = "a_better"
    elif hi < 0:
        outcome = "b_better"
    else:
        outcome = "undecided"
    more = None
    if outcome == "undecided" and need is not None and math.isfinite(need):
        more = max(int(math.ceil(need)) - n, 1)
    return Verdict(na, nb, outcome, measure, n, diff, (float(lo), float(hi)), method, more, alpha)


__all__ = ["Verdict", "paired_verdict", "tango_interval", "adjusted_score_interval", "MEASURES", "OUTCOMES"]
