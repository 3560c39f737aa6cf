"""Write DIR/report.md and DIR/report.html for a campaign bundle.

The HTML page is self-contained: inline CSS, every figure and thumbnail embedded as a base64
data URI, no scripts, no external fonts or links to fetch. The Markdown file carries the same
tables and links its figures from DIR/report_assets/ (written alongside), so it renders on a
code host without bloating the text with base64.

All numbers are recomputed from results.json's per_episode rows (:mod:`kosmos_env.report.summary`).
The report names the judge of its success numbers (label and identity); ``judge=`` chooses
another judge stored with the campaign (:mod:`kosmos_env.report.judge_view`), whose report is
written to DIR/judges/<judge id>/ so the campaign's own report is never overwritten.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

from kosmos_env.report.analysis_html import CSS as ANALYSIS_CSS
from kosmos_env.report.bundle import OUTCOMES, Bundle, load_bundle
from kosmos_env.report.summary import (
    TIME_STAGES,
    PolicyRate,
    aggregated_mismatches,
    cost_breakdown,
    per_policy,
    per_policy_task,
    ranking,
)
from kosmos_env.report.cells import iv, num, pct
from kosmos_env.report.text import judge_line

ASSETS = "report_assets"

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;background:#f6f7f9;color:#1d2433}
main{max-width:1060px;margin:0 auto;padding:24px 28px 48px;background:#fff;min-height:100vh;box-shadow:0 0 12px rgba(0,0,0,.06)}
h1{font-size:1.6em;margin:.2em 0 .1em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:2px solid #e4e7ec;padding-bottom:.25em}
.sub{color:#5b6475;margin:0 0 1em}
table{border-collapse:collapse;margin:.6em 0 1em;font-size:.88em}
th,td{padding:4px 10px;border-bottom:1px solid #e4e7ec;text-align:right;white-space:nowrap}
th{background:#f0f2f5;font-weight:600;white-space:normal;vertical-align:bottom}
.tw{overflow-x:auto}td.l,th.l{text-align:left}
table.meta td{text-align:left;white-space:normal}table.meta td:first-child{color:#5b6475;padding-right:18px}
img.plot{max-width:100%;height:auto;display:block;margin:.4em 0}
.notes{background:#fff6e0;border-left:4px solid #edae49;padding:.5em 1em;margin:1em 0;font-size:.9em}
.grid{display:flex;flex-wrap:wrap;gap:14px}
.pol{border:1px solid #e4e7ec;border-radius:6px;background:#fafbfc;padding:8px}
.pt{font-weight:600;font-size:.85em;margin-bottom:6px;max-width:300px;overflow-wrap:anywhere}
.row{display:flex;gap:8px}
figure{margin:0;width:140px}
figure img{width:128px;height:auto;image-rendering:pixelated;display:block;margin:0 auto}
figcaption{font-size:.75em;color:#3b4252;margin-top:4px;overflow-wrap:anywhere}
.success{color:#2e9e4f;font-weight:600}.failure{color:#d1495b;font-weight:600}
code{font-size:.9em;background:#f0f2f5;padding:0 3px;border-radius:3px}
footer{margin-top:2.5em;color:#5b6475;font-size:.8em}
"""


@dataclass
class ReportData:
    """Everything a report shows, computed once and rendered twice (HTML and Markdown)."""

    bundle: Bundle
    rates: dict[str, PolicyRate]
    cells: dict
    order: list[str]
    cost: dict
    notes: list[str]
    figures: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # key -> (title, png)
    thumbnails: list = field(default_factory=list)
    analysis: dict | None = None  # kosmos-env analyze's statistics (report/analysis.py)
    judge: dict = field(default_factory=dict)  # whose verdicts the success numbers are (report/judge_view.py)
    verdict: dict | None = None  # the headline: top two by one pre-chosen rule (stats/verdict.py)


