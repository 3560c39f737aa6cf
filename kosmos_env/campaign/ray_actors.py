"""The bodies of the Ray executor's actors: rollout actors and judge actors.

Plain classes (the driver wraps them with ``ray.remote``), so they also run without Ray, as a
test does. Each answers with the records of :mod:`kosmos_env.campaign.ray_messages` and never
raises for an episode or a rollout: an episode that failed is an :class:`EpisodeEnded` with its
error; an actor that cannot go on answers :class:`Fatal`. Ray itself imports lazily (only
``where`` asks it anything).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from typing import Any, Mapping, Sequence

from kosmos_env.campaign.design import CampaignConfig, EpisodeKey
from kosmos_env.campaign.ledger import ConfigMismatchError
from kosmos_env.campaign.ray_messages import (
    Artifact,
    EpisodeEnded,
    Fatal,
    JudgeReady,
    JudgeReply,
    PolicyRegistration,
    RolloutReply,
    Verdict,
    describe_failure,
)


def _policy_changed(key: EpisodeKey, exc: BaseException) -> Fatal | None:
    """The actor's answer when ``exc`` says the served policy changed mid-run (see
    :func:`kosmos_env.campaign.worker.policy_changed_error`), else None."""
    from kosmos_env.campaign.worker import policy_changed_error

    changed = policy_changed_error(key, exc)
    return None if changed is None else Fatal.of("", changed)


def _where(role: str) -> dict[str, Any]:
    """Where the calling actor runs: its role, host, pid, node and the GPUs Ray gave it."""
    import ray

    from kosmos_env.utils.threads import torch_threads_now

    torch_threads, torch_loaded = torch_threads_now()
    return {
        "role": role,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "gpus": [str(g) for g in ray.get_gpu_ids()],
        "node_id": ray.get_runtime_context().get_node_id(),
        "torch_threads": torch_threads,
        "torch_loaded": torch_loaded,
    }


def _apply_threads(threads: int | None) -> None:
    """Torch's threads in this actor's process (the driver chose them: kosmos_env.utils.threads),
    set before anything here imports torch; None leaves the process as Ray started it."""
    if threads is not None:
        from kosmos_env.utils.threads import apply_threads

        apply_threads(threads)


class _PolicyRegistrations:
    """Stands in for the ledger inside an actor: EpisodeRunner only registers policy hashes.

    The registrations travel back with the episode and the driver applies them to the real
    ledger (which refuses a policy whose content hash changed) before recording the episode.
    """

    def __init__(self):
        self.pending: list[PolicyRegistration] = []

    def register_policy(self, label: str, content_hash: str, hub_model_id: str | None, worker: str) -> None:
        self.pending.append(PolicyRegistration(label, content_hash, hub_model_id, worker))

    def drain(self) -> tuple[PolicyRegistration, ...]:
        out, self.pending = tuple(self.pending), []
        return out


class EpisodeActor:
    """The body of one Ray rollout actor: a warm :class:`EpisodeRunner` that runs episodes on request.

    Artifacts are written to a private temporary store and sent back as bytes (the driver's
    store may be on another node); the temporary files are removed right after.
    """

    def __init__(self, config: Mapping[str, Any], owner: str, judge_stage: bool = False, threads: int | None = None):
        _apply_threads(threads)
        self.config = CampaignConfig.from_dict(config)
        self.owner = owner
        self.judge_stage = bool(judge_stage)
        self.tmp = tempfile.mkdtemp(prefix="kosmos-ray-actor-")
        self.registry = _PolicyRegistrations()
        self.runner = None
        self.lanes = None  # lockstep lanes (kosmos_env.campaign.lockstep.Lanes), opened by run_lanes

    def where(self) -> dict[str, Any]:
        """Host, pid and the GPUs Ray gave this actor (for logs and tests)."""
        return _where("rollout")

    def _runner(self):
        from kosmos_env.campaign.worker import EpisodeRunner

        if self.runner is None:
            self.runner = EpisodeRunner(self.config, self.tmp, self.registry, self.owner, judge_stage=self.judge_stage)
        return self.runner

    def run(self, key: EpisodeKey) -> RolloutReply | Fatal:
        """Run one episode (the runner is built on the first call)."""
        try:
            runner = self._runner()
        except BaseException as exc:
            return Fatal.of("worker could not start", exc)
        try:
            record, artifacts = runner.run(key)
        except ConfigMismatchError as exc:
            return Fatal.of("", exc)
        except Exception as exc:
            changed = _policy_changed(key, exc)
            if changed is not None:  # the campaign stops; the driver hands the episode back unrecorded
                return changed
            return RolloutReply((EpisodeEnded.failed(key, exc),), self.registry.drain())
        return RolloutReply((EpisodeEnded(key, record, self._payload(artifacts)),), self.registry.drain())

    def run_lanes(self, keys: Sequence[EpisodeKey], width: int) -> RolloutReply | Fatal:
        """Lockstep: start ``keys`` in free lanes (of ``width``, opened on the first call), then step
        the running lanes until at least one episode ends (or none runs); answers the ended ones.

        The driver claims a new episode for each ended one and calls again: lanes are refilled
        while the others go on."""
        from kosmos_env.campaign.lockstep import open_lanes

        try:
            runner = self._runner()
            if self.lanes is None:
                self.lanes = open_lanes(self.config, runner, int(width))
        except BaseException as exc:
            return Fatal.of("worker could not start", exc)
        ended = []
        try:
            for key in keys:
                ended += self.lanes.start(key)
            while self.lanes.running and not ended:
                ended += self.lanes.step()
        except ConfigMismatchError as exc:
            return Fatal.of("", exc)
        for end in ended:
            changed = None if end.error is None else _policy_changed(end.key, end.error)
            if changed is not None:  # the campaign stops; the driver hands the lanes' episodes back
                return changed
        out = []
        read: dict[str, bytes] = {}  # episodes ending together may share a (content-addressed) file
        for end in ended:
            if end.error is not None:
                out.append(EpisodeEnded.failed(end.key, end.error))
            else:
                out.append(EpisodeEnded(end.key, end.record, self._payload(end.artifacts, read)))
        self._remove(read)
        return RolloutReply(tuple(out), self.registry.drain())

    def _payload(self, artifacts, read: dict[str, bytes] | None = None) -> tuple[Artifact, ...]:
        """The artifacts with their bytes for the driver. Files read go into ``read`` (removed by
        the caller with :meth:`_remove`); without it they are removed at once."""
        own = read is None
        read = {} if own else read
        payload = []
        for sha, rel, size, kind in artifacts:
            if rel not in read:
                with open(os.path.join(self.tmp, rel), "rb") as fh:
                    read[rel] = fh.read()
            payload.append(Artifact(sha, rel, size, kind, read[rel]))
        if own:
            self._remove(read)
        return tuple(payload)

    def _remove(self, read: Mapping[str, bytes]) -> None:
        """Remove the temporary artifact files ``read`` names (the driver stores them)."""
        for rel in read:
            path = os.path.join(self.tmp, rel)
            try:
                os.chmod(path, 0o600)
                os.unlink(path)
            except OSError:
                pass

    def close(self) -> None:
        if self.lanes is not None:
            self.lanes.vec.close()
            self.lanes = None
        if self.runner is not None:
            self.runner.close()
            self.runner = None
        shutil.rmtree(self.tmp, ignore_errors=True)


class JudgeActor:
    """The body of one Ray judge actor: the campaign's judge, loaded once, judging batches of rollouts."""

    def __init__(self, config: Mapping[str, Any], judge_batch: int = 0, threads: int | None = None):
        _apply_threads(threads)
        self.config = CampaignConfig.from_dict(config)
        self.judge_batch = int(judge_batch)
        self.runner = None

    def where(self) -> dict[str, Any]:
        """Host, pid and the GPUs Ray gave this actor (for logs and tests)."""
        return _where("judge")

    def start(self) -> JudgeReady | Fatal:
        """Load the judge (once)."""
        from kosmos_env.campaign.judge_stage import JudgeRunner

        if self.runner is None:
            try:
                self.runner = JudgeRunner(self.config, None, batch=self.judge_batch)
            except BaseException as exc:
                return Fatal.of("judge could not start", exc)
        return JudgeReady(self.runner.batch)

    def judge(self, rollouts: list[Any]) -> JudgeReply | Fatal:
        """One verdict per rollout, in order."""
        started = self.start()
        if isinstance(started, Fatal):
            return started
        verdicts, seconds = self.runner.judge_rollouts(rollouts)
        out = []
        for v in verdicts:
            if isinstance(v, BaseException):
                text, infrastructure = describe_failure(v)
                out.append(Verdict(error=text, infrastructure=infrastructure))
            else:
                out.append(Verdict(judgment=v.to_dict()))
        return JudgeReply(tuple(out), seconds, self.runner.identity, self.runner.name, self.runner.take_loads())

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None
