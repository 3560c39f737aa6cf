"""The study's bars: registered (inside a registration made by ``kosmos-env register --study``,
:mod:`kosmos_env.study.registration`) before any episode runs, judged PASS or FAIL after, and
shown first in the report. A study run without a registration is exploratory: its bars are not
judged.

Each bar is fixed data (an id, the evaluator it is about, a threshold and the sentence that
says it); :func:`judge_bars` reads the analysis and never changes a bar. One alpha for all:
:data:`kosmos_env.stats.uncertainty.ALPHA` (two-sided 1 - alpha intervals, one-sided
permutation p-values compared with alpha).

Which bars a design registers: :func:`default_bars` with ``closed_loop=False`` gives exactly the
bars every registration made so far holds, so their bodies do not move. The closed-loop bars
(issue 41: the world against the best cheap baseline on the closed-loop subgroup, and the frame
judge's Kendall on the world's frames against the same judge on the simulator's, on closed-loop
policies) are added only when the design asks for them with ``--closed-loop-bars`` (which then
needs at least :data:`CLOSED_LOOP_MIN_POLICIES` ``ckpt:`` policies). Deciding it from the
policies alone (say, "two or more ``ckpt:`` policies") would have changed the bars of the
registration already committed in ``bench/results/validity_study/``, whose default population
has seven checkpoints; and the flag is not a config field, since a new key in
``StudyConfig.to_dict()`` would move every old registration's ``config``. The registration
still binds the choice: its ``bars`` list is part of the body, so a run without the flag on a
registration made with it (or the reverse) is refused. The deceptive subgroup is reported (a
row of the best-baseline table), not registered: with three policies its Kendall takes few
values and its interval can collapse to a point.
"""

from __future__ import annotations

from typing import Any, Mapping

from kosmos_env.stats.uncertainty import ALPHA

WORLD_KENDALL_BAR = 0.8
REPEAT_BAR = 0.8
DRIFT_HORIZON = 20
SWEEP_KENDALL_LOWER_BAR = 0.6
# issue 41, item 1: the frame judge on the world's frames, on closed-loop policies
FRAME_JUDGE_KENDALL_BAR = 0.8
FRAME_JUDGE_SHARE_BAR = 0.85  # of the same judge's Kendall on the simulator's own frames
CLOSED_LOOP_MIN_POLICIES = 2  # a ranking needs two
FRAME_JUDGE = ("learned/vision", "reference/vision")


WORLD_EVALUATORS = ("learned/vision", "learned/robot_log")


def default_bars(world_evaluators=WORLD_EVALUATORS, *, closed_loop: bool = False) -> list[dict[str, Any]]:
    """The bars a study registers: for each world evaluator, that it beats the best cheap baseline
    on all policies and on the honest ones alone (and, with ``closed_loop``, on the closed-loop
    checkpoints alone), agrees with the simulator and repeats; then drift and the cost sweep; with
    ``closed_loop`` last the frame judge's closed-loop bar (:func:`closed_loop_frames_bar`)."""
    if isinstance(world_evaluators, str):
        world_evaluators = (world_evaluators,)
    pct = f"{100 * (1 - ALPHA):g} %"
    groups = [("all", "all policies"), ("honest", "the honest (non-deceptive) policies")]
    if closed_loop:
        groups.append(("closed_loop", "the closed-loop (image-conditioned checkpoint, ckpt:) policies"))
    bars = []
    for ev in world_evaluators:
        for group, who in groups:
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
    if closed_loop:
        bars.append(closed_loop_frames_bar())
    return bars


def closed_loop_frames_bar() -> dict[str, Any]:
    """Issue 41's target for the frame judge on closed-loop policies: the world's frames must keep
    the ranking the simulator's frames carry. Judged on point estimates, as ``world_agreement`` is
    (a lower interval end of the ratio at 0.85 would fail a world that meets the target whenever
    a dozen policies leave the ratio's interval wide); the intervals are reported beside them."""
    ev, ref = FRAME_JUDGE
    pct = f"{100 * (1 - ALPHA):g} %"
    return {
        "id": f"closed_loop_frames:{ev}",
        "kind": "closed_loop_frames",
        "evaluator": ev,
        "reference_evaluator": ref,
        "subgroup": "closed_loop",
        "metric": "kendall",
        "threshold": FRAME_JUDGE_KENDALL_BAR,
        "share": FRAME_JUDGE_SHARE_BAR,
        "text": f"on the closed-loop policies, the frame judge on the world's frames ({ev}) ranks them against "
        f"the simulator's truth at Kendall >= {FRAME_JUDGE_KENDALL_BAR} with permutation p <= {ALPHA}, and at >= "
        f"{FRAME_JUDGE_SHARE_BAR} x the same judge's Kendall on the simulator's own frames ({ref}) (point "
        f"estimates; both Kendalls and their ratio are reported with {pct} paired bootstrap intervals)",
    }


def judge_closed_loop_frames(bar: Mapping[str, Any], results: Mapping[str, Any]) -> tuple[str, dict | None]:
    """(verdict, value) of a ``closed_loop_frames`` bar. NOT RUN where the analysis has no such
    comparison (no closed-loop policies, or the vision judge did not run in both worlds); FAIL
    where a Kendall is undefined, since the target cannot then be shown to hold."""
    entry = (results.get("world_vs_simulator") or {}).get(bar["evaluator"], {}).get(bar["subgroup"])
    if not entry:
        return "NOT RUN", None
    w, s, r = entry["world"], entry["simulator"], entry["ratio"]
    value = {
        "world_kendall": w.get("value"),
        "world_interval": w.get("interval"),
        "world_p_value": w.get("p_value"),
        "simulator_kendall": s.get("value"),
        "simulator_interval": s.get("interval"),
        "ratio": r.get("estimate"),
        "ratio_interval": r.get("interval"),
    }
    kw, ks, p = w.get("value"), s.get("value"), w.get("p_value")
    ok = (
        kw is not None
        and ks is not None
        and p is not None
        and kw >= bar["threshold"]
        and p <= ALPHA
        and kw >= bar["share"] * ks
    )
    return ("PASS" if ok else "FAIL"), value


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
        elif bid == "closed_loop_frames":
            verdict, value = judge_closed_loop_frames(bar, results)
        elif bid == "cheapest_setting":
            sw = results.get("sweep")
            if sw and sw.get("settings"):
                verdict = "PASS" if sw.get("answer") else "FAIL"
                value = {"answer": sw.get("answer")}
        out.append({"id": bar["id"], "text": bar["text"], "verdict": verdict, "value": value})
    return out
