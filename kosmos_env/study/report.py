"""Write the study's Markdown report (registered bars first), PNG plots (matplotlib, Agg) and a
JSON of every number.

A study run without a registration (``status="exploratory"``) says so on every page it writes:
the report's title and first lines, every plot's title, and ``study.json``'s ``status``; its bars
are listed but not judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kosmos_env.stats.uncertainty import alpha_convention, format_difference, format_metric

METRIC_ORDER = ("kendall", "spearman", "pearson", "mmrv")


def _f(x, d: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{d}f}"


def _iv(iv, d: int = 2) -> str:
    return "—" if not iv else f"[{iv[0]:.{d}f}, {iv[1]:.{d}f}]"


EXPLORATORY = "EXPLORATORY (no registration)"


def _plots(results: dict[str, Any], study: dict[str, Any], out: Path, status: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []

    def save(fig, name: str) -> None:
        if status == "exploratory":  # the label travels with the picture, wherever it is pasted
            fig.suptitle(f"{EXPLORATORY} {fig.get_suptitle()}".strip(), fontsize=8, color="firebrick")
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files.append(name)

    pols = results["policies"]
    truth = np.array([np.nan if v is None else v for v in results["truth"]["rates"]])
    evs = results["evaluators"]
    agr = results["agreement"]["evaluators"]

    # 1. Kendall with interval per evaluator (world vs baselines)
    names = list(agr)
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(names) + 1.2))
    for i, n in enumerate(names):
        k = agr[n]["kendall"]
        if k["value"] is None:
            ax.text(0, i, "undefined", va="center", fontsize=7)
            continue
        lo, hi = k["interval"] or (k["value"], k["value"])
        ax.errorbar(k["value"], i, xerr=[[k["value"] - lo], [hi - k["value"]]], fmt="o", capsize=3)
        if k.get("null_quantile") is not None:
            ax.plot(k["null_quantile"], i, "k|", ms=10)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.axvline(0, color="grey", lw=0.6)
    ax.set_xlabel("Kendall vs simulator truth; bar: 95 % interval, |: random ranking's 95 % quantile", fontsize=8)
    save(fig, "agreement_intervals.png")

    # 2. per-policy success: truth vs the main evaluators
    fig, ax = plt.subplots(figsize=(9, 4))
    shown = [
        n
        for n in (
            "reference/state",
            "learned/robot_log",
            "learned/vision",
            "baseline/action_only",
            "baseline/action_learned",
            "baseline/copy_first_frame/vision",
        )
        if n in evs
    ]
    width = 0.8 / len(shown)
    for i, n in enumerate(shown):
        ax.bar(np.arange(len(pols)) + i * width, [np.nan if v is None else v for v in evs[n]["rates"]], width, label=n)
    ax.set_xticks(
        np.arange(len(pols)) + 0.4 - width / 2,
        [p.replace("deceptive:mode=", "dec:") for p in pols],
        rotation=25,
        fontsize=6,
    )
    ax.set_ylabel("success rate")
    ax.legend(fontsize=6)
    save(fig, "success_rates.png")

    # 3. horizon as drift: Kendall at H vs the simulator's state at H
    h = results["horizon"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for n in next(iter(h["agreement"].values()))["evaluators"]:
        vals, los, his = [], [], []
        for hh in h["horizons"]:
            e = h["agreement"][hh]["evaluators"][n]
            vals.append(np.nan if e["value"] is None else e["value"])
            iv = e.get("interval") or (np.nan, np.nan)
            los.append(iv[0])
            his.append(iv[1])
        axes[0].plot(h["horizons"], vals, "o-", label=n)
        axes[0].fill_between(h["horizons"], los, his, alpha=0.12)
    axes[0].set_xlabel("cut horizon H (steps)")
    axes[0].set_ylabel("Kendall vs simulator state at H")
    axes[0].legend(fontsize=6)
    fe = results.get("frame_error") or {}
    if fe.get("world"):
        hs = [int(x) for x in fe["world"]]
        axes[1].plot(hs, list(fe["world"].values()), "o-", label="world (open loop)")
        axes[1].plot(hs, list(fe["copy_last_frame"].values()), "s--", label="copy-last-frame")
        axes[1].set_xlabel("H (steps)")
        axes[1].set_ylabel("mean |pixel error| (0-255)")
        axes[1].legend(fontsize=7)
    save(fig, "horizon_drift.png")

    # 4. sweep: cost vs Kendall
    sw = results.get("sweep")
    if sw:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for s in sw["settings"]:
            k = s["kendall"]
            if k["value"] is None:
                continue
            lo, hi = k["interval"] or (k["value"], k["value"])
            ax.errorbar(s["cost_seconds"], k["value"], yerr=[[k["value"] - lo], [hi - k["value"]]], fmt="o", capsize=3)
            ax.annotate(s["setting"].replace("sweep:", ""), (s["cost_seconds"], k["value"]), fontsize=6)
        ax.set_xlabel("seconds per rollout (world + policy + judge)")
        ax.set_ylabel("Kendall vs truth")
        save(fig, "sweep.png")

    # 5. an example rollout in each world
    ex = study.get("examples") or {}
    if ex:
        keys = sorted(ex, key=str)
        steps = [0, 5, 10, 20, 30, 40]
        fig, axes = plt.subplots(len(keys), len(steps), figsize=(len(steps) * 1.2, len(keys) * 1.35))
        axes = np.atleast_2d(axes)
        for r, k in enumerate(keys):
            frames = ex[k]
            for c, s in enumerate(steps):
                axes[r, c].imshow(frames[min(s, len(frames) - 1)])
                axes[r, c].set_xticks([])
                axes[r, c].set_yticks([])
                if r == 0:
                    axes[r, c].set_title(f"t={s}", fontsize=7)
            axes[r, 0].set_ylabel(k[0], fontsize=6)
        fig.suptitle(f"{keys[0][1]} on {keys[0][2]}, seed index {keys[0][3]}", fontsize=8)
        save(fig, "example_rollout.png")
    del truth
    return files


def _markdown(
    results: dict[str, Any],
    study: dict[str, Any],
    plots: list[str],
    bars: list[dict] | None,
    registration: dict | None,
    status: str,
    trust: list[str] | None = None,
) -> str:
    cfg = study["config"]
    evs = results["evaluators"]
    agr = results["agreement"]
    pols = results["policies"]
    L = [f"# Evaluator-validity study: {cfg['world']} vs {cfg['reference']}", ""]
    if status == "exploratory":
        L = [
            f"# {EXPLORATORY} evaluator-validity study: {cfg['world']} vs {cfg['reference']}",
            "",
            "**Exploratory.** This study ran without a registration made before it, so nothing on this page "
            "is a registered result and no bar is judged. To test the bars: `kosmos-env register --study <the same "
            "arguments> --out REG.json`, then `kosmos-env study <the same arguments> --registration REG.json`.",
            "",
        ]
        if bars:
            L += ["## Bars (not judged: exploratory)", ""] + [f"- {b['text']}" for b in bars] + [""]
    elif bars is not None:
        L += ["## Registered bars (fixed before any episode ran)", ""]
        if registration:
            L.append(
                f"Registration `registration.json`, sha256 `{registration['sha256'][:16]}…`, registered "
                f"{registration['registered_utc']}, before this run started; it binds the world's weights "
                f"and code, the judges, the policies' content hashes, the evaluation seeds and these bars."
            )
            L.append("")
        L += ["| verdict | bar | measured |", "|---|---|---|"]
        for b in bars:
            L.append(f"| **{b['verdict']}** | {b['text']} | {_bar_value(b['value'])} |")
        L += [
            "",
            f"Decision convention: {alpha_convention(results['alpha'])}. Everything below the bars is exploratory.",
            "",
        ]
    L += [
        f"Policies: {', '.join(pols)}. Tasks: {', '.join(results['tasks'])}. {cfg['seeds']} seeds per "
        f"(policy, task) = {results['n_units']} (task, seed) units, paired across worlds (same seed, same initial "
        f"scene), seeds from {cfg['seed_offset']} (disjoint from the world model's training seeds). Wall time "
        f"{_f(results.get('wall_seconds'), 0)} s.",
        "",
    ]
    L += [
        "Truth = the simulator's state judge. Evaluators: `learned/*` = the world under test judged by the "
        "robot-log judge (on its predicted gripper log) or the vision judge (frame classifier on its frames); "
        "`reference/*` = the same judges on the simulator's own rollouts (judge error alone); "
        "`baseline/action_only` = the action-only rule (pose integrated from the commands with workspace "
        "clipping, holding whenever the gripper is commanded closed; no world at all, the policy run in the "
        "copy-first-frame world); `baseline/action_learned` = the learned action-only judge (logistic regression on "
        "command features, fitted on simulator episodes from training seeds) on the same commands; "
        "`baseline/copy_first_frame/*` = the copy-first-frame world (every frame a copy of the first; in closed "
        "loop the last frame a world was given is the first, so copy-last-frame coincides with it) through the "
        "same judges; `baseline/null_world/*` = the null world (uniform grey frames: no scene at all); "
        "`baseline/same_rollout/*` = the two action-only judges reading the commands of the world's own rollouts "
        "(what the world's frames add beyond the commands of the same episodes).",
        "",
    ]

    L += [
        "## Agreement with the simulator: world vs baselines",
        "",
        "Each cell: value [95 % bootstrap interval over (task, seed) units] and the one-sided permutation p-value "
        "against a random ranking; in brackets under the table, the random ranking's 95 % quantile (5 % for "
        "MMRV, lower is better). — = undefined (a constant side, e.g. a judge that never says success).",
        "",
        "| evaluator | "
        + " | ".join(m.capitalize() if m != "mmrv" else "MMRV" for m in METRIC_ORDER)
        + " | episode accuracy |",
        "|---|" + "---|" * (len(METRIC_ORDER) + 1),
    ]
    for n, e in agr["evaluators"].items():
        L.append(
            f"| {n} | "
            + " | ".join(format_metric(e[m]) for m in METRIC_ORDER)
            + f" | {_f(evs[n]['episode_accuracy'])} |"
        )
    first_name, first = next(iter(agr["evaluators"].items()))
    L += [
        "",
        f"Random ranking's quantile (permuting {first_name}'s rates; each evaluator's own, which depends on "
        "its ties, is in study.json): "
        + ", ".join(
            f"{m} {_f(first[m].get('null_quantile'), 2)}"
            for m in METRIC_ORDER
            if first[m].get("null_quantile") is not None
        )
        + f" (P = {first['kendall'].get('n_policies')} policies; {first['kendall'].get('permutation')}).",
        "",
    ]
    L += [
        "### Difference to the baselines (positive = better than the baseline; ✓ = interval excludes 0)",
        "",
        "| evaluator | vs baseline | " + " | ".join(m if m != "mmrv" else "MMRV" for m in METRIC_ORDER) + " |",
        "|---|---|" + "---|" * len(METRIC_ORDER),
    ]
    for n, by_b in agr["differences"].items():
        if n.startswith("baseline/"):
            continue
        for b, d in by_b.items():
            L.append(f"| {n} | {b} | " + " | ".join(format_difference(d[m]) for m in METRIC_ORDER) + " |")
    L += [""]
    L += _best_baseline_section(agr.get("vs_best_baseline") or {}, results.get("subgroups") or {})
    L += _world_vs_simulator_section(results.get("world_vs_simulator") or {})
    if trust:
        L += ["## How far to trust this world (truth-free diagnostics)", ""] + list(trust) + [""]

    L += [
        "## Per-policy success rates",
        "",
        "Ground truth (simulator) with its 95 % Wilson interval, then each evaluator's rate.",
        "",
        "| policy | truth [95 %] | " + " | ".join(n for n in evs if n != "reference/state") + " |",
        "|---|---|" + "---|" * (len(evs) - 1),
    ]
    for i, p in enumerate(pols):
        t = results["truth"]
        L.append(
            f"| {p} | {_f(t['rates'][i], 2)} {_iv(t['intervals'][i])} | "
            + " | ".join(_f(evs[n]["rates"][i], 2) for n in evs if n != "reference/state")
            + " |"
        )
    L += [""]
    L += [
        "## Per-task agreement (Kendall [95 % interval])",
        "",
        "| evaluator | " + " | ".join(results["tasks"]) + " |",
        "|---|" + "---|" * len(results["tasks"]),
    ]
    for n, e in evs.items():
        if n == "reference/state":
            continue
        L.append(f"| {n} | " + " | ".join(format_metric(e["per_task"][t]) for t in results["tasks"]) + " |")

    L += [
        "",
        "## Repeatability and minimum detectable difference",
        "",
        "Split-half: Spearman between the rankings of two random halves of the (task, seed) units over 500 splits; "
        "median and 5–95 % range, raw and Spearman–Brown corrected to the full design. MDD: the smallest success-"
        f"rate difference detectable at alpha = {results['alpha']:g} (two-sided) with 80 % power; pairs whose "
        "per-unit differences never vary have no MDD (not estimable), and the design's resolution (1 / units) is "
        "given instead of a 0.",
        "",
        "| evaluator | split-half median [5–95 %] | Spearman–Brown median [5–95 %] | paired MDD (median over pairs) | "
        "pairs not estimable | unpaired MDD | resolution | separable pairs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, e in evs.items():
        s, d = e["split_half"], e["detectable"]
        if "error" in s:
            sh = sb = f"not estimable ({s['error']})"
        else:
            sh = f"{_f(s.get('median'))} [{_f(s.get('q05'), 2)}, {_f(s.get('q95'), 2)}]"
            sb = f"{_f(s.get('corrected_median'))} [{_f(s.get('corrected_q05'), 2)}, {_f(s.get('corrected_q95'), 2)}]"
        if "error" in d:
            L.append(f"| {n} | {sh} | {sb} | not estimable ({d['error']}) | | | | |")
            continue
        pm = d.get("paired_mdd_median")
        um = d.get("unpaired_mdd")
        L.append(
            f"| {n} | {sh} | {sb} | {_f(pm) if pm is not None else 'not estimable'} | "
            f"{d.get('n_pairs_not_estimable', 0)} | {_f(um) if um is not None else 'not estimable'} | "
            f"{_f(d.get('resolution'))} | {_f(d.get('fraction_separable'), 2)} |"
        )

    L += [
        "",
        "## Horizon as drift",
        "",
        "Every episode is cut at H and judged at H; the truth is the simulator's state at step H. Kendall [95 % "
        "interval]; — = undefined (the truth or the evaluator is constant at H, e.g. nothing has succeeded yet): "
        "undefined is not broken and not counted either way.",
        "",
    ]
    h = results["horizon"]
    evn = list(next(iter(h["agreement"].values()))["evaluators"])
    L += ["| H | truth: policies with any success | " + " | ".join(evn) + " |", "|---|---|" + "---|" * len(evn)]
    for hh in h["horizons"]:
        a = h["agreement"][hh]
        tr = h["truth_rates"][hh]
        L.append(
            f"| {hh} | {sum(1 for v in tr if v)} / {len(tr)} | "
            + " | ".join(format_metric(a["evaluators"][n]) for n in evn)
            + " |"
        )
    diffs = {n for hh in h["horizons"] for n in h["agreement"][hh]["differences"]}
    if diffs:
        L += [
            "",
            "Difference to the action-only baseline at H (Kendall, ✓ = interval above 0):",
            "",
            "| H | " + " | ".join(sorted(diffs)) + " |",
            "|---|" + "---|" * len(diffs),
        ]
        for hh in h["horizons"]:
            dd = h["agreement"][hh]["differences"]
            L.append(
                f"| {hh} | " + " | ".join(format_difference(dd[n]) if n in dd else "—" for n in sorted(diffs)) + " |"
            )
    fe = results.get("frame_error") or {}
    if fe.get("world"):
        L += [
            "",
            f"Open-loop frame error ({fe['n_episodes']} simulator episodes replayed command by command in the "
            "world; mean absolute pixel error 0–255) against copy-last-frame (the last real frame the world was given, "
            "here the first):",
            "",
            "| H | world | copy-last-frame | ratio [95 %] |",
            "|---|---|---|---|",
        ]
        for hh in fe["world"]:
            L.append(
                f"| {hh} | {_f(fe['world'][hh], 1)} | {_f(fe['copy_last_frame'][hh], 1)} | "
                f"{_f(fe['ratio'][hh], 2)} {_iv(fe['ratio_interval'].get(hh))} |"
            )
        L += _frame_error_by_group(fe.get("by_group") or {})

    sw = results.get("sweep")
    L += ["", "## Cost sweep: the cheapest setting that still ranks correctly", ""]
    if sw:
        L += [
            f"World {sw['settings'][0]['world']}, one setting varied at a time, {sw['units']} (task, seed) units, judged "
            f"by the world's own spec judge against the simulator's truth on the same units. Bar: {sw['bar']}.",
            "",
            "| setting | seconds per rollout | judge share | world seconds | Kendall | Spearman | MMRV | bar |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in sw["settings"]:
            L.append(
                f"| {s['setting'].replace('sweep:', '')} | {_f(s['cost_seconds'])} | {_f(s['judge_share'], 3)} | "
                f"{_f(s['world_seconds'])} | {format_metric(s['kendall'])} | {format_metric(s['spearman'])} | "
                f"{format_metric(s['mmrv'])} | {'holds' if s['bar_holds'] else 'fails'} |"
            )
        L += [
            "",
            f"**Answer:** {sw['answer'].replace('sweep:', '') if sw['answer'] else 'no swept setting holds the bar'}.",
            "",
            "Seconds are wall clock, and the settings ran one after another (the default in the main run): on a "
            "shared machine their ratio carries the load changes between those phases as well as the setting.",
        ]
    else:
        L.append("Not run (the study runs it with `--sweep NAME=V1,V2,...`).")

    L += ["", "## Consistency gate", ""]
    g = results["gate"]
    if g.get("available"):
        L.append(
            f"Gate: {g['detail']}. Discard rate {_f(g['discard_rate'])}; per policy: "
            + ", ".join(f"{p}: {_f(v, 2)}" for p, v in g["discard_rate_per_policy"].items())
            + "."
        )
    else:
        L.append(f"Gate: {g.get('detail')}.")
    L += [
        "",
        "## Cost per rollout (seconds, mean)",
        "",
        "Wall clock per rollout, worlds run one after another on the same machine (see the note under the sweep).",
        "",
        "| world | episode | world model | policy | gate | judges |",
        "|---|---|---|---|---|---|",
    ]
    for w, c in results["cost_seconds_per_rollout"].items():
        judges = ", ".join(f"{k[6:]} {_f(v, 4)}" for k, v in c.items() if k.startswith("judge_"))
        L.append(
            f"| {w} | {_f(c['episode'])} | {_f(c['world'])} | {_f(c['policy'])} | {_f(c.get('gate', 0.0))} | {judges} |"
        )
    L += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(L)


def _best_baseline_section(best: dict, subgroups: dict) -> list[str]:
    """World minus the best baseline (chosen inside each resample): one table per policy subgroup."""
    L = [
        "## World vs the best baseline, by subgroup",
        "",
        "For each policy subgroup and world evaluator: Kendall (ranking the subgroup's policies) and episode "
        "accuracy (share of the subgroup's episodes whose verdict equals the simulator's truth) minus the best of "
        "every baseline above, the best chosen inside each bootstrap resample (so the choice's luck is inside the "
        "interval); positive = the world is better; ✓ = the 95 % interval lies above 0. In brackets after a "
        "baseline's name, its observed value; after the evaluator, its own. A subgroup of three policies has only "
        "three pairs to rank, so its Kendall can take few values and its interval can collapse to a point: read "
        "the episode accuracy there. Subgroups: " + "; ".join(f"{g} ({len(p)})" for g, p in subgroups.items()) + ".",
        "",
    ]
    if not best:
        return L + ["Not computed (no baseline world ran).", ""]
    adds = []
    order = list(subgroups) or list(dict.fromkeys(g for groups in best.values() for g in groups))
    for g in order:
        present = [(ev, groups[g]) for ev, groups in best.items() if g in groups]
        if not present:
            continue
        L += [
            f"### {g} ({len(subgroups.get(g, []))} policies)",
            "",
            "| evaluator | Kendall − best [95 %] | Kendall: evaluator / best baseline | accuracy − best [95 %] | "
            "accuracy: evaluator / best baseline |",
            "|---|---|---|---|---|",
        ]
        for ev, m in present:
            k, a = m["kendall"], m["accuracy"]
            L.append(f"| {ev} | {format_difference(k)} | {_versus(k)} | {format_difference(a)} | {_versus(a)} |")
            if k.get("excludes_zero"):
                adds.append(f"{ev} on {g}")
        L.append("")
    L += [
        "**The world adds information over the best baseline** (Kendall interval above 0) for: "
        + (", ".join(adds) if adds else "no evaluator on any subgroup")
        + ".",
        "",
    ]
    return L


def _frame_error_by_group(groups: dict) -> list[str]:
    """The open-loop frame error by policy group: for closed_loop, the world replaying the commands a
    closed-loop policy gave in the simulator (its own rollouts in the two worlds part as soon as it
    reacts to different frames, so frame against frame needs the same commands)."""
    if not groups:
        return []
    names = list(groups)
    L = [
        "",
        "By policy group (the same replays; world error / copy-last-frame error, ratio [95 %]; closed_loop = the "
        "commands the closed-loop checkpoints gave in the simulator, replayed in the world): "
        + ", ".join(f"{g} {groups[g]['n_episodes']} episodes" for g in names)
        + ".",
        "",
        "| H | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    hs = list(dict.fromkeys(h for g in names for h in groups[g]["world"]))
    for hh in hs:
        cells = []
        for g in names:
            e = groups[g]
            if hh not in e["world"]:
                cells.append("—")
                continue
            cells.append(
                f"{_f(e['world'][hh], 1)} / {_f(e['copy_last_frame'][hh], 1)}, {_f(e['ratio'][hh], 2)} "
                f"{_iv(e['ratio_interval'].get(hh))}"
            )
        L.append(f"| {hh} | " + " | ".join(cells) + " |")
    return L


def _versus(d: dict) -> str:
    """ "0.71 / baseline/action_learned (0.64)": the evaluator's value and the observed best baseline's."""
    b = d.get("best_baseline")
    if b is None:
        return f"{_f(d.get('evaluator'), 2)} / —"
    return f"{_f(d.get('evaluator'), 2)} / {b} ({_f((d.get('baselines') or {}).get(b), 2)})"


def _world_vs_simulator_section(same: dict) -> list[str]:
    """The same judge on the world's rollouts and on the simulator's, by subgroup."""
    if not same:
        return []
    L = [
        "## The same judge on the world's rollouts and on the simulator's, by subgroup",
        "",
        "Each judge's Kendall against the simulator's truth when it reads the world's rollouts and when it reads "
        "the simulator's own rollouts of the same (policy, task, seed) units [95 % interval, permutation p], and "
        "the share the world keeps: world Kendall / simulator Kendall with a paired 95 % interval (the same unit "
        "resamples for both; undefined where the simulator-side Kendall is not above 0). The judge's own error is "
        "on both sides; what the share loses, the world's rollouts lost. On closed-loop policies the policy reacts "
        "to the world's frames, so this is where a world's rollouts can part from the simulator's.",
        "",
        "| judge | subgroup | policies | on the world's rollouts | on the simulator's | share kept [95 %] |",
        "|---|---|---|---|---|---|",
    ]
    for ev, groups in same.items():
        for g, e in groups.items():
            r = e["ratio"]
            share = "—" if r.get("estimate") is None else f"{_f(r['estimate'], 2)} {_iv(r.get('interval'))}"
            L.append(
                f"| {ev.split('/', 1)[1]} | {g} | {len(e['policies'])} | {format_metric(e['world'])} | "
                f"{format_metric(e['simulator'])} | {share} |"
            )
    return L + [""]


def _bar_value(v) -> str:
    if not v:
        return "—"
    parts = []
    for k, x in v.items():
        if isinstance(x, list):
            parts.append(f"{k} {_iv(x)}")
        elif isinstance(x, float):
            parts.append(f"{k} {x:.3f}")
        elif x is None:
            parts.append(f"{k} —")
        else:
            parts.append(f"{k} {x}")
    return "; ".join(parts)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if not np.isfinite(x) else float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def write_report(
    results: dict[str, Any],
    study: dict[str, Any],
    out_dir,
    *,
    bars: list[dict] | None = None,
    registration: dict | None = None,
    status: str = "exploratory",
    trust: list[str] | None = None,
) -> dict[str, Path]:
    """Write report.md, study.json (numbers, config, episode rows) and the PNG plots into ``out_dir``.

    ``status``: "registered" (a registration made before the run, matching it) or "exploratory";
    ``trust``: plain-word lines from the truth-free diagnostics, shown after the agreement."""
    if status not in ("registered", "exploratory"):
        raise ValueError(f"status must be 'registered' or 'exploratory', got {status!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = _plots(results, study, out, status)
    (out / "report.md").write_text(_markdown(results, study, plots, bars, registration, status, trust))
    payload = {
        "status": status,
        "registration_sha256": (registration or {}).get("sha256"),
        "config": study["config"],
        "bars": bars,
        "results": results,
        "gate_status": study["gate_status"],
        "episodes": study["rows"],
        "sweep_episodes": study.get("sweep_rows", []),
    }
    (out / "study.json").write_text(json.dumps(_jsonable(payload), indent=1))
    return {"report": out / "report.md", "json": out / "study.json", **{p: out / p for p in plots}}
