"""Terminal text for an analysis dict (:func:`kosmos_env.report.analysis.analyze_bundle`):
one titled, column-aligned table per section."""

from __future__ import annotations

from kosmos_env.report.analysis_tables import AnalysisTable, analysis_tables
from kosmos_env.report.cells import diff_interval, iv, num, pct
from kosmos_env.stats.numbers import signed, signed_interval


def format_table(headers, rows, left=(0,)) -> str:
    """Columns in ``left`` left-aligned, the others right-aligned; a dashed rule under the
    header; two spaces between columns."""
    table = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[j]) for r in table) for j in range(len(headers))]
    lines = []
    for i, r in enumerate(table):
        lines.append(
            "  ".join(
                c.ljust(w) if j in left else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def verdict_line(v: dict | None) -> str:
    """The headline: the verdict's own sentence, or why there is none."""
    if not v:
        return "No verdict: not computed"
    if "skipped" in v:
        return f"No verdict: {v['skipped']}"
    return v["headline"]


def _table(t: AnalysisTable) -> str:
    return format_table(t.columns, t.rows, left=t.left)


def _title(s: str) -> str:
    return f"{s}\n{'=' * len(s)}"


def _skipped(section) -> str | None:
    return f"  skipped: {section['skipped']}" if isinstance(section, dict) and "skipped" in section else None


def judge_line(judge: dict | None) -> str:
    """Who judged the success numbers: label, identity, and whether it is the campaign's own judge."""
    if not judge:
        return "judge: not recorded"
    whose = "the campaign's own judge" if judge.get("source") == "campaign" else "re-judged from the stored rollouts"
    return f"success judged by {judge['label']} [{judge['id']}] ({whose}, {judge.get('episodes', '?')} episodes)"


def seconds_text(v) -> str:
    """Seconds (or money) with about three significant digits, fixed notation."""
    import math

    if v is None:
        return "n/a"
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{max(2, 2 - math.floor(math.log10(abs(v))))}f}"


def cost_lines(cost: dict | None) -> list[str]:
    """Warm seconds per rollout by stage, model loads apart, and the judge's share of time and money."""
    if not cost or not cost.get("seconds_per_rollout"):
        return ["no episode recorded timings"]
    sec = cost["seconds_per_rollout"]
    stages = [k for k in sec if k != "total"]
    lines = [
        f"warm seconds per rollout ({cost['n_timed']} timed): "
        + ", ".join(f"{k} {seconds_text(sec[k])}" for k in stages)
        + f"; total {seconds_text(sec['total'])}"
    ]
    loads = cost.get("load_seconds") or {}
    if any(loads.values()):
        lines.append(
            "model loads (once per worker, kept out of the seconds above): "
            + ", ".join(f"{k} {seconds_text(v)} s" for k, v in loads.items())
            + f"; spread over the rollouts {seconds_text(sum((cost.get('load_seconds_per_rollout') or {}).values()))}"
            " s each"
        )
    else:
        lines.append("model loads: none recorded with these episodes")
    lines.append(
        f"judge's share of the time: {pct(cost.get('judge_share'))} of warm inference"
        + (f", {pct(cost.get('judge_share_with_loads'))} with model loads" if any(loads.values()) else "")
    )
    m = cost.get("money")
    if m:
        cur = m["currency"]
        lines.append(
            f"money per rollout (warm): {seconds_text(m['per_rollout'])} {cur} = "
            + ", ".join(f"{k} {seconds_text(v)}" for k, v in m["per_rollout_by_stage"].items())
            + f"; campaign {seconds_text(m['campaign_total'])} {cur}"
        )
        if m.get("load_total"):
            lines.append(
                f"model loads: {seconds_text(m['load_total'])} {cur} ("
                + ", ".join(f"{k} {seconds_text(v)}" for k, v in m["load_by_stage"].items())
                + f"); campaign with loads {seconds_text(m['campaign_total_with_loads'])} {cur}"
            )
        lines.append(
            f"judge's share of the bill: {pct(m.get('judge_share'))} of warm inference"
            + (f", {pct(m.get('judge_share_with_loads'))} with model loads" if m.get("load_total") else "")
        )
    else:
        lines.append("no price table: the judge's share of the bill is its share of the time above")
    return lines


def ab_title(ab: dict) -> str:
    on = "judge scores" if (ab or {}).get("value", "score") == "score" else "success"
    return f"secondary: anytime-valid paired A/B test of the top two on {on}"


def ab_lines(ab: dict, conf: str) -> list[str]:
    """The A/B's decision and the interval that made it. Under the "eb" rule both come from one
    empirical-Bernstein confidence sequence; under "betting" the decision comes from the betting
    capital, which has no interval, so none is printed beside it (the capital is shown instead)."""
    f = ab["final"]
    on = "judge scores" if ab.get("value", "score") == "score" else "success"
    lines = [
        f"A = {ab['a']}, B = {ab['b']} on {on}: {ab['decision']} after {ab['n_used']} of {ab['n_pairs']} paired "
        f"episodes (paired on task, seed, repeat; order {ab['order']})"
    ]
    if f.get("rule", ab.get("rule", "betting")) == "eb":
        lines.append(
            f"mean(A - B) = {signed(f['mean_diff'], 3)}, {conf} anytime-valid confidence sequence "
            f"{signed_interval(f['lower'], f['upper'], 3)} (the decision is this interval excluding 0)"
        )
    else:
        import math

        kp, km = f.get("log_capital") or (0.0, 0.0)
        lines.append(
            f"mean(A - B) = {signed(f['mean_diff'], 3)}; decided by betting: capital for A {math.exp(kp):.3g}, "
            f"for B {math.exp(km):.3g}, threshold 2/alpha = {2 / f['alpha']:g}"
        )
    return lines


def analysis_text(a: dict, *, headline: bool = True) -> str:
    """All sections of an analysis as aligned plain-text tables, the verdict line first
    (``headline=False``: without it, for a page that shows it at its top already). The tables are
    the HTML analysis's (:func:`kosmos_env.report.analysis_tables.analysis_tables`), cell for cell."""
    conf = f"{100 * (1 - a['settings']['alpha']):g}%"
    tables = analysis_tables(a)
    c = a["campaign"]
    parts = [
        _title(f"campaign {c.get('id') or '?'}"),
        f"env {c.get('env_id')}  spec {str(c.get('spec_hash'))[:12]}  episodes {c['n_episodes']}  "
        f"policies {len(c['policies'])}  tasks {len(c['tasks'])}  seeds {len(c['seeds'])}  repeats {c['repeats']}",
        judge_line(a.get("judge")),
    ]
    # the headline first: one verdict from one rule; everything after it is detail or secondary
    if headline:
        parts[0:0] = [f"VERDICT: {verdict_line(a.get('verdict'))}", ""]
    if len(a.get("verdicts") or []) > 1:
        parts += [
            "",
            _title("verdict for every pair (same rule as the headline, success per (task, seed))"),
            _table(tables["verdicts"]),
        ]

    parts += [
        "",
        _title("success per policy (raw rate over decided episodes)"),
        _table(tables["per_policy"]),
        "worst case: every discarded/abstained/errored episode counted as failure .. as success.",
    ]

    tasks = a["campaign"]["tasks"]
    if len(tasks) > 1:
        rows = [
            [p]
            + [
                f"{num(a['per_policy_task'][p][t]['success_rate'], 2)} {iv(a['per_policy_task'][p][t]['wilson'], 2)}"
                if t in a["per_policy_task"][p]
                else "-"
                for t in tasks
            ]
            for p in a["ranking"]
        ]
        parts += ["", _title(f"success per policy x task (Wilson {conf})"), format_table(["policy"] + tasks, rows)]

    parts += [
        "",
        _title(
            f"secondary: paired bootstrap by (task, seed) of pairwise differences in success "
            f"({a['settings']['n_boot']} resamples)"
        ),
    ]
    sk = _skipped(a["pairwise"])
    if sk:
        parts.append(sk)
    else:
        parts.append(_table(tables["pairwise"]))
        if any("skipped" not in d and diff_interval(d).startswith("interval not") for d in a["pairwise"]):
            parts.append(
                "a bootstrap interval of zero width is not shown: every resample gave the same difference, "
                "which says too few distinct pairs, not certainty; the verdict's interval is the honest one."
            )

    parts += ["", _title("secondary: ranking uncertainty on success (paired bootstrap)")]
    sk = _skipped(a["bootstrap_ranking"])
    if sk:
        parts.append(sk)
    else:
        parts.append(_table(tables["ranking"]))

    parts += ["", _title("secondary: split-half repeatability of the ranking on success (random seed splits)")]
    sk = _skipped(a["split_half"])
    if sk:
        parts.append(sk)
    else:
        parts.append(_table(tables["split_half"]))

    parts += [
        "",
        _title(
            f"secondary: minimum detectable difference and paired t-tests on success "
            f"(alpha {a['settings']['alpha']:g}, power {a['settings']['power']:g})"
        ),
    ]
    sk = _skipped(a["detectable"])
    if sk:
        parts.append(sk)
    else:
        d = a["detectable"]
        parts.append(
            f"paired MDD (median over pairs): {num(d['paired_mdd_median'])}   unpaired MDD at pooled rate "
            f"{num(d['pooled_rate'])} with {d['n_seeds']} units: {num(d['unpaired_mdd'])}"
        )
        if d["resampled"]:
            parts.append(
                "MDD by subsampling units (median-variance pair): "
                + ", ".join(f"{k} units: {num(v)}" for k, v in d["resampled"].items())
            )
        if d.get("n_pairs_not_estimable"):
            parts.append(
                f"({d['n_pairs_not_estimable']} pair(s) have per-unit differences with no spread: their MDD is "
                f"not estimable; the design's resolution is 1/{d['n_seeds']} = {num(d.get('resolution'))})"
            )
        n_pairs = len(d["pairs"])
        parts.append(
            f"separable pairs (paired t, Holm): {round(d['fraction_separable'] * n_pairs)}/{n_pairs} "
            f"= {pct(d['fraction_separable'])}"
        )
        parts.append(_table(tables["paired_tests"]))

    h = a["horizon"]
    parts += ["", _title("horizon sensitivity (ground truth judged at truncated horizons)")]
    sk = _skipped(h)
    if sk:
        parts.append(sk)
    else:
        pols = h["policies"]
        rows = [
            [str(hz)] + [num(h["scores"][p][i], 2) for p in pols] + [num(ag["value"]), num(ag["random_floor"])]
            for i, (hz, ag) in enumerate(zip(h["horizons"], h["agreements"], strict=True))
        ]
        parts.append(format_table(["horizon"] + pols + [h["metric"], "floor"], rows))
        why = next((ag["reason"] for ag in h["agreements"] if ag["value"] is None and ag["reason"]), None)
        if why:
            parts.append(f"n/a: {why} (undefined: neither passes nor breaks)")
        parts.append(
            f"reference: {h['reference_source']}; threshold {h['metric']} >= {h['threshold']:g}; "
            f"ranking breaks at horizon: {h['break_horizon'] if h['break_horizon'] is not None else 'never'}; "
            f"shortest safe horizon: {h['shortest_safe_horizon']}"
        )

    ab = a["ab"]
    parts += ["", _title(ab_title(ab))]
    sk = _skipped(ab)
    if sk:
        parts.append(sk)
    else:
        parts += ab_lines(ab, conf)

    if "agreement" in a:
        ag = a["agreement"]
        parts += [
            "",
            _title(f"agreement with reference {ag['reference']} (each value with its random floor)"),
            _table(tables["agreement"]),
            f"mmrv: lower is better; weight={ag['convention'].get('mmrv_weight')}, "
            f"ties={ag['convention'].get('mmrv_ties')} (SIMPLER's convention).",
        ]

    if "agreement_uncertainty" in a:
        from kosmos_env.stats.uncertainty import format_difference, format_metric

        u = a["agreement_uncertainty"]
        order = ("kendall", "spearman", "pearson", "mmrv")
        rows = [[name] + [format_metric(e[m]) for m in order] for name, e in u["evaluators"].items()]
        parts += [
            "",
            _title(
                f"agreement over all {len(u['cells'])} (task, policy) cells, with 95 % intervals over "
                f"{u['n_units']} (task, seed) units and permutation p-values"
            ),
            format_table(["evaluator"] + list(order), rows),
        ]
        for name, by_b in u["differences"].items():
            for b, d in by_b.items():
                parts.append(f"{name} - {b}: " + ", ".join(f"{m} {format_difference(d[m])}" for m in order))
        adds = [
            n
            for n, by_b in u["differences"].items()
            if by_b.get("baseline/action_only", {}).get("kendall", {}).get("excludes_zero")
        ]
        parts.append(
            f"the world adds information over the action-only baseline (Kendall): {'yes' if adds else 'no'}; "
            f"action-only baseline {u['action_only']}; null world {u['null_world']}"
        )
        parts.append(u["convention"])

    if "cost" in a:
        parts += ["", _title("time and cost per stage (the judge's share of the bill)")] + cost_lines(a["cost"])

    if a.get("notes"):
        parts += ["", _title("notes")] + [f"- {n}" for n in a["notes"]]
    return "\n".join(parts)
