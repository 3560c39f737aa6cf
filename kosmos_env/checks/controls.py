"""Shuffled-command controls: what a world must fail when it ignores the commands it is given.

Shared by ``kosmos-env gate-check`` (the gate's validation), ``kosmos-env eval --control
shuffled`` and ``kosmos-env study --control shuffled``:

- :func:`record` runs policies and keeps frames, commands and the robot log;
- :func:`replay_controls` replays recorded episodes through the consistency gate with their true
  commands, with shuffled commands (own commands permuted in time; another episode's), frozen
  frames and camera pans;
- :class:`ShuffledCommandWorld` wraps any world so that it executes other actions than the
  commanded ones (another episode's commands permuted in time), or ignores them and lets a
  driver policy play; :func:`campaign` measures success in the true, shuffled and expert worlds
  with and without the gate;
- :func:`gate_check` runs all of it and :func:`gate_check_acceptance` / :func:`format_gate_check`
  judge and print the result.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from kosmos_env.gate.measurements import average_ranks
from kosmos_env.worlds.shuffled import ShuffledCommandWorld  # noqa: F401  (re-exported: the controls use it)


# -- recording --------------------------------------------------------------------------------
@dataclass
class Episode:
    """One recorded episode: frames (T+1, H, W, 3), commanded actions (T, 7), log ee_pos (T, 3)."""

    policy: str
    task: str
    seed: int
    frames: np.ndarray
    actions: np.ndarray
    ee_pos: np.ndarray | None
    success: bool
    gate: list[dict[str, Any]] = field(default_factory=list)


def parse_policies(text: str) -> list[str]:
    """Split a policy list: ';' separates policies; ',' too unless it separates k=v pairs."""
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    out: list[str] = []
    for part in parts:
        if "=" in part and ":" not in part and out:  # a k=v continuing the previous policy
            out[-1] = f"{out[-1]},{part}"
        else:
            out.append(part)
    return out


def make_env(env_id: str, image_size: int, gate: Mapping[str, Any] | None = None, world: Any = None):
    import gymnasium

    import kosmos_env  # noqa: F401  (registers env ids)

    kwargs: dict[str, Any] = {"image_size": (image_size, image_size)}
    if gate is not None:
        kwargs["gate"] = dict(gate)
    if world is not None:
        kwargs["world_model"] = world
    return gymnasium.make(env_id, **kwargs)


def record(env, policy_args: Sequence[str], tasks: Sequence[str], seeds: Sequence[int], progress=None) -> list[Episode]:
    """Run every (policy, task, seed) with the env as given; keep what the gate needs."""
    from kosmos_env.policies import make_policy, parse_policy_arg
    from kosmos_env.rollouts import run_episode

    episodes = []
    for arg in policy_args:
        name, kwargs = parse_policy_arg(arg)
        policy = make_policy(name, **kwargs)
        for task in tasks:
            for seed in seeds:
                result = run_episode(env, policy, seed, task=task)
                ro = result.rollout
                success = bool(result.judgment and result.judgment.get("success"))
                ee = np.asarray(ro.log["ee_pos"]) if "ee_pos" in ro.log else None
                episodes.append(Episode(arg, task, seed, ro.frames, ro.actions, ee, success))
                if progress is not None:
                    progress.update(1)
    return episodes


# -- replay -----------------------------------------------------------------------------------
def replay(
    gate_spec: Mapping[str, Any],
    episode: Episode,
    actions: np.ndarray,
    calibration: Any,
    use_log: bool = True,
    controls: bool = False,
    rng: np.random.Generator | None = None,
    pan_range: tuple[float, float] = (2.0, 8.0),
) -> dict[str, Any]:
    """Feed one recorded episode to a fresh gate, paired with ``actions`` (true or shuffled).

    Returns per-step ``passed``, ``score``, ``demanded`` and, with ``controls``, the verdicts
    on a frozen frame and on a camera pan at every step (each from a copy of the gate's state
    after the true history). Pan magnitudes are in pixels of a 128-px frame, scaled to the
    episode's frame size.
    """
    import cv2

    from kosmos_env.gate import ConsistencyGate

    gate = ConsistencyGate.from_spec({k: v for k, v in gate_spec.items()})
    steps: dict[str, list] = {"passed": [], "score": [], "demanded": [], "check": []}
    ctrl: dict[str, list] = {"frozen_passed": [], "frozen_demanded": [], "pan_passed": [], "pan_demanded": []}
    frames = episode.frames
    h, w = frames.shape[1:3]
    for t in range(len(actions)):
        log = {"ee_pos": episode.ee_pos[t : t + 1]} if (use_log and episode.ee_pos is not None) else {}
        act = actions[t : t + 1]
        if controls:
            frozen = copy.deepcopy(gate).check(frames[t], frames[t][None], act, calibration, log)
            ctrl["frozen_passed"].append(frozen.passed)
            ctrl["frozen_demanded"].append(any(s["demanded"] for s in frozen.segments))
            angle = rng.uniform(0.0, 2 * np.pi)
            mag = rng.uniform(*pan_range) * w / 128.0
            m = np.float32([[1, 0, mag * np.cos(angle)], [0, 1, mag * np.sin(angle)]])
            panned = cv2.warpAffine(frames[t], m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            pan = copy.deepcopy(gate).check(frames[t], panned[None], act, calibration, log)
            ctrl["pan_passed"].append(pan.passed)
            ctrl["pan_demanded"].append(any(s["demanded"] for s in pan.segments))
        verdict = gate.check(frames[t], frames[t + 1][None], act, calibration, log)
        steps["passed"].append(verdict.passed)
        steps["score"].append(verdict.score)
        steps["demanded"].append(any(s["demanded"] for s in verdict.segments))
        steps["check"].append(verdict.check)
    out = {k: np.asarray(v) for k, v in steps.items()}
    if controls:
        out.update({k: np.asarray(v) for k, v in ctrl.items()})
    return out


def shuffled_actions(
    episodes: Sequence[Episode], rng: np.random.Generator
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(permuted, swapped) commands per episode: own commands permuted in time, and another
    episode's (same policy, the next one in order) permuted in time."""
    permuted, swapped = [], []
    by_policy: dict[str, list[int]] = {}
    for i, ep in enumerate(episodes):
        by_policy.setdefault(ep.policy, []).append(i)
    for i, ep in enumerate(episodes):
        permuted.append(ep.actions[rng.permutation(len(ep.actions))])
        group = by_policy[ep.policy]
        other = (
            episodes[group[(group.index(i) + 1) % len(group)]] if len(group) > 1 else episodes[(i + 1) % len(episodes)]
        )
        src = other.actions[rng.permutation(len(other.actions))]
        swapped.append(np.resize(src, ep.actions.shape))
    return permuted, swapped


