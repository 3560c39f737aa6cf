"""The tables of the statistical analysis as plain rows of text cells.

One builder for three readers: the terminal text (``kosmos-env analyze``, report.md), the HTML
analysis (report.html and the console's analysis page) and the console's CSV or parquet download
of each table, so a download is the table on the page, cell for cell, and the terminal says the same. Input is the dict of
:func:`kosmos_env.report.analysis.analyze_bundle`; a section that was skipped has no table.
"""

from __future__ import annotations

from dataclasses import dataclass

from kosmos_env.report.cells import bounds, diff_interval, iv, num, pct, spread
from kosmos_env.stats.numbers import p_value, signed, signed_estimate


@dataclass(frozen=True)
class AnalysisTable:
    """One table: ``name`` is its id in a download URL (``?table=<name>``); ``left`` lists the
    columns set flush left on the page (text rather than numbers)."""

    name: str
    columns: list[str]
    rows: list[list[str]]
    left: tuple[int, ...] = (0,)


def rate_row(policy: str, r: dict) -> list[str]:
    """One row of the success-per-policy table (rank, counts, rate, intervals, discard bounds),
    the same cells in the text, the HTML analysis and the downloads."""
    k = r["counts"]
    return [
        str(r["rank"]),
        policy,
        f"{k['success']}/{r['decided']}",
        num(r["success_rate"]),
        iv(r["wilson"]),
        iv(r["clopper_pearson"]),
        bounds(r["worst_case"]),
        iv(r["worst_case_ci"]),
        pct(r["discard_rate"]),
        pct(r["abstain_rate"]),
        str(k["error"]),
    ]


def verdict_rows(vs: list[dict]) -> list[list[str]]:
    """One row per pair for the every-pair table: pair, outcome, difference [interval], pairs, more pairs."""
    out = []
    for v in vs:
        lo, hi = v["interval"]
        word = {"a_better": f"{v['a']} better", "b_better": f"{v['b']} better"}.get(v["outcome"], "undecided")
        more = "" if v["more_pairs_needed"] is None else f"about {v['more_pairs_needed']}"
        out.append(
            [f"{v['a']} vs {v['b']}", word, signed_estimate(v["difference"], lo, hi, 2), str(v["n_pairs"]), more]
        )
    return out


VERDICT_HEAD = ["pair", "verdict", "difference [interval]", "pairs", "more pairs needed"]


def _skipped(section) -> bool:
    return isinstance(section, dict) and "skipped" in section


def analysis_tables(a: dict) -> dict[str, AnalysisTable]:
    """Every table the analysis ``a`` has, by name, in page order."""
    conf = f"{100 * (1 - a['settings']['alpha']):g}%"
    out: list[AnalysisTable] = []
    if len(a.get("verdicts") or []) > 1:
        out.append(AnalysisTable("verdicts", list(VERDICT_HEAD), verdict_rows(a["verdicts"]), left=(0, 1)))

    out.append(
        AnalysisTable(
            "per_policy",
            [
                "rank",
                "policy",
                "succ/dec",
                "rate",
                f"Wilson {conf}",
                f"Clopper-Pearson {conf}",
                "worst case",
                f"worst case {conf}",
                "discarded",
                "abstained",
                "errors",
            ],
            [rate_row(p, a["per_policy"][p]) for p in a["ranking"]],
            left=(1,),
        )
    )

    if not _skipped(a["pairwise"]):
        out.append(
            AnalysisTable(
                "pairwise",
                ["pair", "difference", f"{conf} interval", "P(a better)", "pairs"],
                [
                    [f"{d['a']} − {d['b']}", "n/a", "", "", d["skipped"]]
                    if "skipped" in d
                    else [
                        f"{d['a']} − {d['b']}",
                        signed(d["estimate"], 3),
                        diff_interval(d),
                        num(d["prob_a_better"]),
                        str(d["n_pairs"]),
                    ]
                    for d in a["pairwise"]
                ],
            )
        )

    if not _skipped(a["bootstrap_ranking"]):
        b = a["bootstrap_ranking"]
        out.append(
            AnalysisTable(
                "ranking",
                ["policy", "mean", "mean rank", f"rank {conf}", "P(best)"],
                [
                    [p, num(m), num(rk, 1), f"[{lo:g}, {hi:g}]", num(pb)]
                    for p, m, rk, (lo, hi), pb in zip(
                        b["policies"], b["means"], b["ranks"], b["rank_interval"], b["prob_best"], strict=True
                    )
                ],
            )
        )

    if not _skipped(a["split_half"]):
        rows = []
        for m, s in a["split_half"].items():
            rows.append(
                [
                    m,
                    num(s["median"]),
                    spread(s.get("distribution") or {}),
                    num(s["corrected_median"]),
                    spread(s.get("corrected_distribution") or {}),
                    str(s["n_splits"]),
                    str(s["n_undefined"]),
                    str(s["half_size"]),
                ]
            )
        out.append(
            AnalysisTable(
                "split_half",
                ["metric", "median", "5-95%", "Spearman-Brown", "SB 5-95%", "splits", "undefined", "units/half"],
                rows,
            )
        )

    if not _skipped(a["detectable"]):
        out.append(
            AnalysisTable(
                "paired_tests",
                ["pair", "difference", "p (paired t)", "MDD", "separated (Holm)"],
                [
                    [
                        f"{t['a']} vs {t['b']}",
                        signed(t["mean_diff"], 3),
                        p_value(t["p_value"]),
                        num(t["mdd"]),
                        "yes" if t["separated"] else "no",
                    ]
                    for t in a["detectable"]["pairs"]
                ],
            )
        )

    if "agreement" in a:
        from kosmos_env.stats.agreement import METRICS

        out.append(
            AnalysisTable(
                "agreement",
                ["task", "n"] + list(METRICS),
                [
                    [r["label"], str(r["n"])]
                    + [
                        f"{num(r['metrics'][m]['value'])} (floor {num(r['metrics'][m]['random_floor'])})"
                        for m in METRICS
                    ]
                    for r in a["agreement"]["rows"]
                ],
            )
        )
    return {t.name: t for t in out}
