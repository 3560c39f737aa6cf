"""Progress-judge calibration on the tabletop: does a judge's progress follow the true distance to the goal?

A progress reward (``reward.mode = "progress"``) pays a policy for what a judge says about each
chunk. On a learned world there is no state to check that against; on the simulator there is. This
module rolls policies out in a simulator world (``Kosmos-Tabletop-v1``), asks any
:class:`~kosmos_env.judges.base.ProgressJudge` for its progress on every chunk, reads the
simulator's own state after every chunk, and measures how well the two agree: the number a user
checks before trusting a progress reward on a new world.

What is measured against what:

- **True distance to the goal** after each control step: the 3-D distance (m) between the task
  object and the target (``object_pos`` and ``target_pos`` of the world's ``evaluate()``, the same
  quantity the console plots), to the nearest millimetre (an untouched object's sub-millimetre
  settling is not progress), and *normalised* by the episode's distance at reset, so episodes of
  different layouts and tasks pool on one scale (1 = where it started, 0 = on the target's centre;
  a solved "on" task ends a few centimetres above it). ``distance="horizontal"`` uses the distance
  in the table's plane instead.
- **Agreement**: Spearman correlation between progress and the *negative* normalised distance
  (+1: progress rises exactly as the object nears the goal), pooled over every step of every
  episode, and the mean of the per-episode correlations (episodes whose distance never changes
  have none and are counted apart).
- **Intervals**: 95 % cluster-bootstrap intervals that resample whole episodes
  (:mod:`kosmos_env.stats.clustered`): the steps of one episode are not independent.
- **The baseline that could explain it away**: time alone, ``progress = step / horizon``. Good
  policies bring the object closer as the episode goes on, so any signal that merely grows with
  time correlates with distance too. The judge's lead over time comes with a *paired* interval
  (both computed on the same resampled episodes).
- **The success flag** against the simulator's success after each step: accuracy and the AUROC
  of the progress score (episode-bootstrap intervals), and accuracy on each episode's last step
  (Wilson interval; one step per episode, so those are independent).

Steps where the judge abstained (``progress is None``) are left out of every number and counted.
The module sits in ``checks``: it needs the simulator, the env, policies and judges together.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kosmos_env.stats.clustered import (
    cluster_bootstrap_many,
    spearman,
    weighted_auroc,
    weighted_mean,
    weighted_pearson,
    weighted_ranks,
)

#: distances are compared to the nearest millimetre: an object nobody touched settles by less
DISTANCE_RESOLUTION_M = 0.001
DISTANCES = ("3d", "horizontal")


@dataclass
class CalibrationEpisode:
    """One episode's per-step series (one entry per env step, i.e. per chunk)."""

    policy: str
    task: str
    seed: int
    horizon: int
    progress: np.ndarray  # (T,) float, NaN where the judge abstained
    judged_success: np.ndarray  # (T,) float 1 / 0, NaN where the judge abstained
    true_success: np.ndarray  # (T,) bool, the simulator's evaluate() after the step
    distance_3d: np.ndarray  # (T,) m, object to target
    distance_horizontal: np.ndarray  # (T,) m, in the table's plane
    start_distance_3d: float
    start_distance_horizontal: float
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.progress)

    def normalised_distance(self, distance: str = "3d") -> np.ndarray:
        """The distance after each step over the distance at reset, both to the nearest millimetre."""
        if distance not in DISTANCES:
            raise ValueError(f"distance must be one of {DISTANCES}, got {distance!r}")
        d = self.distance_3d if distance == "3d" else self.distance_horizontal
        d0 = self.start_distance_3d if distance == "3d" else self.start_distance_horizontal
        q = np.round(np.asarray(d, dtype=float) / DISTANCE_RESOLUTION_M) * DISTANCE_RESOLUTION_M
        return q / max(round(d0 / DISTANCE_RESOLUTION_M) * DISTANCE_RESOLUTION_M, DISTANCE_RESOLUTION_M)

    def time_progress(self) -> np.ndarray:
        """The time-alone baseline: step index (from 1) over the horizon."""
        return np.arange(1, self.steps + 1, dtype=float) / float(self.horizon)

    def to_dict(self) -> dict[str, Any]:
        def floats(a, digits=None):
            a = np.asarray(a, dtype=float)
            return [
                None if not np.isfinite(v) else (float(v) if digits is None else round(float(v), digits)) for v in a
            ]

        return {
            "policy": self.policy,
            "task": self.task,
            "seed": self.seed,
            "horizon": self.horizon,
            # progress at full precision: rounding would tie scores the judge told apart
            "progress": floats(self.progress),
            "judged_success": floats(self.judged_success),
            "true_success": [bool(v) for v in self.true_success],
            "distance_3d": floats(self.distance_3d, 6),
            "distance_horizontal": floats(self.distance_horizontal, 6),
            "start_distance_3d": round(float(self.start_distance_3d), 6),
            "start_distance_horizontal": round(float(self.start_distance_horizontal), 6),
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CalibrationEpisode":
        def arr(key):
            return np.array([np.nan if v is None else float(v) for v in data[key]], dtype=float)

        return cls(
            policy=str(data["policy"]),
            task=str(data["task"]),
            seed=int(data["seed"]),
            horizon=int(data["horizon"]),
            progress=arr("progress"),
            judged_success=arr("judged_success"),
            true_success=np.array([bool(v) for v in data["true_success"]], dtype=bool),
            distance_3d=arr("distance_3d"),
            distance_horizontal=arr("distance_horizontal"),
            start_distance_3d=float(data["start_distance_3d"]),
            start_distance_horizontal=float(data["start_distance_horizontal"]),
            seconds=dict(data.get("seconds", {})),
        )


# ----------------------------------------------------------------------------- judge and policies


def build_progress_judge(spec: Mapping[str, Any] | Any) -> Any:
    """A progress judge from a spec mapping (``{"type": "vision_frame", ...}``) or passed through.

    The type is a registered judge name (never ``module:attr``) whose class implements
    :class:`~kosmos_env.judges.base.ProgressJudge`; unknown settings and a judge that cannot score
    progress are one-line :class:`ValueError`.
    """
    from kosmos_env.errors import PluginError
    from kosmos_env.judges import JUDGES
    from kosmos_env.judges.base import ProgressJudge
    from kosmos_env.plugins import implements, resolve_class

    if not isinstance(spec, Mapping):
        if callable(getattr(spec, "score_progress", None)):
            return spec
        raise ValueError(
            f"a progress judge is a spec mapping with 'type' or a ProgressJudge, got {type(spec).__name__}"
        )
    params = dict(spec)
    kind = params.pop("type", None)
    try:
        cls = resolve_class("judge", kind, JUDGES, implements(ProgressJudge), names_only=True)
    except PluginError as exc:
        raise ValueError(f"progress judge: {exc}") from None
    known = [
        n for n, p in inspect.signature(cls).parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls).parameters.values())
    unknown = sorted(set(params) - set(known))
    if unknown and not takes_any:
        raise ValueError(
            f"unknown setting(s) {unknown} for progress judge {kind!r}; it takes {', '.join(known) or 'none'}"
        )
    return cls(**params)


