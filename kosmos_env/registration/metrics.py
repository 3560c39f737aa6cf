"""Registered metrics: an allow-listed catalogue, checked and normalised at registration, and
computed from a campaign's episode rows with an interval for every value.

Each registered metric is an expression in the grammar of :mod:`kosmos_env.registration.expr`
naming one entry of :data:`METRICS`. At registration the expression is checked (known name,
known arguments of the right type, policies and tasks that are in the design, a reference when
the metric needs one) and rewritten in canonical form with *every* argument explicit, so the
registered definition does not depend on a later version's defaults.

The catalogue (rates are successes / (successes + failures), pooled over the selected tasks):

- ``success_rate(policy=P, task=None)``: a policy's success rate (``task`` None = all tasks);
- ``discard_rate(policy=None, task=None)``: discarded / all episodes (``policy`` None = all);
- ``success_diff(a=P, b=Q, task=None)``: success rate of ``a`` minus that of ``b``;
- ``rank_order([P1, P2, ...], task=None)``: 1.0 when the success rates are strictly in that
  order (P1 best), else 0.0;
- ``pearson``, ``spearman``, ``kendall`` (``scope="task_mean"|"pooled"``) and
  ``mmrv(weight="reference"|"evaluator", ties="greater"|"less"|"strict", scope=...)``: agreement
  of the campaign's per-(task, policy) success rates with the registered reference values, per
  task over policies then averaged over tasks (``task_mean``) or over all cells at once
  (``pooled``); see :mod:`kosmos_env.stats.agreement`. The random floor is reported too.

Intervals: ``wilson`` and ``clopper_pearson`` (rates only, from the counts) and ``bootstrap``
(every metric): a percentile bootstrap that resamples (task, seed) units within each task (a
unit keeps all its repeats and all policies' episodes, so the design stays paired), with the
registered number of resamples and seed. Percentiles use the inverted empirical CDF (no
interpolation), so for ``rank_order`` the lower bound of a 95% interval is 1 exactly when the
order holds in more than 97.5% of resamples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kosmos_env.registration.expr import Call, ExprError, format_call, parse_expr

OUTCOMES = ("success", "failure", "discarded", "abstained", "error")
_S, _F, _D = 0, 1, 2
_REQUIRED = object()


@dataclass(frozen=True)
class Param:
    """One argument of a metric: ``kind`` is policy, policy?, task?, policies or choice."""

    name: str
    kind: str
    default: Any = _REQUIRED
    choices: tuple = ()


@dataclass(frozen=True)
class MetricDef:
    name: str
    params: tuple[Param, ...]
    intervals: tuple[str, ...]
    needs_reference: bool
    higher_is_better: bool | None
    summary: str


_SCOPE = Param("scope", "choice", "task_mean", ("task_mean", "pooled"))
_RATE_IV = ("wilson", "clopper_pearson", "bootstrap")
METRICS: dict[str, MetricDef] = {
    m.name: m
    for m in (
        MetricDef(
            "success_rate",
            (Param("policy", "policy"), Param("task", "task?", None)),
            _RATE_IV,
            False,
            True,
            "success rate of one policy (successes / decided episodes)",
        ),
        MetricDef(
            "discard_rate",
            (Param("policy", "policy?", None), Param("task", "task?", None)),
            _RATE_IV,
            False,
            False,
            "share of episodes the gate discarded",
        ),
        MetricDef(
            "success_diff",
            (Param("a", "policy"), Param("b", "policy"), Param("task", "task?", None)),
            ("bootstrap",),
            False,
            True,
            "success rate of a minus that of b",
        ),
        MetricDef(
            "rank_order",
            (Param("order", "policies"), Param("task", "task?", None)),
            ("bootstrap",),
            False,
            True,
            "1 when the success rates are strictly in the given order, else 0",
        ),
        MetricDef("pearson", (_SCOPE,), ("bootstrap",), True, True, "Pearson correlation with the reference"),
        MetricDef("spearman", (_SCOPE,), ("bootstrap",), True, True, "Spearman correlation with the reference"),
        MetricDef("kendall", (_SCOPE,), ("bootstrap",), True, True, "Kendall tau-b with the reference"),
        MetricDef(
            "mmrv",
            (
                Param("weight", "choice", "reference", ("reference", "evaluator")),
                Param("ties", "choice", "greater", ("greater", "less", "strict")),
                _SCOPE,
            ),
            ("bootstrap",),
            True,
            False,
            "mean maximum rank violation against the reference (0 = perfect)",
        ),
    )
}


def default_interval(name: str) -> str:
    """The interval a bar uses when the protocol names none: Wilson for rates, else bootstrap."""
    return METRICS[name].intervals[0]


# ----------------------------------------------------------------------------- normalisation


def _policy_label(value: Any, policies: Sequence[str], where: str) -> str:
    from kosmos_env.campaign.design import PolicyRef

    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} must be a policy label string, got {value!r}")
    label = PolicyRef.parse(value).label
    if label not in policies:
        raise ValueError(f"{where} = {value!r} is not a registered policy; registered: {list(policies)}")
    return label


def normalize_metric(
    text: str, policies: Sequence[str], tasks: Sequence[str], has_reference: bool, where: str = "metric"
) -> tuple[Call, MetricDef]:
    """Parse, check and canonicalise one metric expression against the design.

    Returns the canonical :class:`Call` (every argument as a keyword, defaults filled in) and
    its definition. Errors are ValueErrors that start with ``where``.
    """
    try:
        call = parse_expr(text)
    except ExprError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if call.name not in METRICS:
        raise ValueError(f"{where}: unknown metric {call.name!r}; allowed: {sorted(METRICS)}")
    mdef = METRICS[call.name]
    if len(call.args) > len(mdef.params):
        raise ValueError(
            f"{where}: {call.name} takes at most {len(mdef.params)} argument(s), got {len(call.args)} positional"
        )
    # positional args fill the first parameters; the rest keep their defaults or come by keyword
    given = dict(zip((p.name for p in mdef.params), call.args, strict=False))
    for key, value in call.kwargs.items():
        if key in given:
            raise ValueError(f"{where}: argument {key!r} of {call.name} given twice")
        given[key] = value
    known = {p.name for p in mdef.params}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(
            f"{where}: unknown argument(s) {unknown} for {call.name}; it takes {[p.name for p in mdef.params]}"
        )
    out: dict[str, Any] = {}
    for p in mdef.params:
        w = f"{where}: {call.name} argument {p.name!r}"
        if p.name not in given:
            if p.default is _REQUIRED:
                raise ValueError(f"{w} is required")
            out[p.name] = p.default
            continue
        v = given[p.name]
        if p.kind == "policy" or (p.kind == "policy?" and v is not None):
            out[p.name] = _policy_label(v, policies, w)
        elif p.kind in ("policy?", "task?") and v is None:
            out[p.name] = None
        elif p.kind == "task?":
            if v not in tasks:
                raise ValueError(f"{w} = {v!r} is not a registered task; registered: {list(tasks)}")
            out[p.name] = v
        elif p.kind == "policies":
            if not isinstance(v, list) or len(v) < 2:
                raise ValueError(f"{w} must be a list of at least 2 policy labels, got {v!r}")
            labels = [_policy_label(x, policies, w) for x in v]
            if len(set(labels)) != len(labels):
                raise ValueError(f"{w} names a policy twice: {labels}")
            out[p.name] = labels
        elif p.kind == "choice":
            if v not in p.choices:
                raise ValueError(f"{w} must be one of {list(p.choices)}, got {v!r}")
            out[p.name] = v
        else:  # pragma: no cover - a catalogue entry with an unknown kind is a programming error
            raise AssertionError(p.kind)
    if call.name == "success_diff" and out["a"] == out["b"]:
        raise ValueError(f"{where}: success_diff needs two different policies, got {out['a']!r} twice")
    if mdef.needs_reference and not has_reference:
        raise ValueError(
            f"{where}: {call.name} compares with reference data; the protocol must declare "
            f"'reference: {{path: FILE.csv, sha256: ...}}'"
        )
    return Call(call.name, (), out), mdef


def canonical_expr(text: str, policies: Sequence[str], tasks: Sequence[str], has_reference: bool) -> str:
    """The canonical text of a metric expression (see :func:`normalize_metric`)."""
    return format_call(normalize_metric(text, policies, tasks, has_reference)[0])


# ----------------------------------------------------------------------------- data


@dataclass
class Cube:
    """Outcome counts per (task, seed) unit: ``counts[u, outcome, policy, task]``.

    A unit belongs to one task, so only its task's column is non-zero; keeping the task axis
    lets every metric sum over whichever tasks it selects.
    """

    policies: list[str]
    tasks: list[str]
    units: list[tuple[str, int]]
    counts: np.ndarray  # (U, 5, P, T)

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]], policies: Sequence[str], tasks: Sequence[str]) -> "Cube":
        pi = {p: i for i, p in enumerate(policies)}
        ti = {t: i for i, t in enumerate(tasks)}
        units = sorted({(r["task"], int(r["seed"])) for r in rows if r["task"] in ti and r["policy"] in pi})
        ui = {u: i for i, u in enumerate(units)}
        counts = np.zeros((len(units), len(OUTCOMES), len(policies), len(tasks)))
        oi = {o: i for i, o in enumerate(OUTCOMES)}
        for r in rows:
            if r["task"] not in ti or r["policy"] not in pi:
                continue
            if r["outcome"] not in oi:
                raise ValueError(f"episode {r.get('episode_id')!r} has unknown outcome {r['outcome']!r}")
            counts[ui[(r["task"], int(r["seed"]))], oi[r["outcome"]], pi[r["policy"]], ti[r["task"]]] += 1
        return cls(list(policies), list(tasks), units, counts)

    def total(self) -> np.ndarray:
        """(1, 5, P, T): the counts of the whole campaign."""
        return self.counts.sum(axis=0)[None]

    def bootstrap(self, n_boot: int, seed: int) -> np.ndarray:
        """(n_boot, 5, P, T): counts of ``n_boot`` resamples of the units, stratified by task."""
        rng = np.random.default_rng(seed)
        weights = np.zeros((n_boot, len(self.units)))
        for task in self.tasks:
            idx = [i for i, u in enumerate(self.units) if u[0] == task]
            if idx:
                weights[:, idx] = rng.multinomial(len(idx), np.full(len(idx), 1.0 / len(idx)), size=n_boot)
        return np.einsum("bu,uopt->bopt", weights, self.counts)


def _tsel(cube: Cube, task: str | None) -> list[int]:
    return list(range(len(cube.tasks))) if task is None else [cube.tasks.index(task)]


def _rates(cube: Cube, C: np.ndarray) -> np.ndarray:
    """(B, P, T) success rates, NaN where a cell has no decided episode."""
    s, d = C[:, _S], C[:, _S] + C[:, _F]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(d > 0, s / np.where(d > 0, d, 1), np.nan)


def _pooled_rate(cube: Cube, C: np.ndarray, policy: str, task: str | None) -> np.ndarray:
    t = _tsel(cube, task)
    p = cube.policies.index(policy)
    s = C[:, _S, p][:, t].sum(axis=1)
    d = s + C[:, _F, p][:, t].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(d > 0, s / np.where(d > 0, d, 1), np.nan)


def _rate_counts(cube: Cube, C: np.ndarray, name: str, kw: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(k, n) counts behind a rate metric, each (B,)."""
    t = _tsel(cube, kw["task"])
    if name == "success_rate":
        p = cube.policies.index(kw["policy"])
        k = C[:, _S, p][:, t].sum(axis=1)
        return k, k + C[:, _F, p][:, t].sum(axis=1)
    ps = list(range(len(cube.policies))) if kw["policy"] is None else [cube.policies.index(kw["policy"])]
    sub = C[:, :, ps][:, :, :, t]
    return sub[:, _D].sum(axis=(1, 2)), sub.sum(axis=(1, 2, 3))


