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
seeds within the float tolerance of batched arithmetic. A new batch is claimed when the whole
batch has ended.

Policies act per episode: each lane holds its own instance of each policy (a policy keeps one
episode's state), asked one by one, or in one call when the policy class overrides
:meth:`Policy.act_many` with a batched one. A policy whose instances share one state (a served
policy, ``side_by_side = False``) cannot run in lockstep: :func:`check_lockstep` refuses it.

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
from kosmos_env.campaign.worker import (EpisodeRunner, Heartbeat, WorkSettings, wait_for_work,
                                        pause_after_infrastructure_failure, record_episode, record_failure, work)


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
                f"share one episode state (e.g. one policy behind a server); use --lockstep 1")


def make_vector_env(config: CampaignConfig, judge: Any, lanes: int):
    """``lanes`` sub-envs of the campaign's env: its ``vector_entry_point`` when it has one, else sync.

    Built with the same arguments as the one-at-a-time worker's env (deferred judging, the
    campaign's judge object, the campaign's spec overrides) and their worlds loaded; every
    sub-env must have the campaign's spec hash. (The worker files the build as a world load.)"""
    import gymnasium

    import kosmos_env  # noqa: F401  (registers the env ids)

    has_entry = gymnasium.spec(config.env_id).vector_entry_point is not None
    vec = gymnasium.make_vec(config.env_id, num_envs=lanes,
                             vectorization_mode="vector_entry_point" if has_entry else "sync",
                             defer_judging=True, judge=judge, **dict(config.spec_overrides))
    for env in vec.envs:
        if env.unwrapped.spec_hash != config.spec_hash:
            vec.close()
            raise RuntimeError(f"a vector sub-env of {config.env_id} has spec hash {env.unwrapped.spec_hash[:12]}, "
                               f"but the campaign was planned with {config.spec_hash[:12]}")
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
class _Lane:
    """One episode running in sub-env ``index``: its key, loop, heartbeat and the seconds charged so far."""

    index: int
    key: EpisodeKey
    heartbeat: "_Heartbeat"
    loop: Any = None
    charged: float = 0.0


class LockstepBatch:
    """Runs one claimed batch of episodes to the end and records each as it ends."""

    def __init__(self, runner: EpisodeRunner, vec: Any, ledger: Ledger, owner: str, settings: WorkSettings,
                 on_episode: Callable[[str, str], None] | None):
        self.runner, self.vec, self.ledger, self.owner = runner, vec, ledger, owner
        self.settings, self.on_episode = settings, on_episode
        self.finished = 0
        self.infra: list[BaseException] = []  # infrastructure failures of this batch, in order
        self.succeeded = False  # whether any episode of this batch was recorded (resets the infra count)

    def run(self, lanes: list[_Lane]) -> None:
        from kosmos_env.rollouts import EpisodeLoop

        running: dict[int, _Lane] = {}
        try:
            for lane in lanes:
                try:
                    policy = self.runner.policy(lane.key.policy, lane=lane.index)  # a first build is a load
                    t0 = time.perf_counter()
                    lane.loop = EpisodeLoop(self.vec.envs[lane.index], policy, lane.key.env_seed, lane.key.task)
                except ConfigMismatchError:
                    raise
                except Exception as exc:
                    self._fail(lane, exc)
                    continue
                lane.charged += time.perf_counter() - t0
                running[lane.index] = lane
            while running:
                actions = self._actions(running)
                results, seconds, side_by_side = step_lanes(self.vec, actions)
                for index in actions:
                    lane, result = running[index], results[index]
                    if isinstance(result, BaseException):
                        if not isinstance(result, Exception):
                            raise result  # KeyboardInterrupt, SystemExit: not an episode's failure
                        del running[index]
                        self._fail(lane, result)
                        continue
                    lane.charged += seconds[index]
                    obs, _, terminated, truncated, info = result
                    if lane.loop.observe(obs, terminated, truncated, info,
                                         share=1.0 / len(actions) if side_by_side else 1.0):
                        del running[index]
                        self._finish(lane)
        except ConfigMismatchError:
            for lane in lanes:  # a changed policy is a campaign-level error: unfinished leases go back unused
                if not lane.heartbeat.stopped:
                    lane.heartbeat.__exit__()
                    self.ledger.release(lane.key.episode_id, self.owner)
            raise

    def _actions(self, running: dict[int, _Lane]) -> dict[int, Any]:
        """The next action of every running lane; lanes whose policy fails are failed and dropped."""
        groups: dict[str, list[_Lane]] = {}
        for lane in running.values():  # lanes that need their policy, by policy, when the policy batches
            if lane.loop.needs_plan and batched_act(type(lane.loop.policy)):
                groups.setdefault(lane.key.policy, []).append(lane)
        for group in groups.values():
            t0 = time.perf_counter()
            try:
                outputs = type(group[0].loop.policy).act_many([g.loop.policy for g in group],
                                                              [g.loop.obs for g in group])
                if len(outputs) != len(group):
                    raise ValueError(f"{type(group[0].loop.policy).__name__}.act_many returned {len(outputs)} "
                                     f"actions for {len(group)} observations")
            except Exception as exc:
                for lane in group:
                    del running[lane.index]
                    self._fail(lane, exc)
                continue
            share = (time.perf_counter() - t0) / len(group)
            for lane, output in zip(group, outputs):
                lane.charged += share
                try:
                    lane.loop.plan(output, share)
                except Exception as exc:
                    del running[lane.index]
                    self._fail(lane, exc)
        actions = {}
        for index, lane in list(running.items()):
            t0 = time.perf_counter()
            try:
                actions[index] = lane.loop.next_action()
            except Exception as exc:
                del running[index]
                self._fail(lane, exc)
                continue
            lane.charged += time.perf_counter() - t0
        return actions

    def _finish(self, lane: _Lane) -> None:
        """Judge, store and record a lane's finished episode (the one-at-a-time worker's own functions)."""
        started = time.perf_counter() - lane.charged
        try:
            record, artifacts = self.runner.run(lane.key, episode=lane.loop.result(), started=started)
        except ConfigMismatchError:
            raise
        except Exception as exc:
            self._fail(lane, exc)
            return
        lane.heartbeat.__exit__()
        self.succeeded = True
        if record_episode(self.ledger, lane.key, self.owner, record, artifacts, self.on_episode):
            self.finished += 1

    def _fail(self, lane: _Lane, exc: Exception) -> None:
        lane.heartbeat.__exit__()
        if record_failure(self.ledger, lane.key, self.owner, exc, self.settings, self.on_episode):
            self.infra.append(exc)
        else:
            self.succeeded = True  # the policy's own failure: the infrastructure works


