"""Aggregates recomputed from a bundle's per-episode rows: outcome counts, success rates with
intervals, the ranking, and the time/money breakdown.

The bundle's own ``aggregated`` block is never used for numbers; :func:`aggregated_mismatches`
only compares it with the recomputation so a report can flag a bundle whose summary disagrees
with its rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from kosmos_env.report.bundle import OUTCOMES, STAGES, Bundle
from kosmos_env.stats.intervals import RateSummary, clopper_pearson, summarize_rate


@dataclass
class PolicyRate:
    """One policy (or policy × task cell): counts, raw rate, Wilson and Clopper–Pearson
    intervals of the raw rate, and the worst-case view with undecided episodes."""

    label: str
    summary: RateSummary
    clopper_pearson: tuple[float, float]

    @property
    def counts(self) -> dict:
        return self.summary.counts

    @property
    def n(self) -> int:
        return sum(self.summary.counts.values())

    @property
    def decided(self) -> int:
        return self.counts["success"] + self.counts["failure"]

    @property
    def rate(self) -> float | None:
        return self.summary.raw.estimate

    @property
    def wilson(self) -> tuple[float, float]:
        return (self.summary.raw.lower, self.summary.raw.upper)

    def to_dict(self) -> dict:
        s = self.summary
        return {
            "n": self.n,
            "counts": dict(s.counts),
            "decided": self.decided,
            "success_rate": self.rate,
            "wilson": list(self.wilson),
            "clopper_pearson": list(self.clopper_pearson),
            "worst_case": list(s.worst_case) if s.worst_case else None,
            "worst_case_ci": list(s.worst_case_ci) if s.worst_case_ci else None,
            "discard_rate": s.discard_rate,
            "abstain_rate": s.abstain_rate,
            "undecided_rate": s.undecided_rate,
            "alpha": s.raw.alpha,
        }


def rate_of(label: str, outcomes: Iterable[str], alpha: float = 0.05) -> PolicyRate:
    """Summarise one list of outcome labels."""
    s = summarize_rate(list(outcomes), alpha=alpha, method="wilson")
    k, n = s.counts["success"], s.counts["success"] + s.counts["failure"]
    cp = clopper_pearson(k, n, alpha)
    return PolicyRate(label, s, (cp.lower, cp.upper))


def per_policy(bundle: Bundle, alpha: float = 0.05) -> dict[str, PolicyRate]:
    """{policy: PolicyRate} over all of its episodes, in bundle policy order."""
    return {p: rate_of(p, (r["outcome"] for r in bundle.rows if r["policy"] == p), alpha) for p in bundle.policies}


def per_policy_task(bundle: Bundle, alpha: float = 0.05) -> dict[str, dict[str, PolicyRate]]:
    """{policy: {task: PolicyRate}}; a task the policy never ran on is left out."""
    out: dict[str, dict[str, PolicyRate]] = {}
    for p in bundle.policies:
        cells = {}
        for t in bundle.tasks:
            outs = [r["outcome"] for r in bundle.rows if r["policy"] == p and r["task"] == t]
            if outs:
                cells[t] = rate_of(f"{p} / {t}", outs, alpha)
        out[p] = cells
    return out


def ranking(rates: Mapping[str, PolicyRate]) -> list[str]:
    """Policies best first: raw success rate, then Wilson lower bound, then the order ``rates``
    lists them in (the campaign's policy order, as the campaign runner breaks ties). Policies
    with no decided episode (no rate) come last."""
    pos = {p: i for i, p in enumerate(rates)}

    def key(p: str):
        r = rates[p]
        return (r.rate is None, -(r.rate or 0.0), -r.wilson[0], pos[p])

    return sorted(rates, key=key)


# ----------------------------------------------------------------------------- time and money

#: stages of a rollout's time; ``overhead`` is what ``total`` leaves after the named stages
TIME_STAGES = STAGES + ("overhead",)


def _stage_means(rows: list[dict]) -> dict[str, float] | None:
    from kosmos_env.campaign.cost import stage_seconds

    timed = [stage_seconds(r["timings"]) for r in rows if r.get("timings")]
    if not timed:
        return None
    return {k: sum(t[k] for t in timed) / len(timed) for k in TIME_STAGES + ("total",)}


def cost_breakdown(bundle: Bundle) -> dict:
    """Warm per-stage seconds per rollout (all episodes and per policy), model-load seconds
    apart (summed over the workers that built a model, and spread over the timed rollouts), the
    judge's share of the time (warm, and with loads), rollouts per hour of serial compute, and
    money split the same way when the campaign has a price table (the campaign's own
    price-table format, :class:`kosmos_env.campaign.cost.PriceTable`).

    Episodes without timings (e.g. infrastructure errors) are left out of the means.
    """
    from kosmos_env.campaign.cost import LOAD_STAGES, judge_shares, load_seconds

    rows = bundle.rows
    overall = _stage_means(rows)
    n_timed = sum(1 for r in rows if r.get("timings"))
    loads = {k: 0.0 for k in LOAD_STAGES}
    for r in rows:
        for k, v in load_seconds(r.get("timings")).items():
            loads[k] += v
    out = {
        "seconds_per_rollout": overall,
        "seconds_per_rollout_by_policy": {
            p: _stage_means([r for r in rows if r["policy"] == p]) for p in bundle.policies
        },
        "load_seconds": loads,
        "load_seconds_per_rollout": {k: v / n_timed for k, v in loads.items()} if n_timed else None,
        "judge_share": None,
        "judge_share_with_loads": None,
        "rollouts_per_hour": None,
        "n_rollouts": len(rows),
        "n_timed": n_timed,
        "money": None,
        "notes": [],
    }
    if n_timed < len(rows):
        out["notes"].append(f"{len(rows) - n_timed} episode(s) have no timings and are left out of the time breakdown")
    if overall and overall["total"] > 0:
        out["judge_share"] = overall["judge"] / overall["total"]
        out["judge_share_with_loads"] = judge_shares(overall, out["load_seconds_per_rollout"])["with_loads"]
        out["rollouts_per_hour"] = 3600.0 / overall["total"]
    table = bundle.campaign.get("price_table")
    if table and overall:
        from kosmos_env.campaign.cost import PriceTable

        try:
            prices = PriceTable.from_dict(table)
        except ValueError as exc:
            raise ValueError(f"{bundle.results_path}: campaign.price_table: {exc}") from None
        per_stage = {s: overall[s] * prices.price_per_second(s) for s in TIME_STAGES}
        per_rollout = sum(per_stage.values())
        load_money = {s: loads[s] * prices.price_per_second(s) for s in LOAD_STAGES}
        out["money"] = {
            "currency": prices.currency,
            "price_per_hour": dict(prices.accelerator_per_hour),
            "devices": {s: prices.device(s) for s in TIME_STAGES},
            "per_rollout_by_stage": per_stage,
            "per_rollout": per_rollout,
            "judge_share": per_stage["judge"] / per_rollout if per_rollout > 0 else None,
            "per_1000_rollouts": 1000 * per_rollout,
            "campaign_total": per_rollout * n_timed,
            # model loads: money of the builds over all workers, apart from the warm per-rollout money
            "load_by_stage": load_money,
            "load_total": sum(load_money.values()),
            "campaign_total_with_loads": per_rollout * n_timed + sum(load_money.values()),
            "judge_share_with_loads": judge_shares({s: v * n_timed for s, v in per_stage.items()}, load_money)[
                "with_loads"
            ],
        }
    return out


def aggregated_mismatches(bundle: Bundle, rates: Mapping[str, PolicyRate]) -> list[str]:
    """Where the bundle's ``aggregated.per_policy`` block disagrees with the recomputed counts."""
    agg = (bundle.data.get("aggregated") or {}).get("per_policy")
    if not isinstance(agg, Mapping):
        return []
    out = []
    names = {
        "successes": "success",
        "failures": "failure",
        "discarded": "discarded",
        "abstained": "abstained",
        "errors": "error",
    }
    for p, r in rates.items():
        block = agg.get(p)
        if not isinstance(block, Mapping):
            out.append(f"aggregated.per_policy has no entry for {p!r}")
            continue
        for k, o in names.items():
            if k in block and block[k] != r.counts[o]:
                out.append(f"aggregated.per_policy[{p!r}].{k} = {block[k]!r}, but the episode rows give {r.counts[o]}")
    return out


__all__ = [
    "OUTCOMES",
    "PolicyRate",
    "rate_of",
    "per_policy",
    "per_policy_task",
    "ranking",
    "cost_breakdown",
    "TIME_STAGES",
    "aggregated_mismatches",
]
