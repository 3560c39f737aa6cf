"""The study's bars: registered (inside a registration made by ``kosmos-env register --study``,
:mod:`kosmos_env.study.registration`) before any episode runs, judged PASS or FAIL after, and
shown first in the report. A study run without a registration is exploratory: its bars are not
judged.

Each bar is fixed data (an id, the evaluator it is about, a threshold and the sentence that
says it); :func:`judge_bars` reads the analysis and never changes a bar. One alpha for all:
:data:`kosmos_env.stats.uncertainty.ALPHA` (two-sided 1 - alpha intervals, one-sided
permutation p-values compared with alpha).
"""

from __future__ import annotations

from typing import Any, Mapping

from kosmos_env.stats.uncertainty import ALPHA

WORLD_KENDALL_BAR = 0.8
REPEAT_BAR = 0.8
DRIFT_HORIZON = 20
SWEEP_KENDALL_LOWER_BAR = 0.6


WORLD_EVALUATORS = ("learned/vision", "learned/robot_log")


def default_bars(world_evaluators=WORLD_EVALUATORS) -> list[dict[str, Any]]:
    """The bars a study registers: for each world evaluator, that it beats the best cheap baseline
    on all policies and on the honest ones alone, agrees with the simulator and repeats; then drift
    and the cost sweep."""
    if isinstance(world_evaluators, str):
        world_evaluators = (world_evaluators,)
    pct = f"{100 * (1 - ALPHA):g} %"
    bars = []
    for ev in world_evaluators:
        for group, who in (("all", "all policies"), ("honest", "the honest (non-deceptive) policies")):
            bars.append(
                {
                    "id": f"world_adds_information:{ev}:{group}",
                    "kind": "world_adds_information",
                    "evaluator": ev,
                    "subgroup": group,
                    "baseline": "best",
                    "metric": "kendall",
                    "text": f"{ev} ranks {who} better than the best cheap baseline (action-only rule, learned "
                    f"action-only judge, copy-first-frame and null worlds, action judges on its own "
                    f"rollouts; best chosen inside each resample): the {pct} interval of the Kendall "
                    f"difference lies above 0",
                }
            )
        bars.append(
            {
                "id": f"world_agreement:{ev}",
                "kind": "world_agreement",
                "evaluator": ev,
                "metric": "kendall",
                "threshold": WORLD_KENDALL_BAR,
                "text": f"{ev} Kendall vs the simulator >= {WORLD_KENDALL_BAR} with permutation p <= {ALPHA}",
            }
        )
        bars.append(
            {
                "id": f"repeatable:{ev}",
                "kind": "repeatable",
                "evaluator": ev,
                "threshold": REPEAT_BAR,
                "text": f"{ev} split-half Spearman (Spearman-Brown corrected) 5 % quantile >= {REPEAT_BAR}",
            }
        )
    bars.append(
        {
            "id": "drift",
            "kind": "drift",
            "horizon": DRIFT_HORIZON,
            "text": f"open-loop frame error of the world at H = {DRIFT_HORIZON} below copy-last-frame's "
            f"(upper end of the {pct} interval of the ratio < 1)",
        }
    )
    bars.append(
        {
            "id": "cheapest_setting",
            "kind": "cheapest_setting",
            "metric": "kendall",
            "threshold": SWEEP_KENDALL_LOWER_BAR,
            "text": f"a swept setting keeps the lower end of its Kendall interval >= {SWEEP_KENDALL_LOWER_BAR}; "
            f"the answer is the cheapest such setting",
        }
    )
    return bars


def judge_bars(registration: Mapping[str, Any], results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """PASS / FAIL (or NOT RUN) for every registered bar, with the number and interval it rests on."""
    out = []
    agr = results["agreement"]
    for bar in registration["bars"]:
        verdict, value = "NOT RUN", None
        bid = bar.get("kind", bar["id"])
        if bid == "world_adds_information":
            best = agr.get("vs_best_baseline", {}).get(bar["evaluator"], {}).get(bar.get("subgroup", "all"), {})
            d = best.get(bar["metric"])
            if d is not None:
                verdict = "PASS" if d.get("excludes_zero") else "FAIL"
                value = {
                    "difference": d.get("estimate"),
                    "interval": d.get("interval"),
                    "best_baseline": d.get("best_baseline"),
                }
        elif bid == "world_agreement":
            e = agr["evaluators"].get(bar["evaluator"], {}).get(bar["metric"])
            if e is not None:
                ok = e["value"] is not None and e["value"] >= bar["threshold"] and (e["p_value"] or 1.0) <= ALPHA
                verdict = "PASS" if ok else "FAIL"
                value = {"value": e["value"], "interval": e["interval"], "p_value": e["p_value"]}
        elif bid == "repeatable":
            s = results["evaluators"].get(bar["evaluator"], {}).get("split_half", {})
            q = s.get("corrected_q05")
            verdict = "FAIL" if q is None else ("PASS" if q >= bar["threshold"] else "FAIL")
            value = {
                "corrected_median": s.get("corrected_median"),
                "corrected_q05": q,
                "corrected_q95": s.get("corrected_q95"),
            }
        elif bid == "drift":
            fe = results.get("frame_error") or {}
            iv = (fe.get("ratio_interval") or {}).get(bar["horizon"]) or (fe.get("ratio_interval") or {}).get(
                str(bar["horizon"])
            )
            if iv is not None:
                verdict = "PASS" if iv[1] < 1 else "FAIL"
                r = fe.get("ratio") or {}
                value = {"ratio": r.get(bar["horizon"], r.get(str(bar["horizon"]))), "interval": iv}
        elif bid == "cheapest_setting":
            sw = results.get("sweep")
            if sw and sw.get("settings"):
                verdict = "PASS" if sw.get("answer") else "FAIL"
                value = {"answer": sw.get("answer")}
        out.append({"id": bar["id"], "text": bar["text"], "verdict": verdict, "value": value})
    return out