def collect(bundle: Bundle, *, thumbnails: bool = True, analysis: bool = True, judge: str | None = None) -> ReportData:
    """Recompute the aggregates, draw the figures and thumbnails, and (``analysis``) run the
    statistics of ``kosmos-env analyze`` for the report's analysis section; success numbers are
    judge ``judge``'s (None: the campaign's own)."""
    from kosmos_env.report import plots
    from kosmos_env.report.judge_view import select_judge
    from kosmos_env.report.thumbnails import make_thumbnails

    campaign_bundle = bundle
    bundle, judge_info = select_judge(bundle, judge)
    rates = per_policy(bundle)
    cells = per_policy_task(bundle)
    order = ranking(rates)
    cost = cost_breakdown(bundle)
    # results.json's own aggregates are the campaign judge's: compared only when showing that judge
    mismatches = aggregated_mismatches(bundle, rates) if judge_info["source"] == "campaign" else []
    notes = list(bundle.notes) + mismatches + list(cost["notes"])
    data = ReportData(bundle, rates, cells, order, cost, notes, judge=judge_info)
    data.figures["ranking"] = ("Ranking: success rate with Wilson 95% intervals", plots.ranking_plot(order, rates))
    data.figures["tasks"] = ("Success per policy × task", plots.task_heatmap(order, bundle.tasks, cells))
    data.figures["outcomes"] = ("Outcomes per policy: discards and abstentions", plots.outcome_plot(order, rates))
    if cost["seconds_per_rollout"]:
        data.figures["time"] = ("Seconds per rollout by stage", plots.time_plot(cost, order))
    if analysis:
        from kosmos_env.report.analysis import analyze_bundle

        data.analysis = analyze_bundle(campaign_bundle, judge=judge)
        data.verdict = data.analysis.get("verdict")
    else:
        from kosmos_env.report.analysis import headline_verdict

        data.verdict = headline_verdict(bundle)
    if thumbnails:
        data.thumbnails = make_thumbnails(bundle)
        for t in data.thumbnails:
            if t.problem:
                data.notes.append(t.problem)
    return data


# ----------------------------------------------------------------------------- shared tables


def _ranking_rows(d: ReportData) -> tuple[list[str], list[list[str]]]:
    head = [
        "rank",
        "policy",
        "success rate",
        "Wilson 95%",
        "successes / decided",
        "worst case 95%",
        "discarded",
        "abstained",
        "errors",
        "episodes",
    ]
    rows = []
    for i, p in enumerate(d.order):
        r = d.rates[p]
        s = r.summary
        rows.append(
            [
                str(i + 1),
                p,
                num(r.rate),
                iv(r.wilson) if r.rate is not None else "n/a",
                f"{r.counts['success']} / {r.decided}",
                iv(s.worst_case_ci),
                pct(s.discard_rate),
                pct(s.abstain_rate),
                str(r.counts["error"]),
                str(r.n),
            ]
        )
    return head, rows


def _task_rows(d: ReportData) -> tuple[list[str], list[list[str]]]:
    head = ["policy"] + list(d.bundle.tasks)
    rows = []
    for p in d.order:
        row = [p]
        for t in d.bundle.tasks:
            c = d.cells[p].get(t)
            row.append(
                "-"
                if c is None
                else (
                    f"n/a (0 of {c.n} decided)" if c.rate is None else f"{c.rate:.2f} {iv(c.wilson, 2)} n={c.decided}"
                )
            )
        rows.append(row)
    return head, rows


def _outcome_rows(d: ReportData) -> tuple[list[str], list[list[str]]]:
    head = ["policy"] + list(OUTCOMES) + ["discard rate", "abstain rate"]
    rows = [
        [p]
        + [str(d.rates[p].counts[o]) for o in OUTCOMES]
        + [pct(d.rates[p].summary.discard_rate), pct(d.rates[p].summary.abstain_rate)]
        for p in d.order
    ]
    return head, rows


def _time_rows(d: ReportData) -> tuple[list[str], list[list[str]]] | None:
    sec = d.cost["seconds_per_rollout"]
    if not sec:
        return None
    total = sec["total"]
    money = d.cost["money"]
    head = ["stage", "warm seconds per rollout", "share of time"]
    if money:
        head += ["device", f"{money['currency']} per 1000 rollouts", "share of money"]
    rows = []
    for s in TIME_STAGES + ("total",):
        row = [s, money_text(sec[s]), pct(sec[s] / total if total > 0 else None)]
        if money:
            m = money["per_rollout"] if s == "total" else money["per_rollout_by_stage"][s]
            row += [
                "" if s == "total" else str(money["devices"][s] or "-"),
                money_text(1000 * m),
                pct(m / money["per_rollout"] if money["per_rollout"] > 0 else None),
            ]
        rows.append(row)
    return head, rows


def _load_rows(d: ReportData) -> tuple[list[str], list[list[str]]] | None:
    """Model builds, once per worker: kept out of the warm per-rollout seconds above."""
    loads = d.cost.get("load_seconds") or {}
    if not any(loads.values()):
        return None
    per = d.cost.get("load_seconds_per_rollout") or {}
    money = d.cost["money"]
    head = ["model load", "seconds (all workers)", "seconds spread per rollout"]
    if money:
        head += ["device", money["currency"]]
    rows = []
    for s in list(loads) + ["total"]:
        sec = sum(loads.values()) if s == "total" else loads[s]
        row = [s, money_text(sec), money_text(sum(per.values()) if s == "total" else per.get(s, 0.0))]
        if money:
            m = money["load_total"] if s == "total" else money["load_by_stage"][s]
            row += ["" if s == "total" else str(money["devices"][s] or "-"), money_text(m)]
        rows.append(row)
    return head, rows


