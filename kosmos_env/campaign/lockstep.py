"""A campaign worker that runs several episodes side by side, in lockstep, through one vector env.

A video world model wastes most of a GPU on one episode's chunk per call. With ``kosmos-env
eval --lockstep N`` each worker claims up to N episodes at once (each under its own lease, kept
alive by its own heartbeat, exactly as the one-at-a-time worker in
:mod:`kosmos_env.campaign.worker`), resets one sub-env of a vector env of the campaign's env
per episode, and steps all running episodes together: for an env registered with a
``vector_entry_point`` (Kosmos-Bridge-v1: :mod:`kosmos_env.batched_vector`) the world calls of
one step meet in one batched model call (one denoising loop); any other env gets a plain
synchronous vector env whose sub-envs step one after another (no speed-up, same results).

An episode that ends (its horizon, a gate discard, an error) stops being stepped while the
others go on, and is judged, stored and recorded right away, by the same functions as in the
one-at-a-time worker (:meth:`EpisodeRunner.run` with the finished episode, ``Ledger.complete``,
:func:`record_failure`), so a record does not depend on the lockstep setting: same fields,
artifacts and judge, and outcomes and actions equal the one-at-a-time campaign's for the same
seeds within the float tolerance of batched arithmetic. Its lane then claims the next pending
episode at once and resets only its own sub-env (continuous batching): the other lanes go on,
so one batched world call holds episodes at different steps, and a short episode never leaves
a lane idle until the longest of its batch ends. (``WorkSettings(refill=False)`` claims only
when every lane is free: whole batches, the comparison arm of ``bench/campaign_lockstep.py``.)

The lanes (:class:`Lanes`) know nothing of leases, so the same code runs under the Ray
executor, whose driver holds the leases and feeds each actor's free lanes
(:mod:`kosmos_env.campaign.ray_executor`).

Policies act per episode: each lane holds its own instance of each policy (a policy keeps one
episode's state), asked one by one, or in one call when the policy class overrides
:meth:`Policy.act_many` with a batched one. A policy whose instances share one state (``side_by_side = False``)
cannot run in lockstep: :func:`check_lockstep` refuses it. (A served policy runs side by side:
each instance holds its own server session per episode.)

Timings: steps run side by side overlap, so each of the n episodes of a batched step is charged
1/n of that step's measured seconds (world and gate) and of its wall time; the per-episode
seconds of a campaign then add up to the device time it used, as for one-at-a-time episodes.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kosmos_env.campaign.control import cancel_requested
from kosmos_env.campaign.design import CampaignConfig, EpisodeKey
from kosmos_env.campaign.ledger import LEDGER_NAME, ConfigMismatchError, Ledger
from kosmos_env.campaign.worker import (
    EpisodeRunner,
    Heartbeat,
    WorkSettings,
    wait_for_work,
    pause_after_infrastructure_failure,
    record_episode,
    record_failure,
    work,
)


def check_lockstep(config: CampaignConfig, lanes: int) -> None:
    """Refuse, in one line, a lockstep width below 1 or a policy that cannot run episodes side by side."""
    if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
        raise ValueError(f"--lockstep must be an integer of at least 1, got {lanes!r}")
    if lanes == 1:
        return
    from kosmos_env.policies import resolve_policy

    for ref in config.policies:
        if not getattr(resolve_policy(ref.name), "side_by_side", True):
            raise ValueError(
                f"policy {ref.label!r} cannot run {lanes} episodes side by side (--lockstep {lanes}): its instances "
                f"share one episode state (e.g. one policy behind a server); use --lockstep 1"
            )


def make_vector_env(config: CampaignConfig, judge: Any, lanes: int):
    """``lanes`` sub-envs of the campaign's env: its ``vector_entry_point`` when it has one, else sync.

    Built with the same arguments as the one-at-a-time worker's env (deferred judging, the
    campaign's judge object, the campaign's spec overrides) and their worlds loaded; every
    sub-env must have the campaign's spec hash. (The worker files the build as a world load.)"""
    import gymnasium

    import kosmos_env  # noqa: F401  (registers the env ids)

    has_entry = gymnasium.spec(config.env_id).vector_entry_point is not None
    vec = gymnasium.make_vec(
        config.env_id,
        num_envs=lanes,
        vectorization_mode="vector_entry_point" if has_entry else "sync",
        defer_judging=True,
        judge=judge,
        **dict(config.spec_overrides),
    )
    for env in vec.envs:
        if env.unwrapped.spec_hash != config.spec_hash:
            vec.close()
            raise RuntimeError(
                f"a vector sub-env of {config.env_id} has spec hash {env.unwrapped.spec_hash[:12]}, "
                f"but the campaign was planned with {config.spec_hash[:12]}"
            )
        env.unwrapped.world.load()  # here, as the one-at-a-time worker's env: not in a first reset
    return vec