def auroc(positive: Sequence[float], negative: Sequence[float]) -> float | None:
    """Area under the ROC curve of a score (higher = positive), ties counted half."""
    pos, neg = np.asarray(positive, float), np.asarray(negative, float)
    if not len(pos) or not len(neg):
        return None
    ranks = average_ranks(np.concatenate([pos, neg]))
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def _rate(values) -> float | None:
    values = np.asarray(values)
    return float(values.mean()) if values.size else None


def replay_controls(
    gate_spec, episodes: Sequence[Episode], calibration, use_log: bool, seed: int, progress=None
) -> dict[str, Any]:
    """Steps 2 and 3 of the module doc for one gate mode (calibrated or not)."""
    rng = np.random.default_rng(seed)
    permuted, swapped = shuffled_actions(episodes, rng)
    runs: dict[str, list[dict[str, Any]]] = {"true": [], "permuted": [], "swapped": []}
    for i, ep in enumerate(episodes):
        runs["true"].append(replay(gate_spec, ep, ep.actions, calibration, use_log, controls=True, rng=rng))
        runs["permuted"].append(replay(gate_spec, ep, permuted[i], calibration, use_log))
        runs["swapped"].append(replay(gate_spec, ep, swapped[i], calibration, use_log))
        if progress is not None:
            progress.update(1)

    def cat(kind, key, mask_key=None):
        parts = [r[key][r[mask_key]] if mask_key else r[key] for r in runs[kind]]
        return np.concatenate(parts) if parts else np.zeros(0)

    out: dict[str, Any] = {"by_policy": {}}
    for kind in runs:
        out[kind] = {
            "step_pass_rate": _rate(cat(kind, "passed")),
            "checkable_step_pass_rate": _rate(cat(kind, "passed", "demanded")),
            "episode_pass_rate": _rate([r["passed"].all() for r in runs[kind]]),
            "checkable_steps": int(sum(r["demanded"].sum() for r in runs[kind])),
            "steps": int(sum(len(r["passed"]) for r in runs[kind])),
        }
    for kind in ("permuted", "swapped"):
        out[f"auroc_{kind}_checkable_steps"] = auroc(cat("true", "score", "demanded"), cat(kind, "score", "demanded"))
        out[f"auroc_{kind}_all_steps"] = auroc(cat("true", "score"), cat(kind, "score"))
        ep_true = [float(np.mean(np.where(r["passed"], r["score"], 0.0))) for r in runs["true"]]
        ep_shuf = [float(np.mean(np.where(r["passed"], r["score"], 0.0))) for r in runs[kind]]
        out[f"auroc_{kind}_episodes"] = auroc(ep_true, ep_shuf)
    frozen_dem = cat("true", "frozen_passed", "frozen_demanded")
    pan_dem = cat("true", "pan_passed", "pan_demanded")
    out["frozen"] = {
        "rejection_rate_demanded": _rate(~frozen_dem) if frozen_dem.size else None,
        "demanded_steps": int(frozen_dem.size),
        "rejection_rate_all": _rate(~cat("true", "frozen_passed")),
    }
    out["pan"] = {
        "rejection_rate_demanded": _rate(~pan_dem) if pan_dem.size else None,
        "demanded_steps": int(pan_dem.size),
        "rejection_rate_all": _rate(~cat("true", "pan_passed")),
    }
    for label in dict.fromkeys(ep.policy for ep in episodes):
        idx = [i for i, ep in enumerate(episodes) if ep.policy == label]
        out["by_policy"][label] = {
            kind: {
                "step_pass_rate": _rate(np.concatenate([runs[kind][i]["passed"] for i in idx])),
                "episode_pass_rate": _rate([runs[kind][i]["passed"].all() for i in idx]),
            }
            for kind in runs
        }
    return out


