"""What the learned tabletop's parts are worth: the ablation table of issue 30, item 4.

Variants of ``Kosmos-TabletopLearned-v1`` (spec fields ``world.rules``, ``world.learned_dynamics``):

- ``full``: the registered world (learned dynamics + slip predictor, the four fixed rules);
- ``rules_off``: ``world.rules = []`` (learned dynamics + slip, no fixed rule);
- ``rules_dynamics``: ``world.learned_dynamics = "rules"`` (the learned dynamics and slip replaced
  by the hand-written rules-only kinematics, all four rules on);
- ``renderer_only``: ``world.learned_dynamics = "none"`` (the object never moves).

For each, on evaluation seeds ``160000 + 1000 * task_index + i`` (i < --seeds), every policy of the
study's population on every task, against the simulator ``Kosmos-Tabletop-v1`` on the same seeds:

- open-loop frame error at H=20 (the simulator's own commands of seed index 0 replayed in both;
  mean absolute pixel difference 0-255) as a ratio to copy-first-frame, bootstrap over episodes;
- the frame judge (``vision``) and the robot-log judge: episode accuracy vs the simulator's state
  truth and Kendall tau of the policy ranking vs the truth's, each with a bootstrap interval over
  (task, seed) units, and the paired difference (variant - full) with its interval (the units
  resampled jointly for both).

The episodes run through the study's own machinery (:mod:`kosmos_env.study.run`: ``_make_env``,
``_run``, ``_judges``), so a variant here is what ``kosmos-env study`` would measure.

    python bench/learned_world_ablation.py --out bench/results/learned_world_ablation

Writes ``results.json`` (every number), ``episodes.json`` (every episode row) and ``table.md`` in
``--out``; the folder's README.md holds the table, command, seeds, wall time and the reading.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

VARIANTS = {
    "full": {},
    "rules_off": {"rules": []},
    "rules_dynamics": {"learned_dynamics": "rules"},
    "renderer_only": {"learned_dynamics": "none"},
}
WORLD = "Kosmos-TabletopLearned-v1"
REFERENCE = "Kosmos-Tabletop-v1"
SEED_OFFSET = 160000
FRAME_H = 20
JUDGES = ("vision", "robot_log")


def replay_frames(
    env_id: str, overrides: dict | None, keys: list, actions: dict, seeds: dict, h: int, prepare=None
) -> dict:
    """Frame ``h`` (after h commands) and frame 0 of each key's commands replayed open loop
    (``prepare(env)``, when given, adjusts the env before the first episode)."""
    from kosmos_env.study.run import _make_env

    env = _make_env(env_id, spec_overrides=overrides)
    if prepare is not None:
        prepare(env)
    out = {}
    try:
        for key in keys:
            obs, _ = env.reset(seed=seeds[key], options={"task": key[1]})
            first = obs["image"].astype(np.float32)
            frame = None
            for t, a in enumerate(actions[key][:h]):
                obs, _, term, trunc, _ = env.step(a)
                if t + 1 == h:
                    frame = obs["image"].astype(np.float32)
                if term or trunc:
                    break
            out[key] = (first, frame)
    finally:
        env.close()
    return out


def bootstrap_ratio(w: np.ndarray, c: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return w[idx].mean(axis=1) / c[idx].mean(axis=1)


def interval(values: np.ndarray, alpha: float = 0.05) -> list | None:
    v = values[np.isfinite(values)]
    if not len(v):
        return None
    return [float(np.quantile(v, alpha / 2)), float(np.quantile(v, 1 - alpha / 2))]


def accuracy_boot(M: np.ndarray, T: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Episode accuracy per resample of unit columns ``idx`` (B, U) (row 0 may be the observed)."""
    e, t = M[:, idx], T[:, idx]
    ok = ~np.isnan(e) & ~np.isnan(t)
    hits = np.where(ok, e == t, False).sum(axis=(0, 2))
    n = ok.sum(axis=(0, 2))
    return np.where(n > 0, hits / np.maximum(n, 1), np.nan)


def subgroup(policy: str) -> str:
    """The study population's subgroups: deceptive policies, closed-loop checkpoints, and the
    open-loop honest family (scripted skills and random)."""
    if policy.startswith("deceptive"):
        return "deceptive"
    if policy.startswith("ckpt:"):
        return "closed_loop"
    return "scripted_random"


