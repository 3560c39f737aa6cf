"""Turn the study's episode rows into every number of the report (plain dicts, JSON-ready).

Evaluators are (world, judge) combinations; the reference is the simulator's state judge (ground
truth) on the same (policy, task, seed). Every agreement number comes with a bootstrap interval
over (task, seed) units, a permutation p-value against a random ranking, and its difference to
the action-only and null-world baselines (:mod:`kosmos_env.stats.uncertainty`). Undefined
stays undefined: a metric that cannot be computed (e.g. nobody has succeeded yet at a short
horizon) is reported as undefined with its reason, never as broken or as 0.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kosmos_env.stats import detectable_summary, split_half, wilson
from kosmos_env.stats.uncertainty import (
    ALPHA,
    agreement_ratio,
    agreement_uncertainty,
    aligned_matrix,
    difference_to_best,
)

REFERENCE_KEY = "reference/state"
ACTION_ONLY = "baseline/action_only"
ACTION_LEARNED = "baseline/action_learned"
COPY_FRAME = "baseline/copy_first_frame"
NULL_WORLD = "baseline/null_world"
SAME_ROLLOUT = "baseline/same_rollout"
# every cheap baseline a world must beat: the two action-only judges with no world at all, the
# copy-first-frame and blank (null) worlds under the world's own judges, and the action-only
# judges reading the commands of the world's own rollouts (what the frames add beyond them)
BASELINES = (
    ACTION_ONLY,
    ACTION_LEARNED,
    f"{COPY_FRAME}/robot_log",
    f"{COPY_FRAME}/vision",
    f"{NULL_WORLD}/robot_log",
    f"{NULL_WORLD}/vision",
    f"{SAME_ROLLOUT}/action_only",
    f"{SAME_ROLLOUT}/action_learned",
)
# the evaluators whose "adds information" is tested against the best baseline, by subgroup
WORLD_EVALUATORS = ("learned/vision", "learned/robot_log", "learned+gate/vision", "learned+gate/robot_log")
SUBGROUPS = ("all", "honest", "deceptive", "closed_loop", "scripted")


def policy_kind(policy: str) -> str:
    """deceptive (``deceptive:*``), closed_loop (image-conditioned checkpoints, ``ckpt:*``) or
    scripted (the open-loop scripted family and random)."""
    return "deceptive" if policy.startswith("deceptive") else "closed_loop" if policy.startswith("ckpt") else "scripted"


def subgroup_rows(policies: Sequence[str], group: str) -> list[int]:
    """Row indices of a policy subgroup: deceptive, closed_loop, scripted (:func:`policy_kind`),
    honest (every policy but the deceptive ones), all."""
    kind = [policy_kind(p) for p in policies]
    if group == "all":
        return list(range(len(policies)))
    if group == "honest":
        return [i for i, k in enumerate(kind) if k != "deceptive"]
    if group in ("deceptive", "closed_loop", "scripted"):
        return [i for i, k in enumerate(kind) if k == group]
    raise ValueError(f"unknown subgroup {group!r}; choose from {SUBGROUPS}")


def _rows_for(rows, world: str, judge: str, horizon: int | None = None) -> list[dict]:
    out = []
    for r in rows:
        if r["world"] != world:
            continue
        if horizon is None:
            verdict = r["judges"].get(judge, "missing")
        else:
            hj = r["horizon_judges"].get(judge, {})
            verdict = hj.get(horizon, hj.get(str(horizon), "missing"))
        if verdict == "missing":
            continue
        out.append(
            {
                "policy": r["policy"],
                "task": r["task"],
                "seed": r["seed"],
                "success": None if r["discarded"] else verdict,
            }
        )
    return out


def evaluator_table(rows, has: set) -> dict[str, tuple[str, str]]:
    """Evaluator name -> (world label, judge) for the worlds and judges present in ``rows``."""
    judged = {(r["world"], j) for r in rows for j in r["judges"]}
    ev = {REFERENCE_KEY: ("reference", "state")}
    for judge in ("robot_log", "vision"):
        ev[f"learned/{judge}"] = ("learned", judge)
    if "learned+gate" in has:
        for judge in ("robot_log", "vision"):
            ev[f"learned+gate/{judge}"] = ("learned+gate", judge)
    for judge in ("robot_log", "vision"):
        ev[f"reference/{judge}"] = ("reference", judge)
    if "null" in has:
        ev[ACTION_ONLY] = ("null", "action_only")
        ev[ACTION_LEARNED] = ("null", "action_learned")
        ev[f"{COPY_FRAME}/robot_log"] = ("null", "robot_log")
        ev[f"{COPY_FRAME}/vision"] = ("null", "vision")
    if "blank" in has:
        ev[f"{NULL_WORLD}/robot_log"] = ("blank", "robot_log")
        ev[f"{NULL_WORLD}/vision"] = ("blank", "vision")
    ev[f"{SAME_ROLLOUT}/action_only"] = ("learned", "action_only")
    ev[f"{SAME_ROLLOUT}/action_learned"] = ("learned", "action_learned")
    if "control:shuffled" in has:
        for judge in ("robot_log", "vision"):
            ev[f"control:shuffled/{judge}"] = ("control:shuffled", judge)
    # an evaluator exists only where its world ran and its judge was recorded (older studies lack some)
    return {k: v for k, v in ev.items() if v in judged}


def _rates(m: np.ndarray) -> list:
    with np.errstate(invalid="ignore"):
        v = [float(np.nanmean(r)) if np.isfinite(r).any() else None for r in m]
    return v


def _split_half(m: np.ndarray) -> dict:
    try:
        s = split_half(m, metric="spearman", n_splits=500)
    except ValueError as exc:
        return {"error": str(exc)}
    d = s.to_dict()
    c = s.corrected[np.isfinite(s.corrected)]
    d["corrected_q05"] = float(np.quantile(c, 0.05)) if c.size else None
    d["corrected_q95"] = float(np.quantile(c, 0.95)) if c.size else None
    return d


def analyze(study: dict[str, Any], *, alpha: float = ALPHA, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    cfg = study["config"]
    rows = study["rows"]
    policies = list(cfg["policies"])
    tasks = list(study.get("tasks") or cfg["tasks"] or sorted({r["task"] for r in rows}))
    units = sorted({(r["task"], r["seed"]) for r in rows if r["world"] == "reference"})
    horizons = [int(h) for h in cfg["horizons"]]
    has = {r["world"] for r in rows}
    evaluators = evaluator_table(rows, has)
    mats = {name: aligned_matrix(_rows_for(rows, w, j), policies, units) for name, (w, j) in evaluators.items()}
    truth = mats.pop(REFERENCE_KEY)
    baselines = [b for b in BASELINES if b in mats]
    out: dict[str, Any] = {
        "policies": policies,
        "tasks": tasks,
        "alpha": alpha,
        "n_units": len(units),
        "evaluators": {},
    }
    out["agreement"] = agreement_uncertainty(mats, truth, baselines=baselines, alpha=alpha, n_boot=n_boot, seed=seed)
    out["agreement"]["vs_best_baseline"] = _vs_best(mats, truth, policies, baselines, alpha, n_boot, seed)
    out["world_vs_simulator"] = _world_vs_simulator(mats, truth, policies, alpha, n_boot, seed)
    out["subgroups"] = {g: [policies[i] for i in subgroup_rows(policies, g)] for g in SUBGROUPS}
    n_truth = (~np.isnan(truth)).sum(axis=1)
    k_truth = np.nansum(truth, axis=1)
    out["truth"] = {
        "rates": _rates(truth),
        "intervals": [
            [iv.lower, iv.upper]
            for iv in (wilson(int(k), int(n), alpha) for k, n in zip(k_truth, n_truth, strict=True))
        ],
        "episodes": n_truth.tolist(),
    }
    for name, m in {REFERENCE_KEY: truth, **mats}.items():
        w, j = evaluators[name]
        entry: dict[str, Any] = {"world": w, "judge": j, "rates": _rates(m), "n_episodes": int((~np.isnan(m)).sum())}
        agree = np.isfinite(m) & np.isfinite(truth)
        entry["episode_accuracy"] = float((m[agree] == truth[agree]).mean()) if agree.any() else None
        entry["per_task"] = {}
        for t in tasks:
            cols = [k for k, u in enumerate(units) if u[0] == t]
            sub = agreement_uncertainty(
                {"e": m[:, cols]}, truth[:, cols], metrics=("kendall",), alpha=alpha, n_boot=200, seed=seed
            )["evaluators"]["e"]["kendall"]
            entry["per_task"][t] = sub
        entry["split_half"] = _split_half(m)
        try:
            entry["detectable"] = {
                k: v for k, v in detectable_summary(m, policies, alpha=alpha).to_dict().items() if k != "pairs"
            }
        except ValueError as exc:
            entry["detectable"] = {"error": str(exc)}
        out["evaluators"][name] = entry

    # horizon as drift: the world's verdict on the episode cut at H vs the simulator's state at H
    out["horizon"] = {"horizons": horizons, "truth_rates": {}, "agreement": {}}
    drift_evs = [
        n
        for n in (
            "learned/robot_log",
            "learned/vision",
            ACTION_ONLY,
            ACTION_LEARNED,
            f"{COPY_FRAME}/robot_log",
            "reference/robot_log",
            "reference/vision",
        )
        if n in evaluators
    ]
    for h in horizons:
        t_h = aligned_matrix(_rows_for(rows, "reference", "state", h), policies, units)
        out["horizon"]["truth_rates"][h] = _rates(t_h)
        ev_h = {n: aligned_matrix(_rows_for(rows, *evaluators[n], h), policies, units) for n in drift_evs}
        res = agreement_uncertainty(
            ev_h,
            t_h,
            baselines=[ACTION_ONLY] if ACTION_ONLY in ev_h else [],
            metrics=("kendall",),
            alpha=alpha,
            n_boot=n_boot,
            seed=seed,
        )
        out["horizon"]["agreement"][h] = {
            "evaluators": {n: res["evaluators"][n]["kendall"] for n in drift_evs},
            "differences": {n: d[ACTION_ONLY]["kendall"] for n, d in res["differences"].items() if ACTION_ONLY in d},
        }
    out["frame_error"] = study.get("frame_error") or {}
    out["sweep"] = _sweep(study, policies, truth, units, alpha, n_boot, seed)

    gated = [r for r in rows if r["world"] == "learned+gate"]
    if gated:
        out["gate"] = {
            "available": True,
            "detail": study["gate_status"]["detail"],
            "discard_rate": float(np.mean([r["discarded"] for r in gated])),
            "discard_rate_per_policy": {
                p: float(np.mean([r["discarded"] for r in gated if r["policy"] == p])) for p in policies
            },
        }
    else:
        out["gate"] = dict(study["gate_status"], available=False)
    out["cost_seconds_per_rollout"] = _cost(rows, sorted(has))
    out["wall_seconds"] = study.get("wall_seconds")
    return out


def _vs_best(mats, truth, policies, baselines, alpha, n_boot, seed) -> dict[str, Any]:
    """World evaluator minus the best baseline (chosen inside each resample), Kendall and episode
    accuracy, on every policy subgroup that has policies (Kendall needs two)."""
    base = {b: mats[b] for b in baselines}
    out: dict[str, Any] = {}
    if not base:
        return out
    for name in WORLD_EVALUATORS:
        if name not in mats:
            continue
        out[name] = {}
        for group in SUBGROUPS:
            rows = subgroup_rows(policies, group)
            if not rows:
                continue
            out[name][group] = {
                m: difference_to_best(
                    mats[name], base, truth, metric=m, rows=rows, alpha=alpha, n_boot=n_boot, seed=seed
                )
                for m in ("kendall", "accuracy")
            }
    return out


# (evaluator on the world's rollouts, the same judge on the simulator's rollouts of the same units)
SAME_JUDGE_PAIRS = (("learned/vision", "reference/vision"), ("learned/robot_log", "reference/robot_log"))


def _world_vs_simulator(mats, truth, policies, alpha, n_boot, seed) -> dict[str, Any]:
    """The same judge on the world's rollouts and on the simulator's, both against the simulator's
    truth, by policy subgroup: Kendall of each (interval, permutation p-value) and their ratio with
    a paired interval (:func:`~kosmos_env.stats.uncertainty.agreement_ratio`, the same unit
    resamples as the two Kendalls). The judge's own error is in both; what the ratio loses is what
    the world's rollouts lose (issue 41's closed-loop frame-judge target reads it on closed_loop)."""
    out: dict[str, Any] = {}
    for world_ev, sim_ev in SAME_JUDGE_PAIRS:
        if world_ev not in mats or sim_ev not in mats:
            continue
        out[world_ev] = {}
        for group in SUBGROUPS:
            rows = subgroup_rows(policies, group)
            if len(rows) < 2:  # a ranking needs two policies
                continue
            both = agreement_uncertainty(
                {world_ev: mats[world_ev][rows], sim_ev: mats[sim_ev][rows]},
                truth[rows],
                metrics=("kendall",),
                alpha=alpha,
                n_boot=n_boot,
                seed=seed,
            )["evaluators"]
            out[world_ev][group] = {
                "reference_evaluator": sim_ev,
                "policies": [policies[i] for i in rows],
                "world": both[world_ev]["kendall"],
                "simulator": both[sim_ev]["kendall"],
                "ratio": agreement_ratio(
                    mats[world_ev], mats[sim_ev], truth, rows=rows, alpha=alpha, n_boot=n_boot, seed=seed
                ),
            }
    return out


def _cost(rows: Sequence[dict], labels: Sequence[str]) -> dict[str, dict]:
    cost = {}
    for label in labels:
        rs = [r for r in rows if r["world"] == label]
        if not rs:
            continue
        keys = sorted({k for r in rs for k in r["seconds"]})
        cost[label] = {k: float(np.mean([r["seconds"].get(k, 0.0) for r in rs])) for k in keys}
        cost[label]["steps"] = float(np.mean([r["steps"] for r in rs]))
    return cost


def _sweep(study, policies, truth, units, alpha, n_boot, seed) -> dict[str, Any] | None:
    """Per setting: the world's own judge vs the truth on the same episodes, with interval, cost per
    rollout (episode + judge) and the judge's share; the answer is the cheapest setting whose
    Kendall interval's lower end holds the registered bar."""
    from kosmos_env.study.bars import SWEEP_KENDALL_LOWER_BAR

    rows = study.get("sweep_rows") or []
    if not rows:
        return None
    cfg = study["config"]
    sweep_world = rows[0]["sweep"]["world"]
    sweep_units = sorted({(r["task"], r["seed"]) for r in rows})
    # the default setting comes from the main run when the sweep world is one of its worlds
    default = {cfg["reference"]: ("reference", "state"), cfg["world"]: ("learned", None)}.get(sweep_world)
    if default is not None:
        label, judge_name = default
        if judge_name is None:
            from kosmos_env.spec import load_spec

            judge_name = load_spec(sweep_world).judge.get("type", "robot_log")
        extra = []
        for r in study["rows"]:
            if r["world"] == label and (r["task"], r["seed"]) in set(sweep_units) and judge_name in r["judges"]:
                extra.append(
                    dict(
                        r,
                        world="sweep:default",
                        sweep={"name": "default", "value": None, "world": sweep_world},
                        judges={"spec": r["judges"][judge_name]},
                        seconds={**r["seconds"], "judge_spec": r["seconds"].get(f"judge_{judge_name}", 0.0)},
                    )
                )
        rows = extra + list(rows)
    labels = list(dict.fromkeys(r["world"] for r in rows))
    cols = [units.index(u) for u in sweep_units]
    judge = "spec"
    mats = {lab: aligned_matrix(_rows_for(rows, lab, judge), policies, sweep_units) for lab in labels}
    res = agreement_uncertainty(
        mats, truth[:, cols], metrics=("kendall", "spearman", "mmrv"), alpha=alpha, n_boot=n_boot, seed=seed
    )
    settings = []
    for lab in labels:
        rs = [r for r in rows if r["world"] == lab]
        episode = float(np.mean([r["seconds"]["episode"] for r in rs]))
        judge_s = float(np.mean([r["seconds"].get(f"judge_{judge}", 0.0) for r in rs]))
        k = res["evaluators"][lab]["kendall"]
        holds = bool(k["interval"] is not None and k["interval"][0] >= SWEEP_KENDALL_LOWER_BAR)
        settings.append(
            {
                "setting": lab,
                "name": rs[0]["sweep"]["name"],
                "value": rs[0]["sweep"]["value"],
                "world": rs[0]["sweep"]["world"],
                "cost_seconds": episode + judge_s,
                "judge_share": judge_s / (episode + judge_s) if episode + judge_s > 0 else None,
                "world_seconds": float(np.mean([r["seconds"]["world"] for r in rs])),
                "kendall": k,
                "spearman": res["evaluators"][lab]["spearman"],
                "mmrv": res["evaluators"][lab]["mmrv"],
                "bar_holds": holds,
            }
        )
    settings.sort(key=lambda s: s["cost_seconds"])
    answer = next((s["setting"] for s in settings if s["bar_holds"]), None)
    return {
        "judge": judge,
        "bar": f"lower end of the Kendall {100 * (1 - alpha):g} % interval >= {SWEEP_KENDALL_LOWER_BAR}",
        "units": len(sweep_units),
        "settings": settings,
        "answer": answer,
    }
