"""Write the study's Markdown report, PNG plots (matplotlib, Agg) and a JSON of every number."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def _f(x, d: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{d}f}"


def _plots(results: dict[str, Any], study: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files.append(name)

    pols = results["policies"]
    truth = np.asarray(results["reference_rates"], dtype=float)
    evs = results["evaluators"]

    # 1. per-policy success: truth vs each evaluator
    fig, ax = plt.subplots(figsize=(8, 4))
    names = [n for n in evs]
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        ax.bar(np.arange(len(pols)) + i * width, np.nan_to_num(np.asarray(evs[n]["rates"], float)), width, label=n)
    ax.set_xticks(np.arange(len(pols)) + 0.4 - width / 2, pols, rotation=20, fontsize=7)
    ax.set_ylabel("success rate")
    ax.set_title("Per-policy success: simulator truth (reference/state) vs each evaluator")
    ax.legend(fontsize=6)
    save(fig, "success_rates.png")

    # 2. scatter of learned-world rates vs truth
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for n in ("learned/vision", "learned/robot_log", "learned+gate/vision"):
        if n in evs:
            ax.scatter(truth, evs[n]["rates"], label=n)
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set_xlabel("simulator success (truth)")
    ax.set_ylabel("learned-world success")
    ax.legend(fontsize=7)
    save(fig, "learned_vs_truth.png")

    # 3. agreement vs horizon
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for n, h in results["horizon"].items():
        vals = [None if a is None else a["value"] for a in h["kendall_vs_reference_same_horizon"]]
        ax.plot(h["horizons"], [np.nan if v is None else v for v in vals], "o-", label=f"{n} vs truth at same step")
        if h.get("vs_reference_final"):
            ax.plot(h["horizons"], [np.nan if a["value"] is None else a["value"] for a in h["vs_reference_final"]["agreements"]],
                    "s:", label=f"{n} vs final truth")
    first = next(iter(results["horizon"].values()))
    ax.axhline(first["threshold"], color="grey", lw=0.8, ls="--")
    ax.set_xlabel("horizon (steps judged)")
    ax.set_ylabel("Kendall tau")
    ax.set_title("Ranking agreement as a function of horizon")
    ax.legend(fontsize=6)
    save(fig, "agreement_vs_horizon.png")

    # 4. per-task Kendall
    fig, ax = plt.subplots(figsize=(7, 3.5))
    tasks = results["tasks"]
    shown = [n for n in evs if n != "reference/state"]
    width = 0.8 / len(shown)
    for i, n in enumerate(shown):
        vals = [evs[n]["per_task"][t]["agreement"]["kendall"]["value"] for t in tasks]
        ax.bar(np.arange(len(tasks)) + i * width, [np.nan if v is None else v for v in vals], width, label=n)
    ax.set_xticks(np.arange(len(tasks)) + 0.4 - width / 2, tasks, fontsize=7)
    ax.set_ylabel("Kendall tau vs truth")
    ax.set_title("Per-task ranking agreement")
    ax.legend(fontsize=6)
    save(fig, "agreement_per_task.png")

    # 5. cost
    cost = results["cost_seconds_per_rollout"]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    labels = list(cost)
    ax.bar(labels, [cost[k]["episode"] for k in labels], label="episode (world + policy)")
    ax.set_ylabel("seconds per rollout")
    ax.set_title("Cost per 40-step rollout (CPU)")
    save(fig, "cost.png")

    # 6. an example rollout in both worlds
    ex = study.get("examples") or {}
    if ex:
        keys = sorted(ex, key=str)
        steps = [0, 5, 10, 15, 20, 25, 30, 40]
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
            axes[r, 0].set_ylabel(k[0].replace("Kosmos-", "").replace("-v1", ""), fontsize=6)
        fig.suptitle(f"{keys[0][1]} on {keys[0][2]}, seed index {keys[0][3]}", fontsize=8)
        save(fig, "example_rollout.png")
    return files


def _markdown(results: dict[str, Any], study: dict[str, Any], plots: list[str]) -> str:
    cfg = study["config"]
    evs = results["evaluators"]
    pols = results["policies"]
    L = [f"# Evaluator-validity study: {cfg['world']} vs {cfg['reference']}", ""]
    L += [f"Policies: {', '.join(pols)}. Tasks: {', '.join(results['tasks'])}. {cfg['seeds']} seeds per "
          f"(policy, task), paired across worlds (same seed, same initial scene), seeds from {cfg['seed_offset']} "
          f"(disjoint from the world model's training seeds). Wall time {_f(results.get('wall_seconds'), 0)} s.", ""]
    L += ["Reference = the simulator's state judge (ground truth). Evaluators: `learned/*` = the learned world "
          "judged by the vision judge (frame classifier on generated frames) or the robot-log judge (on the "
          "predicted gripper log); `reference/vision` and `reference/robot_log` apply the same judges to "
          "simulator rollouts, so judge error and world error can be told apart.", ""]
    L += ["## Headline: ranking agreement with the simulator", "",
          "| evaluator | Spearman (floor) | Kendall (floor) | Pearson (floor) | MMRV (floor) | episode accuracy |",
          "|---|---|---|---|---|---|"]
    for n, e in evs.items():
        a = e["agreement"]
        cells = [f"{_f(a[m]['value'])} ({_f(a[m]['random_floor'])})" for m in ("spearman", "kendall", "pearson", "mmrv")]
        L.append(f"| {n} | " + " | ".join(cells) + f" | {_f(e['episode_accuracy'])} |")
    L += ["", "MMRV: lower is better (0 = no rank violation); the floor is its value for a random ranking. "
          "Episode accuracy: share of paired episodes whose verdict equals the simulator's ground truth.", ""]
    L += ["## Per-policy success rates", "", "| policy | " + " | ".join(evs) + " |", "|---|" + "---|" * len(evs)]
    for i, p in enumerate(pols):
        L.append(f"| {p} | " + " | ".join(_f(evs[n]["rates"][i], 2) for n in evs) + " |")
    L += ["", "## Per-task agreement (Kendall tau, random floor in brackets)", "",
          "| evaluator | " + " | ".join(results["tasks"]) + " |", "|---|" + "---|" * len(results["tasks"])]
    for n, e in evs.items():
        cells = [f"{_f(e['per_task'][t]['agreement']['kendall']['value'])} ({_f(e['per_task'][t]['agreement']['kendall']['random_floor'])})"
                 for t in results["tasks"]]
        L.append(f"| {n} | " + " | ".join(cells) + " |")
    L += ["", "## Repeatability and minimum detectable difference", "",
          "| evaluator | split-half Spearman (median) | Spearman–Brown corrected | paired MDD (median over pairs) | unpaired MDD | separable pairs |",
          "|---|---|---|---|---|---|"]
    for n, e in evs.items():
        s, d = e["split_half"], e["detectable"]
        L.append(f"| {n} | {_f(s.get('median'))} | {_f(s.get('corrected_median'))} | {_f(d.get('paired_mdd_median'))} | "
                 f"{_f(d.get('unpaired_mdd'))} | {_f(d.get('fraction_separable'), 2)} |")
    L += ["", "MDD: the smallest success-rate difference between two policies detectable at α = 0.05 with 80 % power "
          "with this many paired episodes.", ""]
    L += ["## Agreement as a function of horizon", ""]
    for n, h in results["horizon"].items():
        vals = [None if a is None else a["value"] for a in h["kendall_vs_reference_same_horizon"]]
        L.append(f"- **{n}** Kendall vs simulator truth at the same step: " +
                 ", ".join(f"h={hh}: {_f(v, 2)}" for hh, v in zip(h["horizons"], vals)))
        L.append(f"  - breaks (first step below τ = {h['threshold']} after passing): {h['first_break_after_passing']}; "
                 f"longest failing horizon: {h['longest_failing_horizon']}")
        vf = h.get("vs_reference_final")
        if vf:
            L.append(f"  - vs the simulator's *final* truth: shortest safe horizon {vf['shortest_safe_horizon']}, "
                     f"break horizon {vf['break_horizon']}")
    L += ["", "## Consistency gate", ""]
    g = results["gate"]
    if g.get("available"):
        L.append(f"Gate: {g['detail']}. Discard rate {_f(g['discard_rate'])}; per policy: " +
                 ", ".join(f"{p}: {_f(v, 2)}" for p, v in g["discard_rate_per_policy"].items()) + ".")
        L.append("With vs without the gate: compare the `learned+gate/*` rows with the `learned/*` rows above.")
    else:
        L.append(f"**gate: not available** — {g.get('detail')}. The study runs the learned world with the gate "
                 "as soon as `kosmos_env.gate.ConsistencyGate` exists; rerun it then.")
    L += ["", "## Cost per rollout (seconds, mean)", "", "| world | episode | world model | policy | gate | judges |",
          "|---|---|---|---|---|---|"]
    for w, c in results["cost_seconds_per_rollout"].items():
        judges = ", ".join(f"{k[6:]} {_f(v, 4)}" for k, v in c.items() if k.startswith("judge_"))
        L.append(f"| {w} | {_f(c['episode'])} | {_f(c['world'])} | {_f(c['policy'])} | {_f(c.get('gate', 0.0))} | {judges} |")
    L += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(L)


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


def write_report(results: dict[str, Any], study: dict[str, Any], out_dir) -> dict[str, Path]:
    """Write report.md, study.json (numbers, config, episode rows) and the PNG plots into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = _plots(results, study, out)
    (out / "report.md").write_text(_markdown(results, study, plots))
    payload = {"config": study["config"], "results": results, "gate_status": study["gate_status"], "episodes": study["rows"]}
    (out / "study.json").write_text(json.dumps(_jsonable(payload), indent=1))
    return {"report": out / "report.md", "json": out / "study.json", **{p: out / p for p in plots}}