class _Heartbeat(Heartbeat):
    """A :class:`Heartbeat` that may be stopped more than once (a lane stops it when it ends)."""

    stopped = False

    def __exit__(self, *exc) -> None:
        if not self.stopped:
            self.stopped = True
            super().__exit__(*exc)


def run_worker(out_dir: str | os.PathLike, config: CampaignConfig, owner: str, settings: WorkSettings,
               on_episode: Callable[[str, str], None] | None = None, stop: threading.Event | None = None) -> int:
    """The worker loop an executor runs: :func:`work_lockstep` when ``settings.lockstep`` > 1, else
    :func:`kosmos_env.campaign.worker.work` (one episode at a time)."""
    if settings.lockstep > 1:
        return work_lockstep(out_dir, config, owner, settings, on_episode, stop)
    return work(out_dir, config, owner, settings, on_episode, stop)


def work_lockstep(out_dir: str | os.PathLike, config: CampaignConfig, owner: str, settings: WorkSettings,
                  on_episode: Callable[[str, str], None] | None = None,
                  stop: threading.Event | None = None) -> int:
    """:func:`kosmos_env.campaign.worker.work` with ``settings.lockstep`` episodes side by side.

    Claims up to ``settings.lockstep`` episodes, runs them to their ends together, repeats until
    nothing is left; returns how many this worker finished. A batch in which every failure was
    an infrastructure failure and nothing was recorded counts as one failure in a row (the
    one-at-a-time worker counts episodes); the same limit and back-off apply.
    """
    check_lockstep(config, settings.lockstep)
    path = os.path.join(os.fspath(out_dir), LEDGER_NAME)
    ledger = Ledger(path, create=False)
    lanes_wide = min(int(settings.lockstep), max(1, ledger.counts()["planned"]))  # no sub-env that never runs
    runner: EpisodeRunner | None = None
    vec = None
    finished = 0
    infra_in_a_row = 0
    try:
        while stop is None or not stop.is_set():
            if cancel_requested(ledger):  # checked between batches only: a running batch finishes first
                break
            lanes: list[_Lane] = []
            while len(lanes) < lanes_wide:
                key = ledger.claim(owner, settings.lease_seconds, settings.max_attempts)
                if key is None:
                    break
                heartbeat = _Heartbeat(path, key.episode_id, owner, settings.lease_seconds)
                lanes.append(_Lane(len(lanes), key, heartbeat.__enter__()))
            if not lanes:
                if wait_for_work(ledger, settings):
                    continue
                break
            if runner is None:
                try:
                    runner = EpisodeRunner(config, out_dir, ledger, owner, judge_stage=settings.judge_stage)
                    t0 = time.perf_counter()
                    vec = make_vector_env(config, runner.judge, lanes_wide)
                    runner.add_load("world", time.perf_counter() - t0)
                except BaseException:
                    for lane in lanes:  # not the episodes' fault: no attempt used
                        lane.heartbeat.__exit__()
                        ledger.release(lane.key.episode_id, owner)
                    raise
            batch = LockstepBatch(runner, vec, ledger, owner, settings, on_episode)
            try:
                batch.run(lanes)
            finally:
                for lane in lanes:
                    lane.heartbeat.__exit__()
            finished += batch.finished
            if batch.succeeded or not batch.infra:
                infra_in_a_row = 0
            else:
                infra_in_a_row += 1
                pause_after_infrastructure_failure(infra_in_a_row, batch.infra[-1], settings, stop)
    finally:
        if vec is not None:
            vec.close()
        if runner is not None:
            runner.close()
        ledger.close()
    return finished


__all__ = ["check_lockstep", "make_vector_env", "run_worker", "step_lanes", "work_lockstep", "LockstepBatch"]
