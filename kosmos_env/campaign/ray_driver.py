"""The Ray executor's driver: claim episodes, dispatch them to free actors, renew their leases,
record what the actors answer (see :mod:`kosmos_env.campaign.ray_executor` for the design).

Every call sent to an actor is a :class:`Flight`, of one of three kinds: one episode, a
lockstep actor's lanes, or a judge batch. The kinds differ only in which leases they hold, and
so in how those leases are renewed, failed or handed back (:meth:`RayDriver._renew`,
:meth:`~RayDriver._lost`, :meth:`~RayDriver._hand_back`) and how an answer is filed; every
answer goes through one path, :meth:`RayDriver._collect`:

- the actor process died (``RayActorError``): each episode it held loses one infrastructure
  attempt (never final; a judge batch's rollouts go back to the judge queue) and the actor is
  replaced, up to the restart limit;
- any other Ray error (e.g. an answer that could not be sent back), a :class:`Fatal` answer,
  or a policy whose content hash changed: the leases are handed back unused and the campaign
  stops with the error.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from kosmos_env.campaign.control import cancel_requested
from kosmos_env.campaign.design import EpisodeKey
from kosmos_env.campaign.executor_base import CampaignJob, WorkerFailed
from kosmos_env.campaign.ledger import LEDGER_NAME, ConfigMismatchError, Ledger, make_owner
from kosmos_env.campaign.ray_actors import EpisodeActor, JudgeActor
from kosmos_env.campaign.ray_messages import EpisodeEnded, Fatal, JudgeReady, JudgeReply, RolloutReply

EPISODE, LANES, JUDGE = "episode", "lanes", "judge"


@dataclass
class Flight:
    """One call in flight to the actor in ``slot``."""

    slot: int
    kind: str  # EPISODE, LANES or JUDGE
    sent: float  # time.perf_counter() at dispatch
    key: EpisodeKey | None = None  # EPISODE: the episode sent
    rows: list[Mapping[str, Any]] = field(default_factory=list)  # JUDGE: the judge-queue rows sent
    read_s: float = 0.0  # JUDGE: seconds spent reading each rollout here


class RayDriver:
    """The driver's loop, over the actors of one :class:`~kosmos_env.campaign.ray_executor.RayExecutor` run."""

    def __init__(self, ray, executor: Any, job: CampaignJob, refresh: Callable[[], None]):
        from kosmos_env.campaign.artifacts import ArtifactStore

        self.ray = ray
        self.ex = executor
        self.job = job
        self.refresh = refresh
        self.settings = job.settings
        self.config = job.config.to_dict()
        self.ledger = Ledger(os.path.join(job.out_dir, LEDGER_NAME), create=False)
        self.store = ArtifactStore(job.out_dir)
        self.actor_cls = ray.remote(EpisodeActor).options(max_restarts=0, max_task_retries=0, **executor.actor_options)
        self.judge_cls = ray.remote(JudgeActor).options(max_restarts=0, max_task_retries=0, **executor.judge_options)
        self.actors: dict[int, Any] = {}
        # slots 0..workers-1 roll out; the judge actors (two-stage campaigns) follow them
        self.judge_slots = set(range(executor.workers, executor.workers + executor.judge_workers))
        self.owners = {i: make_owner(f"ray-a{i}") for i in range(executor.workers)}
        self.owners.update({i: make_owner(f"ray-j{i - executor.workers}") for i in self.judge_slots})
        self.in_flight: dict[Any, Flight] = {}
        self.idle: set[int] = set()
        self.restarts = 0
        self.judge_batch: int | None = job.settings.judge_batch or None
        self.judge_loading: dict[int, Any] = {}  # judge slot -> its start() call, until the judge is loaded
        self.reader = None
        # lockstep (--lockstep N): each rollout actor runs `width` lanes; the driver holds their leases
        self.lockstep = int(job.settings.lockstep)
        self.held: dict[int, dict[str, EpisodeKey]] = {}  # rollout slot -> episode id -> key, running in its lanes
        if self.lockstep > 1:
            from kosmos_env.campaign.lockstep import check_lockstep, lane_width

            check_lockstep(job.config, self.lockstep)
            self.width = lane_width(job.settings, self.ledger.counts()["planned"])

    def _start_actor(self, slot: int) -> None:
        if slot in self.judge_slots:
            threads = self.ex.threads["judge"].threads
            self.actors[slot] = self.judge_cls.remote(self.config, self.settings.judge_batch, threads)
            # the judge loads while rollouts start (no waiting on it here: the driver renews leases meanwhile)
            self.judge_loading[slot] = self.actors[slot].start.remote()
        else:
            threads = self.ex.threads["rollout"].threads
            self.actors[slot] = self.actor_cls.remote(self.config, self.owners[slot], bool(self.judge_slots), threads)
        self.idle.add(slot)

    def run(self) -> None:
        try:
            for slot in [*range(self.ex.workers), *sorted(self.judge_slots)]:
                self._start_actor(slot)
            self._loop()
        finally:
            self._shutdown()

    def _work_left(self, counts: Mapping[str, int]) -> int:
        """Episodes this driver's actors can still move on (without judge actors, rolled-out
        episodes are the runner's to judge afterwards)."""
        return counts["pending"] + (counts["leased"] if self.judge_slots else counts["rolling_out"])

    def _loop(self) -> None:
        s = self.settings
        next_renew = time.monotonic() + s.lease_seconds / 3.0
        while True:
            self._dispatch()
            if not self.in_flight:
                counts = self.ledger.counts()
                if self._work_left(counts) == 0 or cancel_requested(self.ledger):
                    return
                if not s.wait_for_others:
                    return
                time.sleep(s.poll_seconds)  # leased by other live workers: wait, take over if they die
                self.refresh()
                continue
            ready, _ = self.ray.wait(
                list(self.in_flight), num_returns=1, timeout=min(self.ex.poll_seconds, s.lease_seconds / 3.0)
            )
            for ref in ready:
                self._collect(ref)
            if time.monotonic() >= next_renew:
                for flight in self.in_flight.values():
                    self._renew(flight)
                next_renew = time.monotonic() + s.lease_seconds / 3.0
            self.refresh()

    # -- dispatch -----------------------------------------------------------------------
    def _send(self, slot: int, ref: Any, flight: Flight) -> None:
        self.in_flight[ref] = flight
        self.idle.discard(slot)

    def _dispatch(self) -> None:
        s = self.settings
        if self.lockstep > 1:
            self._dispatch_lanes()
        if cancel_requested(self.ledger):  # cancelled: in-flight episodes finish, nothing new starts
            return
        for slot in sorted(self.idle - self.judge_slots) if self.lockstep == 1 else ():
            key = self.ledger.claim(self.owners[slot], s.lease_seconds, s.max_attempts)
            if key is None:
                break
            self._send(slot, self.actors[slot].run.remote(key), Flight(slot, EPISODE, time.perf_counter(), key=key))
        for slot in sorted(self.idle & self.judge_slots):
            if slot in self.judge_loading and not self._judge_loaded(slot):
                continue
            rows = self.ledger.claim_judging(self.owners[slot], s.lease_seconds, self.judge_batch)
            if not rows:
                break
            rollouts, read_s = self._read(rows)
            self._send(
                slot,
                self.actors[slot].judge.remote(rollouts),
                Flight(slot, JUDGE, time.perf_counter(), rows=list(rows), read_s=read_s),
            )

    def _dispatch_lanes(self) -> None:
        """Lockstep: give each idle rollout actor new episodes for its free lanes (all of them at
        once without refilling) and let it step on; an actor whose lanes still run is always sent
        on, also after a cancel (running episodes finish, nothing new starts)."""
        s = self.settings
        claiming = not cancel_requested(self.ledger)
        for slot in sorted(self.idle - self.judge_slots):
            held = self.held.setdefault(slot, {})
            keys: list[EpisodeKey] = []
            if claiming and (s.refill or not held):
                while len(held) + len(keys) < self.width:
                    key = self.ledger.claim(self.owners[slot], s.lease_seconds, s.max_attempts)
                    if key is None:
                        claiming = False
                        break
                    keys.append(key)
            held.update((key.episode_id, key) for key in keys)
            if not held:
                continue
            self._send(
                slot, self.actors[slot].run_lanes.remote(keys, self.width), Flight(slot, LANES, time.perf_counter())
            )

    def _judge_loaded(self, slot: int) -> bool:
        """Has judge actor ``slot`` loaded its judge? (the first to answer sets the batch size
        when ``--judge-batch`` was not given: the judge's own ``batch_size``)."""
        ref = self.judge_loading[slot]
        ready, _ = self.ray.wait([ref], timeout=0)
        if not ready:
            return False
        del self.judge_loading[slot]
        try:
            started = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            raise WorkerFailed(f"Ray judge actor {slot} failed to start: {type(exc).__name__}: {exc}") from exc
        if isinstance(started, Fatal):
            raise WorkerFailed(f"Ray judge actor {slot} failed: {started.error}", started.traceback)
        assert isinstance(started, JudgeReady), started
        if self.judge_batch is None:
            self.judge_batch = int(started.batch)
        return True

    def _read(self, rows) -> tuple[list[Any], float]:
        """The rollouts of judge-queue rows, read here from the store this driver recorded them in."""
        from kosmos_env.campaign.judge_stage import read_rollouts

        if self.reader is None:  # reading only: no judge is loaded in the driver
            from kosmos_env.campaign.rejudge import StoredRollouts

            self.reader = StoredRollouts(Path(self.job.out_dir), self.job.config)
        return read_rollouts(self.reader, rows)

    # -- the leases a flight holds ------------------------------------------------------
    def _actor_name(self, flight: Flight) -> str:
        return f"Ray judge actor {flight.slot}" if flight.kind == JUDGE else f"Ray actor {flight.slot}"

    def _renew(self, flight: Flight) -> None:
        owner, seconds = self.owners[flight.slot], self.settings.lease_seconds
        if flight.kind == JUDGE:
            self.ledger.renew_judging([r["episode_id"] for r in flight.rows], owner, seconds)
        elif flight.kind == LANES:  # every lane's lease
            for episode_id in self.held.get(flight.slot, {}):
                self.ledger.renew(episode_id, owner, seconds)
        else:
            self.ledger.renew(flight.key.episode_id, owner, seconds)

    def _lost(self, flight: Flight, exc: BaseException) -> None:
        """The actor died with the flight's work: one infrastructure attempt each (never final)."""
        owner, attempts = self.owners[flight.slot], self.settings.max_attempts
        if flight.kind == JUDGE:  # its rollouts are kept and go back to the judge queue
            for row in flight.rows:
                self.ledger.fail_judging(
                    row["episode_id"],
                    owner,
                    f"Ray judge actor {flight.slot} died while judging: {exc}",
                    attempts,
                    infrastructure=True,
                )
        elif flight.kind == LANES:
            held = self.held.setdefault(flight.slot, {})
            for episode_id in held:
                self.ledger.fail(
                    episode_id,
                    owner,
                    f"Ray actor {flight.slot} died while running the episode "
                    f"(one of {len(held)} lockstep lanes): {exc}",
                    attempts,
                    infrastructure=True,
                )
            held.clear()
        else:
            self.ledger.fail(
                flight.key.episode_id,
                owner,
                f"Ray actor {flight.slot} died while running the episode: {exc}",
                attempts,
                infrastructure=True,
            )

    def _hand_back(self, flight: Flight) -> None:
        """Release the flight's leases unused (not the episodes' fault: no attempt counted)."""
        owner = self.owners[flight.slot]
        if flight.kind == JUDGE:
            self.ledger.release_judging([r["episode_id"] for r in flight.rows], owner)
        elif flight.kind == LANES:
            self._release_lanes(flight.slot)
        else:
            self.ledger.release(flight.key.episode_id, owner)

    def _release_lanes(self, slot: int) -> None:
        for episode_id in self.held.pop(slot, {}):
            self.ledger.release(episode_id, self.owners[slot])

    # -- answers ------------------------------------------------------------------------
    def _collect(self, ref) -> None:
        """The one path every answer takes (see the module's docstring)."""
        flight = self.in_flight.pop(ref)
        name = self._actor_name(flight)
        try:
            answer = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:  # OOM killer, segfault, lost node
            self._lost(flight, exc)
            self._replace(flight.slot, exc)
            return
        except self.ray.exceptions.RayError as exc:  # e.g. the answer could not be sent back
            self._hand_back(flight)
            raise WorkerFailed(f"{name} failed: {type(exc).__name__}: {exc}") from exc
        self.idle.add(flight.slot)
        if isinstance(answer, Fatal):
            self._hand_back(flight)
            raise WorkerFailed(f"{name} failed: {answer.error}", answer.traceback)
        try:
            for p in answer.policies:
                self.ledger.register_policy(p.label, p.content_hash, p.hub_model_id, p.worker)
        except ConfigMismatchError:
            self._hand_back(flight)
            raise
        if isinstance(answer, JudgeReply):
            self._file_verdicts(flight, answer)
            return
        assert isinstance(answer, RolloutReply), answer
        for ended in answer.ended:
            if flight.kind == LANES:
                self.held.setdefault(flight.slot, {}).pop(ended.key.episode_id, None)
            # a single episode's total runs from dispatch to record, as in the other executors
            self._file(flight.slot, ended, flight.sent if flight.kind == EPISODE else None)

    def _file(self, slot: int, ended: EpisodeEnded, t_sent: float | None) -> None:
        """Record one episode an actor ran: its failure, or its record and artifacts (stored here).
        ``t_sent``: when it was dispatched (its ``total``); None keeps the actor's own (lockstep)."""
        owner = self.owners[slot]
        key = ended.key
        if ended.error is not None:
            self.ledger.fail(
                key.episode_id, owner, ended.error, self.settings.max_attempts, infrastructure=ended.infrastructure
            )
            return
        record = ended.record
        t0 = time.perf_counter()
        artifacts = []
        for artifact in ended.artifacts:
            got = self.store.put_bytes(artifact.data, artifact.rel.rsplit(".", 1)[1])
            if tuple(got) != (artifact.sha256, artifact.rel, artifact.size):
                raise WorkerFailed(
                    f"artifact {artifact.rel} from Ray actor {slot} arrived damaged (sha256 {got[0][:12]})"
                )
            artifacts.append(artifact.entry())
        timings = dict(record["timings"])
        timings["io"] = float(timings.get("io", 0.0)) + time.perf_counter() - t0
        if t_sent is not None:  # dispatch to record, as the other executors' claim to record
            timings["total"] = time.perf_counter() - t_sent
        else:  # lockstep: the actor's share of the steps it ran side by side, and this storing
            timings["total"] = float(timings.get("total", 0.0)) + time.perf_counter() - t0
        record = {**record, "timings": timings}
        staged = record.pop("staged", None)
        if staged is not None:  # two-stage: the judge actors take it from here
            self.ledger.stage_rollout(key.episode_id, owner, record, artifacts, staged["frames"], staged["fps"])
        else:
            self.ledger.complete(key.episode_id, owner, record, artifacts)

    def _file_verdicts(self, flight: Flight, reply: JudgeReply) -> None:
        from kosmos_env.campaign.cost import file_loads
        from kosmos_env.campaign.judge_stage import finish_record

        owner = self.owners[flight.slot]
        loads = dict(reply.loads or {})  # the judge's build, filed with its first episode
        for row, verdict in zip(flight.rows, reply.verdicts, strict=True):
            if verdict.error is not None:
                self.ledger.fail_judging(
                    row["episode_id"],
                    owner,
                    verdict.error,
                    self.settings.max_attempts,
                    infrastructure=verdict.infrastructure,
                )
                continue
            record = finish_record(
                self.job.config,
                row["record"],
                verdict.judgment,
                reply.identity,
                reply.name,
                float(reply.seconds),
                flight.read_s,
            )
            file_loads(record["timings"], loads)
            loads = {}
            self.ledger.complete_judging(row["episode_id"], owner, record)

    def _replace(self, slot: int, exc: BaseException) -> None:
        counts = self.ledger.counts()
        left = counts["pending"] + counts["leased"] if slot in self.judge_slots else self._work_left(counts)
        if left == 0:
            return
        if self.restarts >= self.ex.max_restarts:
            raise WorkerFailed(
                f"Ray actor {slot} died ({exc}) and the restart limit ({self.ex.max_restarts}) is "
                "used up; rerun the same command to resume"
            )
        self.restarts += 1
        self._start_actor(slot)

    def _record_threads(self, slots: list[int], infos: list[dict[str, Any]]) -> None:
        """File each live actor's torch threads (as its ``where()`` measured them) in the ledger."""
        from kosmos_env.utils.threads import worker_record

        for slot, info in zip(slots, infos, strict=False):  # no infos at all when where() timed out
            role = "judge" if slot in self.judge_slots else "rollout"
            measured = (info.get("torch_threads"), bool(info.get("torch_loaded")))
            entry = worker_record(self.owners[slot], role, self.ex.threads[role], measured)
            try:
                self.ledger.record_worker_threads(entry)
            except Exception:  # leaving on an error: that error is the one to report
                pass

    def _shutdown(self) -> None:
        # calls still in flight (we are leaving on an error or an interrupt): hand their leases back
        for flight in self.in_flight.values():
            try:
                self._hand_back(flight)
            except Exception:
                pass
        self.in_flight.clear()
        for slot in list(self.held):  # lockstep lanes between two calls
            try:
                self._release_lanes(slot)
            except Exception:
                pass
        info_refs, info_slots = [], []
        for slot, handle in self.actors.items():
            try:
                info_refs.append(handle.where.remote())
                info_slots.append(slot)
            except Exception:
                pass
        try:
            self.ex.actor_info = [i for i in self.ray.get(info_refs, timeout=10)]
        except Exception:
            self.ex.actor_info = []
        self._record_threads(info_slots, self.ex.actor_info)
        closing = []
        for handle in self.actors.values():
            try:
                closing.append(handle.close.remote())
            except Exception:
                pass
        try:
            self.ray.wait(closing, num_returns=len(closing), timeout=30)
        except Exception:
            pass
        for handle in self.actors.values():
            try:
                self.ray.kill(handle)
            except Exception:
                pass
        self.actors.clear()
        self.ledger.close()
