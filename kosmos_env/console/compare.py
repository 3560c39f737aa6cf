"""Side-by-side comparison of two campaigns on the same spec hash.

Campaigns with different spec hashes are refused (their results are never ranked together).
For each policy both ran, the difference B − A is paired on the (task, seed, repeat) cells
both decided, with a paired bootstrap interval over those cells.
"""
from __future__ import annotations

from typing import Any

from kosmos_env.console import campaigns as cz
from kosmos_env.report.svg import interval_chart
from kosmos_env.report.text import iv, num


def _decided(ref: cz.CampaignRef) -> dict[tuple, dict[tuple, float]]:
    conn = cz.connect_readonly(ref.ledger_path)
    try:
        out: dict = {}
        for r in conn.execute("SELECT policy, task, seed, repeat, outcome FROM episodes WHERE status = 'done' "
                              "AND outcome IN ('success', 'failure')"):
            out.setdefault(r["policy"], {})[(r["task"], r["seed"], r["repeat"])] = 1.0 if r["outcome"] == "success" else 0.0
        return out
    finally:
        conn.close()


def compare_campaigns(a: cz.CampaignRef, b: cz.CampaignRef, n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Template context of the comparison page; CampaignError when the spec hashes differ."""
    from kosmos_env.stats.intervals import paired_bootstrap_diff

    sa, sb = cz.read_summary(a), cz.read_summary(b)
    if sa.spec_hash != sb.spec_hash:
        raise cz.CampaignError(
            f"{a.name} ran spec {sa.spec_hash[:12]} and {b.name} ran spec {sb.spec_hash[:12]}: results of different "
            "specs are never ranked together (pick two campaigns on the same spec hash)")
    da, db = _decided(a), _decided(b)
    ra, rb = sa.success_so_far(), sb.success_so_far()
    rows = []
    for p in list(dict.fromkeys(sa.policies + sb.policies)):
        xa, xb = ra.get(p), rb.get(p)
        cells = sorted(set(da.get(p, {})) & set(db.get(p, {})))
        diff, diff_ci = "n/a", "n/a"
        if cells:
            va = [da[p][c] for c in cells]
            vb = [db[p][c] for c in cells]
            d = paired_bootstrap_diff(vb, va, n_boot=n_boot, seed=seed)
            diff, diff_ci = f"{d.estimate:+.3f}", iv((d.lower, d.upper))
        rows.append({"policy": p, "rate_a": num(xa["rate"]) if xa else "not run", "ci_a": iv(xa["wilson"]) if xa else "",
                     "rate_b": num(xb["rate"]) if xb else "not run", "ci_b": iv(xb["wilson"]) if xb else "",
                     "diff": diff, "diff_ci": diff_ci, "n": len(cells)})
    sides = []
    for ref, s in ((a, sa), (b, sb)):
        rank = cz.ranking_so_far(s)
        svg = interval_chart([(r["policy"], r["rate"], *(r["wilson"] or (None, None))) for r in rank],
                             xlabel="success rate (Wilson 95%)", width=560, label_width=200,
                             title=f"ranking of {ref.name}")
        sides.append({"key": ref.key, "s": s, "state": s.state(), "svg": svg})
    return {"a": sa, "b": sb, "sides": sides, "rows": rows}
