"""The fidelity ladder: tabletop worlds of known fidelity, their agreement with simulator truth and
the truth-free diagnostics that should predict it (issue 30, item 5).

Rungs, from no information to the simulator:

- ``grey``: :class:`~kosmos_env.worlds.null.NullWorld` ``mode="blank"``: every frame a uniform
  grey, pose integrated from the commands, nothing ever grasped (its judges see nothing);
- ``copy_first_frame``: :class:`kosmos_env.worlds.null.NullWorld` (the first frame, forever);
- ``rules_only``: the learned tabletop with ``world.learned_dynamics = "rules"`` (object dynamics
  and slip replaced by fixed rules; the renderer still learned);
- ``learned_05`` / ``15`` / ``40`` / ``55`` / ``70``: the learned tabletop retrained by
  ``kosmos-env train-world`` at 5 / 15 / 40 / 55 / 70 % of the full step counts (weights in
  --weights-dir; 70 % and then 55 % added after the first three never produced a success);
- ``learned_full``: the shipped learned tabletop;
- ``simulator``: Kosmos-Tabletop-v1 itself as the world under test (its own rollouts are the
  truth's; its judges are the same robot-log and vision judges as every rung's).

Per rung: Kendall tau-b vs the simulator's state judge (vision and robot_log judges), gate discard
rate, shuffled-command gap (per judge) and drift ratio vs copy-first-frame at H = 20, each with a
95 % bootstrap interval over (task, seed) units; then, over rungs, Spearman between each
diagnostic (and the parameter-free combined score) and Kendall, with the same unit resamples
drawn once and shared by every rung (so the interval carries the noise of every rung jointly).
Definitions: ``kosmos_env/study/trust.py``.

    python bench/fidelity_ladder.py --weights-dir /tmp/ladder --out bench/results/fidelity_ladder

Episodes of each rung are saved in OUT/episodes/ as they finish; a second run resumes from them
(``--analyze-only`` redoes only the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import load_average  # noqa: E402

POLICIES = (
    "scripted:skill=1.0",
    "scripted:skill=0.7",
    "scripted:skill=0.45",
    "random",
    "deceptive:mode=grasp_miss,rate=0.7",
    "deceptive:mode=knock_away,rate=0.7",
    "ckpt:shipped=bc_clone_2000",
    "ckpt:shipped=sim_judge_ppo_9216",
    "ckpt:shipped=world_judge_ppo_12288",
)
RUNGS = (
    "grey",
    "copy_first_frame",
    "rules_only",
    "learned_05",
    "learned_15",
    "learned_40",
    "learned_55",
    "learned_70",
    "learned_full",
    "simulator",
)
BUDGETS = {"learned_05": "w05", "learned_15": "w15", "learned_40": "w40", "learned_55": "w55", "learned_70": "w70"}
JUDGES = ("vision", "robot_log")
REFERENCE = "Kosmos-Tabletop-v1"
LEARNED = "Kosmos-TabletopLearned-v1"
LEARNED_V2 = "Kosmos-TabletopLearned-v2"
NOISE_PREFIX = "sim_noise_"
#: v2 retrained on a fraction of its closed-loop pieces (weights in --weights-dir/<name>/world.safetensors)
V2_FRACTIONS = ("v2_25", "v2_50")
#: issue 41's ladder (protocol: bench/results/fidelity_ladder_v2/protocol.json); noise levels in it
RUNGS_V2 = (
    "grey",
    "copy_first_frame",
    "rules_only",
    "learned_full",
    "v2_25",
    "v2_50",
    "learned_v2",
    "simulator",
)


def make_rung_world(name: str, weights_dir: str):
    """(env id, world) of a rung; the world is fresh each call (a shuffled control wraps its own)."""
    from kosmos_env.hashing import sha256_file
    from kosmos_env.spec import load_spec
    from kosmos_env.worlds import make_world
    from kosmos_env.worlds.noisy import NoisyDynamicsWorld
    from kosmos_env.worlds.null import NullWorld

    sim = load_spec(REFERENCE).with_overrides(image_size=[64, 64])
    if name == "grey":  # the null world proper: every frame uniform grey, the commands alone
        return REFERENCE, NullWorld(make_world(sim), sim.world, mode="blank")
    if name == "copy_first_frame":
        return REFERENCE, NullWorld(make_world(sim), sim.world)
    if name == "simulator":
        return REFERENCE, make_world(sim)
    if name.startswith(NOISE_PREFIX):  # the simulator executing every command with graded noise
        return REFERENCE, NoisyDynamicsWorld(make_world(sim), noise_level(name))
    learned = load_spec(LEARNED)
    if name == "rules_only":
        return LEARNED, make_world(learned.with_overrides(world={"learned_dynamics": "rules"}))
    if name == "learned_full":
        return LEARNED, make_world(learned)
    if name == "learned_v2":
        return LEARNED_V2, make_world(load_spec(LEARNED_V2))
    if name in V2_FRACTIONS:  # v2's recipe on a fraction of its closed-loop data (v1's scripted mix whole)
        path = Path(weights_dir) / name / "world.safetensors"
        env_id, base = LEARNED_V2, load_spec(LEARNED_V2)
    else:
        path = Path(weights_dir) / BUDGETS[name] / "world.safetensors"
        env_id, base = LEARNED, learned
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: train it first (see the README's commands)")
    spec = base.with_overrides(world={"weights_sha256": sha256_file(path)})
    return env_id, make_world(spec, weights_path=str(path))


def noise_level(name: str) -> float:
    """The dynamics-noise level of a ``sim_noise_<level>`` rung (``sim_noise_0.25`` -> 0.25)."""
    return float(name[len(NOISE_PREFIX) :])


def known_rung(name: str) -> str:
    """argparse type: a rung name this bench can build."""
    if name in RUNGS or name in RUNGS_V2:
        return name
    if name.startswith(NOISE_PREFIX):
        try:
            level = noise_level(name)
        except ValueError:
            level = -1.0  # not a number: refused below with the other unknown names
        if level >= 0:
            return name
    raise argparse.ArgumentTypeError(
        f"unknown rung {name!r}; known: {sorted(set(RUNGS) | set(RUNGS_V2))} or {NOISE_PREFIX}<level >= 0>"
    )


def _env(env_id, world):
    import gymnasium

    import kosmos_env  # noqa: F401

    return gymnasium.make(env_id, defer_judging=True, gate={"enabled": False}, image_size=(64, 64), world_model=world)


def _tasks():
    import gymnasium

    import kosmos_env  # noqa: F401

    probe = gymnasium.make(REFERENCE, defer_judging=True, image_size=(64, 64))
    tasks = list(probe.unwrapped.task_names)
    probe.close()
    return tasks


def run_reference(args, ctx, out: Path) -> None:
    """The simulator run: truth (state judge), the simulator rung's verdicts and gate replay, its
    commands (for drift and nothing else) and the real frames at H for the drift rows."""
    f = out / "episodes" / "reference.json"
    if f.is_file():
        return
    from kosmos_env.study.trust import DRIFT_HORIZON, replay_frames, run_world

    actions: dict = {}
    rows = run_world(
        "reference",
        _env(*make_rung_world("simulator", args.weights_dir)),
        ctx["policies"],
        ctx["jobs"],
        ctx["seed_of"],
        ctx["judges"],
        gate_spec=ctx["gate"],
        truth=True,
        keep_actions=actions,
        progress=True,
    )
    env = _env(*make_rung_world("simulator", args.weights_dir))
    frames = {}
    try:
        for (p, t, i), a in actions.items():
            if i < args.drift_seeds:
                frames[f"{p}|{t}|{i}"] = replay_frames(env, ctx["seed_of"](t, i), t, a, DRIFT_HORIZON).astype(np.uint8)
    finally:
        env.close()
    np.savez_compressed(
        out / "episodes" / "reference_actions.npz", **{f"{p}|{t}|{i}": a for (p, t, i), a in actions.items()}
    )
    np.savez_compressed(out / "episodes" / "reference_frames.npz", **frames)
    f.write_text(json.dumps(rows, default=float))


def _load_actions(out: Path) -> dict:
    z = np.load(out / "episodes" / "reference_actions.npz")
    return {tuple(k.rsplit("|", 2)[:2]) + (int(k.rsplit("|", 1)[1]),): z[k] for k in z.files}


def run_rung(name: str, args, ctx, out: Path) -> None:
    f = out / "episodes" / f"{name}.json"
    if f.is_file():
        return
    from kosmos_env.study.trust import DRIFT_HORIZON, drift_row, replay_frames, run_world, shuffled_source
    from kosmos_env.worlds.shuffled import ShuffledCommandWorld

    t0 = time.perf_counter()
    env_id, world = make_rung_world(name, args.weights_dir)
    actions: dict = {}
    if name == "simulator":  # the simulator's own rollouts are the reference run's: same seeds, same episodes
        ref = json.loads((out / "episodes" / "reference.json").read_text())
        rows = [dict(r, world=name, judges={j: r["judges"][j] for j in JUDGES}) for r in ref]
        actions = _load_actions(out)
        world.close()
    else:
        rows = run_world(
            name,
            _env(env_id, world),
            ctx["policies"],
            ctx["jobs"],
            ctx["seed_of"],
            ctx["judges"],
            gate_spec=ctx["gate"],
            keep_actions=actions,
            progress=True,
        )
    inner = make_rung_world(name, args.weights_dir)[1]
    sw = ShuffledCommandWorld(inner)
    hook = shuffled_source(actions, args.seeds, args.seed_offset + 7919)
    shuffled = run_world(
        f"{name}:shuffled",
        _env(env_id, sw),
        ctx["policies"],
        ctx["jobs"],
        ctx["seed_of"],
        ctx["judges"],
        before=lambda p, t, i: hook(sw, p, t, i),
        progress=True,
    )
    ref_actions = _load_actions(out)
    real = np.load(out / "episodes" / "reference_frames.npz")
    drift = []
    env = _env(*make_rung_world(name, args.weights_dir))
    try:
        for key in real.files:
            p, t, i = key.rsplit("|", 2)
            i = int(i)
            gen = replay_frames(env, ctx["seed_of"](t, i), t, ref_actions[(p, t, i)], DRIFT_HORIZON)
            r = drift_row(gen, real[key].astype(np.float32))
            if r is not None:
                drift.append({"policy": p, "task": t, "seed": ctx["seed_of"](t, i), **r})
    finally:
        env.close()
    f.write_text(
        json.dumps(
            {"world": rows, "shuffled": shuffled, "drift": drift, "seconds": time.perf_counter() - t0}, default=float
        )
    )
    print(f"rung {name}: {time.perf_counter() - t0:.0f} s", flush=True)


# -- analysis ---------------------------------------------------------------------------------
def _matrix(rows, policies, units, value):
    m = np.full((len(policies), len(units)), np.nan)
    cnt = np.zeros_like(m)
    pi = {p: k for k, p in enumerate(policies)}
    ui = {u: k for k, u in enumerate(units)}
    for r in rows:
        v = value(r)
        if v is None or r["policy"] not in pi or (r["task"], r["seed"]) not in ui:
            continue
        a, b = pi[r["policy"]], ui[(r["task"], r["seed"])]
        m[a, b] = (0 if np.isnan(m[a, b]) else m[a, b]) + float(v)
        cnt[a, b] += 1
    with np.errstate(invalid="ignore"):
        return np.where(cnt > 0, m / np.maximum(cnt, 1), np.nan)


def _rates(m, idx):
    sub = m[:, idx]  # (P, B, U)
    ok = ~np.isnan(sub)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.where(ok, sub, 0).sum(axis=2) / ok.sum(axis=2)).T  # (B, P)


def _kendall(E, T):
    """Kendall tau-b per row; a constant ranking (tau-b undefined) scores 0: no ranking information."""
    from kosmos_env.stats.agreement import rowwise

    k = rowwise("kendall", np.nan_to_num(E), np.nan_to_num(T))
    const = np.ptp(np.nan_to_num(E), axis=1) == 0
    return np.where(const, 0.0, k), const


def analyze(out: Path, rungs, policies, n_boot: int, seed: int = 0) -> dict:
    from kosmos_env.study.trust import DIAGNOSTICS, DRIFT_HORIZON, _interval, diagnostics_from_rows

    ref = json.loads((out / "episodes" / "reference.json").read_text())
    units = sorted({(r["task"], r["seed"]) for r in ref})
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(units), size=(n_boot, len(units)))
    all_idx = np.arange(len(units))[None]
    truth = _matrix(ref, policies, units, lambda r: r["judges"]["state"])
    closed = [k for k, p in enumerate(policies) if p.startswith("ckpt:")]
    t_obs, t_boot = _rates(truth, all_idx), _rates(truth, idx)
    data = {n: json.loads((out / "episodes" / f"{n}.json").read_text()) for n in rungs}
    table = []
    k_obs = {j: [] for j in JUDGES}
    k_boot = {j: [] for j in JUDGES}
    d_obs = {d: {j: [] for j in JUDGES} for d in DIAGNOSTICS}
    d_boot = {d: {j: [] for j in JUDGES} for d in DIAGNOSTICS}
    for name in rungs:
        rec = data[name]
        entry = {"name": name, "kendall": {}, "diagnostics": {}, "seconds": rec.get("seconds")}
        for j in JUDGES:
            m = _matrix(rec["world"], policies, units, lambda r: r["judges"].get(j))
            ko, const = _kendall(_rates(m, all_idx), t_obs)
            kb, _ = _kendall(_rates(m, idx), t_boot)
            k_obs[j].append(ko[0])
            k_boot[j].append(kb)
            entry["kendall"][j] = {
                "value": float(ko[0]),
                "interval": _interval(kb),
                "constant": bool(const[0]),
                "rates": [None if not np.isfinite(x) else float(x) for x in _rates(m, all_idx)[0]],
            }
            if len(closed) >= 3:  # the same Kendall on the closed-loop checkpoints alone
                co_, _ = _kendall(_rates(m[closed], all_idx), t_obs[:, closed])
                cb_, _ = _kendall(_rates(m[closed], idx), t_boot[:, closed])
                entry.setdefault("kendall_closed_loop", {})[j] = {"value": float(co_[0]), "interval": _interval(cb_)}
            diag = diagnostics_from_rows(
                rec["world"],
                judge=j,
                shuffled_rows=rec["shuffled"],
                drift_rows=rec["drift"],
                units=units,
                n_boot=n_boot,
                seed=seed,
                world=name,
            )
            entry["diagnostics"][j] = {"shuffled_gap": diag["shuffled_gap"]}
            entry["diagnostics"]["gate_discard"] = diag["gate_discard"]
            entry["diagnostics"]["drift_ratio"] = diag["drift_ratio"]
            # the same unit resamples as the Kendall's (diagnostics_from_rows draws them from the same seed)
            boots = _diag_boot(rec, j, units, idx)
            for d in DIAGNOSTICS:
                d_obs[d][j].append(diag[d]["value"] if diag[d]["value"] is not None else np.nan)
                d_boot[d][j].append(boots[d])
        table.append(entry)
    # prediction over rungs: Spearman(diagnostic, Kendall) per resample, the same resample for all rungs
    prediction, upper = {}, {}
    for j in JUDGES:
        prediction[j], combined = _predict(list(range(len(rungs))), k_obs[j], k_boot[j], d_obs, d_boot, j)
        for e, c in zip(table, combined, strict=True):
            e.setdefault("combined", {})[j] = float(c)
        # the upper ladder: rungs whose judge ranks at all (a constant ranking is visible without truth)
        live = [i for i, e in enumerate(table) if not e["kendall"][j]["constant"]]
        upper[j] = _predict(live, k_obs[j], k_boot[j], d_obs, d_boot, j)[0] if len(live) >= 3 else None
        if upper[j] is not None:
            upper[j]["rungs_named"] = [table[i]["name"] for i in live]
    names = [e["name"] for e in table]
    v2_minus_v1 = None
    if "learned_v2" in names and "learned_full" in names:  # does the ladder tell v1 and v2 apart?
        a, b = names.index("learned_v2"), names.index("learned_full")
        v2_minus_v1 = {}
        for j in JUDGES:
            v2_minus_v1[f"kendall_{j}"] = _difference(k_obs[j][a], k_obs[j][b], k_boot[j][a], k_boot[j][b])
            v2_minus_v1[f"shuffled_gap_{j}"] = _difference(
                d_obs["shuffled_gap"][j][a],
                d_obs["shuffled_gap"][j][b],
                d_boot["shuffled_gap"][j][a],
                d_boot["shuffled_gap"][j][b],
            )
        for d in ("gate_discard", "drift_ratio"):
            j = JUDGES[0]
            v2_minus_v1[d] = _difference(d_obs[d][j][a], d_obs[d][j][b], d_boot[d][j][a], d_boot[d][j][b])
    return {
        "rungs": table,
        "v2_minus_v1": v2_minus_v1,
        "prediction": prediction,
        "prediction_upper": upper,
        "judges": list(JUDGES),
        "policies": list(policies),
        "units": [list(u) for u in units],
        "n_boot": n_boot,
        "alpha": 0.05,
        "drift_horizon": DRIFT_HORIZON,
        "truth_rates": [float(x) for x in t_obs[0]],
    }


def _predict(sel, k_obs, k_boot, d_obs, d_boot, j):
    """Spearman over the rungs ``sel`` between each diagnostic (and the combined standing) and
    Kendall, on every shared unit resample; returns (prediction, combined standing per selected rung)."""
    from kosmos_env.stats.agreement import rowwise
    from kosmos_env.study.trust import DIAGNOSTICS, _interval

    K = np.stack([k_boot[i] for i in sel], axis=1)  # (B, R)
    Ko = np.asarray([k_obs[i] for i in sel])[None]
    out, comb_obs, comb_boot = {}, [], []
    for d in DIAGNOSTICS:
        D = np.stack([d_boot[d][j][i] for i in sel], axis=1)
        Do = np.asarray([d_obs[d][j][i] for i in sel], dtype=float)[None]
        ok = np.isfinite(Do[0])
        rho_o = rowwise("spearman", Do[:, ok], Ko[:, ok])[0]
        Db = np.where(np.isfinite(D[:, ok]), D[:, ok], np.nanmedian(D[:, ok], axis=0))
        sign = 1 if d == "shuffled_gap" else -1
        out[d] = {
            "value": None if not np.isfinite(rho_o) else float(rho_o),
            "interval": _interval(rowwise("spearman", Db, K[:, ok])),
            "rungs": int(ok.sum()),
            "expected_sign": "+" if d == "shuffled_gap" else "-",
            "p_value": _permutation_p(Do[0, ok], Ko[0, ok], sign),
        }
        comb_obs.append(_standing(sign * Do))
        comb_boot.append(_standing(sign * np.where(np.isfinite(D), D, np.nanmedian(D, axis=0))))
    co = np.nanmean(np.stack(comb_obs), axis=0)
    cb = np.nanmean(np.stack(comb_boot), axis=0)
    rho = rowwise("spearman", co, Ko)[0]
    out["combined"] = {
        "value": None if not np.isfinite(rho) else float(rho),
        "interval": _interval(rowwise("spearman", cb, K)),
        "rungs": len(sel),
        "expected_sign": "+",
        "p_value": _permutation_p(co[0], Ko[0], 1),
    }
    return out, co[0]


def _difference(obs_a, obs_b, boot_a, boot_b) -> dict:
    """a - b with the interval of the paired (shared-resample) differences."""
    from kosmos_env.study.trust import _interval

    diff = np.asarray(boot_a, dtype=float) - np.asarray(boot_b, dtype=float)
    value = float(obs_a) - float(obs_b)
    return {"value": value if np.isfinite(value) else None, "interval": _interval(diff[np.isfinite(diff)])}


def _permutation_p(diag: np.ndarray, kendall: np.ndarray, sign: int, n_perm: int = 10000, seed: int = 0):
    """One-sided permutation p-value of Spearman(diag, kendall) over rung labels, in the expected
    direction ``sign``: the share of label permutations (the observed one counted) with a Spearman at
    least as far that way. None when it is undefined (a constant column or fewer than 3 rungs)."""
    from kosmos_env.stats.agreement import rowwise

    diag, kendall = np.asarray(diag, dtype=float), np.asarray(kendall, dtype=float)
    if len(diag) < 3 or np.ptp(diag) == 0 or np.ptp(kendall) == 0:
        return None
    obs = sign * rowwise("spearman", diag[None], kendall[None])[0]
    rng = np.random.default_rng(seed)
    perms = np.stack([rng.permutation(kendall) for _ in range(n_perm)])
    null = sign * rowwise("spearman", np.broadcast_to(diag, perms.shape), perms)
    return float((1 + np.sum(null >= obs - 1e-12)) / (1 + n_perm))


def _standing(X):
    """Per row, each rung's share of the other rungs it beats (higher X better; ties half)."""
    X = np.asarray(X, dtype=float)
    R = X.shape[1]
    gt = (X[:, :, None] > X[:, None, :]).sum(axis=2)
    eq = (X[:, :, None] == X[:, None, :]).sum(axis=2) - 1
    out = (gt + 0.5 * eq) / max(1, R - 1)
    return np.where(np.isfinite(X), out, np.nan)


