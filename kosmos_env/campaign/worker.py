"""A campaign worker: loads the env, judge and policies once (warm), then takes episodes by lease.

:class:`EpisodeRunner` runs one planned episode and stores its artifacts; :func:`work` is the
loop every executor runs (in the main process, in a pool process, or later in a Ray actor):
claim an episode from the ledger, keep its lease alive with a heartbeat thread while it runs,
record the result or the failure, repeat until no episode is left. A worker whose ledger still
holds episodes leased by *other live* workers waits for them rather than exiting, so a lease
that expires (its worker hung or died) is still taken over and finished.

With judging as its own stage (``eval --judge-workers N``) a worker here is a *rollout*
worker: it never loads the judge, and files each rolled-out episode (record, artifacts and the
exact frames the judge is to see) for the judge workers of :mod:`kosmos_env.campaign.judge_stage`.
Gate discards need no judge and are recorded at once.

Videos are written off the rollout's path: :func:`work` hands each episode's frames to a writer
thread (:meth:`EpisodeRunner.run_video_later`), runs the next episode meanwhile, and records an
episode only once its MP4 is stored under its hash, its lease renewed until then. A writer error
is the episode's recorded failure (retried like any other), a stop or cancel records the episode
in hand before the worker leaves, and a killed worker leaves that episode leased and unrecorded
(run again when its lease expires): no ledger row ever names a video that is not stored.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from kosmos_env.campaign.artifacts import ArtifactStore, npy_bytes, npz_bytes
from kosmos_env.campaign.control import cancel_requested
from kosmos_env.campaign.cost import file_loads
from kosmos_env.campaign.design import CampaignConfig, EpisodeKey
from kosmos_env.campaign.failures import (
    InfrastructureFailure,
    is_infrastructure_failure,
    one_line,
    policy_identity_change,
)
from kosmos_env.campaign.ledger import LEDGER_NAME, ConfigMismatchError, Ledger


class PolicyChangedMidRun(ConfigMismatchError):
    """A served policy's replies stopped stating the content hash this campaign runs: the campaign
    stops (a campaign-level error, like any changed policy), its episodes in flight back to pending."""


def policy_changed_error(key: EpisodeKey, exc: BaseException) -> PolicyChangedMidRun | None:
    """The campaign-level error to stop with when ``exc`` says ``key``'s served policy changed, else None."""
    change = policy_identity_change(exc)
    if change is None:
        return None
    kept = getattr(change, "expected", "") or ""
    return PolicyChangedMidRun(
        f"policy {key.policy!r}: {change}; its episodes in flight were put back unfinished "
        f"and none was recorded under {kept[:12] or 'the old hash'}: serve the original policy again and "
        f"rerun the same command (a new policy needs a new --out directory)"
    )


@dataclass(frozen=True)
class WorkSettings:
    """How a worker takes work (none of it changes results)."""

    lease_seconds: float = 120.0
    max_attempts: int = 3
    poll_seconds: float = 0.25
    wait_for_others: bool = True
    # infrastructure failures (server unreachable, out of memory) are retried after a pause that
    # doubles from infra_backoff up to 8 s; after infra_retries in a row the worker gives up and
    # leaves the episodes unfinished for the next run (they never become errors)
    infra_retries: int = 6
    infra_backoff: float = 0.5
    # episodes run side by side through one vector env (kosmos_env.campaign.lockstep.run_worker); 1 = one at a time
    lockstep: int = 1
    # lockstep: a lane whose episode ended claims the next one at once (False: whole batches)
    refill: bool = True
    # judging as its own stage: rollout workers file rolled-out episodes for judge workers, which
    # take up to judge_batch of them at a time (0: as many as the judge batches itself)
    judge_stage: bool = False
    judge_batch: int = 0
    # each episode's MP4 is encoded on a writer thread while the worker runs its next episode, and the
    # episode is recorded once the video is stored (False: stored before the episode is recorded, as the
    # lockstep and Ray workers do)
    video_thread: bool = True


