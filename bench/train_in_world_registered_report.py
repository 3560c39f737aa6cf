"""results.json, results.md and learning_curves.png of the registered train-in-world experiment.

Reads every finished piece (``arm_X/seed_N/eval_*.json``), pools them with
:func:`kosmos_env.training.analysis.analyse_seeds` and reads the registered bars against the
numbers. An arm with fewer finished seeds than the protocol names is reported as incomplete.
"""

from __future__ import annotations

import json
from pathlib import Path


def _iv(x: dict, signed: bool = True) -> str:
    fmt = "{:+.2f}" if signed else "{:.2f}"
    return f"{fmt.format(x['estimate'])} [{fmt.format(x['lower'])}, {fmt.format(x['upper'])}]"


def load_arms(out: Path) -> dict[str, dict[int, list[dict]]]:
    arms: dict[str, dict[int, list[dict]]] = {}
    for arm_dir in sorted(out.glob("arm_*")):
        for piece in sorted(arm_dir.glob("seed_*")):
            done = piece / "done.json"
            if not done.is_file():
                continue
            names = json.loads(done.read_text())["checkpoints"]
            paths = [piece / "eval_start.json"] + [piece / f"eval_{Path(n).stem}.json" for n in names]
            if not all(p.is_file() for p in paths):
                continue
            evals = [json.loads(p.read_text()) for p in paths]
            arms.setdefault(arm_dir.name.split("_", 1)[1], {})[int(piece.name.split("_", 1)[1])] = evals
    return arms


def write_report(out: Path, protocol: dict, units) -> dict:
    from kosmos_env.training.analysis import analyse_seeds

    arms = load_arms(out)
    if not arms:
        raise SystemExit(f"no finished piece under {out}")
    results = analyse_seeds(arms, units)
    wanted = protocol["training_seeds"]
    lines = [
        "# Training in the world, registered round: results",
        "",
        f"Protocol: `protocol.json` (committed before the first run). Evaluation: {len(units)} units "
        f"({protocol['seeds']['evaluation (never used before this protocol)']}); 95 % bootstrap intervals over "
        "units, shared by every number. Success everywhere: at the horizon (step 40).",
        "",
        "| arm | seeds done | true success start -> last (pooled) | lift (pooled) | per-seed lifts | world-judged "
        "(last) | exploitability (last) | its growth |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, arm in results["arms"].items():
        done = f"{len(arm['seeds'])} of {len(wanted)}"
        start, last = arm["checkpoints"][0], arm["checkpoints"][-1]
        per_seed = "; ".join(f"{s}: {_iv(v['lift'])}" for s, v in arm["per_seed"].items())
        lines.append(
            f"| {name} {protocol['arms'][name]['label']} | {done} | {start['true_success']['estimate']:.2f} -> "
            f"{_iv(last['true_success'], signed=False)} | {_iv(arm['lift'])} | {per_seed} | "
            f"{_iv(last['world_success'], signed=False)} | {_iv(last['exploitability'])} | "
            f"{_iv(arm['exploitability_growth'])} |"
        )
    lines += ["", "Training seconds per piece (pieces ran side by side on the 2 shared cores):", ""]
    for name, arm in results["arms"].items():
        seconds = [
            json.loads((out / f"arm_{name}" / f"seed_{s}" / "done.json").read_text())["train_seconds"]
            for s in arm["seeds"]
        ]
        lines.append(
            f"- {name}: " + ", ".join(f"seed {s}: {t:.0f} s" for s, t in zip(arm["seeds"], seconds, strict=True))
        )
    lines += ["", "Per checkpoint (pooled over seeds; env steps: true / world-judged / exploitability):", ""]
    for name, arm in results["arms"].items():
        cells = "; ".join(
            f"{c['step']}: {c['true_success']['estimate']:.2f} / {c['world_success']['estimate']:.2f} / "
            f"{c['exploitability']['estimate']:+.2f}"
            for c in arm["checkpoints"]
        )
        lines.append(f"- **{name}**: {cells}")
    lines += ["", "## Against the registered bars", ""]
    verdicts = {}
    d = results["arms"].get("D")
    if d is not None:
        complete = len(d["seeds"]) >= len(wanted)
        passes = complete and d["lift"]["estimate"] >= 0.20 and d["lift"]["lower"] > 0
        verdicts["positive_control"] = "passes" if passes else ("fails" if complete else "incomplete")
        lines.append(
            f"- Positive control (arm D, bar: pooled lift >= +0.20 with the interval above 0 over "
            f"{len(wanted)} seeds): pooled lift {_iv(d['lift'])} over seeds {d['seeds']}: "
            f"**{verdicts['positive_control'].upper()}**."
        )
    for name, arm in results["arms"].items():
        if name == "D":
            continue
        lifts = arm["lift"]["lower"] > 0
        last = arm["checkpoints"][-1]["exploitability"]
        exploits = last["lower"] > 0 and arm["exploitability_growth"]["lower"] > 0
        verdicts[name] = {"lifts": lifts, "exploits": exploits}
        lines.append(
            f"- Arm {name}: lift {_iv(arm['lift'])} ({'lifts' if lifts else 'no lift shown'}); exploitability "
            f"{_iv(last)}, growth {_iv(arm['exploitability_growth'])} "
            f"({'exploits' if exploits else 'no exploitation shown'}); over-credit split at the last checkpoint: "
            f"judge {_iv(arm['over_credit_split']['judge'])}, world {_iv(arm['over_credit_split']['world'])}."
        )
        if "transfer_ratio" in arm:
            r = arm["transfer_ratio"]
            text = r.get("note") or _iv(r)
            lines.append(f"  Transfer ratio {name}/A: {text}.")
    for pair, effect in results["gate_effect"].items():
        lines.append(f"- Gate effect ({pair}, exploitability): {_iv(effect)}.")
    results["verdicts"] = verdicts
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    plot(out, results)
    return results


def plot(out: Path, results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, arm in results["arms"].items():
        steps = [c["step"] for c in arm["checkpoints"]]
        est = [c["true_success"]["estimate"] for c in arm["checkpoints"]]
        lo = [c["true_success"]["lower"] for c in arm["checkpoints"]]
        hi = [c["true_success"]["upper"] for c in arm["checkpoints"]]
        line = ax.plot(steps, est, "o-", label=f"{name} (seeds {arm['seeds']})")[0]
        ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.15)
    ax.set_xlabel("PPO env steps")
    ax.set_ylabel("true success at step 40 (pooled over seeds)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("Registered train-in-world round: true success, 95 % intervals over units", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "learning_curves.png", dpi=100)
    plt.close(fig)
