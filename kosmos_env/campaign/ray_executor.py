"""Ray executor: campaign workers as long-lived Ray actors, the ledger kept by the driver.

World-model rollouts are independent, so a campaign scales by running many *warm* workers, not
by splitting a rollout. This executor starts ``workers`` Ray actors; each builds the env, judge
and policies once (on its first episode) and keeps them for the whole campaign. Ray places each
actor by the resources it asks for (``actor_resources``: ``{"num_gpus": 1}`` for one GPU per
world model, ``{"num_gpus": 0.5}`` to pack two small models on one GPU, ``{"num_cpus": 2}``,
custom ``resources`` ...); inside the actor Ray sets ``CUDA_VISIBLE_DEVICES`` so the world
model's ``cuda`` device is the GPU it was given. Resources are per actor: the env, its world
model, the judge and the policies of one worker share them.

Why the driver, not the actors, talks to the ledger: SQLite in WAL mode needs one host's local
disk, and actors may run on other nodes. So the driver claims episodes *with the same leases*
every other executor uses (one lease owner per actor, ``host:driver-pid:ray-a<i>``), sends the
episode key to a free actor, renews the lease while the actor works, and records the result the
actor returns: the ledger record plus the bytes of its artifacts (MP4, actions, robot log),
which the driver stores content-addressed under the campaign folder. Episodes are dispatched as
actors free up (``ray.wait``), one in flight per actor, so a slow episode never holds others.

Consequences:
- local workers (``kosmos-env eval`` in another shell, a process pool) can share the same
  campaign folder at the same time: they take leases from the same ledger;
- if the driver crashes, Ray tears its actors down (they are owned by the driver's job) and the
  leases name a dead process on this host, so a rerun takes them over at once and finishes
  exactly the missing episodes (a resume); with ``--address`` of a remote cluster, actors of a
  dead driver are likewise cleaned up by Ray;
- an actor that dies (OOM, segfault, a lost node) costs its episode one attempt, recorded in
  the ledger, and is replaced (up to ``max_restarts`` times in all);
- an episode that raised is recorded as a failed attempt and retried, as in every executor;
  a worker that cannot start (missing weights, bad config) or a policy whose content hash
  changed stops the campaign with that error.

Lockstep (``settings.lockstep`` N > 1, ``eval --lockstep N``): each rollout actor runs N lanes
(:class:`kosmos_env.campaign.lockstep.Lanes`, one vector env, batched world calls). The driver
claims up to N episodes for an actor and renews all their leases; the actor steps its lanes until
at least one episode ends and sends back the ended ones; the driver records them, claims one new
episode per freed lane and sends the actor on, so lanes are refilled while the others go on. An
actor that dies costs each of its lanes' episodes one infrastructure attempt (never final).

Two stages (``judge_workers`` > 0): the ``workers`` actors become rollout actors (policy, world,
gate; no judge loaded) placed by ``actor_resources``, and ``judge_workers`` judge actors, placed
by their own ``judge_resources`` (e.g. ``{"num_gpus": 0.25}``: four judges per GPU), judge the
rolled-out episodes in batches. The driver leases rolled-out episodes to a judge actor with the
judge stage's leases, reads their stored artifacts (the rollouts it recorded itself) and sends
the rollouts; the actor returns one verdict per rollout. A judge actor that dies costs no
rollout: its batch goes back to the judge queue.

Ray is an optional extra (``pip install 'kosmos-env[ray]'``) imported only inside this
executor. ``address=None`` starts a private local Ray instance (``num_cpus`` caps it) and shuts
it down at the end; ``address="auto"`` or ``"ray://host:10001"`` joins an existing cluster and
leaves it running. If Ray is already initialised in this process, that instance is used as is.
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

from kosmos_env.campaign.control import cancel_requested
from kosmos_env.campaign.design import CampaignConfig, EpisodeKey
from kosmos_env.campaign.executor_base import CampaignJob, Executor, WorkerFailed
from kosmos_env.campaign.ledger import LEDGER_NAME, ConfigMismatchError, Ledger, make_owner

# Ray actor options a user may set through --actor-resources (all are resource requests or
# placement hints; anything else, e.g. max_concurrency, would change how the executor works)
ACTOR_OPTION_KEYS = ("num_cpus", "num_gpus", "memory", "resources", "accelerator_type", "scheduling_strategy")


def import_ray():
    """Import Ray or explain how to install it (it is an optional extra)."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the Ray executor needs Ray: pip install 'kosmos-env[ray]' (or 'ray[default]')") from exc
    return ray


