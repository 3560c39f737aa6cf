"""How far to trust a world without ground truth: three truth-free diagnostics and the fidelity ladder.

A Bridge user has no simulator to rank against. What they can compute on any world is:

- **gate discard rate**: the share of episodes the consistency gate (:mod:`kosmos_env.gate`)
  would discard, i.e. the share whose video fails to follow its commands somewhere. Measured by
  replaying every finished episode (frames, commands, robot log) through a fresh gate call by
  call, exactly as the env's gate would have seen it, so the same episodes also give the
  un-gated verdicts. The gate is the spec's own where the spec enables one (its thresholds are
  calibrated to that camera), else the tabletop default clipped to the spec's workspace (what
  ``kosmos-env study --gate`` runs).
- **shuffled-command gap**: the world's success rate minus the shuffled-command control's, on
  the same (policy, task, seed) episodes and the same judge, pooled over policies. The control
  (:class:`kosmos_env.worlds.shuffled.ShuffledCommandWorld`) makes the world execute the
  commands the *same world* received in another seed of the same (policy, task), permuted in
  time (no simulator commands: the definition must run on Bridge too). A world whose verdicts
  follow what the policy did loses success under shuffling (gap > 0); a world that ignores its
  commands, or a judge that sees nothing, shows no gap. The success-rate gap was chosen before
  any ladder data (it needs no truth and no reference ranking; a Kendall gap needs a ranking of
  the control, which is undefined when the control scores every policy alike, as it does on
  the low rungs); nothing in it is tuned.
- **drift ratio at H = 20** (:data:`DRIFT_HORIZON` commands): the world's mean absolute pixel
  error (0-255) against real frames after H commands replayed open loop from the same first
  frame, divided by copy-first-frame's error (the first real frame against the real frame at H),
  as a ratio of means over episodes. 1 = no better than a still photograph; 0 = exact. On the
  tabletop the real frames are the simulator's; on Bridge the real clip shipped in
  ``kosmos_env/tasks/bridge_real`` with its commands derived from the video (one clip: no
  interval).

Every diagnostic comes with a 95 % percentile bootstrap interval over (task, seed) units.

The **fidelity ladder** (``bench/fidelity_ladder.py``, numbers in ``bench/results/fidelity_ladder_v2``
and in the package as :data:`LADDER_FILE`) measures these diagnostics and Kendall tau-b against
simulator truth on tabletop worlds of known fidelity, from a grey world that shows nothing to the
simulator itself. A world that ranks every policy alike has an undefined tau-b; on the ladder it is
scored 0 (no ranking information, what a random ranking gets on average) and marked ``constant``.
:func:`trust_lines` reads any world's diagnostics against that reference in plain words.

The combined score (:func:`combined_score`) is parameter-free, fixed before any data: the mean,
over the diagnostics a world has, of its standing among the ladder's rungs (share of rungs it
beats, lower discard and drift and higher gap being better), so nothing was chosen on seeds.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kosmos_env.stats.numbers import plain_interval, signed, signed_estimate

DRIFT_HORIZON = 20
LADDER_FILE = "fidelity_ladder.json"
ALPHA = 0.05
DIAGNOSTICS = ("gate_discard", "shuffled_gap", "drift_ratio")
# the direction in which a diagnostic means a more faithful world (fixed by its meaning, not fitted)
BETTER = {"gate_discard": -1, "shuffled_gap": +1, "drift_ratio": -1}
LABELS = {
    "gate_discard": "gate discard rate",
    "shuffled_gap": "shuffled-command gap",
    "drift_ratio": f"drift vs copy-frame at H={DRIFT_HORIZON}",
}


# -- interval helpers -----------------------------------------------------------------------
def _interval(values: np.ndarray, alpha: float = ALPHA) -> list[float] | None:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size < 2:
        return None
    lo, hi = np.quantile(v, [alpha / 2, 1 - alpha / 2])
    return [float(lo), float(hi)]


def _entry(value: float | None, boot: np.ndarray | None, n: int, **extra) -> dict[str, Any]:
    ok = value is not None and np.isfinite(value)
    return {
        "value": float(value) if ok else None,
        "interval": _interval(boot) if (ok and boot is not None) else None,
        "n": int(n),
        **extra,
    }


def _unavailable(reason: str) -> dict[str, Any]:
    return {"value": None, "interval": None, "n": 0, "reason": reason}


def unit_bootstrap(units: Sequence, n_boot: int = 1000, seed: int = 0) -> np.ndarray:
    """(n_boot, U) indices into ``units``, resampled with replacement (one shared draw for paired numbers)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, len(units), size=(n_boot, len(units)))


def _unit_sums(
    rows: Sequence[Mapping], units: list, value: Callable[[Mapping], float | None]
) -> tuple[np.ndarray, np.ndarray]:
    """Per-unit (sum of values, count of rows with a value) over rows keyed by (task, seed)."""
    pos = {u: k for k, u in enumerate(units)}
    s, c = np.zeros(len(units)), np.zeros(len(units))
    for r in rows:
        k = pos.get((r["task"], r["seed"]))
        v = value(r)
        if k is None or v is None:
            continue
        s[k] += float(v)
        c[k] += 1
    return s, c


