"""The study's pre-registered bars: written (with their SHA-256 and a UTC time) before any episode
runs, judged PASS or FAIL after, and shown first in the report.

Each bar is fixed data (an id, the evaluator it is about, a threshold and the sentence that
says it); :func:`judge_bars` reads the analysis and never changes a bar. One alpha for all:
:data:`kosmos_env.stats.uncertainty.ALPHA` (two-sided 1 - alpha intervals, one-sided
permutation p-values compared with alpha).
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Mapping

from kosmos_env.hashing import canonical_json, sha256_hex
from kosmos_env.stats.uncertainty import ALPHA

WORLD_KENDALL_BAR = 0.8
REPEAT_BAR = 0.8
DRIFT_HORIZON = 20
SWEEP_KENDALL_LOWER_BAR = 0.6


def default_bars(world_evaluator: str) -> list[dict[str, Any]]:
    return [
        {"id": "world_adds_information", "evaluator": world_evaluator, "baseline": "baseline/action_only",
         "metric": "kendall",
         "text": f"{world_evaluator} ranks better than the action-only baseline: the {100 * (1 - ALPHA):g} % "
                 f"interval of the Kendall difference lies above 0"},
        {"id": "world_agreement", "evaluator": world_evaluator, "metric": "kendall", "threshold": WORLD_KENDALL_BAR,
         "text": f"{world_evaluator} Kendall vs the simulator >= {WORLD_KENDALL_BAR} with permutation p <= {ALPHA}"},
        {"id": "repeatable", "evaluator": world_evaluator, "threshold": REPEAT_BAR,
         "text": f"{world_evaluator} split-half Spearman (Spearman-Brown corrected) 5 % quantile >= {REPEAT_BAR}"},
        {"id": "drift", "horizon": DRIFT_HORIZON,
         "text": f"open-loop frame error of the world at H = {DRIFT_HORIZON} below copy-last-frame's "
                 f"(upper end of the {100 * (1 - ALPHA):g} % interval of the ratio < 1)"},
        {"id": "cheapest_setting", "metric": "kendall", "threshold": SWEEP_KENDALL_LOWER_BAR,
         "text": f"a swept setting keeps the lower end of its Kendall interval >= {SWEEP_KENDALL_LOWER_BAR}; the "
                 f"answer is the cheapest such setting"},
    ]


def register(out_dir, config: Mapping[str, Any], bars: list[dict]) -> dict[str, Any]:
    """Write ``registration.json`` (config, bars, alpha, sha256, UTC time) before the study runs."""
    body = {"kind": "kosmos-env validity study", "alpha": ALPHA, "config": dict(config), "bars": bars}
    canonical = json.loads(canonical_json(body))
    record = {**canonical, "sha256": _hash(canonical),
              "registered_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "registration.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def judge_bars(registration: Mapping[str, Any], results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """PASS / FAIL (or NOT RUN) for every registered bar, with the number and interval it rests on."""
    out = []
    agr = results["agreement"]
    for bar in registration["bars"]:
        verdict, value = "NOT RUN", None
        bid = bar["id"]
        if bid == "world_adds_information":
            d = agr["differences"].get(bar["evaluator"], {}).get(bar["baseline"], {}).get(bar["metric"])
            if d is not None:
                verdict = "PASS" if d.get("excludes_zero") else "FAIL"
                value = {"difference": d.get("estimate"), "interval": d.get("interval")}
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
            value = {"corrected_median": s.get("corrected_median"), "corrected_q05": q, "corrected_q95": s.get("corrected_q95")}
        elif bid == "drift":
            fe = results.get("frame_error") or {}
            iv = (fe.get("ratio_interval") or {}).get(bar["horizon"]) or (fe.get("ratio_interval") or {}).get(str(bar["horizon"]))
            if iv is not None:
                verdict = "PASS" if iv[1] < 1 else "FAIL"
                r = (fe.get("ratio") or {})
                value = {"ratio": r.get(bar["horizon"], r.get(str(bar["horizon"]))), "interval": iv}
        elif bid == "cheapest_setting":
            sw = results.get("sweep")
            if sw and sw.get("settings"):
                verdict = "PASS" if sw.get("answer") else "FAIL"
                value = {"answer": sw.get("answer")}
        out.append({"id": bid, "text": bar["text"], "verdict": verdict, "value": value})
    return out


def _hash(record: Mapping[str, Any]) -> str:
    """SHA-256 of the record's canonical JSON (the same rule a registered protocol's hash uses)."""
    return sha256_hex(canonical_json(record))