def parse_actor_resources(value: str | Mapping[str, Any] | None, flag: str = "--actor-resources") -> dict[str, Any]:
    """Check ``--actor-resources`` (or ``flag``: a JSON object or a mapping) and return Ray actor options.

    Default: one CPU per actor, no GPU. ``{"num_gpus": 1}`` gives each actor a whole GPU.
    """
    import json

    if value is None or value == "":
        return {"num_cpus": 1}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{flag} must be a JSON object, e.g. '{{\"num_gpus\": 1}}': {exc}") from None
    if not isinstance(value, Mapping):
        raise ValueError(f"{flag} must be a JSON object, got {type(value).__name__}")
    unknown = sorted(set(value) - set(ACTOR_OPTION_KEYS))
    if unknown:
        raise ValueError(f"{flag}: unknown actor resource option(s) {unknown}; allowed: {list(ACTOR_OPTION_KEYS)}")
    out = dict(value)
    for key in ("num_cpus", "num_gpus", "memory"):
        if key in out:
            amount = out[key]
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
                raise ValueError(f"{flag}: {key!r} must be a non-negative number, got {amount!r}")
            if key == "num_gpus" and amount > 1 and float(amount) != int(amount):
                raise ValueError(f"{flag}: num_gpus above 1 must be a whole number (Ray's rule), got {amount}")
    if "resources" in out and not (isinstance(out["resources"], Mapping)
                                   and all(isinstance(v, (int, float)) and v >= 0 for v in out["resources"].values())):
        raise ValueError(f"{flag}: 'resources' must map names to non-negative numbers, got {out['resources']!r}")
    out.setdefault("num_cpus", 1)
    return out


def _where(role: str) -> dict[str, Any]:
    """Where the calling actor runs: its role, host, pid, node and the GPUs Ray gave it."""
    import ray

    return {"role": role, "host": socket.gethostname(), "pid": os.getpid(),
            "gpus": [str(g) for g in ray.get_gpu_ids()], "node_id": ray.get_runtime_context().get_node_id()}


class _PolicyRegistrations:
    """Stands in for the ledger inside an actor: EpisodeRunner only registers policy hashes.

    The registrations travel back with the episode and the driver applies them to the real
    ledger (which refuses a policy whose content hash changed) before recording the episode.
    """

    def __init__(self):
        self.pending: list[tuple[str, str, str | None, str]] = []

    def register_policy(self, label: str, content_hash: str, hub_model_id: str | None, worker: str) -> None:
        self.pending.append((label, content_hash, hub_model_id, worker))

    def drain(self) -> list[tuple[str, str, str | None, str]]:
        out, self.pending = self.pending, []
        return out