def _policy(spec: str):
    from kosmos_env.policies import make_policy, parse_policy_arg

    try:
        name, kwargs = parse_policy_arg(spec)
        return make_policy(name, **kwargs)
    except (ValueError, TypeError, KeyError, FileNotFoundError, ImportError) as exc:
        raise ValueError(f"policy {spec!r}: {exc}") from None


# ----------------------------------------------------------------------------- rollouts


def _distances(truth: Mapping[str, Any] | None) -> tuple[float, float, bool]:
    if not truth or "object_pos" not in truth or "target_pos" not in truth:
        raise ValueError(
            "progress calibration needs a simulator world whose evaluate() reports object_pos and target_pos "
            "(Kosmos-Tabletop-v1); this world has no such ground truth"
        )
    o, t = np.asarray(truth["object_pos"], dtype=float), np.asarray(truth["target_pos"], dtype=float)
    return float(np.linalg.norm(o - t)), float(np.linalg.norm(o[:2] - t[:2])), bool(truth.get("success"))


def run_episode(
    env, policy, judge, policy_label: str, seed: int, task: str, judge_batch: int = 64
) -> CalibrationEpisode:
    """One episode: the policy runs to the horizon; the simulator's state is read after every step;
    then the judge scores every step's chunk (``judge_batch`` chunks per call), each with the
    episode's instruction, task and first frame."""
    from kosmos_env.rollouts import EpisodeLoop

    base = env.unwrapped
    t0 = time.perf_counter()
    loop = EpisodeLoop(env, policy, seed, task)
    instruction = loop.obs["instruction"]
    first = np.asarray(loop.obs["image"])
    d3, dh, _ = _distances(base.world.evaluate())
    chunks, dist3, disth, truth = [], [], [], []
    while not loop.done:
        obs, _, terminated, truncated, info = env.step(loop.next_action())
        loop.observe(obs, terminated, truncated, info)
        chunks.append(np.asarray(info["frames"]))
        a, b, s = _distances(base.world.evaluate())
        dist3.append(a)
        disth.append(b)
        truth.append(s)
    t1 = time.perf_counter()
    scores = []
    for i in range(0, len(chunks), max(1, judge_batch)):
        part = chunks[i : i + judge_batch]
        got = judge.score_progress(part, [instruction] * len(part), [task] * len(part), [first] * len(part))
        if len(got) != len(part):
            raise ValueError(
                f"progress judge {getattr(judge, 'name', '?')!r} returned {len(got)} scores for {len(part)} chunks"
            )
        scores.extend(got)
    t2 = time.perf_counter()
    progress = np.array([np.nan if s.progress is None else float(s.progress) for s in scores], dtype=float)
    flags = np.array([np.nan if s.success is None else float(bool(s.success)) for s in scores], dtype=float)
    return CalibrationEpisode(
        policy=policy_label,
        task=task,
        seed=int(seed),
        horizon=int(base.kosmos_spec.horizon),
        progress=progress,
        judged_success=flags,
        true_success=np.array(truth, dtype=bool),
        distance_3d=np.array(dist3),
        distance_horizontal=np.array(disth),
        start_distance_3d=d3,
        start_distance_horizontal=dh,
        seconds={"rollout": t1 - t0, "judge": t2 - t1},
    )


