"""Agreement with its uncertainty: bootstrap intervals, permutation p-values, baseline differences.

An agreement number (Kendall, Spearman, Pearson, MMRV) between an evaluator's per-policy success
rates and the truth's says little alone: with few, widely spaced policies a judge that reads only
the commands already agrees. This module gives each number the three things that can explain it
away:

- a **bootstrap interval**: resample the (task, seed) units (columns of the policy × unit success
  matrices) with replacement, jointly for the evaluator, the truth and every baseline (the
  episodes are paired on the unit), recompute the per-policy rates and the metric;
- a **permutation p-value against a random ranking**: the share of permutations of the
  evaluator's per-policy rates across policies whose metric is at least as good as the observed
  one (exact over all P! orders for P <= 8, else Monte Carlo, with the +1 correction), and the
  null distribution's (1 - alpha) quantile (alpha for MMRV, where lower is better), which is what
  a random ranking reaches by luck. The permutation *mean* of a correlation is 0 by symmetry and
  says nothing about luck;
- the **difference to a baseline** on the same resamples, signed so that positive means "better
  than the baseline" (world - baseline for correlations, baseline - world for MMRV), with its
  interval. The evaluator adds information over the baseline only where that interval excludes 0.

The alpha convention (one for the whole package): intervals are two-sided percentile intervals
at 1 - alpha; p-values are one-sided (better than random) and compared with alpha; "excludes 0"
means the two-sided 1 - alpha interval lies strictly above 0. Default alpha = 0.05.

Undefined stays undefined: where a metric is undefined (constant rates), its value, interval and
p-value are None with the reason; resamples where it is undefined are counted, never scored as 0.
"""

from __future__ import annotations

import itertools
from typing import Mapping, Sequence

import numpy as np

from kosmos_env.stats.agreement import HIGHER_IS_BETTER, METRICS, _kernel, _mmrv_rows, measure_agreement, rowwise
from kosmos_env.stats.numbers import p_text, plain_interval, signed, signed_estimate

ALPHA = 0.05
EXACT_PERMUTATION_MAX_P = 8
MIN_DEFINED_SHARE = 0.5  # an interval from fewer defined resamples than this is "not estimable"


def alpha_convention(alpha: float = ALPHA) -> str:
    """The one sentence every report prints next to a decision."""
    return (
        f"alpha = {alpha:g}: intervals are two-sided {100 * (1 - alpha):g} % percentile bootstrap intervals over "
        f"(task, seed) units; p-values are one-sided permutation p-values against a random ranking, significant "
        f"when <= {alpha:g}; a difference counts only when its {100 * (1 - alpha):g} % interval excludes 0"
    )


