"""Side-by-side comparison of two campaigns on the same spec hash.

Campaigns with different spec hashes are refused (their results are never ranked together).
For each policy both ran, B's run is compared with A's on the (task, seed, repeat) cells both
decided; for two runs of *different* policies, each policy of A meets each policy of B on the
cells both runs share (the same seeds give the same initial scenes). Every difference is a
:func:`kosmos_env.stats.verdict.paired_verdict`: Tango's score interval, which decides and never
collapses to a zero-width interval (a bootstrap of 12/12 vs 0/12 reads "[1.000, 1.000]").

The page opens with one sentence (:func:`compare_headline`): where the runs' best policies differ,
which of the two ranks higher; for each shared policy, which run it does better in; or that no
difference is detectable yet; each with its paired interval. The table says which of its
columns are unpaired (each run's rate over all its decided episodes) and which are paired (B - A
over the cells both runs decided): the two can disagree, and only the paired one decides.
"""

from __future__ import annotations

from typing import Any

from kosmos_env.console import campaigns as cz
from kosmos_env.console.views import verdict_of
from kosmos_env.report.svg import interval_chart
from kosmos_env.report.cells import iv, num
from kosmos_env.stats.numbers import signed, signed_interval

MAX_CROSS = 24  # head-to-head rows of two runs with different policies (each of A against each of B)
MAX_HEADLINE_CLAUSES = 3  # shared policies named one by one in the headline; past that, the undecided are counted


def _pairs(n: int) -> str:
    return f"{n} paired seed{'s' if n != 1 else ''}"


def _shared_clause(policy: str, v) -> str:
    """One shared policy's finding, B's run against A's (``v`` is B vs A), with its interval."""
    if v.n_pairs == 0:
        return f"{policy} has no (task, seed, repeat) both runs decided, so nothing to compare"
    diff = f"B - A {v.interval_text()} over {_pairs(v.n_pairs)}"
    if v.outcome == "a_better":
        return f"{policy} succeeds more often in B than in A ({diff})"
    if v.outcome == "b_better":
        return f"{policy} succeeds more often in A than in B ({diff})"
    need = f"; need about {v.more_pairs_needed} more pairs" if v.more_pairs_needed is not None else ""
    return f"no detectable difference between the runs for {policy} yet ({diff}{need})"


def _best_clause(pa: str, pb: str, v) -> str:
    """A's best policy ``pa`` against B's best ``pb`` (``v`` is A's vs B's), with its interval."""
    diff = f"A - B {v.interval_text()} over {_pairs(v.n_pairs)}"
    if v.outcome == "a_better":
        return f"A's best, {pa}, beats B's best, {pb} ({diff})"
    if v.outcome == "b_better":
        return f"B's best, {pb}, beats A's best, {pa} ({diff})"
    need = f"; need about {v.more_pairs_needed} more pairs" if v.more_pairs_needed is not None else ""
    return f"no detectable difference yet between A's best, {pa}, and B's best, {pb} ({diff}{need})"


def compare_headline(shared: list[tuple[str, Any]], best: tuple[str, str, Any] | None = None) -> dict[str, str]:
    """The page's one-sentence verdict: ``{"text", "outcome"}``, every finding paired over the seeds
    both runs decided and given with its interval.

    ``best``: (A's best policy, B's best policy, the verdict of A's against B's) when the runs'
    best policies differ and are not both in the other run: which run's policy ranks higher, said
    first. ``shared``: (policy, verdict of B's run vs A's) for every policy both runs ran: which run
    it does better in, or that no difference is detectable yet; past :data:`MAX_HEADLINE_CLAUSES`
    findings the undecided ones are counted, not named. ``outcome`` is ``decided`` when some
    interval excludes 0, ``undecided`` when none does, ``none`` when there is nothing paired."""
    clauses = [_best_clause(*best)] if best is not None else []
    decided = [(p, v) for p, v in shared if v.outcome != "undecided"]
    open_ = [(p, v) for p, v in shared if v.outcome == "undecided"]
    if len(clauses) + len(shared) <= MAX_HEADLINE_CLAUSES:
        clauses += [_shared_clause(p, v) for p, v in shared]
    else:
        clauses += [_shared_clause(p, v) for p, v in decided]
        if open_:
            clauses.append(
                f"no detectable difference yet for the other {len(open_)} policies both ran (B - A in the table)"
            )
    if not clauses:
        return {"text": "The two runs share no decided seed: nothing can be compared paired.", "outcome": "none"}
    any_decided = decided or (best is not None and best[2].outcome != "undecided")
    return {
        "text": "Paired over the seeds both runs decided: " + "; ".join(clauses) + ".",
        "outcome": "decided" if any_decided else "undecided",
    }


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
    verdicts = []  # (policy, B's run vs A's) for the shared policies: the headline reads these
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
            row.update(
                diff=signed(v.difference, 3), diff_ci=signed_interval(*v.interval, 3), verdict=v.headline(), n=v.n_pairs
            )
            verdicts.append((p, v))
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
    # which run's policy ranks higher: A's best against B's best, on the seeds both ran, where the
    # two bests differ and are not both in the other run (then the per-policy findings say it)
    best = None
    top_a, top_b = cz.ranking_so_far(sa), cz.ranking_so_far(sb)
    if top_a and top_b and top_a[0]["rate"] is not None and top_b[0]["rate"] is not None:
        pa, pb = top_a[0]["policy"], top_b[0]["policy"]
        if pa != pb and not (pa in shared and pb in shared):
            v = verdict_of(da.get(pa, {}), db.get(pb, {}), (f"{pa} (A)", f"{pb} (B)"))
            best = (pa, pb, v) if v.n_pairs else None
    headline = compare_headline(verdicts, best)
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
        "headline": headline,
        "rows": rows,
        "shared": shared,
        "cross": cross,
        "per_policy_columns": per_policy_columns,
        "cross_columns": cross_columns,
    }