def money_text(v: float) -> str:
    """A small amount (money, seconds) in fixed notation with about three significant digits
    (0.0000794 rather than 7.94e-05)."""
    import math

    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{max(2, 2 - math.floor(math.log10(abs(v))))}f}"


def _money_rows(d: ReportData) -> tuple[list[str], list[list[str]]] | None:
    m = d.cost["money"]
    if not m:
        return None
    cur = m["currency"]
    head = ["", cur]
    rows = [[f"price per hour: {k}", money_text(v)] for k, v in m["price_per_hour"].items()]
    rows += [
        ["per rollout", money_text(m["per_rollout"])],
        ["per 1000 rollouts", money_text(m["per_1000_rollouts"])],
        [f"this campaign ({d.cost['n_timed']} timed rollouts, warm)", money_text(m["campaign_total"])],
        ["judge's share of the money (warm inference)", pct(m["judge_share"])],
    ]
    if m.get("load_total"):
        rows += [
            ["model loads (all workers)", money_text(m["load_total"])],
            ["this campaign with model loads", money_text(m["campaign_total_with_loads"])],
            ["judge's share of the money with model loads", pct(m["judge_share_with_loads"])],
        ]
    return head, rows


def _meta_rows(d: ReportData) -> list[tuple[str, str]]:
    c = d.bundle.campaign
    judge = d.judge.get("spec") if d.judge else c.get("judge")
    if isinstance(judge, dict):
        name = judge.get("type") or judge.get("name") or judge.get("judge")
        rest = ", ".join(f"{k}={v}" for k, v in judge.items() if k not in ("type", "name", "judge"))
        judge_txt = f"{name}" + (f" ({rest})" if rest else "") if name else (rest or "-")
    else:
        judge_txt = str(judge)
    seeds = sorted({r["seed"] for r in d.bundle.rows})
    return [
        ("campaign", str(c.get("id"))),
        ("env", str(c.get("env_id"))),
        ("spec hash", str(c.get("spec_hash"))),
        ("created", str(c.get("created"))),
        ("judge", judge_line(d.judge) if d.judge else "-"),
        ("judge settings", judge_txt),
        ("policies", ", ".join(d.bundle.policies)),
        ("tasks", ", ".join(d.bundle.tasks)),
        ("seeds", f"{len(seeds)} ({seeds[0]} .. {seeds[-1]})"),
        ("repeats", str(max(r["repeat"] for r in d.bundle.rows) + 1)),
        ("episodes", str(len(d.bundle.rows))),
        ("kosmos-env", str(d.bundle.data.get("package_version"))),
    ]


def _time_summary(d: ReportData) -> str:
    c = d.cost
    if not c["seconds_per_rollout"]:
        return "No episode recorded timings."
    text = (
        f"{c['n_timed']} timed rollouts, {num(c['seconds_per_rollout']['total'], 3)} s of warm inference each on "
        f"average ({num(c['rollouts_per_hour'], 1)} rollouts per hour of serial compute); the judge takes "
        f"{pct(c['judge_share'])} of the time"
    )
    if any((c.get("load_seconds") or {}).values()):
        text += (
            f" ({pct(c['judge_share_with_loads'])} counting model loads, which took "
            f"{money_text(sum(c['load_seconds'].values()))} s over all workers and are kept out of the "
            "per-rollout seconds)"
        )
    m = c.get("money")
    if m:
        text += f"; its share of the bill is {pct(m['judge_share'])}"
        if m.get("load_total"):
            text += f" ({pct(m['judge_share_with_loads'])} with model loads)"
    return text + "."


# ----------------------------------------------------------------------------- HTML


def _h(x) -> str:
    return html.escape(str(x), quote=True)