def calibration_seeds(tasks: Sequence[str], seeds_per_task: int, seed_offset: int) -> dict[str, list[int]]:
    """Seeds ``seed_offset + 1000 * task_index + i`` for ``i < seeds_per_task``, per task (the
    project's layout: each task keeps its own block of a thousand)."""
    if not 1 <= seeds_per_task <= 1000:
        raise ValueError(f"seeds per task must be in 1..1000, got {seeds_per_task}")
    if seed_offset < 0:
        raise ValueError(f"the seed offset must be >= 0, got {seed_offset}")
    return {task: [seed_offset + 1000 * k + i for i in range(seeds_per_task)] for k, task in enumerate(tasks)}


def collect(
    judge: Any,
    policies: Sequence[str],
    seeds: Mapping[str, Sequence[int]],
    *,
    env_id: str = "Kosmos-Tabletop-v1",
    horizon: int | None = None,
    image_size: tuple[int, int] | None = None,
    judge_batch: int = 64,
    on_episode: Callable[[CalibrationEpisode], None] | None = None,
) -> list[CalibrationEpisode]:
    """Every (policy, task, seed) episode of ``seeds`` (task -> seeds) in ``env_id``, scored by ``judge``.

    Frames are rendered at the judge's ``frame_size`` when it has one (else ``image_size``, else the
    spec's); the gate is off and nothing judges the episode at its end (only the progress judge and
    the simulator are read). A judge that does not know a task, or reads another frame size than
    the one asked for, is one-line :class:`ValueError` before any episode runs.
    """
    import gymnasium

    import kosmos_env  # noqa: F401  (registers the env ids)

    if not callable(getattr(judge, "score_progress", None)):
        raise ValueError(
            f"judge {getattr(judge, 'name', type(judge).__name__)!r} has no score_progress: not a progress judge"
        )
    name = getattr(judge, "name", type(judge).__name__)
    size = getattr(judge, "frame_size", None)
    if size is not None and image_size is not None and tuple(size) != tuple(image_size):
        raise ValueError(
            f"progress judge {name!r} reads {size[0]}x{size[1]} frames, not the {image_size[0]}x{image_size[1]} asked for"
        )
    size = tuple(size) if size is not None else (tuple(image_size) if image_size is not None else None)
    known = getattr(judge, "tasks", None)
    unknown = [t for t in seeds if known is not None and t not in known]
    if unknown:
        raise ValueError(f"progress judge {name!r} knows tasks {list(known)}, not {unknown}")
    if not policies:
        raise ValueError("progress calibration needs at least one policy")
    overrides: dict[str, Any] = {"gate": {"enabled": False}}
    if size is not None:
        overrides["image_size"] = size
    if horizon is not None:
        if horizon < 2:
            raise ValueError(f"the horizon must be >= 2 (a correlation needs two steps), got {horizon}")
        overrides["horizon"] = int(horizon)
    env = gymnasium.make(env_id, judge="state", defer_judging=True, **overrides)
    try:
        unknown_tasks = [t for t in seeds if t not in env.unwrapped.task_names]
        if unknown_tasks:
            raise ValueError(f"{env_id} has tasks {env.unwrapped.task_names}, not {unknown_tasks}")
        episodes = []
        for spec in policies:
            policy = _policy(spec)
            try:
                for task, task_seeds in seeds.items():
                    for seed in task_seeds:
                        ep = run_episode(env, policy, judge, spec, int(seed), task, judge_batch)
                        episodes.append(ep)
                        if on_episode is not None:
                            on_episode(ep)
            finally:
                policy.close()
        return episodes
    finally:
        env.close()