def step_lanes(vec: Any, actions: Mapping[int, Any]) -> tuple[dict[int, Any], dict[int, float], bool]:
    """Step the sub-envs ``actions`` names (index -> action), nothing else (no autoreset).

    Returns (index -> ``(obs, reward, terminated, truncated, info)`` or the exception raised,
    index -> wall seconds charged to that sub-env, whether the steps ran side by side). Side by
    side (a vector env with ``step_some``, whose world calls are batched) each of n sub-envs is
    charged 1/n of the wall time; one after another, each its own step's time."""
    if hasattr(vec, "step_some"):
        t0 = time.perf_counter()
        results = vec.step_some(actions)
        share = (time.perf_counter() - t0) / max(1, len(actions))
        return results, {i: share for i in actions}, True
    results, seconds = {}, {}
    for i, action in actions.items():
        t0 = time.perf_counter()
        try:
            results[i] = vec.envs[i].step(action)
        except Exception as exc:
            results[i] = exc
        seconds[i] = time.perf_counter() - t0
    return results, seconds, False


def batched_act(policy_class: type) -> bool:
    """Whether ``policy_class`` overrides ``act_many`` (one batched call for several episodes)."""
    from kosmos_env.policies import Policy

    own = getattr(policy_class, "act_many", None)
    return own is not None and getattr(own, "__func__", own) is not Policy.act_many.__func__


@dataclass
class LaneEnd:
    """An episode that left its lane: its record and artifacts, or the exception that ended it."""

    key: EpisodeKey
    lane: int
    record: dict[str, Any] | None = None
    artifacts: list[tuple[str, str, int, str]] | None = None
    error: Exception | None = None


@dataclass
class _Lane:
    """One episode running in sub-env ``index``: its key, loop and the seconds charged to it so far."""

    index: int
    key: EpisodeKey
    loop: Any = None
    charged: float = 0.0


