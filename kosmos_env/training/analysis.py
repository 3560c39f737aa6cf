"""Lift, exploitability and transfer of policies trained in a world, with intervals over units.

Every checkpoint of every arm is evaluated on the same held-out (task, seed) units, so every
comparison is paired and every interval resamples units (one bootstrap draw of units is shared by
all the quantities of one draw, which keeps ratios and differences of differences honest):

- **optimization lift** of an arm: true success of its last checkpoint minus that of the common
  start (the behaviour-cloned checkpoint), on the same units;
- **exploitability** of a checkpoint: success as its training world judges it minus true success;
  its **growth**: exploitability of the last checkpoint minus that of the start; the **gate's
  effect**: exploitability without the gate minus with it (last checkpoints);
- **transfer ratio**: lift of a world-trained arm over lift of the simulator-trained arm. It is
  reported as undefined when the simulator arm's lift interval contains 0 (a ratio over a
  denominator that may be zero has no useful interval).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

N_BOOT = 5000
ALPHA = 0.05


def unit_vector(records: Sequence[Mapping[str, Any]], key: str, units: Sequence[tuple[str, int]]) -> np.ndarray:
    """``key`` (a bool) of each unit's record as 0/1, in ``units`` order; a missing unit is an error."""
    by_unit = {(r["task"], int(r["seed"])): r for r in records}
    missing = [u for u in units if (u[0], int(u[1])) not in by_unit]
    if missing:
        raise ValueError(f"no record for unit(s) {missing[:3]}{' ...' if len(missing) > 3 else ''}")
    return np.array([float(bool(by_unit[(t, int(s))][key])) for t, s in units])


class UnitBootstrap:
    """One fixed set of bootstrap resamples of the units, shared by every statistic computed from it."""

    def __init__(self, n_units: int, n_boot: int = N_BOOT, seed: int = 0, alpha: float = ALPHA):
        if n_units < 2:
            raise ValueError(f"intervals need at least 2 units, got {n_units}")
        self.idx = np.random.default_rng(seed).integers(0, n_units, size=(n_boot, n_units))
        self.alpha = alpha

    def mean(self, x: np.ndarray) -> dict[str, float]:
        """Mean of a per-unit vector with its percentile interval."""
        boots = x[self.idx].mean(axis=1)
        return self._summary(float(x.mean()), boots)

    def ratio(self, num: np.ndarray, den: np.ndarray) -> dict[str, Any]:
        """mean(num) / mean(den) with a percentile interval over draws whose denominator is not 0."""
        d = den[self.idx].mean(axis=1)
        n = num[self.idx].mean(axis=1)
        ok = d != 0
        point = float(num.mean() / den.mean()) if den.mean() != 0 else float("nan")
        out = (
            self._summary(point, n[ok] / d[ok])
            if ok.any()
            else {"estimate": point, "lower": float("nan"), "upper": float("nan")}
        )
        out["draws_with_zero_denominator"] = int((~ok).sum())
        return out

    def _summary(self, point: float, boots: np.ndarray) -> dict[str, float]:
        lo, hi = np.quantile(boots, [self.alpha / 2, 1 - self.alpha / 2])
        return {"estimate": point, "lower": float(lo), "upper": float(hi)}


def excludes_zero(interval: Mapping[str, float]) -> bool:
    return bool(interval["lower"] > 0 or interval["upper"] < 0)