def _ratio(s: np.ndarray, c: np.ndarray, idx: np.ndarray | None) -> tuple[float | None, np.ndarray | None]:
    """Pooled mean sum/count over all units, and over each resample of units."""
    point = float(s.sum() / c.sum()) if c.sum() > 0 else None
    if idx is None:
        return point, None
    cs = c[idx].sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = np.where(cs > 0, s[idx].sum(axis=1) / np.where(cs > 0, cs, 1), np.nan)
    return point, boot


# -- the diagnostics from episode rows ---------------------------------------------------------
def diagnostics_from_rows(
    world_rows: Sequence[Mapping],
    *,
    judge: str,
    shuffled_rows: Sequence[Mapping] = (),
    drift_rows: Sequence[Mapping] = (),
    units: list | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    world: str = "",
    notes: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The three diagnostics with intervals from plain rows.

    ``world_rows``: one per episode, ``{"policy", "task", "seed", "judges": {judge: bool|None},
    "gate_discard": bool|None}``; ``shuffled_rows``: the control's rows (same keys, same episodes);
    ``drift_rows``: ``{"task", "seed", "world": err, "copy": err}`` at :data:`DRIFT_HORIZON`.
    ``notes`` names why a diagnostic is missing (diagnostic -> reason).
    """
    notes = dict(notes or {})
    if units is None:
        units = sorted({(r["task"], r["seed"]) for r in [*world_rows, *drift_rows]})
    idx = unit_bootstrap(units, n_boot, seed) if len(units) >= 2 else None
    out: dict[str, Any] = {
        "world": world,
        "judge": judge,
        "n_episodes": len(world_rows),
        "n_units": len(units),
        "alpha": ALPHA,
        "n_boot": n_boot,
    }
    s, c = _unit_sums(world_rows, units, lambda r: None if r.get("gate_discard") is None else bool(r["gate_discard"]))
    if c.sum():
        point, boot = _ratio(s, c, idx)
        out["gate_discard"] = _entry(point, boot, int(c.sum()))
    else:
        out["gate_discard"] = _unavailable(notes.get("gate_discard", "no episode was replayed through the gate"))
    if shuffled_rows:
        sw, cw = _unit_sums(world_rows, units, lambda r: r["judges"].get(judge))
        ss, cs = _unit_sums(shuffled_rows, units, lambda r: r["judges"].get(judge))
        pw, bw = _ratio(sw, cw, idx)
        ps, bs = _ratio(ss, cs, idx)
        if pw is None or ps is None:
            out["shuffled_gap"] = _unavailable(f"the {judge} judge gave no verdict in the world or the control")
        else:
            out["shuffled_gap"] = _entry(
                pw - ps, None if bw is None else bw - bs, int(cw.sum()), world_rate=pw, shuffled_rate=ps
            )
    else:
        out["shuffled_gap"] = _unavailable(notes.get("shuffled_gap", "the shuffled-command control was not run"))
    if drift_rows:
        sw, cw = _unit_sums(drift_rows, units, lambda r: r["world"])
        sc, cc = _unit_sums(drift_rows, units, lambda r: r["copy"])
        pw, bw = _ratio(sw, cw, idx)
        pc, bc = _ratio(sc, cc, idx)
        if pw is None or not pc:
            out["drift_ratio"] = _unavailable("copy-first-frame has no error at H (nothing moved)")
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                boot = None if bw is None else np.where(bc > 0, bw / np.where(bc > 0, bc, 1), np.nan)
            out["drift_ratio"] = _entry(
                pw / pc, boot, int(cw.sum()), horizon=DRIFT_HORIZON, world_error=pw, copy_error=pc
            )
            if int(cw.sum()) < 2:
                out["drift_ratio"]["interval"] = None
                out["drift_ratio"]["reason_no_interval"] = "one replayed episode: no interval"
    else:
        out["drift_ratio"] = _unavailable(notes.get("drift_ratio", "no real frames to compare with"))
    return out


def diagnostics_from_study(
    study: Mapping[str, Any], *, judge: str = "vision", world: str = "learned", n_boot: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """The diagnostics of the world under test of a ``run_study`` result (or its saved study dict).

    Uses what the study has: ``learned+gate`` rows for the discard rate (run with ``gate=True``),
    ``control:shuffled`` rows for the gap (``control="shuffled"``; the study's control executes the
    simulator's commands of another seed, not the world's own), and the open-loop frame-error table
    at H = :data:`DRIFT_HORIZON` for the drift ratio (the study's interval, over its replayed episodes).
    """
    rows = study.get("rows") or study.get("episodes") or []
    if not rows:
        raise ValueError("the study has no episode rows: nothing to diagnose")
    units = sorted({(r["task"], r["seed"]) for r in rows if r["world"] == "reference"}) or None
    base = {(r["policy"], r["task"], r["seed"]): r for r in rows if r["world"] == world}
    if not base:
        raise ValueError(f"the study has no rows of world {world!r}")
    gated = {(r["policy"], r["task"], r["seed"]): bool(r["discarded"]) for r in rows if r["world"] == f"{world}+gate"}
    world_rows = [
        {"policy": p, "task": t, "seed": s, "judges": r["judges"], "gate_discard": gated.get((p, t, s))}
        for (p, t, s), r in base.items()
    ]
    shuffled = [
        {"policy": r["policy"], "task": r["task"], "seed": r["seed"], "judges": r["judges"]}
        for r in rows
        if r["world"] == "control:shuffled"
    ]
    notes = {
        "gate_discard": "the study ran without --gate",
        "shuffled_gap": "the study ran without --control shuffled",
        "drift_ratio": "the study replayed no episode open loop",
    }
    cfg = study.get("config") or {}
    out = diagnostics_from_rows(
        world_rows,
        judge=judge,
        shuffled_rows=shuffled,
        units=units,
        n_boot=n_boot,
        seed=seed,
        world=cfg.get("world", world),
        notes=notes,
    )
    fe = (
        study.get("frame_error") or (study.get("results") or {}).get("frame_error") or {}
    )  # run_study's or study.json's
    ratio = fe.get("ratio") or {}
    r20 = ratio.get(DRIFT_HORIZON, ratio.get(str(DRIFT_HORIZON)))
    if r20 is not None:
        iv = fe.get("ratio_interval") or {}
        out["drift_ratio"] = {
            "value": float(r20),
            "interval": iv.get(DRIFT_HORIZON, iv.get(str(DRIFT_HORIZON))),
            "n": int(fe.get("n_episodes", 0)),
            "horizon": DRIFT_HORIZON,
            "baseline": "the study's copy-last-frame (the first frame) over its replayed episodes",
        }
    elif fe.get("n_episodes"):
        out["drift_ratio"] = _unavailable(f"the study's frame-error table has no H = {DRIFT_HORIZON}")
    return out


def ground_truth_world(campaign: Mapping[str, Any]) -> str | None:
    """Why "how far to trust this world" is trivial for a campaign's world, in one line, or None
    where it is a real question.

    It is trivial on a simulator run as itself (a world type in
    :data:`kosmos_env.campaign.rederive.SIMULATOR_WORLDS`, no control wrapped around it): its frames
    are the truth the diagnostics are measured against, so a discard rate or a rank correlation
    printed for it would look like evidence and be none. ``campaign`` is results.json's
    ``campaign`` object (its ``spec`` says the world and the judge)."""
    from kosmos_env.campaign.rederive import SIMULATOR_WORLDS

    spec = campaign.get("spec") or {}
    world = spec.get("world") or {}
    if world.get("type") not in SIMULATOR_WORLDS or world.get("control") is not None:
        return None
    env_id = campaign.get("env_id") or spec.get("id") or "this world"
    judge = (spec.get("judge") or {}).get("type")
    head = (
        f"how far to trust {env_id}: nothing to measure, it is the simulator, the ground truth the "
        "truth-free diagnostics are read against"
    )
    if judge == "state":
        return head + " (its judge reads the simulator's own state; `kosmos-env trust` is for learned worlds)"
    return (
        f"{head}; its {judge or 'campaign'} judge is what can be wrong here: `kosmos-env judge RUN --judge state` "
        "then `kosmos-env compare --judges RUN campaign state` measures it"
    )


def diagnostics_from_campaign(bundle: Any, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """What one campaign run (a :class:`kosmos_env.report.bundle.Bundle`) can tell: the gate discard
    rate when it ran with the gate. A campaign has neither a shuffled twin nor real frames at H, so
    the other two diagnostics are reported unavailable with the command that measures them.

    On a ground-truth world (:func:`ground_truth_world`) there is nothing to diagnose: the dict
    holds only ``world`` and ``ground_truth`` (the line that says why), and :func:`trust_lines`
    prints that line alone."""
    camp = bundle.campaign
    env_id = camp.get("env_id", "?")
    trivial = ground_truth_world(camp)
    if trivial is not None:
        return {"world": env_id, "judge": "campaign", "ground_truth": trivial}
    spec = camp.get("spec") or {}
    gate = {**(spec.get("gate") or {}), **(camp.get("gate") or {})}
    control = (spec.get("world") or {}).get("control")
    rows = [r for r in bundle.rows if r.get("outcome") != "error"]
    gate_on = bool(gate.get("enabled")) or any(r.get("outcome") == "discarded" for r in rows)
    world_rows = [
        {
            "policy": r["policy"],
            "task": r["task"],
            "seed": r["seed"],
            "judges": {},
            "gate_discard": (r.get("outcome") == "discarded") if gate_on else None,
        }
        for r in rows
    ]
    how = f"`kosmos-env trust --env {env_id}`"
    notes = {
        "gate_discard": f"the campaign ran without the gate ({how} replays episodes through it)",
        "shuffled_gap": (
            f"this campaign is the shuffled control itself; the gap needs its twin: {how}"
            if control
            else f"the campaign has no shuffled-command twin: {how}"
        ),
        "drift_ratio": f"a campaign keeps no real frames at H = {DRIFT_HORIZON}: {how}",
    }
    out = diagnostics_from_rows(world_rows, judge="campaign", n_boot=n_boot, seed=seed, world=env_id, notes=notes)
    if gate_on:
        out["gate_discard"]["source"] = "the campaign's own gate (episodes end at the first rejected call)"
    return out


# -- the ladder reference ----------------------------------------------------------------------
def load_ladder(path: str | None = None) -> dict[str, Any] | None:
    """The committed ladder (``kosmos_env/study/fidelity_ladder.json``), or ``path``; None if absent."""
    try:
        text = (
            open(path, encoding="utf-8").read()
            if path
            else (resources.files("kosmos_env.study") / LADDER_FILE).read_text(encoding="utf-8")
        )
    except (FileNotFoundError, OSError):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the fidelity ladder {path or LADDER_FILE} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rungs"), list):
        raise ValueError(f"the fidelity ladder {path or LADDER_FILE} has no 'rungs' list")
    return data


def combined_score(
    diagnostics: Mapping[str, Any], ladder: Mapping[str, Any], *, judge: str = "vision", exclude: str | None = None
) -> float | None:
    """Mean over available diagnostics of the share of ladder rungs this world beats (ties count
    half), each diagnostic oriented by :data:`BETTER`; None when no diagnostic is available.
    ``exclude`` leaves one rung (by name) out of the comparison (a rung scored against the others)."""
    shares = []
    for d in DIAGNOSTICS:
        v = _value(diagnostics, d)
        if v is None:
            continue
        ref = [
            _value(r["diagnostics"][judge] if d == "shuffled_gap" else r["diagnostics"], d)
            for r in ladder["rungs"]
            if r["name"] != exclude
        ]
        ref = [x for x in ref if x is not None]
        if not ref:
            continue
        b = BETTER[d]
        beats = sum(1.0 if b * (v - x) > 1e-12 else 0.5 if abs(v - x) <= 1e-12 else 0.0 for x in ref)
        shares.append(beats / len(ref))
    return float(np.mean(shares)) if shares else None


def _value(diag: Mapping[str, Any], name: str) -> float | None:
    e = diag.get(name) or {}
    v = e.get("value")
    return None if v is None else float(v)


# -- plain words ----------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _fmt(name: str, e: Mapping[str, Any]) -> str:
    iv = e.get("interval")
    if name == "gate_discard":
        s = _pct(e["value"])
        return s + (f" [{100 * iv[0]:.0f}, {100 * iv[1]:.0f}]" if iv else " (no interval)")
    if name == "shuffled_gap":  # a difference of rates: signed, a negative end never reads "+0.00"
        return signed_estimate(e["value"], iv[0], iv[1]) if iv else f"{signed(e['value'])} (no interval)"
    return f"{e['value']:.2f}" + (f" {plain_interval(iv[0], iv[1])}" if iv else " (no interval)")


def _nearby_rungs(name: str, e: Mapping[str, Any], ladder: Mapping[str, Any], judge: str) -> list[dict]:
    """Rungs whose diagnostic interval overlaps this world's interval (or point); else the nearest one."""
    v = e["value"]
    lo, hi = e.get("interval") or (v, v)
    out, dist = [], []
    for r in ladder["rungs"]:
        d = r["diagnostics"][judge] if name == "shuffled_gap" else r["diagnostics"]
        re = d.get(name) or {}
        if re.get("value") is None:
            continue
        rlo, rhi = re.get("interval") or (re["value"], re["value"])
        if rlo <= hi and lo <= rhi:
            out.append(r)
        dist.append((abs(re["value"] - v), r["name"], r))
    if not out and dist:
        out = [min(dist, key=lambda t: t[0])[2]]
    return out


def _kendall_range(rungs: Sequence[Mapping], judge: str) -> str:
    ks = [r["kendall"][judge] for r in rungs]
    vals = [k["value"] for k in ks if k.get("value") is not None]
    if not vals:
        return "undefined"
    lo, hi = min(vals), max(vals)
    ivs = [k["interval"] for k in ks if k.get("interval")]
    span = f" (intervals from {min(i[0] for i in ivs):.2f} to {max(i[1] for i in ivs):.2f})" if ivs else ""
    core = f"{lo:.2f}" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}"
    return core + span


def _with_interval(value: float, iv) -> str:
    # a bootstrap interval of a rank correlation over ten rungs can be narrower than 0.01: it gets
    # the decimals that show its width rather than reading "-0.39 [-0.39, -0.39]"
    return signed_estimate(value, iv[0], iv[1]) if iv else signed(value)


def _goes_with(entry: Mapping[str, Any], expected: int) -> bool:
    """The ladder's rule for "this diagnostic predicts agreement": the interval excludes 0 in the
    expected direction and, where the ladder has one, the permutation p over rungs is below ALPHA."""
    iv, p = entry.get("interval"), entry.get("p_value")
    return bool(iv) and (iv[0] > 0 if expected > 0 else iv[1] < 0) and (p is None or p < ALPHA)


def _predictive(ladder: Mapping[str, Any], name: str, judge: str) -> str:
    c = ((ladder.get("prediction") or {}).get(judge) or {}).get(name)
    if not c or c.get("value") is None:
        return "its rank correlation with agreement over the ladder is undefined"
    iv = c.get("interval")
    rho = f"Spearman {_with_interval(c['value'], iv)}"
    expected = BETTER.get(name, 1)
    if _goes_with(c, expected):
        text = f"over the whole ladder it goes with agreement ({rho} with Kendall)"
    else:
        text = f"over the ladder it does NOT reliably predict agreement ({rho} with Kendall; the interval allows none)"
    up = ((ladder.get("prediction_upper") or {}).get(judge) or {}).get(name)
    if up is not None:
        uiv = up.get("interval")
        if up.get("value") is None:
            text += "; among worlds whose judge ranks at all it is constant and says nothing"
        elif not _goes_with(up, expected):
            text += (
                f"; but among worlds whose judge ranks at all it does not order agreement (Spearman "
                f"{_with_interval(up['value'], uiv)}{_p_text(up)})"
            )
        else:
            text += f"; among worlds whose judge ranks at all too (Spearman {_with_interval(up['value'], uiv)}{_p_text(up)})"
    return text


def _p_text(entry: Mapping[str, Any]) -> str:
    p = entry.get("p_value")
    return "" if p is None else f", permutation p = {p:.3f} over {entry.get('rungs', '?')} rungs"


def trust_lines(
    diagnostics: Mapping[str, Any], ladder: Mapping[str, Any] | None = None, *, judge: str | None = None
) -> list[str]:
    """ "How far to trust this world", in plain words, one line per diagnostic plus the summary (one
    line alone for a ground-truth world, :func:`ground_truth_world`).

    ``diagnostics`` is what :func:`diagnostics_from_rows`, :func:`diagnostics_from_study`,
    :func:`diagnostics_from_campaign` or :func:`measure` return; ``ladder`` defaults to the
    committed :data:`LADDER_FILE` (without it only the measured numbers are printed). ``judge``
    picks the ladder's judge to compare with (default: the diagnostics' judge where the ladder has
    it, else the vision judge).
    """
    if diagnostics.get("ground_truth"):  # a simulator: one line on why there is nothing to trust
        return [str(diagnostics["ground_truth"])]
    if ladder is None:
        ladder = load_ladder()
    world = diagnostics.get("world") or "this world"
    lines = [
        f"how far to trust {world} (truth-free diagnostics, {100 * (1 - ALPHA):g} % intervals over (task, seed) units):"
    ]
    if ladder is not None:
        judges = ladder.get("judges") or ["vision"]
        j = judge or (
            diagnostics.get("judge")
            if diagnostics.get("judge") in judges
            else ("vision" if "vision" in judges else judges[0])
        )
    else:
        j = judge or diagnostics.get("judge") or "vision"
    for name in DIAGNOSTICS:
        e = diagnostics.get(name) or {}
        if e.get("value") is None:
            lines.append(f"- {LABELS[name]}: unavailable ({e.get('reason', 'not measured')})")
            continue
        what = {
            "gate_discard": f"the gate discards {_fmt(name, e)} of episodes",
            "shuffled_gap": (
                f"success is {_fmt(name, e)} higher with the true commands than when the world "
                f"executes shuffled ones"
                + (
                    f" ({_pct(e['world_rate'])} vs {_pct(e['shuffled_rate'])})"
                    if e.get("world_rate") is not None
                    else ""
                )
            ),
            "drift_ratio": f"frames drift {_fmt(name, e)} x copy-first-frame's error at H={DRIFT_HORIZON}",
        }[name]
        if ladder is None:
            lines.append(f"- {what}; no ladder reference is installed")
            continue
        near = _nearby_rungs(name, e, ladder, j)
        names = ", ".join(r["name"] for r in near)
        lines.append(
            f"- {what}; on the ladder, worlds with this {LABELS[name].split(' vs')[0]} ({names}) ranked policies "
            f"with Kendall {_kendall_range(near, j)} vs truth ({j} judge); {_predictive(ladder, name, j)}"
        )
    if ladder is not None:
        score = combined_score(diagnostics, ladder, judge=j)
        if score is not None:
            lines.append(
                f"- combined standing on the ladder: beats {_pct(score)} of its rungs on average over the "
                f"diagnostics above ({_predictive(ladder, 'combined', j)})"
            )
        lines.append(
            f"  reference: {ladder.get('source', 'bench/results/fidelity_ladder')} "
            f"({len(ladder['rungs'])} tabletop worlds; numbers measured there do not transfer in scale to "
            f"another camera, judge or gate, only in kind)"
        )
    return lines


# -- measuring any registered env ----------------------------------------------------------------
@dataclass
class TrustConfig:
    env_id: str
    policies: tuple = ("scripted:skill=1.0", "scripted:skill=0.6", "scripted:skill=0.3", "random")
    tasks: tuple | None = None
    seeds: int = 3
    seed_offset: int = 100000
    judge: str | dict | None = None  # a judge type or a judge spec; None: the spec's judge
    drift_seeds: int = 1  # seed indices per (policy, task) replayed open loop against the real frames
    threads: int = 1
    world_kwargs: dict = field(default_factory=dict)


def gate_spec_for(spec: Any) -> dict[str, Any]:
    """The spec's own gate when it enables one (calibrated to its camera); for a learned tabletop its
    reference simulator's (same camera, same workspace); else the default thresholds clipped to the
    spec's workspace (as ``kosmos-env study --gate`` runs it)."""
    g = dict(spec.gate or {})
    if g.get("enabled"):
        return g
    if spec.world.get("type") == "tabletop_learned" and spec.world.get("reference"):
        from kosmos_env.spec import load_spec

        ref = dict(load_spec(spec.world["reference"]).gate or {})
        if ref.get("enabled"):  # the same camera and workspace: the simulator's validated gate applies as is
            return ref
    out: dict[str, Any] = {"enabled": True}
    if "workspace" in spec.world:
        out["workspace"] = spec.world["workspace"]
    return out


def replay_gate(gate_spec: Mapping[str, Any], rollout: Any, chunk: int, calibration: Any) -> bool:
    """Whether the env's gate would have discarded this finished rollout: a fresh gate is fed every
    world call (chunk actions, its frames, its log rows) in order; one rejected call discards."""
    from kosmos_env.gate import ConsistencyGate

    gate = ConsistencyGate.from_spec(gate_spec)
    frames, actions = np.asarray(rollout.frames), np.asarray(rollout.actions)
    calls = len(actions) // max(1, chunk)
    if calls == 0:
        return False
    per_call = (len(frames) - 1) // calls
    for t in range(calls):
        a = slice(t * chunk, (t + 1) * chunk)
        log = {k: np.asarray(v)[a] for k, v in (rollout.log or {}).items()}
        v = gate.check(
            frames[t * per_call], frames[t * per_call + 1 : (t + 1) * per_call + 1], actions[a], calibration, log
        )
        if not v.passed:
            return True
    return False


def run_world(
    label: str,
    env: Any,
    policies: Mapping[str, Any],
    jobs: Sequence[tuple],
    seed_of: Callable,
    judges: Mapping[str, Any],
    *,
    gate_spec: Mapping[str, Any] | None = None,
    truth: bool = False,
    before: Callable | None = None,
    keep_actions: dict | None = None,
    progress: bool = False,
) -> list[dict]:
    """Run (policy, task, seed index) jobs in ``env`` (gate off); one row per episode with every
    judge's final verdict, the gate replay's discard (when ``gate_spec``) and, with ``truth``, the
    simulator's ground truth as judge ``state``. ``keep_actions`` collects each episode's commands."""
    from tqdm import tqdm

    from kosmos_env.rollouts import run_episode
    from kosmos_env.study.run import _judge_all

    base = env.unwrapped
    chunk = base.kosmos_spec.action_chunk
    rows = []
    t_start = time.perf_counter()
    try:
        for policy, task, i in tqdm(jobs, desc=f"trust: {label}", disable=not progress):
            seed = seed_of(task, i)
            if before is not None:
                before(policy, task, i)
            t0 = time.perf_counter()
            result = run_episode(env, policies[policy], seed=seed, task=task)
            seconds = time.perf_counter() - t0
            rollout = result.rollout
            final, _, _ = _judge_all(judges, rollout, ())
            row = {
                "world": label,
                "policy": policy,
                "task": task,
                "seed": seed,
                "index": i,
                "steps": result.steps,
                "judges": final,
                "seconds": seconds,
            }
            if truth:
                row["judges"]["state"] = bool((result.ground_truth or {}).get("success", False))
            if gate_spec is not None:
                t0 = time.perf_counter()
                row["gate_discard"] = replay_gate(gate_spec, rollout, chunk, base.world.calibration)
                row["seconds_gate"] = time.perf_counter() - t0
            if keep_actions is not None:
                keep_actions[(policy, task, i)] = np.asarray(rollout.actions).copy()
            rows.append(row)
    finally:
        env.close()
    if progress:
        print(f"trust: {label}: {len(rows)} episodes in {time.perf_counter() - t_start:.0f} s", flush=True)
    return rows


def shuffled_source(actions: Mapping[tuple, np.ndarray], seeds: int, seed: int) -> Callable:
    """A ``before`` hook for a :class:`ShuffledCommandWorld`: each episode executes the commands its
    own world received in the next seed index of the same (policy, task), permuted in time."""
    rng = np.random.default_rng(seed)

    def source(world, policy, task, i):
        other = actions[(policy, task, (i + 1) % seeds)]
        world.set_source(other[rng.permutation(len(other))])

    return source


def replay_frames(env: Any, seed: int, task: str, actions: np.ndarray, horizon: int) -> np.ndarray | None:
    """Open-loop frames (horizon + 1, H, W, 3) float32 of ``env`` from ``seed``/``task`` under ``actions``
    (one env step per chunk); None if the episode ends before ``horizon`` commands."""
    base = env.unwrapped
    chunk = base.kosmos_spec.action_chunk
    obs, _ = env.reset(seed=seed, options={"task": task})
    seq = [np.asarray(obs["image"], dtype=np.float32)]
    done = 0
    while done < horizon:
        a = actions[done : done + chunk]
        if len(a) < chunk:
            return None
        obs, _, term, trunc, info = env.step(a[0] if chunk == 1 else a)
        fr = info.get("frames")
        # frames per command: one per action here; a world drawing several per call is sampled at call ends
        seq.extend(
            [np.asarray(fr[-1], dtype=np.float32)] * chunk
            if fr is not None and len(fr) != chunk
            else [np.asarray(f, dtype=np.float32) for f in (fr if fr is not None else [obs["image"]])]
        )
        done += chunk
        if (term or trunc) and done < horizon:
            return None
    return np.asarray(seq[: horizon + 1])


def drift_row(world_frames: np.ndarray, real_frames: np.ndarray, horizon: int = DRIFT_HORIZON) -> dict | None:
    """World and copy-first-frame errors (mean |.|, 0-255) at ``horizon`` against the real frames."""
    if world_frames is None or real_frames is None or len(world_frames) <= horizon or len(real_frames) <= horizon:
        return None
    if world_frames.shape[1:] != real_frames.shape[1:]:
        return None
    return {
        "world": float(np.abs(world_frames[horizon] - real_frames[horizon]).mean()),
        "copy": float(np.abs(real_frames[0] - real_frames[horizon]).mean()),
    }


def validate_trust(cfg: TrustConfig) -> None:
    from kosmos_env.spec import load_spec

    load_spec(cfg.env_id)  # an unknown id is one clear error
    if cfg.seeds < 2:
        raise ValueError(
            f"the shuffled control executes another seed's commands: --seeds must be >= 2, got {cfg.seeds}"
        )
    if not cfg.policies:
        raise ValueError("give at least one policy")
    if not 0 <= cfg.drift_seeds <= cfg.seeds:
        raise ValueError(f"--drift-seeds must be between 0 and --seeds ({cfg.seeds}), got {cfg.drift_seeds}")
    if cfg.seed_offset < 0:
        raise ValueError(f"--seed-offset must be >= 0, got {cfg.seed_offset}")


def measure(cfg: TrustConfig, *, progress: bool = False, n_boot: int = 1000) -> dict[str, Any]:
    """Run the three diagnostics on any registered env (see the module docstring)."""
    import gymnasium
    import torch

    import kosmos_env  # noqa: F401  (registers the env ids)
    from kosmos_env.judges import make_judge
    from kosmos_env.policies import make_policy, parse_policy_arg
    from kosmos_env.spec import load_spec
    from kosmos_env.worlds import make_world
    from kosmos_env.worlds.shuffled import ShuffledCommandWorld

    validate_trust(cfg)
    torch.set_num_threads(max(1, cfg.threads))
    spec = load_spec(cfg.env_id)
    judge_spec = (
        dict(cfg.judge) if isinstance(cfg.judge, Mapping) else {"type": cfg.judge} if cfg.judge else dict(spec.judge)
    )
    judge_name = judge_spec.get("type", "judge")
    judges = {judge_name: make_judge(judge_spec)}
    # the env is handed the judge already built (it would otherwise build the spec's own, e.g. load a VLM)
    kwargs = {"defer_judging": True, "gate": {"enabled": False}, "judge": judges[judge_name]}
    probe = gymnasium.make(
        cfg.env_id, **kwargs, **({"world_kwargs": dict(cfg.world_kwargs)} if cfg.world_kwargs else {})
    )
    all_tasks = list(probe.unwrapped.task_names)
    probe.close()
    tasks = list(cfg.tasks) if cfg.tasks else all_tasks
    unknown = [t for t in tasks if t not in all_tasks]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; {cfg.env_id} has {all_tasks}")
    policies = {p: make_policy(n, **kw) for p, (n, kw) in ((p, parse_policy_arg(p)) for p in cfg.policies)}
    jobs = [(p, t, i) for p in cfg.policies for t in tasks for i in range(cfg.seeds)]

    def seed_of(task, i):
        return cfg.seed_offset + all_tasks.index(task) * 1000 + i

    gate = gate_spec_for(spec)
    actions: dict = {}
    wk = {"world_kwargs": dict(cfg.world_kwargs)} if cfg.world_kwargs else {}
    rows = run_world(
        cfg.env_id,
        gymnasium.make(cfg.env_id, **kwargs, **wk),
        policies,
        jobs,
        seed_of,
        judges,
        gate_spec=gate,
        keep_actions=actions,
        progress=progress,
    )
    world = ShuffledCommandWorld(make_world(spec, **dict(cfg.world_kwargs)))
    hook = shuffled_source(actions, cfg.seeds, cfg.seed_offset + 7919)
    shuffled = run_world(
        "control:shuffled",
        gymnasium.make(cfg.env_id, **kwargs, world_model=world),
        policies,
        jobs,
        seed_of,
        judges,
        before=lambda p, t, i: hook(world, p, t, i),
        progress=progress,
    )
    drift, note = _drift(cfg, spec, tasks, seed_of, actions, kwargs, wk)
    out = diagnostics_from_rows(
        rows,
        judge=judge_name,
        shuffled_rows=shuffled,
        drift_rows=drift,
        n_boot=n_boot,
        world=cfg.env_id,
        notes={"drift_ratio": note},
    )
    out["gate"] = {k: v for k, v in gate.items() if k != "notes"}
    out["seeds"] = sorted({r["seed"] for r in rows})
    out["policies"] = list(cfg.policies)
    return out


def _drift(cfg, spec, tasks, seed_of, actions, kwargs, wk) -> tuple[list[dict], str]:
    """Drift rows against real frames: the reference simulator's (tabletop worlds, or the simulator
    itself) replaying the world's own commands; on Bridge the shipped real clip. Else none, with why."""
    import gymnasium

    world_type = spec.world.get("type")
    if cfg.drift_seeds == 0:
        return [], "not measured (--drift-seeds 0)"
    if world_type in ("tabletop", "tabletop_learned"):
        ref_id = spec.world.get("reference", cfg.env_id) if world_type == "tabletop_learned" else cfg.env_id
        ref_env = gymnasium.make(ref_id, **kwargs, image_size=tuple(spec.image_size))
        env = gymnasium.make(cfg.env_id, **kwargs, **wk)
        rows = []
        try:
            for (policy, task, i), acts in actions.items():
                if i >= cfg.drift_seeds:
                    continue
                seed = seed_of(task, i)
                real = replay_frames(ref_env, seed, task, acts, DRIFT_HORIZON)
                gen = replay_frames(env, seed, task, acts, DRIFT_HORIZON)
                r = drift_row(gen, real)
                if r is not None:
                    rows.append({"policy": policy, "task": task, "seed": seed, **r})
        finally:
            ref_env.close()
            env.close()
        return rows, f"no replayed episode reached H = {DRIFT_HORIZON}"
    if spec.tasks.get("suite") == "bridge":
        return _bridge_drift(cfg, kwargs, wk)
    return [], f"no real frames for world type {world_type!r} (the tabletop has its simulator, Bridge its real clip)"


def _bridge_drift(cfg, kwargs, wk) -> tuple[list[dict], str]:
    """The real can episode: its first frame is the move_can_to_left task's, its commands are
    derived from the video (kosmos_env.checks.bridge_gate.load_reference_commands)."""
    import gymnasium

    from kosmos_env.checks.bridge_gate import load_reference_commands
    from kosmos_env.checks.bridge_reference import load_real_episode

    try:
        ref = load_reference_commands()
        ep = load_real_episode()
    except Exception as exc:  # the clip needs a video decoder; say so instead of losing the other numbers
        return [], f"the real Bridge clip could not be read ({type(exc).__name__}: {exc})"
    env = gymnasium.make(cfg.env_id, **kwargs, **wk)
    try:
        acts = np.asarray(ref["actions"], dtype=np.float32)
        gen = replay_frames(env, cfg.seed_offset, "move_can_to_left", acts, DRIFT_HORIZON)
    finally:
        env.close()
    if gen is None:
        return [], f"the world's episode ended before H = {DRIFT_HORIZON} commands"
    import cv2

    h, w = gen.shape[1:3]
    real = np.asarray(
        [cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA) for f in ep.frames[: DRIFT_HORIZON + 1]], dtype=np.float32
    )
    r = drift_row(gen, real)
    if r is None:
        return [], f"the real clip is shorter than H = {DRIFT_HORIZON} commands"
    return [{"policy": "real clip", "task": "move_can_to_left", "seed": cfg.seed_offset, **r}], ""


def format_diagnostics(diag: Mapping[str, Any], ladder: Mapping[str, Any] | None = None) -> str:
    head = (
        f"{diag.get('world')}: {diag.get('n_episodes')} episodes over {diag.get('n_units')} (task, seed) units, "
        f"judge {diag.get('judge')}"
    )
    return "\n".join([head, *trust_lines(diag, ladder)])