class Lanes:
    """The sub-envs of one vector env, each running one episode; a freed lane takes a new one.

    Knows nothing of leases: a caller (the ledger-backed :func:`work_lockstep`, or a Ray actor
    whose driver holds the leases) hands in episodes with :meth:`start` while :attr:`free` is
    non-zero and calls :meth:`step` while :attr:`running`; both return the episodes that ended
    (:class:`LaneEnd`: judged and stored by :meth:`EpisodeRunner.run`, or failed). Lanes may sit
    at different steps of their episodes: a sub-env's reset and step touch only that sub-env,
    and a batched world call takes each request's own frame, actions and seed.
    """

    def __init__(self, runner: EpisodeRunner, vec: Any):
        self.runner, self.vec = runner, vec
        self.running: dict[int, _Lane] = {}
        self._free = list(range(len(vec.envs)))

    @property
    def free(self) -> int:
        return len(self._free)

    def keys(self) -> list[EpisodeKey]:
        """The episodes running now."""
        return [lane.key for lane in self.running.values()]

    def start(self, key: EpisodeKey) -> list[LaneEnd]:
        """Reset the lowest free lane for ``key`` (a policy's first build there is a load)."""
        from kosmos_env.rollouts import EpisodeLoop

        lane = _Lane(self._free.pop(0), key)
        try:
            policy = self.runner.policy(key.policy, lane=lane.index)
            t0 = time.perf_counter()
            lane.loop = EpisodeLoop(self.vec.envs[lane.index], policy, key.env_seed, key.task)
        except ConfigMismatchError:
            self._free_lane(lane.index)
            raise
        except Exception as exc:
            return [self._fail(lane, exc)]
        lane.charged += time.perf_counter() - t0
        self.running[lane.index] = lane
        return []

    def step(self) -> list[LaneEnd]:
        """One env step of every running lane, side by side; returns the episodes that ended."""
        ended: list[LaneEnd] = []
        actions = self._actions(ended)
        if not actions:
            return ended
        results, seconds, side_by_side = step_lanes(self.vec, actions)
        for index in actions:
            lane, result = self.running[index], results[index]
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # KeyboardInterrupt, SystemExit: not an episode's failure
                ended.append(self._fail(lane, result))
                continue
            lane.charged += seconds[index]
            obs, _, terminated, truncated, info = result
            if lane.loop.observe(obs, terminated, truncated, info, share=1.0 / len(actions) if side_by_side else 1.0):
                ended.append(self._finish(lane))
        return ended

    def _actions(self, ended: list[LaneEnd]) -> dict[int, Any]:
        """The next action of every running lane; lanes whose policy fails end (into ``ended``)."""
        groups: dict[str, list[_Lane]] = {}
        for lane in self.running.values():  # lanes that need their policy, by policy, when the policy batches
            if lane.loop.needs_plan and batched_act(type(lane.loop.policy)):
                groups.setdefault(lane.key.policy, []).append(lane)
        for group in groups.values():
            t0 = time.perf_counter()
            try:
                outputs = type(group[0].loop.policy).act_many(
                    [g.loop.policy for g in group], [g.loop.obs for g in group]
                )
                if len(outputs) != len(group):
                    raise ValueError(
                        f"{type(group[0].loop.policy).__name__}.act_many returned {len(outputs)} "
                        f"actions for {len(group)} observations"
                    )
            except Exception as exc:
                ended.extend(self._fail(lane, exc) for lane in group)
                continue
            share = (time.perf_counter() - t0) / len(group)
            for lane, output in zip(group, outputs, strict=True):
                lane.charged += share
                try:
                    lane.loop.plan(output, share)
                except Exception as exc:
                    ended.append(self._fail(lane, exc))
        actions = {}
        for index, lane in list(self.running.items()):
            t0 = time.perf_counter()
            try:
                actions[index] = lane.loop.next_action()
            except Exception as exc:
                ended.append(self._fail(lane, exc))
                continue
            lane.charged += time.perf_counter() - t0
        return actions

    def _finish(self, lane: _Lane) -> LaneEnd:
        """Judge and store a lane's finished episode (the one-at-a-time worker's own function)."""
        self._free_lane(lane.index)
        started = time.perf_counter() - lane.charged
        try:
            record, artifacts = self.runner.run(lane.key, episode=lane.loop.result(), started=started)
        except ConfigMismatchError:
            raise
        except Exception as exc:
            return LaneEnd(lane.key, lane.index, error=exc)
        return LaneEnd(lane.key, lane.index, record=record, artifacts=artifacts)

    def _fail(self, lane: _Lane, exc: Exception) -> LaneEnd:
        self._free_lane(lane.index)
        return LaneEnd(lane.key, lane.index, error=exc)

    def _free_lane(self, index: int) -> None:
        self.running.pop(index, None)
        if index not in self._free:
            self._free.append(index)
            self._free.sort()


def open_lanes(config: CampaignConfig, runner: EpisodeRunner, width: int) -> Lanes:
    """``width`` lanes over a vector env of the campaign's env (its build filed as a world load)."""
    t0 = time.perf_counter()
    vec = make_vector_env(config, runner.judge, width)
    runner.add_load("world", time.perf_counter() - t0)
    return Lanes(runner, vec)


def lane_width(settings: WorkSettings, planned: int) -> int:
    """Lanes a lockstep worker opens: ``settings.lockstep``, but no sub-env that could never run."""
    return min(int(settings.lockstep), max(1, int(planned)))


class _Heartbeat(Heartbeat):
    """A :class:`Heartbeat` that may be stopped more than once."""

    stopped = False

    def __exit__(self, *exc) -> None:
        if not self.stopped:
            self.stopped = True
            super().__exit__(*exc)