def _agreement_values(
    cube: Cube, C: np.ndarray, name: str, kw: Mapping[str, Any], reference: Mapping[tuple[str, str], float]
) -> np.ndarray:
    from kosmos_env.stats.agreement import measure_agreement

    rates = _rates(cube, C)
    extra = {"weight": kw["weight"], "ties": kw["ties"]} if name == "mmrv" else {}
    groups: list[tuple[list[int], list[int], list[float]]] = []  # (policy idx, task idx, reference)
    cells = [
        (cube.tasks.index(t), cube.policies.index(p), v)
        for (t, p), v in sorted(reference.items())
        if t in cube.tasks and p in cube.policies
    ]
    if kw["scope"] == "pooled":
        groups.append(([c[1] for c in cells], [c[0] for c in cells], [c[2] for c in cells]))
    else:
        for ti in sorted({c[0] for c in cells}):
            mine = [c for c in cells if c[0] == ti]
            groups.append(([c[1] for c in mine], [c[0] for c in mine], [c[2] for c in mine]))
    out = np.full(C.shape[0], np.nan)
    for b in range(C.shape[0]):
        vals = []
        for pis, tis, ref in groups:
            e = rates[b, pis, tis]
            if len(e) < 2 or np.isnan(e).any():
                continue
            v = measure_agreement(e, ref, name, floor=False, **extra).value
            if v is not None:
                vals.append(v)
        if vals:
            out[b] = float(np.mean(vals))
    return out


