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
A head this executor starts is watched (:mod:`kosmos_env.campaign.ray_watchdog`): if this
process dies, even by SIGKILL, every process of that head is stopped within about a second.

Modules: this one (options, Ray's lifetime), :mod:`~kosmos_env.campaign.ray_driver` (the
driver's loop), :mod:`~kosmos_env.campaign.ray_actors` (the actors' bodies) and
:mod:`~kosmos_env.campaign.ray_messages` (the typed records they exchange).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Mapping

from kosmos_env.campaign.executor_base import CampaignJob, Executor
from kosmos_env.campaign.ray_actors import EpisodeActor, JudgeActor
from kosmos_env.campaign.ray_driver import RayDriver

__all__ = [
    "ACTOR_OPTION_KEYS",
    "EpisodeActor",
    "JudgeActor",
    "RayDriver",
    "RayExecutor",
    "import_ray",
    "parse_actor_resources",
]

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
    if "resources" in out and not (
        isinstance(out["resources"], Mapping)
        and all(isinstance(v, (int, float)) and v >= 0 for v in out["resources"].values())
    ):
        raise ValueError(f"{flag}: 'resources' must map names to non-negative numbers, got {out['resources']!r}")
    out.setdefault("num_cpus", 1)
    return out


class RayExecutor(Executor):
    """``workers`` Ray actors fed episodes by lease from this process's ledger."""

    name = "ray"

    def __init__(
        self,
        workers: int,
        address: str | None = None,
        num_cpus: float | None = None,
        actor_resources: str | Mapping[str, Any] | None = None,
        max_restarts: int | None = None,
        poll_seconds: float = 0.2,
        init_kwargs: Mapping[str, Any] | None = None,
        judge_workers: int = 0,
        judge_resources: str | Mapping[str, Any] | None = None,
        threads: Any = None,
    ):
        if workers < 1:
            raise ValueError(f"--workers must be at least 1, got {workers}")
        if judge_workers < 0:
            raise ValueError(f"--judge-workers must be 0 (judge in-line) or more, got {judge_workers}")
        if judge_resources is not None and not judge_workers:
            raise ValueError("--judge-resources places judge actors: give --judge-workers N")
        self.judge_workers = int(judge_workers)
        self.judge_options = parse_actor_resources(judge_resources, "--judge-resources")
        if num_cpus is not None and address is not None:
            raise ValueError(
                "--ray-num-cpus sizes a new local Ray instance; it cannot be used with --address "
                "(the cluster's resources are set where it was started)"
            )
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
        # torch threads per actor (kosmos_env.utils.threads): a count given, or per role the CPUs its
        # actors reserve (num_cpus, at least 1): Ray packs actors on a node by their num_cpus
        self.threads = {
            role: _actor_threads(threads, options)
            for role, options in (("rollout", self.actor_options), ("judge", self.judge_options))
        }

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
            RayDriver(ray, self, job, refresh).run()
        finally:
            if guard is not None:
                ray.shutdown()
                guard.close()
        refresh()


def _actor_threads(threads: Any, options: Mapping[str, Any]):
    """The :class:`~kosmos_env.utils.threads.ThreadChoice` of an actor placed with ``options``:
    the rule with the actor's reserved CPUs as its cores and itself as the one worker on them."""
    from kosmos_env.utils.threads import ThreadChoice, choose_threads

    if isinstance(threads, ThreadChoice):
        return threads
    reserved = max(1, int(float(options.get("num_cpus", 1))))
    return choose_threads(1, given=threads, cores=reserved, given_as="threads=")


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