def _diag_boot(rec, judge, units, idx):
    """Per-resample values of the three diagnostics on the shared unit resamples ``idx``."""
    from kosmos_env.study.trust import _ratio, _unit_sums

    out = {}
    s, c = _unit_sums(rec["world"], units, lambda r: r.get("gate_discard"))
    out["gate_discard"] = _ratio(s, c, idx)[1]
    sw, cw = _unit_sums(rec["world"], units, lambda r: r["judges"].get(judge))
    ss, cs = _unit_sums(rec["shuffled"], units, lambda r: r["judges"].get(judge))
    out["shuffled_gap"] = _ratio(sw, cw, idx)[1] - _ratio(ss, cs, idx)[1]
    sw, cw = _unit_sums(rec["drift"], units, lambda r: r["world"])
    sc, cc = _unit_sums(rec["drift"], units, lambda r: r["copy"])
    bw, bc = _ratio(sw, cw, idx)[1], _ratio(sc, cc, idx)[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["drift_ratio"] = np.where(bc > 0, bw / np.where(bc > 0, bc, 1), np.nan)
    return out


def _iv(e, pct=False, signed=False):
    if e is None or e.get("value") is None:
        return "n/a"
    f = (lambda x: f"{100 * x:.0f}") if pct else (lambda x: f"{x:+.2f}") if signed else (lambda x: f"{x:.2f}")
    iv = e.get("interval")
    return f"{f(e['value'])}{' %' if pct else ''} [{f(iv[0])}, {f(iv[1])}]" if iv else f"{f(e['value'])} (no interval)"


def format_table(res: dict) -> str:
    lines = [
        "| rung | Kendall vision | Kendall robot_log | gate discard | gap vision | gap robot_log | drift ratio H=20 |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in res["rungs"]:
        kv, kr = e["kendall"]["vision"], e["kendall"]["robot_log"]
        lines.append(
            f"| {e['name']} | {_iv(kv, signed=True)}{' (constant)' if kv['constant'] else ''} | "
            f"{_iv(kr, signed=True)}{' (constant)' if kr['constant'] else ''} | "
            f"{_iv(e['diagnostics']['gate_discard'], pct=True)} | "
            f"{_iv(e['diagnostics']['vision']['shuffled_gap'], signed=True)} | "
            f"{_iv(e['diagnostics']['robot_log']['shuffled_gap'], signed=True)} | "
            f"{_iv(e['diagnostics']['drift_ratio'])} |"
        )
    lines += [
        "",
        "| diagnostic | expected sign | Spearman vs Kendall (vision) | Spearman vs Kendall (robot_log) |",
        "|---|---|---|---|",
    ]
    for d in ("gate_discard", "shuffled_gap", "drift_ratio", "combined"):
        pv, pr = res["prediction"]["vision"][d], res["prediction"]["robot_log"][d]
        lines.append(
            f"| {d} | {pv['expected_sign']} | {_iv(pv, signed=True)} over {pv['rungs']} rungs | "
            f"{_iv(pr, signed=True)} over {pr['rungs']} rungs |"
        )
    for j in JUDGES:
        up = res.get("prediction_upper", {}).get(j)
        if up is None:
            continue
        lines += [
            "",
            f"upper ladder ({j} judge: rungs whose judge ranks at all: {', '.join(up['rungs_named'])})",
            "",
            "| diagnostic | expected sign | Spearman vs Kendall | one-sided permutation p |",
            "|---|---|---|---|",
        ]
        for d in ("gate_discard", "shuffled_gap", "drift_ratio", "combined"):
            pv = up[d].get("p_value")
            lines.append(
                f"| {d} | {up[d]['expected_sign']} | {_iv(up[d], signed=True)} over {up[d]['rungs']} rungs | "
                f"{'n/a' if pv is None else f'{pv:.4f}'} |"
            )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench/results/fidelity_ladder")
    p.add_argument(
        "--weights-dir",
        default="bench/results/fidelity_ladder/weights",
        help="folder with w05/ w15/ w40/ world.safetensors from train-world",
    )
    p.add_argument("--rungs", nargs="+", default=list(RUNGS), type=known_rung)
    p.add_argument("--policies", nargs="+", default=list(POLICIES))
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--seed-offset", type=int, default=170000)
    p.add_argument("--drift-seeds", type=int, default=2)
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--analyze-only", action="store_true")
    p.add_argument(
        "--package-json",
        default="kosmos_env/study/fidelity_ladder.json",
        help="where the reference numbers for `kosmos-env trust` go ('' to skip)",
    )
    args = p.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    out = Path(args.out)
    (out / "episodes").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not args.analyze_only:
        import torch

        from kosmos_env.policies import make_policy, parse_policy_arg
        from kosmos_env.spec import load_spec
        from kosmos_env.study.run import _judges
        from kosmos_env.study.trust import gate_spec_for

        torch.set_num_threads(1)
        tasks = _tasks()
        judges = {k: v for k, v in _judges(None, load_spec(REFERENCE).world).items() if k in JUDGES}
        ctx = {
            "policies": {q: make_policy(n, **kw) for q, (n, kw) in ((q, parse_policy_arg(q)) for q in args.policies)},
            "jobs": [(q, t, i) for q in args.policies for t in tasks for i in range(args.seeds)],
            "seed_of": lambda t, i: args.seed_offset + tasks.index(t) * 1000 + i,
            "judges": judges,
            # one gate for every rung: the simulator spec's validated gate (the same camera and workspace)
            "gate": gate_spec_for(load_spec(REFERENCE)),
        }
        run_reference(args, ctx, out)
        for name in args.rungs:
            run_rung(name, args, ctx, out)
    done = [n for n in args.rungs if (out / "episodes" / f"{n}.json").is_file()]
    res = analyze(out, done, args.policies, args.n_boot)
    res.update(
        {
            "source": f"{args.out} (python bench/fidelity_ladder.py)",
            "command": "python bench/fidelity_ladder.py " + " ".join(sys.argv[1:]),
            "seeds": {
                "offset": args.seed_offset,
                "per_policy_task": args.seeds,
                "drift_seeds": args.drift_seeds,
                "rule": "seed_offset + 1000 * task_index + i",
            },
            "machine": f"{platform.machine()}, {os.cpu_count()} cpus, load {load_average()}",
            "analysis_seconds": time.perf_counter() - t0,
        }
    )
    text = json.dumps(res, indent=1, default=float)
    (out / "ladder.json").write_text(text + "\n")
    if args.package_json and len(done) >= 3:
        Path(args.package_json).write_text(text + "\n")
    table = format_table(res)
    (out / "table.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
