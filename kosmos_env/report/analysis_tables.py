"""The tables of the statistical analysis as plain rows of text cells.

One builder for two readers: the HTML analysis (report.html and the console's analysis page) draws
these tables, and the console serves each one as a CSV or parquet download, so a download is the
table on the page, cell for cell. Input is the dict of
:func:`kosmos_env.report.analysis.analyze_bundle`; a section that was skipped has no table.
"""

from __future__ import annotations

from dataclasses import dataclass

from kosmos_env.report.text import VERDICT_HEAD, diff_interval, num, rate_row, spread, verdict_rows


@dataclass(frozen=True)
class AnalysisTable:
    """One table: ``name`` is its id in a download URL (``?table=<name>``); ``left`` lists the
    columns set flush left on the page (text rather than numbers)."""

    name: str
    columns: list[str]
    rows: list[list[str]]
    left: tuple[int, ...] = (0,)


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
                        f"{d['estimate']:+.3f}",
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
                ["pair", "difference", "p", "MDD", "separated"],
                [
                    [
                        f"{t['a']} vs {t['b']}",
                        f"{t['mean_diff']:+.3f}",
                        num(t["p_value"], 4),
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
