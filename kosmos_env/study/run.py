"""Run the study's episodes: every policy × task × seed in the world under test, the simulator
and the baselines, plus the open-loop frame-error replays, the controls and the cost sweep.

Each episode is recorded as a plain row (no frames kept except a few for the report): the
verdict of every judge at the full horizon and at each cut horizon H, the simulator's ground
truth at H, and the seconds it cost. Worlds (the row's ``world`` label):

- ``reference``: the simulator; judges ``state`` (ground truth, the reference), ``robot_log``,
  ``vision`` and ``action_only``, so judge error and world error can be told apart;
- ``learned`` (and ``learned+gate``): the world under test (``--world``);
- ``null``: the copy-first-frame world (:mod:`kosmos_env.worlds.null`, mode ``first``: copy the
  first frame, pose from the commands, nothing ever grasped) through the same policies and
  judges; its ``action_only`` and ``action_learned`` verdicts are the action-only baselines (no
  world at all);
- ``blank``: the null world proper (mode ``blank``: uniform grey frames from the start, so neither
  a closed-loop policy nor a frame judge sees a scene);
- ``control:shuffled`` (with ``control="shuffled"``): the world under test executing another
  episode's commands permuted in time (:class:`kosmos_env.checks.controls.ShuffledCommandWorld`);
- ``sweep:NAME=VALUE``: the sweep world at one setting (:mod:`kosmos_env.study.sweep`).

Seeds start at ``seed_offset`` (default 100000), far from the world model's training seeds; a
(policy, task, seed index) has the same seed, hence the same initial scene, in every world.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

DEFAULT_POLICIES = (
    "scripted:skill=1.0",
    "scripted:skill=0.8",
    "scripted:skill=0.7",
    "scripted:skill=0.6",
    "scripted:skill=0.45",
    "scripted:skill=0.3",
    "random",
    "deceptive:mode=grasp_miss,rate=0.7",
    "deceptive:mode=wrong_target,rate=0.5",
    "deceptive:mode=knock_away,rate=0.7",
    # closed loop: image-conditioned checkpoints shipped with the package (policies/checkpoints/manifest.json),
    # trained by behaviour cloning, then PPO in the simulator and in the learned world
    "ckpt:shipped=bc_clone_2000",
    "ckpt:shipped=bc_clone_6000",
    "ckpt:shipped=sim_judge_ppo_3072",
    "ckpt:shipped=sim_judge_ppo_9216",
    "ckpt:shipped=world_judge_ppo_3072",
    "ckpt:shipped=world_judge_ppo_12288",
    "ckpt:shipped=sim_oracle_ppo_9216",
)
DEFAULT_HORIZONS = (5, 10, 20, 30, 40)
FRAME_ERROR_SEEDS = 1  # seed indices per (policy, task) replayed open loop for the frame-error table


@dataclass
class StudyConfig:
    world: str = "Kosmos-TabletopLearned-v1"
    reference: str = "Kosmos-Tabletop-v1"
    policies: tuple = DEFAULT_POLICIES
    tasks: tuple | None = None  # None: every task of the suite
    seeds: int = 5  # per (policy, task)
    seed_offset: int = 100000
    horizons: tuple = DEFAULT_HORIZONS
    gate: bool = False  # also run the world under test with the consistency gate
    null_world: bool = True  # the copy-first-frame and blank (null) baseline worlds
    control: str | None = None  # "shuffled": the shuffled-command control of the world under test
    sweep: dict = field(default_factory=dict)  # setting name -> list of values
    sweep_world: str | None = None  # default: the world under test
    sweep_seeds: int = 3
    threads: int = 1
    world_kwargs: dict = field(default_factory=dict)
    vision_weights: str | None = None
    frame_error_seeds: int = FRAME_ERROR_SEEDS
    keep_examples: int = 1  # (policy, task, seed) triples whose frames go in the report

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


def validate(cfg: StudyConfig) -> None:
    """Every check that can fail before an episode runs, each one clear line (ValueError)."""
    from kosmos_env.spec import load_spec

    if cfg.seeds < 2:
        raise ValueError(f"the study needs at least 2 seeds per (policy, task) for split-half numbers, got {cfg.seeds}")
    if len(cfg.policies) < 2:
        raise ValueError("the study ranks policies: give at least 2")
    ref = load_spec(cfg.reference)
    if ref.world["type"] != "tabletop":
        raise ValueError(f"--reference must be a simulator with ground truth (a tabletop env), got {cfg.reference}")
    world = load_spec(cfg.world)
    episode = min(ref.horizon, world.horizon)
    bad = [h for h in cfg.horizons if not 1 <= int(h) <= episode]
    if bad:
        raise ValueError(
            f"horizon(s) {bad} lie outside the episode: {cfg.world} and {cfg.reference} run "
            f"{episode} steps, so cut horizons must be 1..{episode}"
        )
    if cfg.control not in (None, "shuffled"):
        raise ValueError(f"unknown control {cfg.control!r}; the study knows 'shuffled'")
    if cfg.sweep:
        from kosmos_env.study.sweep import validate_sweep

        validate_sweep(cfg.sweep_world or cfg.world, cfg.sweep)
        if not 2 <= cfg.sweep_seeds <= cfg.seeds:
            raise ValueError(f"--sweep-seeds must be between 2 and --seeds ({cfg.seeds}), got {cfg.sweep_seeds}")
    if not 0 <= cfg.frame_error_seeds <= cfg.seeds:
        raise ValueError(f"frame-error seeds must be between 0 and --seeds ({cfg.seeds})")


def _judges(vision_weights, reference_world: dict) -> dict:
    from kosmos_env.judges import make_judge
    from kosmos_env.judges.action_learned import LearnedActionJudge
    from kosmos_env.judges.action_only import ActionOnlyJudge
    from kosmos_env.judges.vision_frame import FrameVisionJudge

    return {
        "robot_log": make_judge("robot_log"),
        "vision": FrameVisionJudge(vision_weights),
        "action_only": ActionOnlyJudge.from_world(reference_world),
        "action_learned": LearnedActionJudge.from_world(reference_world),
    }


def _judge_all(judges, rollout, horizons) -> tuple[dict, dict, dict]:
    """(final verdicts, verdicts per cut horizon, judge seconds per verdict) for one rollout."""
    final, per_h, seconds = {}, {}, {}
    n = len(rollout.actions)
    for name, judge in judges.items():
        t0 = time.perf_counter()
        cuts = [h for h in horizons if h < n] + [n]
        rolls = [rollout if h == n else rollout.truncated(h) for h in cuts]
        if hasattr(judge, "judge_batch"):
            verdicts = judge.judge_batch(rolls)
        else:
            verdicts = []
            for r in rolls:
                try:
                    verdicts.append(judge.judge(r))
                except ValueError:  # e.g. a log too short to judge: it shows nothing, so no verdict
                    verdicts.append(None)
        seconds[name] = (time.perf_counter() - t0) / len(cuts)
        per_h[name] = {int(h): (None if v is None else bool(v.success)) for h, v in zip(cuts, verdicts, strict=True)}
        final[name] = per_h[name][n]
    return final, per_h, seconds


def _seed(cfg: StudyConfig, tasks: list, task: str, i: int) -> int:
    return cfg.seed_offset + tasks.index(task) * 1000 + i


def _make_env(env_id: str, *, world_model=None, world_kwargs=None, gate=False, spec_overrides=None):
    import gymnasium

    import kosmos_env  # noqa: F401
    from kosmos_env.spec import load_spec

    spec = load_spec(env_id)
    kwargs: dict[str, Any] = {"defer_judging": True, **(spec_overrides or {})}
    kwargs.setdefault("image_size", (64, 64))
    if gate:  # the gate clips commands to the workspace exactly as the world does
        kwargs["gate"] = {"enabled": True, "workspace": spec.world["workspace"]}
    else:  # a spec's own gate (the tabletop's) would discard the null world's frozen frames
        kwargs["gate"] = {"enabled": False}
    if world_model is not None:
        kwargs["world_model"] = world_model
    elif world_kwargs:
        kwargs["world_kwargs"] = dict(world_kwargs)
    return gymnasium.make(env_id, **kwargs)


def _run(
    label: str,
    env,
    cfg: StudyConfig,
    judges: dict,
    jobs: list,
    tasks: list,
    *,
    is_reference: bool,
    progress: bool,
    examples: dict,
    before: Callable | None = None,
    keep_actions: dict | None = None,
) -> list[dict]:
    from tqdm import tqdm

    from kosmos_env.policies import make_policy, parse_policy_arg
    from kosmos_env.rollouts import run_episode

    rows = []
    t_start = time.perf_counter()
    built = {p: make_policy(n, **kw) for p, (n, kw) in ((p, parse_policy_arg(p)) for p in cfg.policies)}
    try:
        for policy, task, i in tqdm(jobs, desc=f"study: {label}", disable=not progress):
            seed = _seed(cfg, tasks, task, i)
            if before is not None:
                before(policy, task, i)
            t0 = time.perf_counter()
            result = run_episode(env, built[policy], seed=seed, task=task)
            episode_seconds = time.perf_counter() - t0
            rollout = result.rollout
            final, per_h, judge_seconds = _judge_all(judges, rollout, cfg.horizons)
            row = {
                "world": label,
                "gate": label.endswith("+gate"),
                "policy": policy,
                "task": task,
                "seed": seed,
                "repeat": 0,
                "outcome": result.outcome,
                "discarded": result.outcome == "discarded",
                "steps": result.steps,
                "judges": final,
                "horizon_judges": per_h,
                "seconds": {
                    "episode": episode_seconds,
                    "world": result.timings.get("world", 0.0),
                    "policy": result.timings.get("policy", 0.0),
                    "gate": result.timings.get("gate", 0.0),
                    **{f"judge_{k}": v for k, v in judge_seconds.items()},
                },
            }
            if is_reference:
                gt = result.ground_truth or {}
                row["judges"]["state"] = bool(gt.get("success", False))
                steps_truth = np.asarray(rollout.log.get("gt_success", []), dtype=bool)
                row["horizon_judges"]["state"] = {
                    int(h): bool(steps_truth[h - 1]) for h in cfg.horizons if h <= len(steps_truth)
                }
                row["horizon_judges"]["state"][int(result.steps)] = row["judges"]["state"]
            if keep_actions is not None:
                keep_actions[(policy, task, i)] = np.asarray(rollout.actions).copy()
            if result.gate is not None:
                row["gate_verdict"] = result.gate
            key = (policy, task, i)
            if key in examples.get("keys", ()) and label in ("reference", "learned", "null"):
                examples.setdefault("frames", {})[(label, *key)] = rollout.frames.copy()
            rows.append(row)
    finally:
        env.close()
        if progress:
            print(f"study: {label}: {len(rows)} episodes in {time.perf_counter() - t_start:.0f} s", flush=True)
    return rows


def frame_errors(cfg: StudyConfig, tasks: list, actions: dict, progress: bool) -> dict[str, Any]:
    """Open-loop frame error of the world under test against the simulator at each cut horizon.

    For the first ``cfg.frame_error_seeds`` seed indices of every (policy, task), the simulator's
    own commands are replayed in both worlds from the same initial scene (no policy in the loop,
    so the worlds see identical commands); the error at H is the mean absolute pixel difference
    (0-255) between the two frames after H commands. The baseline is copy-last-frame: the last
    real frame the world was given, here the first, against the simulator's frame at H.

    The same numbers are also given by policy group (``by_group``: closed_loop, scripted,
    deceptive; :func:`kosmos_env.study.analyze.policy_kind`). A closed-loop policy's own rollouts
    in the two worlds diverge as soon as it reacts to different frames, so the honest error
    under closed-loop control is this one: the world fed the commands a closed-loop policy gave
    in the simulator, frame against frame.
    """
    from tqdm import tqdm

    from kosmos_env.study.analyze import policy_kind

    keys = [k for k in actions if k[2] < cfg.frame_error_seeds]
    hs = sorted(int(h) for h in cfg.horizons)
    world_err = {h: [] for h in hs}
    copy_err = {h: [] for h in hs}
    group_of = {h: [] for h in hs}
    if not keys:
        return {"horizons": hs, "n_episodes": 0}
    envs = {"reference": _make_env(cfg.reference), "world": _make_env(cfg.world, world_kwargs=cfg.world_kwargs)}
    try:
        for policy, task, i in tqdm(keys, desc="study: open-loop frame error", disable=not progress):
            seed = _seed(cfg, tasks, task, i)
            frames = {}
            for name, env in envs.items():
                obs, _ = env.reset(seed=seed, options={"task": task})
                seq = [obs["image"]]
                for a in actions[(policy, task, i)]:
                    obs, _, term, trunc, _ = env.step(a)
                    seq.append(obs["image"])
                    if term or trunc:
                        break
                frames[name] = np.asarray(seq, dtype=np.float32)
            ref, gen = frames["reference"], frames["world"]
            for h in hs:
                if h < len(ref) and h < len(gen) and ref.shape[1:] == gen.shape[1:]:
                    world_err[h].append(float(np.abs(gen[h] - ref[h]).mean()))
                    copy_err[h].append(float(np.abs(ref[0] - ref[h]).mean()))
                    group_of[h].append(policy_kind(policy))
    finally:
        for env in envs.values():
            env.close()
    out: dict[str, Any] = {"horizons": hs, "n_episodes": len(keys), **frame_error_summary(world_err, copy_err)}
    out["by_group"] = {}
    for g in sorted({k for v in group_of.values() for k in v}):
        pick = {h: [j for j, k in enumerate(group_of[h]) if k == g] for h in hs}
        out["by_group"][g] = {
            "n_episodes": sum(policy_kind(p) == g for p, _, _ in keys),
            **frame_error_summary(
                {h: [world_err[h][j] for j in pick[h]] for h in hs}, {h: [copy_err[h][j] for j in pick[h]] for h in hs}
            ),
        }
    return out


def frame_error_summary(world_err: dict, copy_err: dict, seed: int = 0) -> dict[str, Any]:
    """Per horizon: mean world and copy-last-frame error, their ratio and its 95 % bootstrap interval
    over episodes (resampled jointly: both errors of an episode come from the same frames)."""
    out: dict[str, Any] = {"world": {}, "copy_last_frame": {}, "ratio": {}, "ratio_interval": {}}
    rng = np.random.default_rng(seed)
    for h in world_err:
        w, c = np.asarray(world_err[h]), np.asarray(copy_err[h])
        if not len(w):
            continue
        out["world"][h] = float(w.mean())
        out["copy_last_frame"][h] = float(c.mean())
        out["ratio"][h] = float(w.mean() / c.mean()) if c.mean() > 0 else None
        idx = rng.integers(0, len(w), size=(1000, len(w)))
        cm = c[idx].mean(axis=1)
        ratios = np.where(cm > 0, w[idx].mean(axis=1) / np.where(cm > 0, cm, 1.0), np.nan)
        ratios = ratios[np.isfinite(ratios)]
        out["ratio_interval"][h] = (
            [float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))] if len(ratios) else None
        )
    return out


def study_tasks(cfg: StudyConfig) -> list[str]:
    """The tasks the study runs: ``cfg.tasks`` (checked against the reference's suite) or all of them."""
    probe = _make_env(cfg.reference)
    all_tasks = list(probe.unwrapped.task_names)
    probe.close()
    tasks = list(cfg.tasks) if cfg.tasks else all_tasks
    unknown = [t for t in tasks if t not in all_tasks]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; tasks: {all_tasks}")
    return tasks


def planned_baselines(cfg: StudyConfig) -> list[str]:
    """The baseline evaluators this config will produce (what a registration binds)."""
    from kosmos_env.study.analyze import BASELINES, SAME_ROLLOUT

    return [b for b in BASELINES if cfg.null_world or b.startswith(SAME_ROLLOUT)]


def gate_available() -> tuple[bool, str]:
    """Whether the consistency gate module exists and builds from a minimal spec."""
    try:
        from kosmos_env.gate import ConsistencyGate  # noqa: F401
    except Exception as exc:  # report plainly rather than lose the study
        return False, f"kosmos_env.gate is not importable ({type(exc).__name__}: {exc})"
    try:
        ConsistencyGate.from_spec({"enabled": True})
    except Exception as exc:
        return False, f"ConsistencyGate.from_spec({{'enabled': True}}) failed: {type(exc).__name__}: {exc}"
    return True, "kosmos_env.gate.ConsistencyGate with its default thresholds"


def run_study(cfg: StudyConfig, progress: bool = True) -> dict[str, Any]:
    """Run everything; returns {"config", "rows", "gate_status", "examples", "frame_error", "wall_seconds"}."""
    import torch

    from kosmos_env.spec import load_spec

    validate(cfg)
    torch.set_num_threads(max(1, min(2, cfg.threads)))
    t0 = time.perf_counter()
    ref_spec = load_spec(cfg.reference)
    judges = _judges(cfg.vision_weights, ref_spec.world)
    tasks = study_tasks(cfg)
    jobs = [(p, t, i) for p in cfg.policies for t in tasks for i in range(cfg.seeds)]
    examples: dict[str, Any] = {"keys": {(cfg.policies[0], tasks[0], 0)}}
    ref_actions: dict = {}
    rows = _run(
        "reference",
        _make_env(cfg.reference),
        cfg,
        judges,
        jobs,
        tasks,
        is_reference=True,
        progress=progress,
        examples=examples,
        keep_actions=ref_actions,
    )
    rows += _run(
        "learned",
        _make_env(cfg.world, world_kwargs=cfg.world_kwargs),
        cfg,
        judges,
        jobs,
        tasks,
        is_reference=False,
        progress=progress,
        examples=examples,
    )
    if cfg.null_world:
        from kosmos_env.worlds import make_world
        from kosmos_env.worlds.null import NullWorld

        spec = load_spec(cfg.reference).with_overrides(image_size=[64, 64])
        for label, mode in (("null", "first"), ("blank", "blank")):
            null = NullWorld(make_world(spec), spec.world, mode=mode)
            rows += _run(
                label,
                _make_env(cfg.reference, world_model=null),
                cfg,
                judges,
                jobs,
                tasks,
                is_reference=False,
                progress=progress,
                examples=examples,
            )
    if cfg.control == "shuffled":
        rows += _shuffled_control(cfg, judges, jobs, tasks, ref_actions, progress, examples)
    ok, why = gate_available() if cfg.gate else (False, "not run (the study runs it with --gate)")
    gate_status = {"available": ok, "detail": why}
    if ok:
        try:
            rows += _run(
                "learned+gate",
                _make_env(cfg.world, world_kwargs=cfg.world_kwargs, gate=True),
                cfg,
                judges,
                jobs,
                tasks,
                is_reference=False,
                progress=progress,
                examples=examples,
            )
        except Exception as exc:  # report it plainly rather than lose the rest of the study
            gate_status = {"available": False, "detail": f"running with the gate failed: {type(exc).__name__}: {exc}"}
    sweep_rows: list[dict] = []
    if cfg.sweep:
        from kosmos_env.study.sweep import run_sweep

        sweep_rows = run_sweep(cfg, judges, tasks, progress, make_env=_make_env, run=_run)
    frame = frame_errors(cfg, tasks, ref_actions, progress) if cfg.frame_error_seeds else {"n_episodes": 0}
    return {
        "config": cfg.to_dict(),
        "tasks": tasks,
        "rows": rows,
        "sweep_rows": sweep_rows,
        "gate_status": gate_status,
        "examples": examples.get("frames", {}),
        "frame_error": frame,
        "wall_seconds": time.perf_counter() - t0,
    }


def _shuffled_control(cfg, judges, jobs, tasks, ref_actions, progress, examples) -> list[dict]:
    """The world under test made to execute another seed's reference commands, permuted in time."""
    from kosmos_env.checks.controls import ShuffledCommandWorld
    from kosmos_env.spec import load_spec
    from kosmos_env.worlds import make_world

    spec = load_spec(cfg.world).with_overrides(image_size=[64, 64])
    world = ShuffledCommandWorld(make_world(spec, **dict(cfg.world_kwargs)))
    rng = np.random.default_rng(cfg.seed_offset + 7919)

    def before(policy, task, i):
        other = ref_actions[(policy, task, (i + 1) % cfg.seeds)]
        world.set_source(other[rng.permutation(len(other))])

    return _run(
        "control:shuffled",
        _make_env(cfg.world, world_model=world),
        cfg,
        judges,
        jobs,
        tasks,
        is_reference=False,
        progress=progress,
        examples=examples,
        before=before,
    )