# ----------------------------------------------------------------------------- analysis


class _Steps:
    """The episodes' per-step series laid end to end, with the episode of every step, so that a
    resample's multiplicities (k, episodes) become step weights (k, steps) by one lookup."""

    def __init__(self, episodes: Sequence[CalibrationEpisode], distance: str):
        self.n = len(episodes)
        self.episode = np.concatenate([np.full(e.steps, i) for i, e in enumerate(episodes)])
        self.progress = np.concatenate([e.progress for e in episodes])
        self.time = np.concatenate([e.time_progress() for e in episodes])
        self.closeness = np.concatenate([-e.normalised_distance(distance) for e in episodes])
        self.flags = np.concatenate([e.judged_success for e in episodes])
        self.truth = np.concatenate([e.true_success for e in episodes]).astype(bool)

    def weights(self, counts: np.ndarray) -> np.ndarray:
        return counts[:, self.episode]


def _within(progress: Sequence[np.ndarray], closeness: Sequence[np.ndarray]) -> np.ndarray:
    """Per-episode Spearman correlation (NaN where the episode has none)."""
    return np.array([spearman(p, c) for p, c in zip(progress, closeness, strict=True)], dtype=float)


def _enough(est: dict[str, Any], defined: int) -> dict[str, Any]:
    """No interval for a mean of per-episode values that fewer than two episodes have: resampling
    one value gives that value every time, which would read as certainty."""
    if defined < 2 and est.get("estimate") is not None:
        est = est | {"lower": None, "upper": None, "reason": f"only {defined} episode has a value: no interval"}
    return est


def _success(
    episodes: Sequence[CalibrationEpisode], steps: _Steps, n_boot: int, alpha: float, seed: int
) -> dict[str, Any]:
    from kosmos_env.stats.intervals import wilson

    decided = np.array([np.isfinite(e.judged_success).sum() for e in episodes], dtype=float)
    right = np.array(
        [
            (e.judged_success[np.isfinite(e.judged_success)] == e.true_success[np.isfinite(e.judged_success)]).sum()
            for e in episodes
        ],
        dtype=float,
    )

    def accuracy_and_area(counts):
        den = counts @ decided
        with np.errstate(invalid="ignore", divide="ignore"):
            accuracy = np.where(den > 0, (counts @ right) / np.where(den > 0, den, 1.0), np.nan)
        return np.column_stack([accuracy, weighted_auroc(steps.progress, steps.truth, steps.weights(counts))])

    boot = cluster_bootstrap_many(
        accuracy_and_area, steps.n, ["accuracy", "auroc"], n_boot=n_boot, alpha=alpha, seed=seed
    )
    final = [(e.judged_success[-1], bool(e.true_success[-1])) for e in episodes if np.isfinite(e.judged_success[-1])]
    final_right = sum(int(bool(f) == t) for f, t in final)
    flags = steps.flags[np.isfinite(steps.flags)]
    out = {
        "true_success_step_rate": float(steps.truth.mean()),
        "judged_success_step_rate": float(flags.mean()) if flags.size else None,
        "step_accuracy": boot["accuracy"].to_dict(),
        "step_auroc_of_progress": boot["auroc"].to_dict(),
        "final_true_success_rate": float(np.mean([e.true_success[-1] for e in episodes])),
        "final_accuracy": None,
    }
    if final:
        iv = wilson(final_right, len(final), alpha)
        out["final_accuracy"] = {
            "estimate": final_right / len(final),
            "lower": iv.lower,
            "upper": iv.upper,
            "n": len(final),
            "method": "wilson",
        }
    return out


