"""Turn the study's episode rows into every number of the report (plain dicts, JSON-ready).

Evaluators are (world, gate, judge) combinations; the reference is the simulator's state judge
(ground truth) on the same (policy, task, seed). All statistics come from :mod:`kosmos_env.stats`.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kosmos_env.stats import all_agreements, detectable_summary, horizon_agreement, measure_agreement, split_half
from kosmos_env.stats.matrix import success_matrix

REFERENCE_KEY = "reference/state"


def _rows_for(rows, world: str, gate: bool, judge: str, horizon: int | None = None) -> list[dict]:
    out = []
    for r in rows:
        if r["world"] != world or bool(r["gate"]) != gate:
            continue
        if horizon is None:
            verdict = r["judges"].get(judge, "missing")
        else:
            verdict = r["horizon_judges"].get(judge, {}).get(horizon, r["horizon_judges"].get(judge, {}).get(str(horizon), "missing"))
        if verdict == "missing":
            continue
        success = None if r["discarded"] else verdict
        out.append({"policy": r["policy"], "task": r["task"], "seed": r["seed"], "repeat": 0, "success": success})
    return out


def _rates(rows, policies: Sequence[str], task: str | None = None) -> np.ndarray:
    m = success_matrix(rows, "success", task=task)
    out = np.full(len(policies), np.nan)
    for i, p in enumerate(policies):
        if p in m.policies:
            v = m.row(p)
            if np.isfinite(v).any():
                out[i] = float(np.nanmean(v))
    return out


def _agree(e: np.ndarray, r: np.ndarray) -> dict[str, Any]:
    ok = np.isfinite(e) & np.isfinite(r)
    if ok.sum() < 2:
        return {m: {"metric": m, "value": None, "random_floor": None, "reason": "fewer than 2 policies with values"}
                for m in ("pearson", "spearman", "kendall", "mmrv")}
    return {k: a.to_dict() for k, a in all_agreements(e[ok], r[ok]).items()}


def _matrix(rows, policies):
    m = success_matrix(rows, "success")
    order = [m.policies.index(p) for p in policies if p in m.policies]
    return m.values[order], [m.policies[i] for i in order]


def _episode_accuracy(rows_eval, rows_ref) -> float | None:
    ref = {(r["policy"], r["task"], r["seed"]): r["success"] for r in rows_ref}
    pairs = [(r["success"], ref.get((r["policy"], r["task"], r["seed"]))) for r in rows_eval]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    return float(np.mean([a == b for a, b in pairs])) if pairs else None


def analyze(study: dict[str, Any], kendall_threshold: float = 0.6) -> dict[str, Any]:
    cfg = study["config"]
    rows = study["rows"]
    policies = list(cfg["policies"])
    tasks = list(cfg["tasks"] or sorted({r["task"] for r in rows}, key=[r["task"] for r in rows].index))
    world, ref = cfg["world"], cfg["reference"]
    horizons = list(cfg["horizons"])
    has_gate = any(r["gate"] for r in rows)

    evaluators = {REFERENCE_KEY: (ref, False, "state")}
    evaluators["learned/vision"] = (world, False, "vision")
    evaluators["learned/robot_log"] = (world, False, "robot_log")
    if has_gate:
        evaluators["learned+gate/vision"] = (world, True, "vision")
        evaluators["learned+gate/robot_log"] = (world, True, "robot_log")
    evaluators["reference/vision"] = (ref, False, "vision")
    evaluators["reference/robot_log"] = (ref, False, "robot_log")

    ref_rows = _rows_for(rows, *evaluators[REFERENCE_KEY])
    truth = _rates(ref_rows, policies)
    out: dict[str, Any] = {"policies": policies, "tasks": tasks, "reference_rates": truth.tolist(), "evaluators": {}}
    for name, (w, g, j) in evaluators.items():
        ev_rows = _rows_for(rows, w, g, j)
        rates = _rates(ev_rows, policies)
        values, names = _matrix(ev_rows, policies)
        entry: dict[str, Any] = {
            "world": w, "gate": g, "judge": j, "rates": rates.tolist(),
            "agreement": _agree(rates, truth),
            "per_task": {t: {"rates": _rates(ev_rows, policies, t).tolist(),
                             "reference_rates": _rates(ref_rows, policies, t).tolist(),
                             "agreement": _agree(_rates(ev_rows, policies, t), _rates(ref_rows, policies, t))}
                         for t in tasks},
            "episode_accuracy": _episode_accuracy(ev_rows, ref_rows),
            "n_episodes": len(ev_rows),
            "n_undecided": int(sum(r["success"] is None for r in ev_rows)),
        }
        try:
            entry["split_half"] = split_half(values, metric="spearman", n_splits=500).to_dict()
        except ValueError as exc:
            entry["split_half"] = {"error": str(exc)}
        try:
            entry["detectable"] = {k: v for k, v in detectable_summary(values, names).to_dict().items() if k != "pairs"}
        except ValueError as exc:
            entry["detectable"] = {"error": str(exc)}
        out["evaluators"][name] = entry

    # horizon: learned-world verdicts after h steps vs the simulator's truth after h steps (drift),
    # and vs the simulator's final truth (how early the final ranking can be read off)
    out["horizon"] = {}
    ref_h = {h: _rates(_rows_for(rows, ref, False, "state", h), policies) for h in horizons}
    for name in ("learned/vision", "learned/robot_log"):
        w, g, j = evaluators[name]
        scores = np.stack([_rates(_rows_for(rows, w, g, j, h), policies) for h in horizons])
        same_h = []
        for h, row in zip(horizons, scores):
            ok = np.isfinite(row) & np.isfinite(ref_h[h])
            a = measure_agreement(row[ok], ref_h[h][ok], "kendall") if ok.sum() >= 2 else None
            same_h.append(None if a is None else a.to_dict())
        passing = [a is not None and a["value"] is not None and a["value"] >= kendall_threshold for a in same_h]
        brk = next((horizons[i] for i in range(len(horizons)) if not passing[i] and any(passing[:i])), None)
        first_fail_from_end = next((horizons[i] for i in reversed(range(len(horizons))) if not passing[i]), None)
        finite = np.isfinite(scores).all(axis=0) & np.isfinite(truth)
        vs_final = (horizon_agreement(np.nan_to_num(scores[:, finite]), horizons, truth[finite], metric="kendall",
                                      threshold=kendall_threshold).to_dict() if finite.sum() >= 2 else None)
        out["horizon"][name] = {
            "horizons": horizons, "scores": scores.tolist(), "reference_scores": [ref_h[h].tolist() for h in horizons],
            "kendall_vs_reference_same_horizon": same_h, "threshold": kendall_threshold,
            "first_break_after_passing": brk, "longest_failing_horizon": first_fail_from_end,
            "vs_reference_final": vs_final,
        }

    # gate
    if has_gate:
        gated = [r for r in rows if r["world"] == world and r["gate"]]
        out["gate"] = {"available": True, "detail": study["gate_status"]["detail"],
                       "discard_rate": float(np.mean([r["discarded"] for r in gated])) if gated else None,
                       "discard_rate_per_policy": {p: float(np.mean([r["discarded"] for r in gated if r["policy"] == p]))
                                                   for p in policies}}
    else:
        out["gate"] = dict(study["gate_status"], available=False)

    # cost per rollout
    cost = {}
    for label, (w, g) in {"reference": (ref, False), "learned": (world, False), "learned+gate": (world, True)}.items():
        rs = [r for r in rows if r["world"] == w and bool(r["gate"]) == g]
        if not rs:
            continue
        keys = sorted({k for r in rs for k in r["seconds"]})
        cost[label] = {k: float(np.mean([r["seconds"].get(k, 0.0) for r in rs])) for k in keys}
        cost[label]["steps"] = float(np.mean([r["steps"] for r in rs]))
    out["cost_seconds_per_rollout"] = cost
    out["wall_seconds"] = study.get("wall_seconds")
    return out