# -- campaign ---------------------------------------------------------------------------------
def campaign(
    env_id: str,
    image_size: int,
    gate_spec: Mapping[str, Any],
    skills: Sequence[float],
    tasks: Sequence[str],
    seeds: Sequence[int],
    seed: int,
    progress=None,
) -> dict[str, Any]:
    """Success rates of scripted skills in the true and the shuffled-command world, with and
    without the gate (see the module doc). Deterministic for a given ``seed``."""
    from kosmos_env.policies import make_policy
    from kosmos_env.rollouts import run_episode
    from kosmos_env.spec import load_spec
    from kosmos_env.worlds import make_world

    gate_on = dict(gate_spec, enabled=True)
    gate_off = {"enabled": False}
    base_spec = load_spec(env_id).with_overrides(image_size=(image_size, image_size))
    envs = {
        ("true", False): make_env(env_id, image_size, gate_off),
        ("true", True): make_env(env_id, image_size, gate_on),
    }
    shuffled_worlds = {}
    for gated in (False, True):
        world = ShuffledCommandWorld(make_world(base_spec))
        shuffled_worlds[gated] = world
        envs[("shuffled", gated)] = make_env(env_id, image_size, gate_on if gated else gate_off, world=world)
        expert = ShuffledCommandWorld(make_world(base_spec), driver=make_policy("scripted", skill=1.0, env_id=env_id))
        envs[("expert", gated)] = make_env(env_id, image_size, gate_on if gated else gate_off, world=expert)

    rng = np.random.default_rng(seed + 7919)
    results: dict[str, Any] = {}
    for skill in skills:
        policy = make_policy("scripted", skill=float(skill))
        label = f"scripted:skill={skill}"
        # the executed actions of the shuffled world: another seed's true episode, permuted in time
        sources = {}
        counts = {
            f"{w}_{'gate' if g else 'nogate'}": {"success": 0, "discarded": 0, "episodes": 0}
            for w in ("true", "shuffled", "expert")
            for g in (False, True)
        }
        for task in tasks:
            recorded = {}
            for s in seeds:
                res = run_episode(envs[("true", False)], policy, s, task=task)
                recorded[s] = res.rollout.actions
                c = counts["true_nogate"]
                c["episodes"] += 1
                c["success"] += bool(res.judgment and res.judgment.get("success"))
                if progress is not None:
                    progress.update(1)
            for i, s in enumerate(seeds):
                other = recorded[seeds[(i + 1) % len(seeds)]] if len(seeds) > 1 else recorded[s]
                sources[(task, s)] = other[rng.permutation(len(other))]
            for s in seeds:
                res = run_episode(envs[("true", True)], policy, s, task=task)
                _count(counts["true_gate"], res)
                for gated in (False, True):
                    shuffled_worlds[gated].set_source(sources[(task, s)])
                    res = run_episode(envs[("shuffled", gated)], policy, s, task=task)
                    _count(counts[f"shuffled_{'gate' if gated else 'nogate'}"], res)
                    res = run_episode(envs[("expert", gated)], policy, s, task=task)
                    _count(counts[f"expert_{'gate' if gated else 'nogate'}"], res)
                if progress is not None:
                    progress.update(5)
        results[label] = {
            k: {
                "episodes": c["episodes"],
                "success_rate": c["success"] / c["episodes"] if c["episodes"] else None,
                "discard_rate": c["discarded"] / c["episodes"] if c["episodes"] else None,
            }
            for k, c in counts.items()
        }
    for env in envs.values():
        env.close()
    return results