def _agreements(episodes, distance, n_boot, alpha, seed) -> dict[str, Any]:
    """Judge, time alone and judge minus time: pooled and mean within-episode Spearman, all on the
    same resampled episodes (one bootstrap for the three pooled numbers, one for the three means).
    Time is scored on the steps the judge scored (its abstentions leave both out)."""
    steps = _Steps(episodes, distance)
    scored = np.isfinite(steps.progress)
    progress = np.where(scored, steps.progress, 0.0)  # abstentions weigh nothing below
    closeness = [-e.normalised_distance(distance) for e in episodes]
    wj = _within([e.progress for e in episodes], closeness)
    wt = _within([np.where(np.isfinite(e.progress), e.time_progress(), np.nan) for e in episodes], closeness)
    both = np.isfinite(wj) & np.isfinite(wt)
    diff = np.where(both, wj - wt, np.nan)

    def pooled_rho(counts):
        w = steps.weights(counts) * scored
        rc = weighted_ranks(steps.closeness, w)
        j = weighted_pearson(weighted_ranks(progress, w), rc, w)
        t = weighted_pearson(weighted_ranks(steps.time, w), rc, w)
        return np.column_stack([j, t, j - t])

    def within_mean(counts):
        return np.column_stack([weighted_mean(wj, counts), weighted_mean(wt, counts), weighted_mean(diff, counts)])

    names = ["judge", "time_baseline", "judge_minus_time"]
    kw = dict(n_boot=n_boot, alpha=alpha, seed=seed)
    pooled = cluster_bootstrap_many(pooled_rho, steps.n, names, **kw)
    within = cluster_bootstrap_many(within_mean, steps.n, names, **kw)
    defined = {"judge": int(np.isfinite(wj).sum()), "time_baseline": int(np.isfinite(wt).sum())}
    defined["judge_minus_time"] = int(both.sum())
    out = {}
    for name in names:
        key = "episodes_with_both" if name == "judge_minus_time" else "episodes_with_a_correlation"
        out[name] = {
            "pooled_spearman": pooled[name].to_dict(),
            "within_episode_spearman": _enough(within[name].to_dict(), defined[name]) | {key: defined[name]},
        }
    return out


def analyze(
    episodes: Sequence[CalibrationEpisode],
    *,
    distance: str = "3d",
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
    by_policy: bool = True,
) -> dict[str, Any]:
    """Every number of the module doc, from collected (or reloaded) episodes."""
    if not episodes:
        raise ValueError("no episodes to analyse")
    if distance not in DISTANCES:
        raise ValueError(f"distance must be one of {DISTANCES}, got {distance!r}")
    out: dict[str, Any] = {
        "distance": distance,
        "distance_resolution_m": DISTANCE_RESOLUTION_M,
        "n_episodes": len(episodes),
        "n_steps": int(sum(e.steps for e in episodes)),
        "abstained_steps": int(sum(np.isnan(e.progress).sum() for e in episodes)),
        "n_boot": n_boot,
        "alpha": alpha,
        "bootstrap_seed": seed,
        **_agreements(episodes, distance, n_boot, alpha, seed),
        "success_flag": _success(episodes, _Steps(episodes, distance), n_boot, alpha, seed),
    }
    if by_policy:
        out["by_policy"] = {}
        for name in dict.fromkeys(e.policy for e in episodes):
            group = [e for e in episodes if e.policy == name]
            parts = _agreements(group, distance, n_boot, alpha, seed)
            out["by_policy"][name] = {
                "episodes": len(group),
                "final_true_success_rate": float(np.mean([e.true_success[-1] for e in group])),
                # a median: an object knocked off the table falls away (tens of metres), which a mean would follow
                "median_final_normalised_distance": float(
                    np.median([e.normalised_distance(distance)[-1] for e in group])
                ),
                "judge": parts["judge"],
                "time_baseline": parts["time_baseline"],
            }
    return out


def interval_text(est: Mapping[str, Any] | None, digits: int = 2, signed: bool = False) -> str:
    """``+0.62 [+0.55, +0.70]`` (``signed``: correlations and differences), or what is missing, in words."""
    if not est or est.get("estimate") is None:
        return "undefined" + (f" ({est['reason']})" if est and est.get("reason") else "")
    fmt = f"{{:+.{digits}f}}" if signed else f"{{:.{digits}f}}"
    value = fmt.format(est["estimate"])
    if est.get("lower") is None:
        return f"{value} (no interval: {est.get('reason') or 'undefined on every resample'})"
    return f"{value} [{fmt.format(est['lower'])}, {fmt.format(est['upper'])}]"
