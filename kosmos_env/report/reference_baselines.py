"""Agreement with a reference table, with intervals, p-values and the action-only baseline.

The campaign's per-(task, policy) success rates are compared with the reference values (one
vector over every matched cell). The interval resamples the campaign's (task, seed) units; the
reference is a fixed published number per cell. The action-only baseline (the judge that reads
only the commands, :mod:`kosmos_env.judges.action_only`) is judged on the same episodes from their
stored ``actions`` artifacts, so "the world adds information" has the same meaning as in the
study: the interval of the difference to that baseline lies above 0. A null world needs the
policies rerun and is only in ``kosmos-env study``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kosmos_env.stats.uncertainty import agreement_uncertainty

ACTION_ONLY = "baseline/action_only"


def action_only_verdicts(bundle) -> tuple[dict[tuple, bool], str | None]:
    """{(policy, task, seed, repeat): success} from each episode's stored actions, or ({}, why not)."""
    from kosmos_env.judges.action_only import ActionOnlyJudge, action_log
    from kosmos_env.judges.robot_log import analyse_log
    from kosmos_env.spec import load_spec

    env_id = bundle.campaign.get("env_id")
    try:
        world = load_spec(env_id).world
    except Exception as exc:  # an env this install does not know: no baseline, say why
        return {}, f"the campaign's env {env_id!r} is not registered here ({type(exc).__name__})"
    if "home_tcp" not in world or "workspace" not in world:
        return {}, f"{env_id}'s world has no home_tcp/workspace to integrate commands from"
    judge = ActionOnlyJudge.from_world(world)
    out = {}
    missing = 0
    for r in bundle.rows:
        path = bundle.artifact(r, "actions")
        if path is None or not path.is_file():
            missing += 1
            continue
        actions = np.load(path, allow_pickle=False)
        ev = analyse_log(action_log(actions, judge.home, judge.workspace), judge.thresholds)
        out[(r["policy"], r["task"], r["seed"], r["repeat"])] = bool(ev.success)
    if not out:
        return {}, f"no episode has a stored actions artifact ({missing} without)"
    return out, None


def reference_uncertainty(bundle, ref_rows: list[dict], *, alpha: float, n_boot: int, seed: int) -> dict[str, Any]:
    """agreement_uncertainty of the campaign (and its action-only baseline) against the reference."""
    cells = sorted({(r["task"], r["policy"]) for r in ref_rows})
    ref_value = {(r["task"], r["policy"]): r["reference"] for r in ref_rows}
    units = sorted({(r["task"], r["seed"]) for r in bundle.rows})
    ui = {u: j for j, u in enumerate(units)}
    ci = {c: i for i, c in enumerate(cells)}
    verdicts, why = action_only_verdicts(bundle)
    sums = {"campaign": np.zeros((len(cells), len(units))), ACTION_ONLY: np.zeros((len(cells), len(units)))}
    counts = {k: np.zeros((len(cells), len(units))) for k in sums}
    for r in bundle.rows:
        i = ci.get((r["task"], r["policy"]))
        if i is None:
            continue
        j = ui[(r["task"], r["seed"])]
        if r.get("success") is not None:  # repeats of a unit average into it
            sums["campaign"][i, j] += float(bool(r["success"]))
            counts["campaign"][i, j] += 1
        v = verdicts.get((r["policy"], r["task"], r["seed"], r["repeat"]))
        if v is not None:
            sums[ACTION_ONLY][i, j] += float(v)
            counts[ACTION_ONLY][i, j] += 1
    mats = {}
    for k in sums:
        with np.errstate(invalid="ignore", divide="ignore"):
            mats[k] = np.where(counts[k] > 0, sums[k] / np.maximum(counts[k], 1), np.nan)
    if why is not None:
        mats.pop(ACTION_ONLY)
    truth = np.array([[ref_value[c]] * len(units) for c in cells], dtype=float)
    res = agreement_uncertainty(
        mats, truth, baselines=[ACTION_ONLY] if ACTION_ONLY in mats else [], alpha=alpha, n_boot=n_boot, seed=seed
    )
    res["cells"] = [list(c) for c in cells]
    res["action_only"] = "available" if why is None else f"not available: {why}"
    res["null_world"] = "not available from a bundle (the policies must be rerun): see kosmos-env study"
    return res
