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
    signals = over_credit_signals(arms, units)
    if signals:
        results["over_credit_signals"] = signals
        lines += [
            "",
            "## Which truth-free signal flags the over-credited episodes (exploratory: NOT registered)",
            "",
            "At the last checkpoint, pooled over the seeds run: the units the arm's world calls a success "
            "(the frame judge at step 40 in the world), split by the simulator's truth for the same unit and "
            "checkpoint. Signals a user has without the simulator: the frame judge's final P(success) in the "
            "world (AUROC for ranking true successes above over-credited ones; 0.5 = no signal), and the "
            "world's own env judge disagreeing with the frame judge (share of each group it flags). Gate "
            "discards: world episodes the gate ended, per checkpoint.",
            "",
            "| arm | world-judged successes | of them over-credited | AUROC of final P(success) | env judge "
            "disagrees: over-credited / true | gate discards per checkpoint |",
            "|---|---|---|---|---|---|",
        ]
        for name, sig in signals.items():
            auc = sig["auroc_progress"]
            auc_text = "n/a" if auc is None else f"{auc['estimate']:.2f} [{auc['lower']:.2f}, {auc['upper']:.2f}]"
            lines.append(
                f"| {name} | {sig['world_successes']} | {sig['over_credited']} | {auc_text} | "
                f"{sig['judge_disagrees_over']:.2f} / {sig['judge_disagrees_true']:.2f} | "
                f"{', '.join(str(x) for x in sig['gate_discards'])} |"
            )
    results["verdicts"] = verdicts
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    plot(out, results)
    return results


def _auroc(pos: list[float], neg: list[float]) -> float:
    """P(a random ``pos`` score > a random ``neg`` score), ties counting half (Mann-Whitney)."""
    import numpy as np

    pos_a, neg_a = np.asarray(pos, float)[:, None], np.asarray(neg, float)[None, :]
    return float(((pos_a > neg_a).sum() + 0.5 * (pos_a == neg_a).sum()) / (pos_a.size * neg_a.size))


def over_credit_signals(arms: dict, units, n_boot: int = 2000, seed: int = 0) -> dict:
    """For each arm with world rollouts (B, C): at the last checkpoint, over seeds, the world-judged
    successes split by the simulator's truth, and how well truth-free signals separate them."""
    import numpy as np

    key = {(t, int(s)): i for i, (t, s) in enumerate(units)}
    out = {}
    for name, runs in arms.items():
        if not runs or "world" not in next(iter(runs.values()))[0]:
            continue
        rows = []  # (unit index, over-credited?, final P in the world, env judge disagrees?)
        discards = None
        for evals in runs.values():
            last = evals[-1]
            truth = {(r["task"], int(r["seed"])): bool(r["true_success"]) for r in last["simulator"]}
            for r in last["world"]:
                u = (r["task"], int(r["seed"]))
                if r["world_success"]:
                    rows.append((key[u], not truth[u], float(r["progress"] or 0.0), r["judge_success"] is False))
            counts = [sum(r.get("outcome") == "discarded" for r in e["world"]) for e in evals]
            discards = counts if discards is None else [a + b for a, b in zip(discards, counts, strict=True)]
        over = [r for r in rows if r[1]]
        true = [r for r in rows if not r[1]]
        auc = None
        if over and true:
            rng = np.random.default_rng(seed)
            point = _auroc([r[2] for r in true], [r[2] for r in over])
            n_units = len(units)
            boots = []
            for _ in range(n_boot):
                # resample units (every row of a drawn unit comes along): the same unit bootstrap as elsewhere
                draw = np.bincount(rng.integers(0, n_units, n_units), minlength=n_units)
                t = [r[2] for r in true for _ in range(draw[r[0]])]
                o = [r[2] for r in over for _ in range(draw[r[0]])]
                if t and o:
                    boots.append(_auroc(t, o))
            lo, hi = np.quantile(boots, [0.025, 0.975])
            auc = {"estimate": point, "lower": float(lo), "upper": float(hi), "draws": len(boots)}
        out[name] = {
            "world_successes": len(rows),
            "over_credited": len(over),
            "auroc_progress": auc,
            "judge_disagrees_over": (sum(r[3] for r in over) / len(over)) if over else 0.0,
            "judge_disagrees_true": (sum(r[3] for r in true) / len(true)) if true else 0.0,
            "gate_discards": discards,
        }
    return out


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
