"""Side-by-side comparison of two campaigns on the same spec hash.

Campaigns with different spec hashes are refused (their results are never ranked together).
For each policy both ran, B's run is compared with A's on the (task, seed, repeat) cells both
decided; for two runs of *different* policies, each policy of A meets each policy of B on the
cells both runs share (the same seeds give the same initial scenes). Every difference is a
:func:`kosmos_env.stats.verdict.paired_verdict`: Tango's score interval, which decides and never
collapses to a zero-width interval (a bootstrap of 12/12 vs 0/12 reads "[1.000, 1.000]").
"""

from __future__ import annotations

from typing import Any

from kosmos_env.console import campaigns as cz
from kosmos_env.console.views import verdict_of
from kosmos_env.report.svg import interval_chart
from kosmos_env.report.cells import iv, num

MAX_CROSS = 24  # head-to-head rows of two runs with different policies (each of A against each of B)


def _row(v, label_a: str, label_b: str) -> dict[str, Any]:
    lo, hi = v.interval
    return {
        "a": label_a,
        "b": label_b,
        "n": v.n_pairs,
        "difference": v.difference,
        "lower": lo,
        "upper": hi,
        "outcome": v.outcome,
        "headline": v.headline(),
        "interval_text": v.interval_text(),
        "more_pairs_needed": v.more_pairs_needed,
        "method": v.method,
    }


def compare_campaigns(a: cz.CampaignRef, b: cz.CampaignRef) -> dict[str, Any]:
    """Template context of the comparison page; CampaignError when the spec hashes differ."""
    sa, sb = cz.read_summary(a), cz.read_summary(b)
    if sa.spec_hash != sb.spec_hash:
        raise cz.CampaignError(
            f"{a.name} ran spec {sa.spec_hash[:12]} and {b.name} ran spec {sb.spec_hash[:12]}: results of different "
            "specs are never ranked together (pick two campaigns on the same spec hash)"
        )
    da, db = cz.cells(a), cz.cells(b)
    ra, rb = sa.success_so_far(), sb.success_so_far()
    shared = [p for p in sa.policies if p in sb.policies]
    rows = []
    for p in list(dict.fromkeys(sa.policies + sb.policies)):
        xa, xb = ra.get(p), rb.get(p)
        row = {
            "policy": p,
            "rate_a": num(xa["rate"]) if xa else "not in A",
            "ci_a": iv(xa["wilson"]) if xa else "",
            "rate_b": num(xb["rate"]) if xb else "not in B",
            "ci_b": iv(xb["wilson"]) if xb else "",
            "diff": "",
            "diff_ci": "",
            "verdict": "",
            "n": 0,
            "csv": {
                "policy": p,
                "rate_a": xa["rate"] if xa else None,
                "rate_b": xb["rate"] if xb else None,
                "wilson_a_lower": (xa["wilson"] or [None, None])[0] if xa else None,
                "wilson_a_upper": (xa["wilson"] or [None, None])[1] if xa else None,
                "wilson_b_lower": (xb["wilson"] or [None, None])[0] if xb else None,
                "wilson_b_upper": (xb["wilson"] or [None, None])[1] if xb else None,
            },
        }
        if p in shared:
            v = verdict_of(db.get(p, {}), da.get(p, {}), (f"{p} in B", f"{p} in A"))
            row.update(diff=f"{v.difference:+.3f}", diff_ci=iv(v.interval), verdict=v.headline(), n=v.n_pairs)
            row["csv"].update(
                b_minus_a=v.difference, lower=v.interval[0], upper=v.interval[1], pairs=v.n_pairs, outcome=v.outcome
            )
        rows.append(row)
    cross = []
    only_a = [p for p in sa.policies if p not in shared] or sa.policies
    only_b = [p for p in sb.policies if p not in shared] or sb.policies
    if set(sa.policies) != set(sb.policies):
        for pa in only_a:
            for pb in only_b:
                if len(cross) >= MAX_CROSS or pa == pb:
                    continue
                v = verdict_of(da.get(pa, {}), db.get(pb, {}), (f"{pa} (A)", f"{pb} (B)"))
                cross.append(_row(v, pa, pb))
    sides = []
    for ref, s in ((a, sa), (b, sb)):
        rank = cz.ranking_so_far(s)
        svg = interval_chart(
            [(r["policy"], r["rate"], *(r["wilson"] or (None, None))) for r in rank],
            xlabel="success rate (Wilson 95%)",
            width=560,
            label_width=200,
            title=f"ranking of {ref.name}",
        )
        sides.append({"key": ref.key, "s": s, "state": s.state(), "svg": svg})
    per_policy_columns = [
        "policy",
        "rate_a",
        "wilson_a_lower",
        "wilson_a_upper",
        "rate_b",
        "wilson_b_lower",
        "wilson_b_upper",
        "b_minus_a",
        "lower",
        "upper",
        "pairs",
        "outcome",
    ]
    cross_columns = ["a", "b", "n", "difference", "lower", "upper", "outcome", "more_pairs_needed", "method"]
    return {
        "a": sa,
        "b": sb,
        "sides": sides,
        "rows": rows,
        "shared": shared,
        "cross": cross,
        "per_policy_columns": per_policy_columns,
        "cross_columns": cross_columns,
    }