def analyse(
    arms: Mapping[str, Sequence[Mapping[str, Any]]],
    units: Sequence[tuple[str, int]],
    *,
    simulator_arm: str = "A",
    gate_pairs: Sequence[tuple[str, str]] = (("B", "C"),),
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> dict[str, Any]:
    """The experiment's numbers from its evaluations.

    ``arms[name]`` is the arm's list of checkpoint evaluations in training order, each a mapping with
    ``step`` (env steps of training), ``truth`` (records in the simulator) and ``world`` (records in
    the arm's training configuration). The first entry of every arm is the common start.
    """
    boot = UnitBootstrap(len(units), n_boot=n_boot, seed=seed)
    out: dict[str, Any] = {"units": len(units), "n_boot": n_boot, "alpha": boot.alpha, "arms": {}}
    lifts: dict[str, np.ndarray] = {}
    exploit_last: dict[str, np.ndarray] = {}
    for name, evals in arms.items():
        truth = [unit_vector(e["truth"], "true_success", units) for e in evals]
        world = [unit_vector(e["world"], "world_success", units) for e in evals]
        curve = []
        for e, t, w in zip(evals, truth, world, strict=True):
            curve.append(
                {
                    "step": int(e["step"]),
                    "true_success": boot.mean(t),
                    "world_success": boot.mean(w),
                    "exploitability": boot.mean(w - t),
                }
            )
        lifts[name] = truth[-1] - truth[0]
        exploit_last[name] = world[-1] - truth[-1]
        out["arms"][name] = {
            "checkpoints": curve,
            "lift": boot.mean(lifts[name]),
            "exploitability_growth": boot.mean((world[-1] - truth[-1]) - (world[0] - truth[0])),
        }
    _transfer_and_gate(out, boot, lifts, exploit_last, simulator_arm, (), gate_pairs)
    return out


def _transfer_and_gate(
    out: dict[str, Any],
    boot: UnitBootstrap,
    lifts: Mapping[str, np.ndarray],
    exploit_last: Mapping[str, np.ndarray],
    simulator_arm: str,
    no_ratio: Sequence[str],
    gate_pairs: Sequence[tuple[str, str]],
) -> None:
    """Each arm's transfer ratio over ``simulator_arm`` (not for ``no_ratio`` arms) and the gate's
    effect per pair, written into ``out``."""
    sim = lifts.get(simulator_arm)
    if sim is not None:
        sim_lift = out["arms"][simulator_arm]["lift"]
        for name in lifts:
            if name == simulator_arm or name in no_ratio:
                continue
            ratio = boot.ratio(lifts[name], sim)
            ratio["defined"] = excludes_zero(sim_lift)
            if not ratio["defined"]:
                ratio["note"] = (
                    f"undefined: arm {simulator_arm}'s lift interval [{sim_lift['lower']:+.3f}, "
                    f"{sim_lift['upper']:+.3f}] contains 0"
                )
            out["arms"][name]["transfer_ratio"] = ratio
    out["gate_effect"] = {
        f"{a}-{b}": boot.mean(exploit_last[a] - exploit_last[b])
        for a, b in gate_pairs
        if a in exploit_last and b in exploit_last
    }


def _mean_over_seeds(vectors: Sequence[np.ndarray]) -> np.ndarray:
    return np.mean(np.stack(vectors), axis=0)


def analyse_seeds(
    arms: Mapping[str, Mapping[int, Sequence[Mapping[str, Any]]]],
    units: Sequence[tuple[str, int]],
    *,
    simulator_arm: str = "A",
    oracle_arms: Sequence[str] = ("D",),
    gate_pairs: Sequence[tuple[str, str]] = (("B", "C"),),
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> dict[str, Any]:
    """The registered experiment's numbers, pooled over training seeds.

    ``arms[name][training_seed]`` is that run's checkpoint evaluations in training order, the
    seed's own behaviour-cloned start first. Each evaluation has ``step`` and ``simulator`` records
    (``true_success``: the truth; ``world_success``: the step judge on the simulator's frames) and,
    for arms trained in another world, ``world`` records (``world_success`` there). An oracle arm's
    world-judged success is the truth itself. Every seed of an arm must have the same checkpoint
    steps. Pooled quantities average the per-unit values over seeds, then resample units.
    """
    boot = UnitBootstrap(len(units), n_boot=n_boot, seed=seed)
    out: dict[str, Any] = {"units": len(units), "n_boot": n_boot, "alpha": boot.alpha, "arms": {}}
    lifts: dict[str, np.ndarray] = {}
    exploit_last: dict[str, np.ndarray] = {}
    for name, runs in arms.items():
        if not runs:
            continue
        steps = {s: [int(e["step"]) for e in evals] for s, evals in runs.items()}
        first = next(iter(steps.values()))
        if any(v != first for v in steps.values()):
            raise ValueError(f"arm {name}: seeds were evaluated at different steps {steps}")
        truth, sim_judged, world = {}, {}, {}
        for s, evals in runs.items():
            truth[s] = [unit_vector(e["simulator"], "true_success", units) for e in evals]
            sim_judged[s] = [unit_vector(e["simulator"], "world_success", units) for e in evals]
            if name in oracle_arms:
                world[s] = truth[s]
            elif "world" in evals[0]:
                world[s] = [unit_vector(e["world"], "world_success", units) for e in evals]
            else:
                world[s] = sim_judged[s]
        seeds = sorted(runs)
        per_seed = {
            str(s): {
                "start": boot.mean(truth[s][0]),
                "last": boot.mean(truth[s][-1]),
                "lift": boot.mean(truth[s][-1] - truth[s][0]),
            }
            for s in seeds
        }
        curve = []
        for k, step in enumerate(first):
            t = _mean_over_seeds([truth[s][k] for s in seeds])
            w = _mean_over_seeds([world[s][k] for s in seeds])
            j = _mean_over_seeds([sim_judged[s][k] for s in seeds])
            curve.append(
                {
                    "step": step,
                    "true_success": boot.mean(t),
                    "world_success": boot.mean(w),
                    "simulator_judged": boot.mean(j),
                    "exploitability": boot.mean(w - t),
                }
            )
        t0 = _mean_over_seeds([truth[s][0] for s in seeds])
        t1 = _mean_over_seeds([truth[s][-1] for s in seeds])
        w0 = _mean_over_seeds([world[s][0] for s in seeds])
        w1 = _mean_over_seeds([world[s][-1] for s in seeds])
        j1 = _mean_over_seeds([sim_judged[s][-1] for s in seeds])
        lifts[name] = t1 - t0
        exploit_last[name] = w1 - t1
        out["arms"][name] = {
            "seeds": seeds,
            "per_seed": per_seed,
            "checkpoints": curve,
            "lift": boot.mean(t1 - t0),
            "exploitability_growth": boot.mean((w1 - t1) - (w0 - t0)),
            "over_credit_split": {"judge": boot.mean(j1 - t1), "world": boot.mean(w1 - j1)},
        }
    _transfer_and_gate(out, boot, lifts, exploit_last, simulator_arm, oracle_arms, gate_pairs)
    return out
