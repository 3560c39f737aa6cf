"""Rolling a policy out over (task, seed) units in one env configuration, one record per unit.

The train-in-world experiment evaluates every checkpoint twice on the same held-out units:

- **truth**: the simulator in its evaluation configuration (``Kosmos-Tabletop-v1`` at 64×64,
  terminal reward, no termination on success, the state judge): ``true_success`` is the
  simulator's own verdict at the horizon;
- **world-judged**: the configuration the policy was trained in (its world, reward, gate):
  ``world_success`` is what that training signal calls the episode *at its end*, the same success
  definition as the truth's: with a step signal (``progress`` or ``oracle`` reward) the signal at
  the last step is at or above the reward's ``success_threshold`` (or the episode ended on
  success, when training terminates on success); with the terminal reward, the env judge's
  verdict. A gate discard is never a success.

Both are plain :class:`~kosmos_env.policies.base.Policy` rollouts; nothing here trains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence


@dataclass(frozen=True)
class EnvConfig:
    """An env id and the ``gymnasium.make`` keyword arguments that make one configuration of it."""

    env_id: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""

    def make(self):
        import gymnasium

        import kosmos_env  # noqa: F401  (registers the env ids)

        return gymnasium.make(self.env_id, **dict(self.kwargs))


#: the simulator as the truth: evaluation semantics (terminal reward, no early end), 64×64 frames
TRUTH = EnvConfig("Kosmos-Tabletop-v1", {"image_size": (64, 64)}, "simulator truth")


def rollout_units(
    make_policy: Callable[[], Any], config: EnvConfig, units: Sequence[tuple[str, int]], *, env=None
) -> list[dict[str, Any]]:
    """One episode per (task, seed) unit; ``make_policy()`` builds the policy (once).

    Each record: task, seed, steps, outcome, ``terminated_by``, ``true_success`` (the simulator's
    ground truth at the end, where the world has one, else None), ``world_success`` (the training
    signal's success at the end: :func:`signal_success`), ``progress`` (the step signal at the last
    step, None without one), ``judge_success`` (the env judge's verdict), ``return`` (sum of rewards).
    """
    own = env is None
    env = config.make() if own else env
    policy = make_policy()
    records = []
    try:
        for task, seed in units:
            obs, _ = env.reset(seed=int(seed), options={"task": task})
            policy.reset(obs["instruction"], seed=int(seed))
            total, steps = 0.0, 0
            while True:
                obs, reward, terminated, truncated, info = env.step(policy.act(obs))
                total += float(reward)
                steps += 1
                if terminated or truncated:
                    break
            truth = info.get("ground_truth")
            judgment = info.get("judgment") or {}
            records.append(
                {
                    "task": task,
                    "seed": int(seed),
                    "steps": steps,
                    "outcome": info.get("outcome"),
                    "terminated_by": info.get("terminated_by"),
                    "true_success": None if truth is None else bool(truth.get("success")),
                    "world_success": signal_success(info, env.unwrapped.kosmos_spec),
                    "progress": info.get("progress"),
                    "judge_success": judgment.get("success"),
                    "return": total,
                }
            )
    finally:
        policy.close()
        if own:
            env.close()
    return records


def signal_success(info: Mapping[str, Any], spec) -> bool:
    """Success of a finished episode as its training signal scores it, at the episode's end.

    With a step signal (``reward.mode`` ``progress`` or ``oracle``): the signal at the last step at
    or above ``reward.success_threshold`` (default 0.5), or an episode ended on success. With the
    terminal reward: the env judge's verdict. A discarded episode (gate) is not a success.
    """
    if info.get("outcome") == "discarded":
        return False
    if info.get("terminated_by") == "success":
        return True
    reward = dict(getattr(spec, "reward", None) or {})
    if reward.get("mode", "terminal") in ("progress", "oracle"):
        progress = info.get("progress")
        return progress is not None and float(progress) >= float(reward.get("success_threshold", 0.5))
    judgment = info.get("judgment") or {}
    return judgment.get("success") is True