def _html_table(head, rows, left=(0,)) -> str:
    th = "".join(f'<th class="l">{_h(h)}</th>' if i in left else f"<th>{_h(h)}</th>" for i, h in enumerate(head))
    body = "".join(
        "<tr>"
        + "".join(f'<td class="l">{_h(c)}</td>' if i in left else f"<td>{_h(c)}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f'<div class="tw"><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def _data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _img(d: ReportData, key: str) -> str:
    from kosmos_env.report.plots import SCALE, png_size

    title, png = d.figures[key]
    w, h = png_size(png)
    return (
        f'<img class="plot" alt="{_h(title)}" width="{round(w / SCALE)}" height="{round(h / SCALE)}" '
        f'src="{_data_uri("image/png", png)}">'
    )


def render_html(d: ReportData) -> str:
    c = d.bundle.campaign
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Kosmos-Env report: {_h(c.get('id'))}</title>",
        f"<style>{CSS}{ANALYSIS_CSS}</style></head><body><main>",
        f"<h1>Campaign report: {_h(c.get('id'))}</h1>",
        f'<p class="sub">{_h(c.get("env_id"))} &middot; spec <code>{_h(str(c.get("spec_hash"))[:12])}</code> &middot; '
        f"{len(d.bundle.rows)} episodes &middot; {len(d.bundle.policies)} policies &times; {len(d.bundle.tasks)} tasks</p>",
    ]
    # the headline comes first: one verdict on the top two from one pre-chosen rule
    if d.verdict is not None:
        from kosmos_env.report.analysis_html import verdict_html

        parts.append(verdict_html(d.verdict))
    parts.append(
        '<table class="meta"><tbody>'
        + "".join(f"<tr><td>{_h(k)}</td><td>{_h(v)}</td></tr>" for k, v in _meta_rows(d))
        + "</tbody></table>"
    )
    if d.notes:
        parts.append(
            '<div class="notes"><strong>Notes</strong><ul>'
            + "".join(f"<li>{_h(n)}</li>" for n in d.notes)
            + "</ul></div>"
        )
    parts += [
        "<h2>Ranking</h2>",
        f"<p><b>{_h(judge_line(d.judge))}</b></p>",
        "<p>Success rate = successes / decided episodes (discarded, abstained and errored episodes are "
        "undecided). The worst-case interval counts every undecided episode as a failure (lower end) "
        "and as a success (upper end), widened by sampling error.</p>",
        _img(d, "ranking"),
        _html_table(*_ranking_rows(d), left=(1,)),
        "<h2>Success per policy &times; task</h2>",
        _img(d, "tasks"),
        _html_table(*_task_rows(d)),
        "<h2>Discards and abstentions</h2>",
        "<p>A discarded episode is one the consistency gate stopped because the world model broke; an "
        "abstention is one the judge would not decide. Neither is a policy failure.</p>",
        _img(d, "outcomes"),
        _html_table(*_outcome_rows(d)),
        "<h2>Time and cost</h2>",
        f"<p>{_h(_time_summary(d))}</p>",
    ]
    if "time" in d.figures:
        parts.append(_img(d, "time"))
    times = _time_rows(d)
    if times:
        parts.append(_html_table(*times))
    loads = _load_rows(d)
    if loads:
        parts.append(_html_table(*loads))
    money = _money_rows(d)
    parts.append(
        _html_table(*money) if money else "<p>No price table was given to the campaign, so no money figures.</p>"
    )
    if d.analysis is not None:
        from kosmos_env.report.analysis_html import render_analysis_html

        parts.append(render_analysis_html(d.analysis, headline=False))
    parts.append("<h2>Sampled rollouts</h2>")
    if d.thumbnails:
        parts.append(
            "<p>The first success and the first failure of each policy in (task, seed, repeat) order.</p>"
            '<div class="grid">'
        )
        for policy in d.bundle.policies:
            mine = [t for t in d.thumbnails if t.policy == policy]
            if not mine:
                continue
            parts.append(f'<div class="pol"><div class="pt">{_h(policy)}</div><div class="row">')
            for t in mine:
                img = (
                    f'<img alt="{_h(t.episode_id)}" src="{_data_uri("image/gif", t.gif)}">'
                    if t.gif
                    else f"<p>{_h(t.problem)}</p>"
                )
                parts.append(
                    f"<figure>{img}<figcaption>{_h(t.task)} seed {t.seed}"
                    f"{' rep ' + str(t.repeat) if t.repeat else ''}<br>"
                    f'<span class="{_h(t.outcome)}">{_h(t.outcome)}</span></figcaption></figure>'
                )
            parts.append("</div></div>")
        parts.append("</div>")
    else:
        parts.append("<p>No episode with a video artifact to show.</p>")
    parts.append(
        f"<footer>Generated by kosmos-env report from {_h(d.bundle.results_path.name)} "
        "(aggregates recomputed from the per-episode rows); the analysis section is what "
        "<code>kosmos-env analyze</code> computes.</footer></main></body></html>"
    )
    return "\n".join(parts)


# ----------------------------------------------------------------------------- Markdown


def _md_cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _md_table(head, rows, left=(0,)) -> str:
    align = ["---" if i in left else "---:" for i in range(len(head))]
    lines = ["| " + " | ".join(_md_cell(h) for h in head) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def render_markdown(d: ReportData, assets: dict[str, str]) -> str:
    """Markdown text; ``assets`` maps figure keys and thumbnail episode ids to relative paths."""
    c = d.bundle.campaign
    out = [f"# Campaign report: {c.get('id')}", ""]
    if d.verdict is not None:  # the headline first
        from kosmos_env.report.text import verdict_line

        out += [f"**Verdict:** {verdict_line(d.verdict)}", ""]
    out += [_md_table(["", ""], _meta_rows(d)), ""]
    if d.notes:
        out += ["**Notes**", ""] + [f"- {n}" for n in d.notes] + [""]
    out += [
        "## Ranking",
        "",
        f"**{judge_line(d.judge)}**",
        "",
        "Success rate = successes / decided episodes; the worst-case interval counts undecided episodes "
        "as failures (lower end) and as successes (upper end).",
        "",
        f"![{d.figures['ranking'][0]}]({assets['ranking']})",
        "",
        _md_table(*_ranking_rows(d), left=(1,)),
        "",
        "## Success per policy × task",
        "",
        f"![{d.figures['tasks'][0]}]({assets['tasks']})",
        "",
        _md_table(*_task_rows(d)),
        "",
        "## Discards and abstentions",
        "",
        f"![{d.figures['outcomes'][0]}]({assets['outcomes']})",
        "",
        _md_table(*_outcome_rows(d)),
        "",
        "## Time and cost",
        "",
        _time_summary(d),
        "",
    ]
    if "time" in d.figures:
        out += [f"![{d.figures['time'][0]}]({assets['time']})", ""]
    times = _time_rows(d)
    if times:
        out += [_md_table(*times), ""]
    loads = _load_rows(d)
    if loads:
        out += [_md_table(*loads), ""]
    money = _money_rows(d)
    out += [_md_table(*money) if money else "No price table was given to the campaign, so no money figures.", ""]
    if d.analysis is not None:
        from kosmos_env.report.text import analysis_text

        out += ["## Statistical analysis", "", "```text", analysis_text(d.analysis, headline=False), "```", ""]
    out += ["## Sampled rollouts", ""]
    if d.thumbnails:
        for t in d.thumbnails:
            if t.gif:
                out.append(
                    f"- **{t.policy}**, {t.task} seed {t.seed}, {t.outcome}: "
                    f"![{t.episode_id}]({assets[t.episode_id]}) (video: `{t.video}`)"
                )
            else:
                out.append(f"- **{t.policy}**, {t.task} seed {t.seed}, {t.outcome}: {t.problem}")
    else:
        out.append("No episode with a video artifact to show.")
    out += [
        "",
        "_Generated by `kosmos-env report` from results.json (aggregates recomputed from the per-episode "
        "rows). Statistical analysis: `kosmos-env analyze`._",
        "",
    ]
    return "\n".join(out)


# ----------------------------------------------------------------------------- entry point


def _asset_name(episode_id: str) -> str:
    from kosmos_env.hashing import sha256_hex

    return "rollout-" + sha256_hex(episode_id)[:12] + ".gif"


def write_report(
    directory: str | Path, *, thumbnails: bool = True, analysis: bool = True, judge: str | None = None
) -> dict[str, Path]:
    """Write report.html, report.md and report_assets/ into the campaign ``directory`` (another
    judge's report: into ``directory/judges/<judge id>/``); return their paths."""
    from kosmos_env.report.judge_view import judge_output_dir

    bundle = load_bundle(directory)
    d = collect(bundle, thumbnails=thumbnails, analysis=analysis, judge=judge)
    root = judge_output_dir(bundle.root, d.judge)
    assets_dir = root / ASSETS
    assets_dir.mkdir(exist_ok=True)
    assets: dict[str, str] = {}
    for key, (_, png) in d.figures.items():
        (assets_dir / f"{key}.png").write_bytes(png)
        assets[key] = f"{ASSETS}/{key}.png"
    for t in d.thumbnails:
        if t.gif:
            name = _asset_name(t.episode_id)
            (assets_dir / name).write_bytes(t.gif)
            assets[t.episode_id] = f"{ASSETS}/{name}"
    html_path, md_path = root / "report.html", root / "report.md"
    html_path.write_text(render_html(d), encoding="utf-8")
    md_path.write_text(render_markdown(d, assets), encoding="utf-8")
    return {"html": html_path, "markdown": md_path, "assets": assets_dir}