def run_worker(
    out_dir: str | os.PathLike,
    config: CampaignConfig,
    owner: str,
    settings: WorkSettings,
    on_episode: Callable[[str, str], None] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """The worker loop an executor runs: :func:`work_lockstep` when ``settings.lockstep`` > 1, else
    :func:`kosmos_env.campaign.worker.work` (one episode at a time)."""
    if settings.lockstep > 1:
        return work_lockstep(out_dir, config, owner, settings, on_episode, stop)
    return work(out_dir, config, owner, settings, on_episode, stop)


def work_lockstep(
    out_dir: str | os.PathLike,
    config: CampaignConfig,
    owner: str,
    settings: WorkSettings,
    on_episode: Callable[[str, str], None] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """:func:`kosmos_env.campaign.worker.work` with ``settings.lockstep`` episodes side by side.

    Claims episodes into free lanes (each under its own lease and heartbeat), steps the running
    lanes together and records each episode as it ends; with ``settings.refill`` (the default) a
    freed lane claims the next episode at once, else new episodes are claimed only when every
    lane is free (whole batches). A cancel or ``stop`` ends the claiming; running episodes
    finish first. Returns how many episodes this worker finished. Infrastructure failures are
    counted per step: a step in which episodes failed for an infrastructure reason and none
    ended otherwise counts one failure in a row (the same limit and back-off as one at a time).
    """
    check_lockstep(config, settings.lockstep)
    path = os.path.join(os.fspath(out_dir), LEDGER_NAME)
    ledger = Ledger(path, create=False)
    width = lane_width(settings, ledger.counts()["planned"])
    runner: EpisodeRunner | None = None
    lanes: Lanes | None = None
    leases: dict[str, _Heartbeat] = {}  # episode id -> the heartbeat renewing its lease
    finished = 0
    infra_in_a_row = 0
    next_claim = 0.0  # after a claim found nothing while lanes run: no new claim before this time

    def claim(n: int) -> list[EpisodeKey]:
        keys: list[EpisodeKey] = []
        while len(keys) < n:
            key = ledger.claim(owner, settings.lease_seconds, settings.max_attempts)
            if key is None:
                break
            leases[key.episode_id] = _Heartbeat(path, key.episode_id, owner, settings.lease_seconds).__enter__()
            keys.append(key)
        return keys

    def release_all() -> None:  # not the episodes' fault: no attempt used
        for episode_id, heartbeat in list(leases.items()):
            heartbeat.__exit__()
            ledger.release(episode_id, owner)
        leases.clear()

    try:
        stopping = False
        while True:
            ended: list[LaneEnd] = []
            idle = lanes is None or not lanes.running
            free = width if lanes is None else lanes.free
            claimed: list[EpisodeKey] = []
            if not stopping and free and (idle or settings.refill) and (idle or time.monotonic() >= next_claim):
                # checked before claiming only: running episodes always finish
                stopping = (stop is not None and stop.is_set()) or cancel_requested(ledger)
                claimed = [] if stopping else claim(free)
                if not claimed:
                    next_claim = time.monotonic() + settings.poll_seconds
            if claimed and lanes is None:
                try:
                    runner = runner or EpisodeRunner(config, out_dir, ledger, owner, judge_stage=settings.judge_stage)
                    lanes = open_lanes(config, runner, width)
                except BaseException:
                    release_all()
                    raise
            for key in claimed:
                ended += lanes.start(key)
            if lanes is not None and lanes.running:
                ended += lanes.step()
            elif not ended:  # no lane running, nothing claimed
                if not stopping and wait_for_work(ledger, settings):
                    continue
                break
            recorded, infra = 0, []
            for end in ended:
                leases.pop(end.key.episode_id).__exit__()
                if end.error is None:
                    recorded += 1
                    finished += record_episode(ledger, end.key, owner, end.record, end.artifacts, on_episode)
                elif record_failure(ledger, end.key, owner, end.error, settings, on_episode):
                    infra.append(end.error)
                else:
                    recorded += 1  # the policy's own failure: the infrastructure works
            if recorded:
                infra_in_a_row = 0
            elif infra:
                infra_in_a_row += 1
                pause_after_infrastructure_failure(infra_in_a_row, infra[-1], settings, stop)
    except ConfigMismatchError:
        release_all()  # a changed policy is a campaign-level error: unfinished leases go back unused
        raise
    finally:
        for heartbeat in leases.values():
            heartbeat.__exit__()
        if lanes is not None:
            lanes.vec.close()
        if runner is not None:
            runner.close()
        ledger.close()
    return finished


__all__ = [
    "check_lockstep",
    "lane_width",
    "make_vector_env",
    "open_lanes",
    "run_worker",
    "step_lanes",
    "work_lockstep",
    "LaneEnd",
    "Lanes",
]