class StagedJudge:
    """Stands in for the campaign's judge in a rollout worker of a two-stage campaign.

    The env needs a judge object (else it would load the spec's default judge); this one is
    never asked to judge (the env defers judging) and loads nothing, so a rollout worker's
    memory holds the world and the policies only.
    """

    def __init__(self, spec: Mapping[str, Any]):
        self.spec = dict(spec)
        self.name = str(self.spec.get("type", "judge"))

    def judge(self, rollout: Any) -> Any:
        raise RuntimeError("a rollout worker of a two-stage campaign does not judge: its judge workers do")


class EpisodeRunner:
    """Runs episodes of one campaign in this process with a warm env, judge and policies.

    ``judge_stage=True``: a rollout worker of a two-stage campaign (no judge is loaded; a
    rollout that needs a verdict comes back with outcome ``pending`` and its record carries
    ``staged``: the frames artifact and rate the judge workers are to use).
    """

    def __init__(
        self, config: CampaignConfig, out_dir: str | os.PathLike, ledger: Ledger, owner: str, judge_stage: bool = False
    ):
        import gymnasium

        import kosmos_env  # noqa: F401  (registers the env ids)
        from kosmos_env.judges import make_judge

        self.config = config
        self.owner = owner
        self.ledger = ledger
        self.store = ArtifactStore(out_dir)
        self.judge_stage = bool(judge_stage)
        # judging is deferred: the campaign judges the finished rollout in its own, timed stage. The env
        # gets the campaign's judge object, so the spec's default judge is never loaded beside it.
        # model builds are timed apart from the warm per-episode seconds and filed with the next finished
        # episode as load_<stage> timings (kosmos_env.campaign.cost); the world loads here, not in the first reset.
        # A rollout worker of a two-stage campaign builds no judge (its judge workers file their own load).
        t0 = time.perf_counter()
        self.judge = StagedJudge(config.judge) if self.judge_stage else make_judge(dict(config.judge))
        self._loads = {} if self.judge_stage else {"judge": time.perf_counter() - t0}
        t0 = time.perf_counter()
        self.env = gymnasium.make(config.env_id, defer_judging=True, judge=self.judge, **dict(config.spec_overrides))
        base = self.env.unwrapped
        base.world.load()
        self._loads["world"] = time.perf_counter() - t0
        if base.spec_hash != config.spec_hash:
            raise RuntimeError(
                f"{config.env_id} now has spec hash {base.spec_hash[:12]}, but the campaign was planned with "
                f"{config.spec_hash[:12]} (the env spec or task suite changed): use a new --out directory"
            )
        self._provenance: dict[str, Any] | None = None
        self.fps = float(base.kosmos_spec.render_fps * base.world.frames_per_action)
        self._policies: dict[tuple[str, int], Any] = {}
        self._refs = {p.label: p for p in config.policies}
        self._writer: ThreadPoolExecutor | None = None  # the video writer thread (run_video_later), built on first use

    def policy(self, label: str, lane: int = 0):
        """The warm policy for ``label`` (built on first use; its content hash checked in the ledger).

        ``lane``: episodes run side by side (lockstep) each get their own instance, since a policy
        holds one episode's state."""
        if (label, lane) not in self._policies:
            from kosmos_env.policies import make_policy

            ref = self._refs[label]
            t0 = time.perf_counter()
            pol = make_policy(ref.name, **dict(ref.kwargs))
            self._loads["policy"] = self._loads.get("policy", 0.0) + time.perf_counter() - t0
            hub = getattr(pol, "hub_model_id", None) or ref.kwargs.get("model_id")
            self.ledger.register_policy(label, pol.content_hash(), None if hub is None else str(hub), self.owner)
            self._policies[(label, lane)] = pol
        return self._policies[(label, lane)]

    def add_load(self, stage: str, seconds: float) -> None:
        """Count a model build of ``stage`` made for this worker (filed with its next finished episode)."""
        self._loads[stage] = self._loads.get(stage, 0.0) + float(seconds)

    def provenance(self) -> dict[str, Any]:
        """Spec hash, the world that runs and the campaign's judge (with its model), and their joint hash."""
        if self._provenance is None:
            world = self.env.unwrapped.provenance["world"]
            if self.judge_stage:  # the judge worker adds its judge (see campaign_provenance)
                self._provenance = _plain({"spec_hash": self.config.spec_hash, "world": world})
            else:
                from kosmos_env.judges.base import judge_identity

                self._provenance = campaign_provenance(
                    self.config, world, judge_identity(self.judge, self.config.judge)
                )
        return self._provenance

    def run(
        self, key: EpisodeKey, episode: Any = None, started: float | None = None
    ) -> tuple[dict[str, Any], list[tuple[str, str, int, str]]]:
        """Run ``key`` to the end, judge it, store artifacts; returns (ledger record, artifacts).

        ``episode``: the EpisodeResult of ``key`` already run elsewhere (the lockstep worker runs
        several side by side), then only judging and storing happen here; ``started`` is the
        ``perf_counter`` time its ``total`` counts from."""
        record, artifacts, _ = self._run(key, episode, started, video_later=False)
        return record, artifacts

    def run_video_later(self, key: EpisodeKey) -> "PendingEpisode":
        """Run ``key`` like :meth:`run`, but hand its video to this runner's writer thread: the
        episode comes back before its MP4 is written, and :meth:`PendingEpisode.complete` waits for
        it (the caller runs the next episode meanwhile)."""
        record, artifacts, video = self._run(key, None, None, video_later=True)
        return PendingEpisode(key, record, artifacts, video)

    def _video_writer(self) -> ThreadPoolExecutor:
        # one thread: videos are stored in the order the episodes ran, and at most one encodes beside
        # the worker's own rollout (PyAV encodes without holding the GIL)
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kosmos-video-writer")
        return self._writer

    def _store_video(self, frames: Any) -> tuple[str, str, int, float]:
        """The writer thread's job: the stored video's (sha256, relpath, size) and its seconds."""
        t0 = time.perf_counter()
        sha, rel, size = self.store.put_video(frames, self.fps)
        return sha, rel, size, time.perf_counter() - t0

    def _run(
        self, key: EpisodeKey, episode: Any, started: float | None, video_later: bool
    ) -> tuple[dict[str, Any], list[tuple[str, str, int, str]], "Future | None"]:
        from kosmos_env.rollouts import run_episode

        # a first use builds the policy: a load, not this episode's seconds
        policy = self.policy(key.policy) if episode is None else None
        t_start = time.perf_counter() if started is None else started
        result = episode if episode is not None else run_episode(self.env, policy, key.env_seed, key.task)
        timings = {k: float(result.timings.get(k, 0.0)) for k in ("policy", "world", "gate", "judge")}
        judgment = None
        outcome = result.outcome
        if outcome == "pending" and not self.judge_stage:
            t0 = time.perf_counter()
            verdict = self.judge.judge(result.rollout)
            timings["judge"] += time.perf_counter() - t0
            judgment = verdict.to_dict()
            outcome = verdict.outcome
        elif outcome not in ("pending", "discarded", "success", "failure", "abstained"):
            raise RuntimeError(f"episode ended with outcome {outcome!r}; expected pending or discarded")
        elif result.judgment and not result.judgment.get("pending"):
            judgment = dict(result.judgment)

        t0 = time.perf_counter()
        rollout = result.rollout
        artifacts = []
        video = None
        video_job = None
        if self.config.video and len(rollout.frames):
            # "video": the seconds this episode waited for its MP4 (part of "io"), "video_writer": the
            # seconds the write took, wherever it ran (kept in the ledger; bench/time_breakdown.py reads them)
            t_video = time.perf_counter()
            if video_later:
                # the writer thread gets its own copy: it encodes while the next episode renders, and a
                # frame that shares memory with a renderer's buffer would change under it (a test saw
                # the threaded video differ from the inline one under load)
                video_job = self._video_writer().submit(self._store_video, np.array(rollout.frames, copy=True))
            else:
                sha, video, size = self.store.put_video(rollout.frames, self.fps)
                artifacts.append((sha, video, size, "video"))
            timings["video"] = time.perf_counter() - t_video
            if video_job is None:  # "video_writer": the write's own seconds, here the same as waited
                timings["video_writer"] = timings["video"]
        sha, actions, size = self.store.put_bytes(npy_bytes(rollout.actions), "npy")
        artifacts.append((sha, actions, size, "actions"))
        log = None
        if rollout.log:
            sha, log, size = self.store.put_bytes(npz_bytes(rollout.log), "npz")
            artifacts.append((sha, log, size, "log"))
        staged = None
        if outcome == "pending":  # two-stage: the judge workers judge exactly the frames the env produced
            staged = {"frames": None, "fps": float(rollout.fps)}
            if len(rollout.frames):
                sha, staged["frames"], size = self.store.put_bytes(npz_bytes({"frames": rollout.frames}), "npz")
                artifacts.append((sha, staged["frames"], size, "frames"))
        timings["io"] = time.perf_counter() - t0
        timings["total"] = time.perf_counter() - t_start
        file_loads(timings, self._loads)
        self._loads = {}
        success = None if judgment is None else judgment.get("success")
        record = {
            "outcome": outcome,
            "success": success,
            "score": None if judgment is None or success is None else float(judgment.get("score", 0.0)),
            "judge": (judgment or {}).get("judge") or getattr(self.judge, "name", str(self.config.judge.get("type"))),
            "judgment": judgment,
            # the last world call's verdict, plus every call's short verdict (the console lists them)
            "gate": _plain(None if result.gate is None else {**result.gate, "calls": result.gate_calls}),
            "ground_truth": _plain(result.ground_truth),
            "steps": int(result.steps),
            "timings": timings,
            "video": video,
            "actions": actions,
            "log": log,
            "error": None,
            "provenance": self.provenance(),
        }
        if staged is not None:
            record["staged"] = staged
        return record, artifacts, video_job

    def close(self) -> None:
        """Wait for the writer thread's last video, then close the policies and the env."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
        for pol in self._policies.values():
            try:
                pol.close()
            except Exception:  # closing must not hide the campaign's result
                pass
        self.env.close()


@dataclass
class PendingEpisode:
    """An episode run to the end whose video the writer thread may still be storing.

    ``heartbeat``: the lease renewal of ``key``, kept running until the episode is recorded."""

    key: EpisodeKey
    record: dict[str, Any]
    artifacts: list[tuple[str, str, int, str]]
    video: "Future | None" = None
    heartbeat: "Heartbeat | None" = field(default=None, repr=False)

    def complete(self) -> tuple[dict[str, Any], list[tuple[str, str, int, str]]]:
        """Wait for the video and return the record and artifacts that name it; raises what the
        writer raised (the caller records it as the episode's failure)."""
        if self.video is not None:
            t0 = time.perf_counter()
            try:
                sha, rel, size, writer_seconds = self.video.result()
            finally:
                waited = time.perf_counter() - t0
                timings = self.record["timings"]
                for stage in ("video", "io", "total"):  # waiting for it is this episode's time
                    timings[stage] = float(timings.get(stage, 0.0)) + waited
            timings["video_writer"] = writer_seconds  # the writer thread's own seconds, beside the rollouts
            self.record["video"] = rel
            self.artifacts.insert(0, (sha, rel, size, "video"))
            self.video = None
        return self.record, self.artifacts

    def stop_heartbeat(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
            self.heartbeat = None


def campaign_provenance(config: CampaignConfig, world: Mapping[str, Any], judge: Mapping[str, Any]) -> dict[str, Any]:
    """Spec hash, the world that ran and the judge that judged (its ``judge_identity``), and
    their joint identity hash.

    The same function serves in-line judging and the judge stage, so an episode's provenance
    does not depend on which of them judged it.
    """
    from kosmos_env.hashing import canonical_json, sha256_hex

    core = _plain({"spec_hash": config.spec_hash, "world": dict(world), "judge": dict(judge)})
    return {**core, "identity_sha256": sha256_hex(canonical_json(core))}


def _plain(value: Any) -> Any:
    """JSON-able copy (numpy scalars and arrays become Python values)."""
    import numpy as np

    if value is None:
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class Heartbeat:
    """Renews one lease every ``lease_seconds / 3`` from a thread with its own connection."""

    def __init__(self, ledger_path: str, episode_id: str, owner: str, lease_seconds: float):
        self.args = (ledger_path, episode_id, owner, lease_seconds)
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(target=self._loop, name=f"lease:{episode_id}", daemon=True)

    def __enter__(self) -> "Heartbeat":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _renew(self, ledger: Ledger) -> bool:
        _, episode_id, owner, ttl = self.args
        return ledger.renew(episode_id, owner, ttl)

    def _loop(self) -> None:
        path, episode_id, owner, ttl = self.args
        ledger = None
        try:
            while not self._stop.wait(ttl / 3.0):
                if ledger is None:
                    ledger = Ledger(path, create=False)
                if not self._renew(ledger):
                    self.lost = True
                    return
        finally:
            if ledger is not None:
                ledger.close()


def nothing_left(ledger: Ledger) -> bool:
    """True when no episode is left for a worker to run or to take over."""
    counts = ledger.counts()
    return counts["pending"] == 0 and counts["rolling_out"] == 0  # the judge stage is not ours


def wait_for_work(ledger: Ledger, settings: WorkSettings) -> bool:
    """After a claim found nothing: sleep one poll and return True when work may still come
    (another worker's lease can expire), False when the worker should stop."""
    if nothing_left(ledger) or not settings.wait_for_others:
        return False
    time.sleep(settings.poll_seconds)
    return True


def record_episode(
    ledger: Ledger,
    key: EpisodeKey,
    owner: str,
    record: dict[str, Any],
    artifacts: list[tuple[str, str, int, str]],
    on_episode: Callable[[str, str], None] | None = None,
) -> bool:
    """Record ``key``'s finished episode (first finisher wins); returns whether this call recorded it
    as done. A rolled-out episode of a two-stage campaign is filed for the judge stage instead
    (returns False: it is not done yet)."""
    staged = record.pop("staged", None)
    if staged is not None:  # rolled out: the judge stage takes it from here
        ledger.stage_rollout(key.episode_id, owner, record, artifacts, staged["frames"], staged["fps"])
        if on_episode:
            on_episode(key.episode_id, "rolled_out")
        return False
    if not ledger.complete(key.episode_id, owner, record, artifacts):
        return False
    if on_episode:
        on_episode(key.episode_id, record["outcome"])
    return True


def record_failure(
    ledger: Ledger,
    key: EpisodeKey,
    owner: str,
    exc: BaseException,
    settings: WorkSettings,
    on_episode: Callable[[str, str], None] | None = None,
) -> bool:
    """Record ``exc`` as a failed attempt of ``key``; returns whether it was an infrastructure failure.

    Raises :class:`PolicyChangedMidRun` (after recording the attempt as an infrastructure failure:
    the episode is pending again) when ``exc`` says the served policy changed: the campaign stops."""
    infra = is_infrastructure_failure(exc)
    status = ledger.fail(
        key.episode_id, owner, "".join(traceback.format_exception(exc)), settings.max_attempts, infrastructure=infra
    )
    if status == "done" and on_episode:
        on_episode(key.episode_id, "error")
    changed = policy_changed_error(key, exc)
    if changed is not None:
        raise changed from exc
    return infra


def pause_after_infrastructure_failure(
    in_a_row: int,
    exc: BaseException,
    settings: WorkSettings,
    stop: threading.Event | None = None,
    *,
    failed: str = "episodes",
    kept: str = "they are left unfinished",
) -> None:
    """Back off after the ``in_a_row``-th infrastructure failure; past ``settings.infra_retries``, give up.

    One back-off for rollout workers, lockstep workers and judge workers (``failed`` and ``kept``
    name what failed and what is kept in the message)."""
    if in_a_row > settings.infra_retries:
        raise InfrastructureFailure(
            f"{in_a_row} {failed} in a row failed for an infrastructure reason (last: "
            f"{one_line(exc)}); {kept}: fix the cause and rerun the same command"
        ) from exc
    pause = min(settings.infra_backoff * 2 ** (in_a_row - 1), 8.0)
    if stop is not None:
        stop.wait(pause)
    else:
        time.sleep(pause)


def work(
    out_dir: str | os.PathLike,
    config: CampaignConfig,
    owner: str,
    settings: WorkSettings = WorkSettings(),
    on_episode: Callable[[str, str], None] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Take and run episodes until none is left; returns how many this worker finished.

    ``on_episode(episode_id, outcome)`` is called after each recorded episode (progress).
    A cancel recorded in the ledger (:mod:`kosmos_env.campaign.control`) stops the loop before
    the next claim.
    The env and models are built on the first claim, so an idle worker costs nothing.
    With ``settings.video_thread`` an episode's video is written while the next episode runs, and
    the episode is recorded after that one (or before the worker waits or leaves), once its video
    is stored; a failed video write is recorded as the episode's failed attempt. An episode with
    no video to write is recorded at once.
    (``settings.lockstep`` > 1 is :func:`kosmos_env.campaign.lockstep.work_lockstep`; executors
    choose through :func:`kosmos_env.campaign.lockstep.run_worker`.)
    """
    path = os.path.join(os.fspath(out_dir), LEDGER_NAME)
    ledger = Ledger(path, create=False)
    runner: EpisodeRunner | None = None
    finished = 0
    infra_in_a_row = 0
    pending: PendingEpisode | None = None  # run to the end, its video still being written

    def failed(key: EpisodeKey, exc: Exception) -> None:
        nonlocal infra_in_a_row
        if not record_failure(ledger, key, owner, exc, settings, on_episode):
            infra_in_a_row = 0
            return
        infra_in_a_row += 1
        pause_after_infrastructure_failure(infra_in_a_row, exc, settings, stop)

    def finish() -> None:
        """Record the pending episode once its video is stored (its lease renewed until then)."""
        nonlocal pending, finished
        if pending is None:
            return
        done, pending = pending, None
        try:
            try:
                record, artifacts = done.complete()
            except Exception as exc:  # the writer's error: this episode's failed attempt, never lost
                failed(done.key, exc)
                return
            if record_episode(ledger, done.key, owner, record, artifacts, on_episode):
                finished += 1
        finally:
            done.stop_heartbeat()

    try:
        while stop is None or not stop.is_set():
            if cancel_requested(ledger):  # checked between episodes only: a running one finishes first
                break
            key = ledger.claim(owner, settings.lease_seconds, settings.max_attempts)
            if key is None:
                finish()  # no next episode to run beside its video: record it now
                if wait_for_work(ledger, settings):
                    continue
                break
            if runner is None:
                try:
                    runner = EpisodeRunner(config, out_dir, ledger, owner, judge_stage=settings.judge_stage)
                except BaseException:
                    ledger.release(key.episode_id, owner)  # not the episode's fault: no attempt used
                    raise
            heartbeat = Heartbeat(path, key.episode_id, owner, settings.lease_seconds).start()
            try:
                if settings.video_thread:
                    ran = runner.run_video_later(key)
                else:
                    ran = PendingEpisode(key, *runner.run(key))
            except ConfigMismatchError:
                heartbeat.stop()
                ledger.release(key.episode_id, owner)
                raise  # a changed policy is a campaign-level error, not an episode's
            except Exception as exc:
                heartbeat.stop()
                finish()
                failed(key, exc)
                continue
            except BaseException:
                heartbeat.stop()
                raise
            ran.heartbeat = heartbeat
            infra_in_a_row = 0
            finish()  # the episode before: its video was written while this one ran
            pending = ran
            if ran.video is None:  # no video being written (none kept, or written already): record it now
                finish()
        finish()
    finally:
        if pending is not None:  # leaving on an error: the episode in hand is still recorded if it can be
            try:
                finish()
            except Exception:  # noqa: BLE001 - the error that ended the loop is the one to raise; the
                pass  # episode stays leased and unrecorded, and runs again when its lease expires
        if runner is not None:
            runner.close()
        ledger.close()
    return finished
