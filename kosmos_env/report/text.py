"""Terminal text for an analysis dict (:func:`kosmos_env.report.analysis.analyze_bundle`):
one titled, column-aligned table per section."""

from __future__ import annotations

from kosmos_env.stats.agreement import METRICS


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


def num(x, digits: int = 3) -> str:
    """A number for a table cell; ``n/a`` for None/NaN."""
    if x is None or (isinstance(x, float) and x != x):
        return "n/a"
    return f"{x:.{digits}f}"


def pct(x, digits: int = 1) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def iv(pair, digits: int = 3) -> str:
    return "n/a" if not pair else f"[{num(pair[0], digits)}, {num(pair[1], digits)}]"


def bounds(pair, digits: int = 3) -> str:
    """The worst-case bounds of a rate (undecided episodes as failures .. as successes): with no
    undecided episode they coincide, which is a fact about the count, not an interval, so it is
    said in words rather than printed as a zero-width "[x, x]"."""
    if pair and pair[0] is not None and pair[1] is not None and abs(pair[1] - pair[0]) < 1e-12:
        return "none undecided"
    return iv(pair, digits)


def spread(d: dict | None, digits: int = 3) -> str:
    """The 5-95% range of a distribution over splits; when every split gave the same value it is
    said so ("every split 1.000") rather than printed as a zero-width interval."""
    if not d:
        return "n/a"
    lo, hi = d.get("q05"), d.get("q95")
    if lo is not None and hi is not None and abs(hi - lo) < 1e-12:
        return f"every split {num(lo, digits)}"
    return iv((lo, hi), digits)


def diff_interval(d: dict, digits: int = 3) -> str:
    """A bootstrap interval of a difference, or why there is none: a zero-width bootstrap
    interval (every resample alike) claims a certainty a handful of pairs cannot give."""
    lo, hi = d.get("lower"), d.get("upper")
    if lo is None or hi is None or abs(hi - lo) < 1e-12:
        return f"interval not estimable from {d.get('n_pairs', '?')} pairs"
    return iv((lo, hi), digits)


def rate_row(policy: str, r: dict) -> list[str]:
    """One row of the success-per-policy table (rank, counts, rate, intervals, discard bounds),
    the same cells in the text and the HTML analysis."""
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


def verdict_line(v: dict | None) -> str:
    """The headline: the verdict's own sentence, or why there is none."""
    if not v:
        return "No verdict: not computed"
    if "skipped" in v:
        return f"No verdict: {v['skipped']}"
    return v["headline"]


def verdict_rows(vs: list[dict]) -> list[list[str]]:
    """One row per pair for the every-pair table: pair, outcome, difference [interval], pairs, more pairs."""
    out = []
    for v in vs:
        lo, hi = v["interval"]
        word = {"a_better": f"{v['a']} better", "b_better": f"{v['b']} better"}.get(v["outcome"], "undecided")
        more = "" if v["more_pairs_needed"] is None else f"about {v['more_pairs_needed']}"
        out.append(
            [f"{v['a']} vs {v['b']}", word, f"{v['difference']:+.2f} [{lo:+.2f}, {hi:+.2f}]", str(v["n_pairs"]), more]
        )
    return out


VERDICT_HEAD = ["pair", "verdict", "difference [interval]", "pairs", "more pairs needed"]


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
            f"mean(A - B) = {num(f['mean_diff'])}, {conf} anytime-valid confidence sequence "
            f"{iv((f['lower'], f['upper']))} (the decision is this interval excluding 0)"
        )
    else:
        import math

        kp, km = f.get("log_capital") or (0.0, 0.0)
        lines.append(
            f"mean(A - B) = {num(f['mean_diff'])}; decided by betting: capital for A {math.exp(kp):.3g}, "
            f"for B {math.exp(km):.3g}, threshold 2/alpha = {2 / f['alpha']:g}"
        )
    return lines


def analysis_text(a: dict, *, headline: bool = True) -> str:
    """All sections of an analysis as aligned plain-text tables, the verdict line first
    (``headline=False``: without it, for a page that shows it at its top already)."""
    conf = f"{100 * (1 - a['settings']['alpha']):g}%"
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
            format_table(VERDICT_HEAD, verdict_rows(a["verdicts"]), left=(0, 1)),
        ]

    rows = [rate_row(p, a["per_policy"][p]) for p in a["ranking"]]
    parts += [
        "",
        _title("success per policy (raw rate over decided episodes)"),
        format_table(
            [
                "rank",
                "policy",
                "succ/dec",
                "rate",
                f"wilson {conf}",
                f"clopper-pearson {conf}",
                "worst case",
                f"worst case {conf}",
                "discard",
                "abstain",
                "errors",
            ],
            rows,
            left=(0, 1),
        ),
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
        rows = [
            [f"{d['a']} - {d['b']}", "n/a", "", "", d["skipped"]]
            if "skipped" in d
            else [
                f"{d['a']} - {d['b']}",
                f"{d['estimate']:+.3f}",
                diff_interval(d),
                num(d["prob_a_better"]),
                str(d["n_pairs"]),
            ]
            for d in a["pairwise"]
        ]
        parts.append(format_table(["pair", "diff", f"{conf} interval", "P(a better)", "pairs"], rows))
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
        b = a["bootstrap_ranking"]
        rows = [
            [p, num(m), num(rk, 1), f"[{lo:g}, {hi:g}]", num(pb)]
            for p, m, rk, (lo, hi), pb in zip(
                b["policies"], b["means"], b["ranks"], b["rank_interval"], b["prob_best"], strict=True
            )
        ]
        parts.append(format_table(["policy", "mean", "rank", f"rank {conf}", "P(best)"], rows))

    parts += ["", _title("secondary: split-half repeatability of the ranking on success (random seed splits)")]
    sk = _skipped(a["split_half"])
    if sk:
        parts.append(sk)
    else:
        rows = []
        for m, s in a["split_half"].items():
            d = s.get("distribution") or {}
            cd = s.get("corrected_distribution") or {}
            rows.append(
                [
                    m,
                    num(s["median"]),
                    spread(d),
                    num(s["corrected_median"]),
                    spread(cd),
                    f"{s['n_splits']}",
                    str(s["n_undefined"]),
                    str(s["half_size"]),
                ]
            )
        parts.append(
            format_table(
                ["metric", "median", "5-95%", "Spearman-Brown", "SB 5-95%", "splits", "undefined", "units/half"], rows
            )
        )

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
        rows = [
            [
                f"{t['a']} vs {t['b']}",
                f"{t['mean_diff']:+.3f}",
                num(t["p_value"], 4),
                num(t["mdd"]),
                "yes" if t["separated"] else "no",
            ]
            for t in d["pairs"]
        ]
        parts.append(format_table(["pair", "diff", "p", "MDD", "separated"], rows))

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
        rows = [
            [r["label"], str(r["n"])]
            + [f"{num(r['metrics'][m]['value'])} ({num(r['metrics'][m]['random_floor'])})" for m in METRICS]
            for r in ag["rows"]
        ]
        parts += [
            "",
            _title(f"agreement with reference {ag['reference']} (value (random floor))"),
            format_table(["task", "n"] + list(METRICS), rows),
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