def _count(c: dict[str, int], res) -> None:
    c["episodes"] += 1
    if res.outcome == "discarded":
        c["discarded"] += 1
    elif res.judgment and res.judgment.get("success"):
        c["success"] += 1


def _fmt(x, pct=True) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:5.1f}%" if pct else f"{x:.3f}"


def json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.bool_):
        return bool(o)
    raise TypeError(type(o).__name__)


def gate_check_acceptance(cal: Mapping[str, Any], camp: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    worst = min(v["true"]["step_pass_rate"] for v in cal["by_policy"].values())
    out["true steps pass >= 95% for every policy"] = {"value": worst, "ok": worst >= 0.95}
    for kind in ("permuted", "swapped"):
        v = cal[f"auroc_{kind}_checkable_steps"]
        out[f"AUROC true vs {kind} (checkable steps) >= 0.90"] = {"value": v, "ok": v is not None and v >= 0.90}
    for ctrl in ("frozen", "pan"):
        v = cal[ctrl]["rejection_rate_demanded"]
        out[f"{ctrl} rejected on 100% of steps over the motion threshold"] = {"value": v, "ok": v == 1.0}
    if camp:
        surviving = max(r["shuffled_gate"]["success_rate"] for r in camp.values())
        out["shuffled world: success surviving the gate <= 5% for every skill"] = {
            "value": surviving,
            "ok": surviving <= 0.05,
        }
        # an expert-playing world hands every policy the expert's successes; the gate must take
        # away those the policy's own commands would not have earned (for the skill-1 policy the
        # expert's moves *are* its commands, so nothing is to be taken away there)
        excess = max(r["expert_gate"]["success_rate"] - r["true_nogate"]["success_rate"] for r in camp.values())
        out["expert world: success surviving the gate exceeds the true world's by <= 5 points"] = {
            "value": excess,
            "ok": excess <= 0.05,
        }
        change = max(abs(r["true_gate"]["success_rate"] - r["true_nogate"]["success_rate"]) for r in camp.values())
        out["gate changes true-world success by <= 5 points"] = {"value": change, "ok": change <= 0.05}
    return out


def format_gate_check(r: Mapping[str, Any]) -> str:
    lines = [
        f"gate-check on {r['env_id']} (spec {r['spec_hash'][:12]}), {r['image_size']}x{r['image_size']}, "
        f"{len(r['policies'])} policies x {len(r['tasks'])} tasks x {len(r['seeds'])} seeds, {r['seconds']} s"
    ]
    for mode in ("calibrated", "calibration_free"):
        m = r[mode]
        lines.append("")
        lines.append(f"[{mode}] gate replayed on recorded episodes")
        lines.append(
            f"  {'commands':<10} {'steps pass':>11} {'checkable pass':>15} {'episodes pass':>14} {'checkable':>10}"
        )
        for kind in ("true", "permuted", "swapped"):
            k = m[kind]
            lines.append(
                f"  {kind:<10} {_fmt(k['step_pass_rate']):>11} {_fmt(k['checkable_step_pass_rate']):>15} "
                f"{_fmt(k['episode_pass_rate']):>14} {k['checkable_steps']:>6}/{k['steps']}"
            )
        for kind in ("permuted", "swapped"):
            lines.append(
                f"  AUROC true vs {kind:<8}: checkable steps {_fmt(m[f'auroc_{kind}_checkable_steps'], False)}, "
                f"all steps {_fmt(m[f'auroc_{kind}_all_steps'], False)}, "
                f"episodes {_fmt(m[f'auroc_{kind}_episodes'], False)}"
            )
        for ctrl in ("frozen", "pan"):
            c = m[ctrl]
            lines.append(
                f"  {ctrl:<6} rejected: {_fmt(c['rejection_rate_demanded'])} of {c['demanded_steps']} steps over the "
                f"motion threshold, {_fmt(c['rejection_rate_all'])} of all steps"
            )
        lines.append(
            "  per policy (step pass / episode pass): "
            + "; ".join(
                f"{p}: true {_fmt(v['true']['step_pass_rate'])}/{_fmt(v['true']['episode_pass_rate'])}, "
                f"swapped {_fmt(v['swapped']['step_pass_rate'])}/{_fmt(v['swapped']['episode_pass_rate'])}"
                for p, v in m["by_policy"].items()
            )
        )
    if r["campaign"]:
        lines.append("")
        lines.append(
            "[campaign] success rate (discard rate); with the gate, discarded episodes count as not successful"
        )
        lines.append(
            "  world: true = executes the command; shuffled = executes another episode's commands permuted in "
            "time; expert = ignores the command and plays scripted:skill=1.0"
        )
        keys = [f"{w}_{g}" for w in ("true", "shuffled", "expert") for g in ("nogate", "gate")]
        lines.append(
            f"  {'policy':<20} "
            + " ".join(f"{k.replace('_nogate', ', no gate').replace('_gate', ', gate'):>17}" for k in keys)
        )
        for label, c in r["campaign"].items():
            cells = [f"{_fmt(c[k]['success_rate'])} ({_fmt(c[k]['discard_rate'])})" for k in keys]
            lines.append(f"  {label:<20} " + " ".join(f"{cell:>17}" for cell in cells))
    lines.append("")
    lines.append("acceptance:")
    for name, a in r["acceptance"].items():
        v = a["value"]
        lines.append(f"  [{'ok' if a['ok'] else 'FAIL'}] {name}: {v if v is None else round(float(v), 4)}")
    return "\n".join(lines)


def load_gate_spec(env_id: str, gate_json: str | None) -> dict[str, Any]:
    """The gate settings to validate: the env spec's, or a JSON file's; checked before any episode runs."""
    from kosmos_env.gate import ConsistencyGate
    from kosmos_env.spec import load_spec

    spec = load_spec(env_id)
    if spec.world.get("type") != "tabletop":
        raise ValueError(f"gate-check needs a simulated tabletop world; {env_id} uses {spec.world.get('type')!r}")
    if gate_json:
        with open(gate_json, encoding="utf-8") as fh:
            gate_spec = json.load(fh)
        if not isinstance(gate_spec, dict):
            raise ValueError(f"{gate_json} must hold a JSON object of gate settings")
    else:
        gate_spec = dict(spec.gate)
    gate_spec.pop("enabled", None)
    ConsistencyGate.from_spec(gate_spec)  # validate before spending minutes
    return gate_spec


def gate_check(
    env_id: str,
    gate_spec: Mapping[str, Any],
    policies: Sequence[str],
    tasks: Sequence[str] | None,
    n_seeds: int,
    first_seed: int,
    image_size: int,
    campaign_skills: Sequence[float],
    campaign_seeds: int,
    progress: bool = True,
) -> dict[str, Any]:
    """Every control of ``kosmos-env gate-check`` (see that command's help); returns the report dict
    with its ``acceptance`` entries."""
    import sys

    from tqdm import tqdm

    from kosmos_env.spec import load_spec

    if n_seeds < 1 or campaign_seeds < 1:
        raise ValueError("--seeds and --campaign-seeds must be at least 1")
    if image_size < 32:
        raise ValueError("--image-size must be at least 32")
    spec = load_spec(env_id)
    t_start = time.perf_counter()
    env = make_env(env_id, image_size, {"enabled": False})
    base = env.unwrapped
    tasks = list(tasks) if tasks else base.task_names
    for t in tasks:
        if t not in base.task_names:
            env.close()
            raise ValueError(f"unknown task {t!r}; tasks: {base.task_names}")
    seeds = list(range(first_seed, first_seed + n_seeds))
    calibration = base.world.calibration
    n_eps = len(policies) * len(tasks) * len(seeds)
    with tqdm(total=n_eps, desc="recording", unit="ep", file=sys.stderr, disable=not progress) as bar:
        episodes = record(env, policies, tasks, seeds, bar)
    env.close()
    with tqdm(total=2 * n_eps, desc="replaying the gate", unit="ep", file=sys.stderr, disable=not progress) as bar:
        calibrated = replay_controls(gate_spec, episodes, calibration, True, first_seed, bar)
        uncalibrated = replay_controls(gate_spec, episodes, None, False, first_seed, bar)
    camp = {}
    if campaign_skills:
        camp_seeds = list(range(first_seed + 1000, first_seed + 1000 + campaign_seeds))
        with tqdm(
            total=len(campaign_skills) * len(tasks) * len(camp_seeds) * 6,
            desc="campaign",
            unit="ep",
            file=sys.stderr,
            disable=not progress,
        ) as bar:
            camp = campaign(env_id, image_size, gate_spec, campaign_skills, tasks, camp_seeds, first_seed, bar)
    report = {
        "env_id": env_id,
        "spec_hash": spec.hash,
        "image_size": image_size,
        "policies": list(policies),
        "tasks": tasks,
        "seeds": seeds,
        "gate": dict(gate_spec),
        "calibrated": calibrated,
        "calibration_free": uncalibrated,
        "campaign": camp,
        "seconds": round(time.perf_counter() - t_start, 1),
    }
    report["acceptance"] = gate_check_acceptance(calibrated, camp)
    return report
