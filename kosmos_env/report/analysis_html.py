"""The analysis section as HTML: every statistic of ``kosmos-env analyze`` with inline-SVG plots.

One renderer for two readers: report.html embeds it (offline readers get the analysis too) and
the console's analysis page shows it for a live or finished campaign. Input is the dict of
:func:`kosmos_env.report.analysis.analyze_bundle`; every value is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from kosmos_env.report.analysis_tables import AnalysisTable, analysis_tables
from kosmos_env.report.svg import interval_chart, line_chart
from kosmos_env.report.cells import diff_interval, num
from kosmos_env.report.text import ab_lines, ab_title, cost_lines, judge_line, verdict_line

CSS = """
.an h3{font-size:1.02em;margin:1.4em 0 .3em}
.an p.skip{color:#5b6475;font-style:italic}
.an svg.chart{max-width:100%;height:auto;display:block;margin:.3em 0 .6em}
p.verdict{font-size:1.08em;padding:.5em .7em;border-left:4px solid #3465a4;background:#f3f6fb}
p.verdict.a_better,p.verdict.b_better{border-left-color:#2e7d32}
.an .secondary-note{color:#5b6475}
"""


def verdict_html(v: dict | None) -> str:
    """The headline paragraph of a verdict dict (or why there is none)."""
    cls = v.get("outcome", "undecided") if isinstance(v, dict) and "skipped" not in v else "none"
    return f'<p class="verdict {_h(cls)}" id="verdict"><b>{_h(verdict_line(v))}</b></p>'


def _h(x) -> str:
    return html.escape(str(x), quote=True)


def _table(t: AnalysisTable, download: Callable[[str, str], str] | None) -> str:
    """The table as HTML; ``download(name, format)`` (the console) gives the URL of its CSV and parquet."""
    left = t.left
    th = "".join(f'<th class="l">{_h(h)}</th>' if i in left else f"<th>{_h(h)}</th>" for i, h in enumerate(t.columns))
    body = "".join(
        "<tr>"
        + "".join(f'<td class="l">{_h(c)}</td>' if i in left else f"<td>{_h(c)}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in t.rows
    )
    out = f'<div class="tw"><table data-table="{_h(t.name)}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'
    if download is not None:
        links = " &middot; ".join(
            f'<a href="{_h(download(t.name, f))}" download>{f.upper()}</a>' for f in ("csv", "parquet")
        )
        out += f'<p class="small dl">This table: {links}</p>'
    return out


def _skipped(section) -> str | None:
    if isinstance(section, dict) and "skipped" in section:
        return f'<p class="skip">Skipped: {_h(section["skipped"])}</p>'
    return None


def render_analysis_html(
    a: dict, *, heading: str = "h2", headline: bool = True, download: Callable[[str, str], str] | None = None
) -> str:
    """HTML of every analysis section (headings at level ``heading``, sub-sections one below).

    ``headline``: open with the verdict paragraph (a page that already shows the verdict at its
    top, like report.html, passes False so the headline appears once). ``download``: given a table's
    name and a format (csv, parquet), the URL that serves it; each table then links its downloads."""
    sub = "h3" if heading == "h2" else "h4"
    tables = analysis_tables(a)
    conf = f"{100 * (1 - a['settings']['alpha']):g}%"
    st = a["settings"]
    parts = [
        '<section class="an" id="analysis">'
        + (verdict_html(a.get("verdict")) if headline else "")
        + f"<{heading}>Statistical analysis</{heading}>",
        f"<p>The statistics of <code>kosmos-env analyze</code>: resampling unit (task, seed) with repeats "
        f"averaged; alpha {st['alpha']:g}, power {st['power']:g}, {st['n_boot']} bootstrap resamples, "
        f"{st['n_splits']} split-half splits, seed {st['seed']}.</p>",
        f'<p class="judge"><b>{_h(judge_line(a.get("judge")))}</b></p>',
    ]
    # the headline (above) is one verdict from one pre-chosen rule, its interval the one that decides
    v = a.get("verdict")
    if isinstance(v, dict) and "skipped" not in v:
        parts.append(
            f'<p class="small">Rule chosen before looking at the data: {_h(v["method"])} on success per '
            f'(task, seed), repeats averaged; the verdict is "the interval excludes 0". The tests further '
            f"down (bootstrap, paired t, anytime-valid A/B) are secondary.</p>"
        )
    if len(a.get("verdicts") or []) > 1:
        parts += [
            f"<{sub}>Verdict for every pair (same rule)</{sub}>",
            _table(tables["verdicts"], download),
        ]

    # rates with intervals and discard bounds
    chart = []
    for p in a["ranking"]:
        r = a["per_policy"][p]
        wc = r["worst_case_ci"] or (None, None)
        chart.append((p, r["success_rate"], *(r["wilson"] or (None, None)), *wc))
    parts += [
        f"<{sub}>Success per policy, intervals and discard bounds</{sub}>",
        interval_chart(
            chart,
            xlabel="success rate",
            title="success rate per policy",
            band_label=f"worst case {conf} (undecided as failure .. success)",
            point_label=f"rate with Wilson {conf}",
        ),
        _table(tables["per_policy"], download),
        "<p>Discard bounds: the worst case counts every discarded, abstained or errored episode as a failure "
        "(lower end) and as a success (upper end).</p>",
    ]

    # pairwise differences
    parts.append(f"<{sub}>Secondary: paired differences in success (bootstrap over (task, seed))</{sub}>")
    sk = _skipped(a["pairwise"])
    if sk:
        parts.append(sk)
    else:
        # a zero-width bootstrap interval is not drawn: it is too few distinct pairs, not certainty
        ok = [d for d in a["pairwise"] if "skipped" not in d and not diff_interval(d).startswith("interval not")]
        if ok:
            parts.append(
                interval_chart(
                    [(f"{d['a']} − {d['b']}", d["estimate"], d["lower"], d["upper"]) for d in ok],
                    lo=-1.0,
                    hi=1.0,
                    zero=0.0,
                    xlabel=f"difference in success ({conf} interval)",
                    title="pairwise differences",
                )
            )
        parts.append(_table(tables["pairwise"], download))

    parts.append(f"<{sub}>Secondary: ranking uncertainty on success</{sub}>")
    sk = _skipped(a["bootstrap_ranking"])
    if sk:
        parts.append(sk)
    else:
        parts.append(_table(tables["ranking"], download))

    parts.append(f"<{sub}>Secondary: split-half repeatability of the ranking on success</{sub}>")
    sk = _skipped(a["split_half"])
    if sk:
        parts.append(sk)
    else:
        chart = []
        for m, s in a["split_half"].items():
            d = s.get("distribution") or {}
            cd = s.get("corrected_distribution") or {}
            chart.append((f"{m} (half vs half)", s["median"], d.get("q05"), d.get("q95")))
            chart.append((f"{m}, Spearman-Brown", s["corrected_median"], cd.get("q05"), cd.get("q95")))
        parts += [
            interval_chart(
                chart,
                lo=-1.0,
                hi=1.0,
                zero=0.0,
                xlabel="rank correlation: median, 5-95% of splits",
                title="split-half repeatability",
            ),
            _table(tables["split_half"], download),
        ]

    parts.append(f"<{sub}>Secondary: minimum detectable difference and paired t-tests on success</{sub}>")
    sk = _skipped(a["detectable"])
    if sk:
        parts.append(sk)
    else:
        d = a["detectable"]
        n_pairs = len(d["pairs"])
        parts.append(
            f"<p>Paired MDD (median over pairs): <b>{_h(num(d['paired_mdd_median']))}</b>; unpaired MDD at "
            f"the pooled rate {_h(num(d['pooled_rate']))} with {_h(d['n_seeds'])} units: "
            f"{_h(num(d['unpaired_mdd']))}. Separable pairs (paired t, Holm): "
            f"{round(d['fraction_separable'] * n_pairs)}/{n_pairs}.</p>"
        )
        if d.get("resampled"):
            ks = list(d["resampled"])
            parts.append(
                line_chart(
                    [float(k) for k in ks],
                    {"MDD": [d["resampled"][k] for k in ks]},
                    xlabel="units (task, seed) subsampled",
                    ylabel="minimum detectable difference",
                    height=200,
                    title="MDD by number of units",
                )
            )
        parts.append(_table(tables["paired_tests"], download))

    parts.append(f"<{sub}>Horizon sensitivity</{sub}>")
    h = a["horizon"]
    sk = _skipped(h)
    if sk:
        parts.append(sk)
    else:
        pols = h["policies"]
        parts.append(
            line_chart(
                h["horizons"],
                {p: h["scores"][p] for p in pols},
                xlabel="horizon (steps)",
                ylabel="ground-truth success",
                ylim=(0.0, 1.0),
                title="success by horizon",
            )
        )
        parts.append(
            line_chart(
                h["horizons"],
                {
                    f"{h['metric']} vs longest horizon": [g["value"] for g in h["agreements"]],
                    "random floor": [g["random_floor"] for g in h["agreements"]],
                },
                xlabel="horizon (steps)",
                ylabel=h["metric"],
                ylim=(-1.0, 1.0),
                hline=h["threshold"],
                height=200,
                title="ranking agreement by horizon",
            )
        )
        parts.append(
            f"<p>Reference: {_h(h['reference_source'])}; threshold {_h(h['metric'])} ≥ {h['threshold']:g}; "
            f"ranking breaks at horizon {_h(h['break_horizon'] if h['break_horizon'] is not None else 'never')}; "
            f"shortest safe horizon {_h(h['shortest_safe_horizon'])}.</p>"
        )

    ab = a["ab"]
    parts.append(f"<{sub}>{_h(ab_title(ab)[0].upper() + ab_title(ab)[1:])}</{sub}>")
    sk = _skipped(ab)
    if sk:
        parts.append(sk)
    else:
        f = ab["final"]
        # the interval is drawn only when it is the rule that decided (its own confidence sequence)
        if f.get("rule", ab.get("rule")) == "eb":
            on = "judge scores" if ab.get("value", "score") == "score" else "success"
            parts.append(
                interval_chart(
                    [(f"{ab['a']} − {ab['b']}", f["mean_diff"], f["lower"], f["upper"])],
                    lo=-1.0,
                    hi=1.0,
                    zero=0.0,
                    xlabel=f"mean paired difference in {on}, {conf} confidence sequence",
                    title="A/B test",
                )
            )
        parts.append("<p>" + "<br>".join(_h(line) for line in ab_lines(ab, conf)) + "</p>")

    if "agreement" in a:
        ag = a["agreement"]
        parts += [
            f"<{sub}>Agreement with the reference {_h(ag['reference'])}</{sub}>",
            _table(tables["agreement"], download),
            "<p>Each value with its random floor; MMRV: lower is better.</p>",
        ]
    if "cost" in a:
        parts.append(f"<{sub}>Time and cost per stage: the judge's share of the bill</{sub}>")
        parts.append("<ul>" + "".join(f"<li>{_h(line)}</li>" for line in cost_lines(a["cost"])) + "</ul>")
    if a.get("notes"):
        parts.append(
            '<div class="notes"><strong>Analysis notes</strong><ul>'
            + "".join(f"<li>{_h(n)}</li>" for n in a["notes"])
            + "</ul></div>"
        )
    parts.append("</section>")
    return "\n".join(parts)