def judge_table(rows: list, policies, variants: list, n_boot: int) -> tuple[dict, list, list]:
    """Per judge and variant (and the simulator's own frames): episode accuracy and Kendall vs the
    simulator's state truth with intervals over (task, seed) units, the paired difference to
    ``full``, and episode accuracy per subgroup of policies (paired difference to full too)."""
    from kosmos_env.stats.uncertainty import agreement_uncertainty, aligned_matrix, difference_to_best
    from kosmos_env.study.analyze import _rows_for

    units = sorted({(r["task"], r["seed"]) for r in rows if r["world"] == "reference"})
    truth = aligned_matrix(_rows_for(rows, "reference", "state"), policies, units)
    uidx = np.random.default_rng(1).integers(0, len(units), size=(n_boot, len(units)))
    groups = {}
    for i, p in enumerate(policies):
        groups.setdefault(subgroup(p), []).append(i)
    judged: dict = {}
    for judge in JUDGES:
        mats = {v: aligned_matrix(_rows_for(rows, v, judge), policies, units) for v in variants}
        mats["simulator"] = aligned_matrix(_rows_for(rows, "reference", judge), policies, units)
        kend = agreement_uncertainty(mats, truth, metrics=("kendall",), n_boot=n_boot, seed=0)
        judged[judge] = {}
        for v in [*variants, "simulator"]:
            acc = accuracy_boot(mats[v], truth, np.arange(len(units))[None])[0]
            entry = {
                "accuracy": float(acc),
                "accuracy_interval": interval(accuracy_boot(mats[v], truth, uidx)),
                "kendall": kend["evaluators"][v]["kendall"]["value"],
                "kendall_interval": kend["evaluators"][v]["kendall"]["interval"],
                "kendall_undefined_reason": kend["evaluators"][v]["kendall"].get("reason"),
                "subgroups": {},
            }
            for g, idx in groups.items():
                sub = {
                    "policies": len(idx),
                    "accuracy": float(accuracy_boot(mats[v][idx], truth[idx], np.arange(len(units))[None])[0]),
                    "accuracy_interval": interval(accuracy_boot(mats[v][idx], truth[idx], uidx)),
                }
                if v not in ("full", "simulator"):
                    d = difference_to_best(
                        mats[v], {"full": mats["full"]}, truth, metric="accuracy", rows=idx, n_boot=n_boot, seed=2
                    )
                    sub["accuracy_minus_full"], sub["accuracy_minus_full_interval"] = d["estimate"], d["interval"]
                entry["subgroups"][g] = sub
            if v not in ("full", "simulator"):
                for metric in ("accuracy", "kendall"):
                    d = difference_to_best(mats[v], {"full": mats["full"]}, truth, metric=metric, n_boot=n_boot, seed=2)
                    entry[f"{metric}_minus_full"] = d["estimate"]
                    entry[f"{metric}_minus_full_interval"] = d["interval"]
            judged[judge][v] = entry
    truth_rates = [None if np.isnan(x) else float(x) for x in np.nanmean(truth, axis=1)]
    return judged, truth_rates, units