def metric_values(
    cube: Cube, C: np.ndarray, call: Call, reference: Mapping[tuple[str, str], float] | None = None
) -> np.ndarray:
    """The metric ``call`` (canonical) for each of the B count arrays in ``C``; NaN = undefined."""
    name, kw = call.name, call.kwargs
    if name in ("success_rate", "discard_rate"):
        k, n = _rate_counts(cube, C, name, kw)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, k / np.where(n > 0, n, 1), np.nan)
    if name == "success_diff":
        return _pooled_rate(cube, C, kw["a"], kw["task"]) - _pooled_rate(cube, C, kw["b"], kw["task"])
    if name == "rank_order":
        r = np.stack([_pooled_rate(cube, C, p, kw["task"]) for p in kw["order"]], axis=1)
        holds = np.all(r[:, :-1] > r[:, 1:], axis=1).astype(float)
        return np.where(np.isnan(r).any(axis=1), np.nan, holds)
    if METRICS[name].needs_reference:
        if not reference:
            raise ValueError(f"{name} needs the registered reference data")
        return _agreement_values(cube, C, name, kw, reference)
    raise ValueError(f"unknown metric {name!r}")  # pragma: no cover - normalize_metric refuses it first


# ----------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class MetricResult:
    """One registered metric on one campaign: estimate, interval, and the bar's verdict."""

    name: str
    expr: str
    estimate: float | None
    interval: dict | None  # {"method", "level", "lower", "upper", ...}
    bar: dict
    checked: float | None  # the number compared with the bar (estimate or a bound)
    passed: bool
    reason: str | None
    extra: dict

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "expr": self.expr,
            "estimate": self.estimate,
            "interval": self.interval,
            "bar": dict(self.bar),
            "checked_value": self.checked,
            "verdict": self.verdict,
            "reason": self.reason,
            **self.extra,
        }


OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda x, v: x >= v,
    ">": lambda x, v: x > v,
    "<=": lambda x, v: x <= v,
    "<": lambda x, v: x < v,
}


def _finite(x: Any) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def evaluate_metric(
    metric: Mapping[str, Any], cube: Cube, boot: np.ndarray | None, reference: Mapping[tuple[str, str], float] | None
) -> MetricResult:
    """Compute one registered metric (canonical protocol entry) and check its bar.

    ``boot`` holds the bootstrap count arrays (shared by all metrics of the study, so they
    see the same resamples); it may be None when no bar uses a bootstrap interval.
    """
    from kosmos_env.stats.intervals import rate_interval

    call = parse_expr(metric["expr"])
    bar = metric["bar"]
    level = float(bar["level"])
    alpha = 1.0 - level
    est = _finite(metric_values(cube, cube.total(), call, reference)[0])
    extra: dict[str, Any] = {}
    interval = None
    reason = None
    method = bar["interval"]
    if method in ("wilson", "clopper_pearson"):
        k, n = (int(x[0]) for x in _rate_counts(cube, cube.total(), call.name, call.kwargs))
        extra["counts"] = {"k": k, "n": n}
        if n > 0:
            iv = rate_interval(k, n, alpha, "wilson" if method == "wilson" else "clopper-pearson")
            interval = {"method": method, "level": level, "lower": iv.lower, "upper": iv.upper}
    else:
        if boot is None:
            raise ValueError("bootstrap resamples are needed for a bootstrap interval")
        vals = metric_values(cube, boot, call, reference)
        ok = vals[~np.isnan(vals)]
        extra["bootstrap"] = {"n_boot": int(vals.size), "defined": int(ok.size)}
        if call.name == "rank_order" and ok.size:
            extra["bootstrap"]["share_order_holds"] = float(ok.mean())
        if ok.size:
            lo = float(np.quantile(ok, alpha / 2, method="inverted_cdf"))
            hi = float(np.quantile(ok, 1 - alpha / 2, method="inverted_cdf"))
            interval = {
                "method": "bootstrap",
                "level": level,
                "lower": lo,
                "upper": hi,
                "unit": "(task, seed), stratified by task",
            }
        if ok.size < vals.size:
            extra["bootstrap"]["note"] = f"{vals.size - ok.size} resample(s) left the metric undefined and were dropped"
    if METRICS[call.name].needs_reference and est is not None:
        extra["random_floor"] = _agreement_floor(cube, call, reference)
    if est is None:
        reason = "the metric is undefined on this campaign (e.g. no decided episode, or constant values)"
    bound = bar["bound"]
    checked = est if bound == "estimate" else (None if interval is None else interval[bound])
    if checked is None and reason is None:
        reason = f"no {bound} bound: the interval is undefined"
    passed = checked is not None and OPS[bar["op"]](checked, float(bar["value"]))
    return MetricResult(metric["name"], metric["expr"], est, interval, dict(bar), checked, passed, reason, extra)


def _agreement_floor(cube: Cube, call: Call, reference: Mapping[tuple[str, str], float]) -> float | None:
    """The metric's expectation under a random permutation of the evaluator values (same scope)."""
    from kosmos_env.stats.agreement import random_floor

    rates = _rates(cube, cube.total())[0]
    cells = [
        (cube.tasks.index(t), cube.policies.index(p), v)
        for (t, p), v in sorted(reference.items())
        if t in cube.tasks and p in cube.policies
    ]
    groups = (
        [cells]
        if call.kwargs["scope"] == "pooled"
        else [[c for c in cells if c[0] == ti] for ti in sorted({c[0] for c in cells})]
    )
    extra = {"weight": call.kwargs["weight"], "ties": call.kwargs["ties"]} if call.name == "mmrv" else {}
    floors = []
    for g in groups:
        e = [rates[c[1], c[0]] for c in g]
        if len(e) >= 2 and not np.isnan(e).any():
            f, _ = random_floor(e, [c[2] for c in g], call.name, **extra)
            if f is not None:
                floors.append(f)
    return float(np.mean(floors)) if floors else None