class EpisodeActor:
    """The body of one Ray actor: a warm :class:`EpisodeRunner` that runs episodes on request.

    Artifacts are written to a private temporary store and sent back as bytes (the driver's
    store may be on another node); the temporary files are removed right after.
    """

    def __init__(self, config: Mapping[str, Any], owner: str, judge_stage: bool = False):
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

    def run(self, key: tuple[str, str, int, int, int]) -> dict[str, Any]:
        """Run one episode; returns {"status": ok|error|fatal, ...} (never raises for an episode)."""
        from kosmos_env.campaign.worker import EpisodeRunner

        episode = EpisodeKey(*key)
        if self.runner is None:
            try:
                self.runner = EpisodeRunner(self.config, self.tmp, self.registry, self.owner,
                                            judge_stage=self.judge_stage)
            except BaseException as exc:
                return {"status": "fatal", "error": f"worker could not start: {type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc()}
        try:
            record, artifacts = self.runner.run(episode)
        except ConfigMismatchError as exc:
            return {"status": "fatal", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        except Exception as exc:
            return {**_error(exc), "policies": self.registry.drain()}
        return {"status": "ok", "record": record, "artifacts": self._payload(artifacts),
                "policies": self.registry.drain()}

    def run_lanes(self, keys: list[tuple[str, str, int, int, int]], width: int) -> dict[str, Any]:
        """Lockstep: start ``keys`` in free lanes (of ``width``, opened on the first call), then step
        the running lanes until at least one episode ends (or none runs).

        Returns {"status": "ok", "ended": [{"episode": key, "status": ok|error, ...}, ...],
        "policies": registrations} or a fatal error (the driver then hands back every lease it
        holds for this actor). The driver claims a new episode for each ended one and calls
        again: lanes are refilled while the others go on."""
        from kosmos_env.campaign.lockstep import open_lanes
        from kosmos_env.campaign.worker import EpisodeRunner

        try:
            if self.runner is None:
                self.runner = EpisodeRunner(self.config, self.tmp, self.registry, self.owner,
                                            judge_stage=self.judge_stage)
            if self.lanes is None:
                self.lanes = open_lanes(self.config, self.runner, int(width))
        except BaseException as exc:
            return {"status": "fatal", "error": f"worker could not start: {type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()}
        ended = []
        try:
            for key in keys:
                ended += self.lanes.start(EpisodeKey(*key))
            while self.lanes.running and not ended:
                ended += self.lanes.step()
        except ConfigMismatchError as exc:
            return {"status": "fatal", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        out = []
        read: dict[str, bytes] = {}  # episodes ending together may share a (content-addressed) file
        for end in ended:
            key = _key_tuple(end.key)
            if end.error is not None:
                out.append({"episode": key, **_error(end.error)})
            else:
                out.append({"episode": key, "status": "ok", "record": end.record,
                            "artifacts": self._payload(end.artifacts, read)})
        self._remove(read)
        return {"status": "ok", "ended": out, "policies": self.registry.drain()}

    def _payload(self, artifacts, read: dict[str, bytes] | None = None) -> list[tuple[str, str, int, str, bytes]]:
        """The artifacts' bytes for the driver. Files read go into ``read`` (removed by the
        caller with :meth:`_remove`); without it they are removed at once."""
        own = read is None
        read = {} if own else read
        payload = []
        for sha, rel, size, kind in artifacts:
            if rel not in read:
                with open(os.path.join(self.tmp, rel), "rb") as fh:
                    read[rel] = fh.read()
            payload.append((sha, rel, size, kind, read[rel]))
        if own:
            self._remove(read)
        return payload

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


def _key_tuple(key: EpisodeKey) -> tuple[str, str, int, int, int]:
    return (key.policy, key.task, key.seed, key.repeat, key.order)


def _error(exc: BaseException) -> dict[str, Any]:
    """An episode's failure as the driver records it (traceback text, infrastructure or not)."""
    from kosmos_env.campaign.failures import is_infrastructure_failure

    return {"status": "error", "error": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            "infrastructure": is_infrastructure_failure(exc)}


class JudgeActor:
    """The body of one Ray judge actor: the campaign's judge, loaded once, judging batches of rollouts."""

    def __init__(self, config: Mapping[str, Any], judge_batch: int = 0):
        self.config = CampaignConfig.from_dict(config)
        self.judge_batch = int(judge_batch)
        self.runner = None

    def where(self) -> dict[str, Any]:
        """Host, pid and the GPUs Ray gave this actor (for logs and tests)."""
        return _where("judge")

    def start(self) -> dict[str, Any]:
        """Load the judge; returns {"status": "ok", "batch": rollouts per claim} or a fatal error."""
        from kosmos_env.campaign.judge_stage import JudgeRunner

        if self.runner is None:
            try:
                self.runner = JudgeRunner(self.config, None, batch=self.judge_batch)
            except BaseException as exc:
                return {"status": "fatal", "error": f"judge could not start: {type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc()}
        return {"status": "ok", "batch": self.runner.batch}

    def judge(self, rollouts: list[Any]) -> dict[str, Any]:
        """One verdict dict or error per rollout (never raises for a rollout)."""
        from kosmos_env.campaign.failures import is_infrastructure_failure

        started = self.start()
        if started["status"] != "ok":
            return started
        verdicts, seconds = self.runner.judge_rollouts(rollouts)
        out = []
        for v in verdicts:
            if isinstance(v, BaseException):
                out.append({"error": "".join(traceback.format_exception(type(v), v, v.__traceback__)),
                            "infrastructure": is_infrastructure_failure(v)})
            else:
                out.append({"judgment": v.to_dict()})
        return {"status": "ok", "verdicts": out, "seconds": seconds, "identity": self.runner.identity,
                "name": self.runner.name, "loads": self.runner.take_loads()}

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None


class RayExecutor(Executor):
    """``workers`` Ray actors fed episodes by lease from this process's ledger."""

    name = "ray"

    def __init__(self, workers: int, address: str | None = None, num_cpus: float | None = None,
                 actor_resources: str | Mapping[str, Any] | None = None, max_restarts: int | None = None,
                 poll_seconds: float = 0.2, init_kwargs: Mapping[str, Any] | None = None, judge_workers: int = 0,
                 judge_resources: str | Mapping[str, Any] | None = None):
        if workers < 1:
            raise ValueError(f"--workers must be at least 1, got {workers}")
        if judge_workers < 0:
            raise ValueError(f"--judge-workers must be 0 (judge in-line) or more, got {judge_workers}")
        if judge_resources is not None and not judge_workers:
            raise ValueError("--judge-resources places judge actors: give --judge-workers N")
        self.judge_workers = int(judge_workers)
        self.judge_options = parse_actor_resources(judge_resources, "--judge-resources")
        if num_cpus is not None and address is not None:
            raise ValueError("--ray-num-cpus sizes a new local Ray instance; it cannot be used with --address "
                             "(the cluster's resources are set where it was started)")
        if num_cpus is not None and num_cpus <= 0:
            raise ValueError(f"--ray-num-cpus must be positive, got {num_cpus}")
        self.workers = int(workers)
        self.address = address
        self.num_cpus = num_cpus
        self.actor_options = parse_actor_resources(actor_resources, "--rollout-resources/--actor-resources")
        self.max_restarts = 2 * (self.workers + self.judge_workers) if max_restarts is None else int(max_restarts)
        self.poll_seconds = float(poll_seconds)
        self.init_kwargs = dict(init_kwargs or {})
        self.actor_info: list[dict[str, Any]] = []  # where each actor ran (filled during run)

    # -- Ray lifetime -----------------------------------------------------------------
    def _init(self, ray):
        """Start or join Ray. Returns None when Ray was already initialised here (used as is),
        else a guard whose ``close`` follows ``ray.shutdown``: for a head this call starts, a
        :class:`~kosmos_env.campaign.ray_watchdog.HeadGuard` whose watchdog takes the head
        down if this process dies (a cluster given by address is joined and never touched)."""
        if ray.is_initialized():
            return None
        kwargs = {"include_dashboard": False, "logging_level": "warning", **self.init_kwargs}
        if self.address is not None:
            kwargs["address"] = self.address
        if self.num_cpus is not None:
            kwargs["num_cpus"] = self.num_cpus
        if kwargs.get("address") is not None or sys.platform == "win32":
            # joined, not started (on Windows Ray binds its processes to the driver's job object)
            ray.init(**kwargs)
            return _NoGuard()
        from kosmos_env.campaign.ray_watchdog import HeadGuard

        guard = HeadGuard.start()  # before ray.init: a kill during start-up is covered too
        try:
            with guard.marking():
                ray.init(**kwargs)
        except BaseException:
            guard.close()
            raise
        guard.session(_session_dir(ray))
        return guard

    def run(self, job: CampaignJob, refresh: Callable[[], None]) -> None:
        ray = import_ray()
        guard = self._init(ray)
        try:
            _Dispatcher(ray, self, job, refresh).run()
        finally:
            if guard is not None:
                ray.shutdown()
                guard.close()
        refresh()


class _NoGuard:
    """A Ray instance this executor joined: shut down (disconnected) at the end, nothing to watch."""

    def close(self) -> None:
        pass


def _session_dir(ray) -> str | None:
    """The session folder of the Ray node this process started (Ray keeps it on a private attribute)."""
    try:
        return ray._private.worker._global_node.get_session_dir_path()
    except Exception:  # another Ray version: the watchdog then finds the head by its token alone
        return None


class _Dispatcher:
    """The driver's loop: claim, dispatch to free actors, renew leases, record results."""

    def __init__(self, ray, executor: RayExecutor, job: CampaignJob, refresh: Callable[[], None]):
        from kosmos_env.campaign.artifacts import ArtifactStore

        self.ray = ray
        self.ex = executor
        self.job = job
        self.refresh = refresh
        self.settings = job.settings
        self.config = job.config.to_dict()
        self.ledger = Ledger(os.path.join(job.out_dir, LEDGER_NAME), create=False)
        self.store = ArtifactStore(job.out_dir)
        self.actor_cls = ray.remote(EpisodeActor).options(max_restarts=0, max_task_retries=0,
                                                          **executor.actor_options)
        self.judge_cls = ray.remote(JudgeActor).options(max_restarts=0, max_task_retries=0,
                                                        **executor.judge_options)
        self.actors: dict[int, Any] = {}
        # slots 0..workers-1 roll out; the judge actors (two-stage campaigns) follow them
        self.judge_slots = set(range(executor.workers, executor.workers + executor.judge_workers))
        self.owners = {i: make_owner(f"ray-a{i}") for i in range(executor.workers)}
        self.owners.update({i: make_owner(f"ray-j{i - executor.workers}") for i in self.judge_slots})
        # rollout: ref -> (slot, episode key, sent); judging: ref -> (slot, queue rows, sent, read seconds per rollout)
        self.in_flight: dict[Any, tuple] = {}
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
            self.actors[slot] = self.judge_cls.remote(self.config, self.settings.judge_batch)
            # the judge loads while rollouts start (no waiting on it here: the driver renews leases meanwhile)
            self.judge_loading[slot] = self.actors[slot].start.remote()
        else:
            self.actors[slot] = self.actor_cls.remote(self.config, self.owners[slot], bool(self.judge_slots))
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
            ready, _ = self.ray.wait(list(self.in_flight), num_returns=1,
                                     timeout=min(self.ex.poll_seconds, s.lease_seconds / 3.0))
            for ref in ready:
                self._collect(ref)
            if time.monotonic() >= next_renew:
                for slot, work, *_ in self.in_flight.values():
                    if slot in self.judge_slots:
                        self.ledger.renew_judging([r["episode_id"] for r in work], self.owners[slot], s.lease_seconds)
                    elif work is None:  # a lockstep actor: every lane's lease
                        for episode_id in self.held.get(slot, {}):
                            self.ledger.renew(episode_id, self.owners[slot], s.lease_seconds)
                    else:
                        self.ledger.renew(work.episode_id, self.owners[slot], s.lease_seconds)
                next_renew = time.monotonic() + s.lease_seconds / 3.0
            self.refresh()

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
            ref = self.actors[slot].run.remote((key.policy, key.task, key.seed, key.repeat, key.order))
            self.in_flight[ref] = (slot, key, time.perf_counter())
            self.idle.discard(slot)
        for slot in sorted(self.idle & self.judge_slots):
            if slot in self.judge_loading and not self._judge_loaded(slot):
                continue
            rows = self.ledger.claim_judging(self.owners[slot], s.lease_seconds, self.judge_batch)
            if not rows:
                break
            rollouts, read_s = self._read(rows)
            ref = self.actors[slot].judge.remote(rollouts)
            self.in_flight[ref] = (slot, rows, time.perf_counter(), read_s)
            self.idle.discard(slot)

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
            ref = self.actors[slot].run_lanes.remote([_key_tuple(k) for k in keys], self.width)
            self.in_flight[ref] = (slot, None, time.perf_counter())
            self.idle.discard(slot)

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
        if started["status"] != "ok":
            raise WorkerFailed(f"Ray judge actor {slot} failed: {started['error']}", started.get("traceback", ""))
        if self.judge_batch is None:
            self.judge_batch = int(started["batch"])
        return True

    def _read(self, rows) -> tuple[list[Any], float]:
        """The rollouts of judge-queue rows, read here from the store this driver recorded them in."""
        from kosmos_env.campaign.judge_stage import read_rollouts

        if self.reader is None:  # reading only: no judge is loaded in the driver
            from kosmos_env.campaign.rejudge import StoredRollouts

            self.reader = StoredRollouts(Path(self.job.out_dir), self.job.config)
        return read_rollouts(self.reader, rows)

    def _collect(self, ref) -> None:
        if self.in_flight[ref][0] in self.judge_slots:
            self._collect_judging(ref)
            return
        if self.in_flight[ref][1] is None:
            self._collect_lanes(ref)
            return
        slot, key, t_sent = self.in_flight.pop(ref)
        owner = self.owners[slot]
        s = self.settings
        try:
            result = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:
            # the actor process died (OOM killer, segfault, lost node): infrastructure, never final
            self.ledger.fail(key.episode_id, owner, f"Ray actor {slot} died while running the episode: {exc}",
                             s.max_attempts, infrastructure=True)
            self._replace(slot, exc)
            return
        except self.ray.exceptions.RayError as exc:  # e.g. the result could not be sent back
            self.ledger.release(key.episode_id, owner)
            raise WorkerFailed(f"Ray actor {slot} failed: {type(exc).__name__}: {exc}") from exc
        self.idle.add(slot)
        status = result["status"]
        if status == "fatal":
            self.ledger.release(key.episode_id, owner)  # not the episode's fault: no attempt used
            raise WorkerFailed(f"Ray actor {slot} failed: {result['error']}", result.get("traceback", ""))
        try:
            self._register(result.get("policies", ()))
        except ConfigMismatchError:
            self.ledger.release(key.episode_id, owner)
            raise
        self._file(slot, key, result, t_sent)

    def _collect_lanes(self, ref) -> None:
        """A lockstep actor's answer: record the episodes that ended; their lanes are free again."""
        slot, _, _ = self.in_flight.pop(ref)
        owner = self.owners[slot]
        held = self.held.setdefault(slot, {})
        try:
            result = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:
            # the actor died: each of its lanes' episodes loses its run (infrastructure, never final)
            for episode_id in held:
                self.ledger.fail(episode_id, owner, f"Ray actor {slot} died while running the episode "
                                 f"(one of {len(held)} lockstep lanes): {exc}", self.settings.max_attempts,
                                 infrastructure=True)
            held.clear()
            self._replace(slot, exc)
            return
        except self.ray.exceptions.RayError as exc:
            self._release_lanes(slot)
            raise WorkerFailed(f"Ray actor {slot} failed: {type(exc).__name__}: {exc}") from exc
        self.idle.add(slot)
        if result["status"] == "fatal":
            self._release_lanes(slot)  # not the episodes' fault: no attempt used
            raise WorkerFailed(f"Ray actor {slot} failed: {result['error']}", result.get("traceback", ""))
        try:
            self._register(result.get("policies", ()))
        except ConfigMismatchError:
            self._release_lanes(slot)
            raise
        for item in result["ended"]:
            key = EpisodeKey(*item["episode"])
            held.pop(key.episode_id, None)
            self._file(slot, key, item, None)

    def _release_lanes(self, slot: int) -> None:
        for episode_id in self.held.pop(slot, {}):
            self.ledger.release(episode_id, self.owners[slot])

    def _file(self, slot: int, key: EpisodeKey, result: Mapping[str, Any], t_sent: float | None) -> None:
        """Record one episode an actor ran: its failure, or its record and artifacts (stored here).
        ``t_sent``: when it was dispatched (its ``total``); None keeps the actor's own (lockstep)."""
        owner = self.owners[slot]
        s = self.settings
        if result["status"] == "error":
            self.ledger.fail(key.episode_id, owner, result["error"], s.max_attempts,
                             infrastructure=bool(result.get("infrastructure")))
            return
        record = result["record"]
        t0 = time.perf_counter()
        artifacts = []
        for sha, rel, size, kind, data in result["artifacts"]:
            got_sha, got_rel, got_size = self.store.put_bytes(data, rel.rsplit(".", 1)[1])
            if (got_sha, got_rel, got_size) != (sha, rel, size):
                raise WorkerFailed(f"artifact {rel} from Ray actor {slot} arrived damaged (sha256 {got_sha[:12]})")
            artifacts.append((sha, rel, size, kind))
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

    def _collect_judging(self, ref) -> None:
        from kosmos_env.campaign.cost import file_loads
        from kosmos_env.campaign.judge_stage import finish_record

        slot, rows, t_sent, read_s = self.in_flight.pop(ref)
        owner = self.owners[slot]
        s = self.settings
        ids = [r["episode_id"] for r in rows]
        try:
            result = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:
            # the judge actor died: its rollouts are kept and go back to the judge queue
            for eid in ids:
                self.ledger.fail_judging(eid, owner, f"Ray judge actor {slot} died while judging: {exc}",
                                         s.max_attempts, infrastructure=True)
            self._replace(slot, exc)
            return
        except self.ray.exceptions.RayError as exc:
            self.ledger.release_judging(ids, owner)
            raise WorkerFailed(f"Ray judge actor {slot} failed: {type(exc).__name__}: {exc}") from exc
        self.idle.add(slot)
        if result["status"] == "fatal":
            self.ledger.release_judging(ids, owner)
            raise WorkerFailed(f"Ray judge actor {slot} failed: {result['error']}", result.get("traceback", ""))
        for row, verdict in zip(rows, result["verdicts"]):
            if "error" in verdict:
                self.ledger.fail_judging(row["episode_id"], owner, verdict["error"], s.max_attempts,
                                         infrastructure=bool(verdict.get("infrastructure")))
                continue
            record = finish_record(self.job.config, row["record"], verdict["judgment"], result["identity"],
                                   result["name"], float(result["seconds"]), read_s)
            file_loads(record["timings"], result.get("loads") or {})  # the judge's build, with its first episode
            result["loads"] = {}
            self.ledger.complete_judging(row["episode_id"], owner, record)

    def _register(self, policies) -> None:
        for label, content_hash, hub, worker in policies:
            self.ledger.register_policy(label, content_hash, hub, worker)

    def _replace(self, slot: int, exc: BaseException) -> None:
        counts = self.ledger.counts()
        left = counts["pending"] + counts["leased"] if slot in self.judge_slots else self._work_left(counts)
        if left == 0:
            return
        if self.restarts >= self.ex.max_restarts:
            raise WorkerFailed(f"Ray actor {slot} died ({exc}) and the restart limit ({self.ex.max_restarts}) is "
                               "used up; rerun the same command to resume")
        self.restarts += 1
        self._start_actor(slot)

    def _shutdown(self) -> None:
        # episodes still in flight (we are leaving on an error or an interrupt): hand them back
        for slot, work, *_ in self.in_flight.values():
            try:
                if slot in self.judge_slots:
                    self.ledger.release_judging([r["episode_id"] for r in work], self.owners[slot])
                elif work is not None:
                    self.ledger.release(work.episode_id, self.owners[slot])
            except Exception:
                pass
        self.in_flight.clear()
        for slot in list(self.held):  # lockstep lanes, in flight or between two calls
            try:
                self._release_lanes(slot)
            except Exception:
                pass
        info_refs = []
        for handle in self.actors.values():
            try:
                info_refs.append(handle.where.remote())
            except Exception:
                pass
        try:
            self.ex.actor_info = [i for i in self.ray.get(info_refs, timeout=10)]
        except Exception:
            self.ex.actor_info = []
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