def reanalyse(out: Path, n_boot: int) -> int:
    """Recompute the judge numbers and the table from a finished run's episodes.json (the frame
    error, which needs the replays, is kept from results.json)."""
    results = json.loads((out / "results.json").read_text())
    rows = json.loads((out / "episodes.json").read_text())
    for r in rows:  # JSON turned the integer cut horizons into strings
        r["horizon_judges"] = {j: {int(h): v for h, v in hv.items()} for j, hv in r["horizon_judges"].items()}
    judged, truth_rates, units = judge_table(rows, results["policies"], list(results["variants"]), n_boot)
    results.update(judges=judged, truth_rates=truth_rates, n_units=len(units), n_boot=n_boot)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    (out / "table.md").write_text(table(results))
    print(table(results))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/learned_world_ablation")
    ap.add_argument("--seeds", type=int, default=4, help="seed indices per (policy, task)")
    ap.add_argument("--policies", default="default", help="'default' (the study's population) or a ';'-list")
    ap.add_argument("--tasks", default=None, help="comma list (default: every task)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--frame-seeds", type=int, default=1, help="seed indices per (policy, task) replayed for frame error"
    )
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--from-episodes",
        action="store_true",
        help="recompute the judge numbers and table from --out's episodes.json (no episodes run)",
    )
    args = ap.parse_args(argv)
    if args.from_episodes:
        return reanalyse(Path(args.out), args.n_boot)

    import torch

    torch.set_num_threads(args.threads)
    from kosmos_env.spec import load_spec
    from kosmos_env.study.run import DEFAULT_POLICIES, StudyConfig, _judges, _make_env, _run, _seed

    variants = [v for v in args.variants.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or "full" not in variants:
        print(f"--variants must include 'full' and name only {list(VARIANTS)}; got {variants}", file=sys.stderr)
        return 2
    policies = DEFAULT_POLICIES if args.policies == "default" else tuple(p for p in args.policies.split(";") if p)
    cfg = StudyConfig(
        world=WORLD,
        reference=REFERENCE,
        policies=policies,
        seeds=args.seeds,
        seed_offset=SEED_OFFSET,
        null_world=False,
        frame_error_seeds=args.frame_seeds,
        threads=args.threads,
    )
    t_all = time.perf_counter()
    ref_spec = load_spec(REFERENCE)
    judges = _judges(None, ref_spec.world)
    probe = _make_env(REFERENCE)
    all_tasks = probe.unwrapped.task_names
    probe.close()
    tasks = args.tasks.split(",") if args.tasks else list(all_tasks)
    jobs = [(p, t, i) for p in policies for t in tasks for i in range(args.seeds)]
    seconds: dict[str, float] = {}
    ref_actions: dict = {}
    t0 = time.perf_counter()
    rows = _run(
        "reference",
        _make_env(REFERENCE),
        cfg,
        judges,
        jobs,
        tasks,
        is_reference=True,
        progress=False,
        examples={},
        keep_actions=ref_actions,
    )
    seconds["reference episodes"] = time.perf_counter() - t0
    hashes = {}
    for v in variants:
        t0 = time.perf_counter()
        env = _make_env(WORLD, spec_overrides={"world": VARIANTS[v]})
        hashes[v] = env.unwrapped.spec_hash
        rows += _run(v, env, cfg, judges, jobs, tasks, is_reference=False, progress=False, examples={})
        seconds[f"{v} episodes"] = time.perf_counter() - t0
        print(f"{v}: {len(jobs)} episodes in {seconds[f'{v} episodes']:.0f} s", flush=True)

    # open-loop frame error at H=20
    keys = [k for k in ref_actions if k[2] < args.frame_seeds]
    seeds = {k: _seed(cfg, tasks, k[1], k[2]) for k in keys}
    t0 = time.perf_counter()
    ref_frames = replay_frames(REFERENCE, None, keys, ref_actions, seeds, FRAME_H)
    seconds["reference replays"] = time.perf_counter() - t0
    keys = [k for k in keys if ref_frames[k][1] is not None]
    copy_err = np.array([np.abs(ref_frames[k][0] - ref_frames[k][1]).mean() for k in keys])
    world_err = {}
    for v in variants:
        t0 = time.perf_counter()
        gen = replay_frames(WORLD, {"world": VARIANTS[v]}, keys, ref_actions, seeds, FRAME_H)
        world_err[v] = np.array([np.abs(gen[k][1] - ref_frames[k][1]).mean() for k in keys])
        seconds[f"{v} replays"] = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    eidx = rng.integers(0, len(keys), size=(args.n_boot, len(keys)))
    frame = {}
    for v in variants:
        ratio = float(world_err[v].mean() / copy_err.mean())
        boot = bootstrap_ratio(world_err[v], copy_err, eidx)
        entry = {
            "error": float(world_err[v].mean()),
            "copy_first_frame": float(copy_err.mean()),
            "ratio": ratio,
            "ratio_interval": interval(boot),
            "n_episodes": len(keys),
        }
        if v != "full":
            d = boot - bootstrap_ratio(world_err["full"], copy_err, eidx)
            entry["ratio_minus_full"] = ratio - frame["full"]["ratio"]
            entry["ratio_minus_full_interval"] = interval(d)
        frame[v] = entry

    judged, truth_rates, units = judge_table(rows, policies, variants, args.n_boot)
    wall = time.perf_counter() - t_all
    command = "python bench/learned_world_ablation.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results = {
        "command": command.strip(),
        "variants": {v: VARIANTS[v] for v in variants},
        "spec_hashes": hashes,
        "policies": list(policies),
        "tasks": tasks,
        "seeds": sorted({r["seed"] for r in rows}),
        "seed_rule": f"{SEED_OFFSET} + 1000 * task_index + i, i < {args.seeds}",
        "n_units": len(units),
        "frame_error_h": FRAME_H,
        "frame_error": frame,
        "judges": judged,
        "truth_rates": truth_rates,
        "seconds": seconds,
        "wall_seconds": wall,
        "torch_threads": args.threads,
        "n_boot": args.n_boot,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    # every episode row (verdicts per judge and cut horizon, seconds): the table recomputes from them
    (out / "episodes.json").write_text(json.dumps(rows, default=float))
    (out / "table.md").write_text(table(results))
    print(table(results))
    return 0


def _iv(x, iv, digits=3, signed=False) -> str:
    if x is None:
        return "undefined"
    s = f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"
    return s + ("" if iv is None else f" [{iv[0]:.{digits}f}, {iv[1]:.{digits}f}]")


def table(res: dict) -> str:
    variants = list(res["variants"])
    lines = [
        f"Frame error at H={res['frame_error_h']} (ratio to copy-first-frame; < 1 beats copying the first "
        f"frame), judge episode accuracy and Kendall vs simulator truth; 95 % bootstrap intervals "
        f"({res['n_units']} (task, seed) units for the judges, {res['frame_error'][variants[0]]['n_episodes']} "
        f"replayed episodes for the frame error).",
        "",
        "| variant | frame err ratio | vision acc | vision Kendall | robot_log acc | robot_log Kendall |",
        "|---|---|---|---|---|---|",
    ]
    for v in [*variants, "simulator"]:
        f = res["frame_error"].get(v)
        fr = "0 (is the truth)" if v == "simulator" else _iv(f["ratio"], f["ratio_interval"])
        cells = [fr]
        for j in JUDGES:
            e = res["judges"][j][v]
            cells += [_iv(e["accuracy"], e["accuracy_interval"]), _iv(e["kendall"], e["kendall_interval"], 2)]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Paired differences, variant - full (same units / episodes resampled together):",
        "",
        "| variant | frame err ratio | vision acc | vision Kendall | robot_log acc | robot_log Kendall |",
        "|---|---|---|---|---|---|",
    ]
    for v in variants:
        if v == "full":
            continue
        f = res["frame_error"][v]
        cells = [_iv(f["ratio_minus_full"], f["ratio_minus_full_interval"], signed=True)]
        for j in JUDGES:
            e = res["judges"][j][v]
            cells += [
                _iv(e["accuracy_minus_full"], e["accuracy_minus_full_interval"], signed=True),
                _iv(e["kendall_minus_full"], e["kendall_minus_full_interval"], 2, signed=True),
            ]
        lines.append(f"| {v} - full | " + " | ".join(cells) + " |")
    groups = list(res["judges"][JUDGES[0]]["full"].get("subgroups", {}))
    if groups:
        lines += [
            "",
            "Episode accuracy per subgroup of policies (value; paired difference to full):",
            "",
            "| variant | "
            + " | ".join(
                f"{j} {g} ({res['judges'][j]['full']['subgroups'][g]['policies']})" for j in JUDGES for g in groups
            )
            + " |",
            "|---|" + "---|" * (len(JUDGES) * len(groups)),
        ]
        for v in [*variants, "simulator"]:
            cells = []
            for j in JUDGES:
                for g in groups:
                    e = res["judges"][j][v]["subgroups"][g]
                    c = f"{e['accuracy']:.3f}"
                    if "accuracy_minus_full" in e:
                        c += "; " + _iv(e["accuracy_minus_full"], e["accuracy_minus_full_interval"], signed=True)
                    cells.append(c)
            lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Seconds: "
        + ", ".join(f"{k} {v:.0f}" for k, v in res["seconds"].items())
        + f"; wall {res['wall_seconds']:.0f} s at {res['torch_threads']} torch thread(s).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
