"""Pages of ``bench/train_in_world.py``: results.json, results.md (tables and their reading) and one
learning-curve plot per arm (true and world-judged success against env steps, with intervals)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping


def _ci(x: Mapping[str, float], signed: bool = True, digits: int = 2) -> str:
    f = f"{{:{'+' if signed else ''}.{digits}f}}"
    return f"{f.format(x['estimate'])} [{f.format(x['lower'])}, {f.format(x['upper'])}]"


def _verdict(x: Mapping[str, float]) -> str:
    if x["lower"] > 0:
        return "above 0"
    if x["upper"] < 0:
        return "below 0"
    return "interval contains 0"


def write_report(out: Path, results: Mapping[str, Any], arms: Mapping[str, list]) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True, default=str) + "\n")
    for name, arm in results["arms"].items():
        _plot_arm(out / f"arm_{name}" / "learning_curve.png", name, results["arms_config"][name]["label"], arm)
    (out / "results.md").write_text(_markdown(results))


def _markdown(r: Mapping[str, Any]) -> str:
    L = [
        "# Training inside the world: lift, exploitability, transfer",
        "",
        f"Command: `{r['command']}`  ",
        f"Machine: {r['machine']}; this invocation's wall time "
        f"{max(r['wall_seconds_cumulative'].values()) / 60:.1f} min (stages found on disk are not rerun); PPO seconds "
        f"per arm: " + ", ".join(f"{k} {v:.0f}" for k, v in r["train_seconds"].items()) + "; "
        f"{r['settings']['steps']} PPO env steps per arm, "
        f"{r['units']} held-out evaluation units (tasks x seeds); 95 % bootstrap intervals over units "
        f"({r['n_boot']} draws, shared by every number).  ",
        f"Terminate on success: threshold {r['success_threshold']}, patience {r['success_patience']} "
        "(chosen on tuning seeds, `tuning.json`).  ",
        "Seeds: " + "; ".join(f"{k} {v}" for k, v in r["seeds"].items()) + ".",
        "",
        "| arm | trained in | true success: start -> last | optimization lift | world-judged success (last) | "
        "exploitability (last) | exploitability growth | transfer ratio (lift / lift A) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, arm in r["arms"].items():
        first, last = arm["checkpoints"][0], arm["checkpoints"][-1]
        ratio = arm.get("transfer_ratio")
        ratio_s = "—" if ratio is None else (_ci(ratio) if ratio["defined"] else f"undefined ({_ci(ratio)})")
        L.append(
            f"| {name} | {r['arms_config'][name]['label']} | {first['true_success']['estimate']:.2f} -> "
            f"{_ci(last['true_success'], signed=False)} | {_ci(arm['lift'])} | "
            f"{_ci(last['world_success'], signed=False)} | {_ci(last['exploitability'])} | "
            f"{_ci(arm['exploitability_growth'])} | {ratio_s} |"
        )
    L += ["", "Per checkpoint (env steps: true success / world-judged success / exploitability):", ""]
    for name, arm in r["arms"].items():
        cells = [
            f"{c['step']}: {c['true_success']['estimate']:.2f} / {c['world_success']['estimate']:.2f} / "
            f"{c['exploitability']['estimate']:+.2f}"
            for c in arm["checkpoints"]
        ]
        L.append(f"- **{name}**: " + "; ".join(cells))
    L += ["", "## Reading", ""]
    for name, arm in r["arms"].items():
        L.append(
            f"- Arm {name} ({r['arms_config'][name]['label']}): lift {_ci(arm['lift'])}, {_verdict(arm['lift'])}; "
            f"exploitability at the last checkpoint {_ci(arm['checkpoints'][-1]['exploitability'])} "
            f"({_verdict(arm['checkpoints'][-1]['exploitability'])}), growth from the start "
            f"{_ci(arm['exploitability_growth'])} ({_verdict(arm['exploitability_growth'])})."
        )
    for pair, x in r.get("gate_effect", {}).items():
        a, b = pair.split("-")
        L.append(
            f"- Gate: exploitability of {a} minus {b} at the last checkpoints {_ci(x)} ({_verdict(x)}; "
            f"above 0 would mean the gate reduced it)."
        )
    for name, arm in r["arms"].items():
        ratio = arm.get("transfer_ratio")
        if ratio is not None and not ratio["defined"]:
            L.append(f"- Transfer ratio of {name}: {ratio['note']}.")
    L.append("")
    return "\n".join(L)


def _plot_arm(path: Path, name: str, label: str, arm: Mapping[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [c["step"] for c in arm["checkpoints"]]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for key, colour, text in (
        ("true_success", "tab:green", "true success (simulator, held-out seeds)"),
        ("world_success", "tab:orange", "success as the training world judges it"),
    ):
        est = [c[key]["estimate"] for c in arm["checkpoints"]]
        lo = [c[key]["lower"] for c in arm["checkpoints"]]
        hi = [c[key]["upper"] for c in arm["checkpoints"]]
        ax.plot(steps, est, "o-", color=colour, label=text)
        ax.fill_between(steps, lo, hi, color=colour, alpha=0.15)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("PPO env steps (0 = behaviour-cloned start)")
    ax.set_ylabel("success rate (95 % interval)")
    ax.set_title(f"Arm {name}: {label}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