def _rates(matrix: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per-policy means over resampled columns: (P, U) matrix, (B, U) index -> (B, P); NaN where a
    policy has no decided episode in the resample."""
    sub = matrix[:, idx]  # (P, B, U)
    ok = ~np.isnan(sub)
    cnt = ok.sum(axis=2)
    tot = np.where(ok, sub, 0.0).sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = tot / cnt
    return np.where(cnt > 0, out, np.nan).T


def _paired_metric(metric: str, E: np.ndarray, R: np.ndarray) -> np.ndarray:
    """``metric`` between matching rows of E and R (B, P); NaN where undefined or a rate is missing."""
    bad = np.isnan(E).any(axis=1) | np.isnan(R).any(axis=1)
    E0, R0 = np.nan_to_num(E), np.nan_to_num(R)
    if metric == "mmrv":
        out = np.array([_mmrv_rows(E0[i : i + 1], R0[i], "reference", "greater")[0] for i in range(len(E0))])
    else:
        out = rowwise(metric, E0, R0)
    return np.where(bad, np.nan, out)


def permutation_test(
    evaluator: Sequence[float],
    reference: Sequence[float],
    metric: str,
    *,
    alpha: float = ALPHA,
    n_perm: int = 10_000,
    seed: int = 0,
) -> dict:
    """One-sided permutation p-value of ``metric`` against a random ranking, and the null quantile.

    Returns {"p_value", "null_quantile", "null_mean", "method"}; p_value None where the observed
    metric is undefined. Permutations where the metric is undefined count as not extreme.
    """
    e = np.asarray(evaluator, dtype=float)
    r = np.asarray(reference, dtype=float)
    obs = measure_agreement(e, r, metric, floor=False).value
    kern = _kernel(metric)
    n = e.size
    if n <= EXACT_PERMUTATION_MAX_P:
        perms = np.array(list(itertools.permutations(range(n))), dtype=np.intp)
        method, plus = "exact", 0
    else:
        rng = np.random.default_rng(seed)
        perms = rng.permuted(np.tile(np.arange(n), (n_perm, 1)), axis=1)
        method, plus = f"monte-carlo({n_perm}, seed={seed})", 1
    vals = np.concatenate([kern(e[perms[i : i + 4096]], r) for i in range(0, len(perms), 4096)])
    defined = vals[~np.isnan(vals)]
    higher = HIGHER_IS_BETTER[metric]
    q = None
    if defined.size:
        q = float(np.quantile(defined, 1 - alpha if higher else alpha))
    p = None
    if obs is not None:
        tol = 1e-12
        extreme = (vals >= obs - tol) if higher else (vals <= obs + tol)
        extreme &= ~np.isnan(vals)
        p = float((extreme.sum() + plus) / (len(vals) + plus))
    return {
        "p_value": p,
        "null_quantile": q,
        "null_mean": float(defined.mean()) if defined.size else None,
        "method": method,
    }


def _interval(values: np.ndarray, alpha: float) -> tuple[list[float] | None, float, str | None]:
    defined = values[~np.isnan(values)]
    share = defined.size / values.size if values.size else 0.0
    if share < MIN_DEFINED_SHARE:
        return (
            None,
            share,
            (f"not estimable: the metric is undefined in {100 * (1 - share):.0f} % of the bootstrap resamples"),
        )
    lo, hi = np.quantile(defined, [alpha / 2, 1 - alpha / 2])
    return [float(lo), float(hi)], share, None


def agreement_uncertainty(
    evaluators: Mapping[str, np.ndarray],
    truth: np.ndarray,
    *,
    baselines: Sequence[str] = (),
    metrics: Sequence[str] = METRICS,
    alpha: float = ALPHA,
    n_boot: int = 1000,
    n_perm: int = 10_000,
    seed: int = 0,
) -> dict:
    """Every evaluator's agreement with the truth, with interval and p-value, and its difference
    to each named baseline (itself one of ``evaluators``).

    ``evaluators`` maps a name to a (policies × units) success matrix (NaN: undecided or
    missing); ``truth`` is the truth's matrix on the same policies and units (same column order).
    Returns {"alpha", "convention", "n_units", "n_boot", "evaluators": {name: {metric: {...}}},
    "differences": {name: {baseline: {metric: {...}}}}}.
    """
    T = np.asarray(truth, dtype=float)
    if T.ndim != 2 or T.shape[1] < 2:
        raise ValueError(f"truth must be a (policies x units) matrix with >= 2 units, got shape {T.shape}")
    mats = {k: np.asarray(v, dtype=float) for k, v in evaluators.items()}
    for k, v in mats.items():
        if v.shape != T.shape:
            raise ValueError(f"evaluator {k!r} has shape {v.shape}, the truth {T.shape}: they must pair up")
    for b in baselines:
        if b not in mats:
            raise ValueError(f"baseline {b!r} is not one of the evaluators {sorted(mats)}")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; choose from {METRICS}")
    P, U = T.shape
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, U, size=(n_boot, U))
    all_idx = np.arange(U)[None]
    truth_obs = _rates(T, all_idx)[0]
    truth_boot = _rates(T, idx)
    boot: dict[str, dict[str, np.ndarray]] = {}
    out: dict = {
        "alpha": alpha,
        "convention": alpha_convention(alpha),
        "n_units": U,
        "n_boot": n_boot,
        "evaluators": {},
        "differences": {},
    }
    for name, M in mats.items():
        obs = _rates(M, all_idx)[0]
        e_boot = _rates(M, idx)
        boot[name] = {}
        entry = {"rates": [None if np.isnan(x) else float(x) for x in obs]}
        for metric in metrics:
            ok = ~np.isnan(obs) & ~np.isnan(truth_obs)
            if ok.sum() < 2:
                entry[metric] = {
                    "value": None,
                    "interval": None,
                    "p_value": None,
                    "null_quantile": None,
                    "reason": "fewer than 2 policies with decided episodes",
                }
                boot[name][metric] = np.full(n_boot, np.nan)
                continue
            a = measure_agreement(obs[ok], truth_obs[ok], metric, floor=False)
            vals = _paired_metric(metric, e_boot[:, ok], truth_boot[:, ok])
            boot[name][metric] = vals
            iv, share, why = _interval(vals, alpha) if a.value is not None else (None, 0.0, a.reason)
            perm = permutation_test(obs[ok], truth_obs[ok], metric, alpha=alpha, n_perm=n_perm, seed=seed)
            entry[metric] = {
                "value": a.value,
                "interval": iv,
                "defined_share": share,
                "p_value": perm["p_value"],
                "null_quantile": perm["null_quantile"],
                "null_mean": perm["null_mean"],
                "permutation": perm["method"],
                "reason": a.reason or why,
                "n_policies": int(ok.sum()),
            }
        out["evaluators"][name] = entry
    for name in mats:
        for b in baselines:
            if b == name:
                continue
            d: dict = {}
            for metric in metrics:
                sign = 1.0 if HIGHER_IS_BETTER[metric] else -1.0
                ev, bv = out["evaluators"][name][metric]["value"], out["evaluators"][b][metric]["value"]
                if ev is None or bv is None:
                    d[metric] = {
                        "estimate": None,
                        "interval": None,
                        "excludes_zero": False,
                        "reason": "undefined for the evaluator or the baseline",
                    }
                    continue
                diffs = sign * (boot[name][metric] - boot[b][metric]) + 0.0
                iv, share, why = _interval(diffs, alpha)
                iv = None if iv is None else [x + 0.0 for x in iv]  # no "-0.00"
                d[metric] = {
                    "estimate": sign * (ev - bv) + 0.0,
                    "interval": iv,
                    "defined_share": share,
                    "excludes_zero": bool(iv is not None and iv[0] > 0),
                    "reason": why,
                }
            out["differences"].setdefault(name, {})[b] = d
    return out


def aligned_matrix(rows: Sequence[Mapping], policies: Sequence[str], units: Sequence[tuple]) -> np.ndarray:
    """(policies × units) success matrix from rows with ``policy``, ``task``, ``seed`` and ``success``
    (True/False/None); ``units`` are (task, seed) pairs. Missing or undecided cells are NaN; a
    duplicate (policy, task, seed) is a ValueError."""
    pi = {p: i for i, p in enumerate(policies)}
    ui = {u: j for j, u in enumerate(units)}
    m = np.full((len(policies), len(units)), np.nan)
    seen = set()
    for r in rows:
        key = (r["policy"], (r["task"], r["seed"]))
        if key in seen:
            raise ValueError(f"duplicate episode for {key}")
        seen.add(key)
        i, j = pi.get(r["policy"]), ui.get((r["task"], r["seed"]))
        if i is None or j is None or r["success"] is None:
            continue
        m[i, j] = float(bool(r["success"]))
    return m


def format_metric(entry: Mapping, digits: int = 2) -> str:
    """ "0.93 [0.81, 1.00] p = 0.0123" ("p < 0.0001" below that), or "—" without a value."""
    v = entry.get("value")
    if v is None:
        return "—"
    iv = entry.get("interval")
    s = f"{v:.{digits}f}"
    s += " " + plain_interval(iv[0], iv[1], digits) if iv else " [n.e.]"
    p = entry.get("p_value")
    if p is not None:
        # a Monte Carlo permutation p-value cannot go below 1 / (n_perm + 1), about 1e-4 by default
        s += " " + p_text(p)
    return s


def format_difference(entry: Mapping, digits: int = 2) -> str:
    """ "+0.12 [-0.03, +0.27]" (signed; a negative end never reads "+0.00"), ✓ when it excludes 0."""
    if entry.get("estimate") is None:
        return "—"
    iv = entry.get("interval")
    s = (
        signed_estimate(entry["estimate"], iv[0], iv[1], digits)
        if iv
        else f"{signed(entry['estimate'], digits)} [n.e.]"
    )
    return s + (" ✓" if entry.get("excludes_zero") else "")


__all__ = [
    "ALPHA",
    "alpha_convention",
    "agreement_uncertainty",
    "permutation_test",
    "aligned_matrix",
    "format_metric",
    "format_difference",
]


def _accuracy(E: np.ndarray, T: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Episode accuracy (verdict == truth, over episodes both decided) per resample: (B,)."""
    e, t = E[:, idx], T[:, idx]  # (P, B, U)
    ok = ~np.isnan(e) & ~np.isnan(t)
    hits = np.where(ok, e == t, False).sum(axis=(0, 2))
    n = ok.sum(axis=(0, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, hits / np.maximum(n, 1), np.nan)


def difference_to_best(
    evaluator: np.ndarray,
    baselines: Mapping[str, np.ndarray],
    truth: np.ndarray,
    *,
    metric: str = "kendall",
    rows: Sequence[int] | None = None,
    alpha: float = ALPHA,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict:
    """The evaluator's agreement minus the *best* baseline's, the best chosen inside every resample.

    ``metric`` is one of the correlation metrics or ``"accuracy"`` (share of episodes whose verdict
    equals the truth's). ``rows`` restricts to a subgroup of policies (rows of the matrices). The
    (task, seed) units are resampled jointly for all (paired). Choosing the best baseline inside
    each resample, not once on the observed data, keeps the selection's luck inside the interval.
    Returns {"estimate", "interval", "excludes_zero", "best_baseline" (observed), "evaluator",
    "baselines": {name: value}, "n_policies", "defined_share", "reason"}.
    """
    if metric not in METRICS and metric != "accuracy":
        raise ValueError(f"unknown metric {metric!r}; choose from {METRICS + ('accuracy',)}")
    if not baselines:
        raise ValueError("difference_to_best needs at least one baseline")
    T = np.asarray(truth, dtype=float)
    sel = np.arange(T.shape[0]) if rows is None else np.asarray(list(rows), dtype=np.intp)
    T = T[sel]
    E = np.asarray(evaluator, dtype=float)[sel]
    B = {k: np.asarray(v, dtype=float)[sel] for k, v in baselines.items()}
    U = T.shape[1]
    rng = np.random.default_rng(seed)
    idx = np.concatenate([np.arange(U)[None], rng.integers(0, U, size=(n_boot, U))])  # row 0: observed
    sign = 1.0 if metric == "accuracy" or HIGHER_IS_BETTER[metric] else -1.0

    def values(M: np.ndarray) -> np.ndarray:
        if metric == "accuracy":
            return _accuracy(M, T, idx)
        if len(sel) < 2:
            return np.full(len(idx), np.nan)
        return sign * _paired_metric(metric, _rates(M, idx), _rates(T, idx))

    ev = values(E)
    bv = np.stack([values(M) for M in B.values()])  # (K, 1 + n_boot)
    with np.errstate(invalid="ignore"):
        best = np.where(np.isnan(bv).all(axis=0), np.nan, np.nanmax(np.where(np.isnan(bv), -np.inf, bv), axis=0))
    diffs = ev - best
    names = list(B)
    obs_best = (
        None if np.isnan(bv[:, 0]).all() else names[int(np.nanargmax(np.where(np.isnan(bv[:, 0]), -np.inf, bv[:, 0])))]
    )
    base = {
        "evaluator": None if np.isnan(ev[0]) else float(sign * ev[0]),
        "baselines": {n: (None if np.isnan(v) else float(sign * v)) for n, v in zip(names, bv[:, 0], strict=True)},
        "best_baseline": obs_best,
        "n_policies": int(len(sel)),
        "metric": metric,
    }
    if np.isnan(diffs[0]):
        return {
            **base,
            "estimate": None,
            "interval": None,
            "excludes_zero": False,
            "defined_share": 0.0,
            "reason": "undefined for the evaluator or every baseline",
        }
    iv, share, why = _interval(diffs[1:], alpha)
    iv = None if iv is None else [x + 0.0 for x in iv]
    return {
        **base,
        "estimate": float(diffs[0]) + 0.0,
        "interval": iv,
        "defined_share": share,
        "excludes_zero": bool(iv is not None and iv[0] > 0),
        "reason": why,
    }


def agreement_ratio(
    evaluator: np.ndarray,
    reference: np.ndarray,
    truth: np.ndarray,
    *,
    metric: str = "kendall",
    rows: Sequence[int] | None = None,
    alpha: float = ALPHA,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict:
    """The evaluator's agreement with the truth over a reference evaluator's, on the same resamples.

    Asks "how much of what the reference (e.g. a judge on the simulator's own frames) gets right
    does the evaluator (the same judge on a world's frames) keep?". The (task, seed) units are
    resampled jointly for all three matrices, with the same draws as :func:`agreement_uncertainty`
    for the same ``seed`` and unit count, so the ratio's interval is paired with the two agreements'
    intervals it is reported beside. A ratio is defined only where the reference's agreement is
    above 0 (a reference no better than random leaves nothing to keep); resamples where it is not
    are counted as undefined, never scored. ``rows`` restricts to a subgroup of policies.
    Returns {"estimate", "interval", "defined_share", "reason", "evaluator", "reference",
    "n_policies", "metric"} (the last two agreements observed).
    """
    if metric not in METRICS or not HIGHER_IS_BETTER[metric]:
        raise ValueError(f"a ratio of agreements needs a correlation where higher is better, got {metric!r}")
    T = np.asarray(truth, dtype=float)
    sel = np.arange(T.shape[0]) if rows is None else np.asarray(list(rows), dtype=np.intp)
    T = T[sel]
    E = np.asarray(evaluator, dtype=float)[sel]
    R = np.asarray(reference, dtype=float)[sel]
    if E.shape != T.shape or R.shape != T.shape:
        raise ValueError(f"evaluator {E.shape}, reference {R.shape} and truth {T.shape} must pair up")
    U = T.shape[1]
    rng = np.random.default_rng(seed)
    idx = np.concatenate([np.arange(U)[None], rng.integers(0, U, size=(n_boot, U))])  # row 0: observed
    if len(sel) < 2:
        e = r = np.full(len(idx), np.nan)
    else:
        t = _rates(T, idx)
        e = _paired_metric(metric, _rates(E, idx), t)
        r = _paired_metric(metric, _rates(R, idx), t)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(r > 0, e / np.where(r > 0, r, 1.0), np.nan)
    base = {
        "evaluator": None if np.isnan(e[0]) else float(e[0]),
        "reference": None if np.isnan(r[0]) else float(r[0]),
        "n_policies": int(len(sel)),
        "metric": metric,
    }
    if np.isnan(ratio[0]):
        why = (
            "undefined for the evaluator or the reference"
            if np.isnan(e[0]) or np.isnan(r[0])
            else "the reference's agreement is not above 0"
        )
        return {**base, "estimate": None, "interval": None, "defined_share": 0.0, "reason": why}
    iv, share, why = _interval(ratio[1:], alpha)
    return {**base, "estimate": float(ratio[0]), "interval": iv, "defined_share": share, "reason": why}
