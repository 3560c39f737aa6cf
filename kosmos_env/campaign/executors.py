"""Executors: where campaign workers run. All of them share one contract.

An executor starts some number of workers, each running :func:`kosmos_env.campaign.worker.work`
(through :func:`kosmos_env.campaign.lockstep.run_worker`, which picks the lockstep loop for ``--lockstep N``)
with its own lease owner id on the same ledger, and returns once no episode is left or a worker
failed in a way that retrying cannot fix. Work distribution, retries and crash recovery live in
the ledger (leases), not in the executor, so executors stay small:

- :class:`InProcessExecutor`: one worker in this process (debugging, tiny campaigns);
- :class:`ProcessPoolExecutor`: N worker processes started with the ``spawn`` (default) or
  ``forkserver`` context, because MuJoCo/EGL and CUDA contexts do not survive ``fork``. Each
  process builds its env, judge and policies once and keeps them warm. A worker killed by a
  signal (segfault, OOM killer) is replaced and its lease is taken over; a worker that raised
  (bad config, missing weights) stops the campaign with its error. With ``judge_workers`` the
  campaign runs in two stages at once: N rollout processes (no judge loaded) and
  ``judge_workers`` judge processes (:mod:`kosmos_env.campaign.judge_stage`), each replaced
  the same way when killed.

Torch threads (:mod:`kosmos_env.utils.threads`): each pool process sets its torch intra-op threads
at start, ``max(1, cores // (workers + judge_workers))`` unless ``threads`` (``eval --threads``) or
``OMP_NUM_THREADS`` says otherwise, so the pool never runs more threads than cores; the in-process
executor sets them only when given ``threads``. Every worker records the count torch ran with in
the ledger (``results.json`` ``campaign.worker_threads``).

A Ray executor (issue 10) fits the same shape: ``run`` creates N actors that each call
``work(out_dir, config, owner, settings)`` (the ledger must sit on a disk the actors share
with one host, or behind a coordinator), and polls ``progress.refresh()`` meanwhile.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback
from contextlib import nullcontext
from dataclasses import asdict, replace
from typing import Any, Callable

from kosmos_env.campaign.design import CampaignConfig
from kosmos_env.campaign.executor_base import CampaignJob, Executor, WorkerFailed
from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger, make_owner
from kosmos_env.campaign.lockstep import run_worker
from kosmos_env.campaign.worker import WorkSettings
from kosmos_env.utils.threads import ThreadChoice, apply_threads, choose_threads, threads_applied, worker_record


def thread_choice(threads: ThreadChoice | int | None, processes: int) -> ThreadChoice:
    """``threads`` as a :class:`ThreadChoice`: a choice made by the caller (``eval --threads``) as it
    is, a count given in code as ``threads=``, or None: the rule for ``processes`` on this host."""
    if isinstance(threads, ThreadChoice):
        return threads
    return choose_threads(processes, given=threads, given_as="threads=")


def record_threads(out_dir: str, entry: dict[str, Any]) -> None:
    """File one worker's thread record in the campaign's ledger. Never raises: a worker that is
    failing reports its own error, not this one's."""
    try:
        with Ledger(os.path.join(out_dir, LEDGER_NAME), create=False) as ledger:
            ledger.record_worker_threads(entry)
    except Exception:
        pass


class InProcessExecutor(Executor):
    """One worker in the calling process.

    ``threads``: torch's threads in this process while the campaign runs (OMP_NUM_THREADS and an
    earlier torch count are put back after; see :func:`kosmos_env.utils.threads.threads_applied`);
    None leaves the process as it is (it is the caller's). Recorded either way."""

    name = "in-process"

    def __init__(self, owner_tag: str | None = None, threads: ThreadChoice | int | None = None):
        self.workers = 1
        self.owner_tag = owner_tag
        self.threads = None if threads is None else thread_choice(threads, 1)

    def run(self, job: CampaignJob, refresh: Callable[[], None]) -> None:
        owner = make_owner(self.owner_tag)
        with nullcontext() if self.threads is None else threads_applied(self.threads.threads):
            try:
                run_worker(job.out_dir, job.config, owner, job.settings, on_episode=lambda *_: refresh())
            finally:  # measured before the block puts an earlier count back
                record_threads(job.out_dir, worker_record(owner, "rollout", self.threads))
        refresh()


def _die_with_parent(parent_pid: int) -> None:
    """Make this pool process end when the process that started it dies, even by SIGKILL.

    On Linux the kernel does it: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``. Elsewhere (and as a
    fallback) a daemon thread checks every second that the parent is still our parent. Without
    this a parent killed with SIGKILL leaves its workers running under PID 1.
    """
    import signal
    import sys
    import threading

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no libc symbol: the watchdog below still works
            pass
    parent = os.getppid()  # the campaign process (spawn), or the forkserver it started
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:  # the campaign process died before the death signal was armed
        os._exit(1)
    except PermissionError:
        pass
    if parent == 1:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:  # re-parented: whoever started us is gone
                os._exit(1)

    threading.Thread(target=watch, name="kosmos-parent-watchdog", daemon=True).start()


def _pool_worker(
    out_dir: str,
    config: dict[str, Any],
    settings: dict[str, Any],
    tag: str,
    errors,
    parent_pid: int | None = None,
    role: str = "rollout",
    threads: dict[str, Any] | None = None,
) -> None:
    """Entry point of a pool process (top level so ``spawn`` can import it); ``role``: rollout or judge;
    ``threads``: the pool's :class:`ThreadChoice` as a dict, applied before anything loads torch."""
    if parent_pid is not None:
        _die_with_parent(parent_pid)
    choice = None if threads is None else ThreadChoice(**threads)
    if choice is not None:
        apply_threads(choice.threads)
    owner = make_owner(tag)
    try:
        if role == "judge":
            from kosmos_env.campaign.judge_stage import judge_work

            judge_work(out_dir, CampaignConfig.from_dict(config), owner, WorkSettings(**settings))
        else:
            run_worker(out_dir, CampaignConfig.from_dict(config), owner, WorkSettings(**settings))
    except BaseException as exc:  # report, then exit non-zero: the parent decides what to do
        errors.put((tag, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        raise SystemExit(1)
    finally:
        record_threads(out_dir, worker_record(owner, role, choice))


class ProcessPoolExecutor(Executor):
    """``workers`` processes on this host taking episodes by lease from the shared ledger."""

    name = "process-pool"

    def __init__(
        self,
        workers: int,
        start_method: str = "spawn",
        max_respawns: int | None = None,
        poll_seconds: float = 0.3,
        judge_workers: int = 0,
        threads: ThreadChoice | int | None = None,
    ):
        if workers < 1:
            raise ValueError(f"--workers must be at least 1, got {workers}")
        if judge_workers < 0:
            raise ValueError(f"--judge-workers must be 0 (judge in-line) or more, got {judge_workers}")
        self.judge_workers = int(judge_workers)
        if start_method not in ("spawn", "forkserver"):
            raise ValueError(
                f"start_method must be 'spawn' or 'forkserver' (fork breaks MuJoCo/EGL and CUDA), got {start_method!r}"
            )
        self.workers = int(workers)
        self.start_method = start_method
        self.max_respawns = 2 * (self.workers + self.judge_workers) if max_respawns is None else int(max_respawns)
        self.poll_seconds = poll_seconds
        # every process of the pool (rollout and judge) shares this host's cores
        self.threads = thread_choice(threads, self.workers + self.judge_workers)

    def run(self, job: CampaignJob, refresh: Callable[[], None]) -> None:
        ctx = mp.get_context(self.start_method)
        errors = ctx.Queue()
        config = job.config.to_dict()
        settings = asdict(replace(job.settings, judge_stage=self.judge_workers > 0))
        procs: dict[str, Any] = {}
        spawned = 0

        def start(i: int, role: str) -> None:
            nonlocal spawned
            tag = f"{'j' if role == 'judge' else 'w'}{i}-{spawned}"
            spawned += 1
            p = ctx.Process(
                target=_pool_worker,
                args=(job.out_dir, config, settings, tag, errors, os.getpid(), role, self.threads.to_dict()),
                name=f"kosmos-campaign-{tag}",
                daemon=False,
            )
            p.start()
            procs[tag] = p

        respawns = 0
        try:
            for i in range(self.workers):
                start(i, "rollout")
            for i in range(self.judge_workers):
                start(i, "judge")
            while procs:
                time.sleep(self.poll_seconds)
                refresh()
                self._raise_reported(errors)
                for tag, p in list(procs.items()):
                    if p.is_alive():
                        continue
                    p.join()
                    del procs[tag]
                    if p.exitcode == 0:
                        continue
                    self._raise_reported(errors)
                    # killed by a signal: its lease is taken over; replace it while its stage has work
                    role = "judge" if tag.startswith("j") else "rollout"
                    if respawns < self.max_respawns and self._work_left(job, role):
                        respawns += 1
                        start(int(tag[1:].split("-")[0]), role)
                    elif self._work_left(job, role):
                        raise WorkerFailed(
                            f"worker {tag} died (exit code {p.exitcode}) and the respawn limit "
                            f"({self.max_respawns}) is used up; rerun the same command to resume"
                        )
            self._raise_reported(errors, wait=0.2)
        finally:
            for p in procs.values():
                if p.is_alive():
                    p.terminate()
            for p in procs.values():
                p.join(timeout=10)
            errors.close()
        refresh()

    @staticmethod
    def _raise_reported(errors, wait: float = 0.0) -> None:
        try:
            tag, message, tb = errors.get(timeout=wait) if wait else errors.get_nowait()
        except queue.Empty:
            return
        first = message.strip().splitlines()[0] if message.strip() else "(no message)"
        raise WorkerFailed(f"worker {tag} failed: {first}", tb)

    @staticmethod
    def _work_left(job: CampaignJob, role: str = "rollout") -> bool:
        """Work left for a worker of ``role``: rollouts to run, or (judge) any episode not done."""
        with Ledger(os.path.join(job.out_dir, LEDGER_NAME), create=False) as ledger:
            counts = ledger.counts()
        if role == "judge":
            return counts["pending"] + counts["leased"] > 0
        return counts["pending"] + counts["rolling_out"] > 0


EXECUTORS = ("auto", "in-process", "process", "ray")


def make_executor(
    workers: int = 1,
    kind: str = "auto",
    start_method: str = "spawn",
    judge_workers: int = 0,
    threads: ThreadChoice | int | None = None,
    **ray_options: Any,
) -> Executor:
    """``auto``: in this process for one worker, a process pool for more; or force either.

    ``threads``: torch threads per worker (:mod:`kosmos_env.utils.threads`); None: the rule
    (a pool: cores // its processes; a Ray actor: the CPUs it reserved; in-process: this process
    is left as it is).

    ``judge_workers`` > 0 runs judging as its own stage beside the rollout workers (a process
    pool, or Ray judge actors); 0 judges in-line, in each rollout worker.
    ``ray``: Ray actors (:mod:`kosmos_env.campaign.ray_executor`, imported only then);
    ``ray_options`` are its ``address``, ``num_cpus``, ``actor_resources`` and ``judge_resources``.
    """
    if kind not in EXECUTORS:
        raise ValueError(f"unknown executor {kind!r}; choose from {EXECUTORS}")
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if judge_workers < 0:
        raise ValueError(f"--judge-workers must be 0 (judge in-line) or more, got {judge_workers}")
    if kind == "ray":
        from kosmos_env.campaign.ray_executor import RayExecutor

        return RayExecutor(workers, judge_workers=judge_workers, threads=threads, **ray_options)
    if any(v is not None for v in ray_options.values()):
        raise ValueError(f"{sorted(k for k, v in ray_options.items() if v is not None)} only apply to --executor ray")
    if kind == "in-process" and judge_workers:
        raise ValueError(
            "--judge-workers runs judge processes beside the rollout workers; use --executor process "
            "(or auto) or ray, not in-process"
        )
    if kind == "in-process" or (kind == "auto" and workers == 1 and not judge_workers):
        if workers != 1:
            raise ValueError("the in-process executor runs exactly one worker; use --executor process for more")
        return InProcessExecutor(threads=threads)
    return ProcessPoolExecutor(workers, start_method=start_method, judge_workers=judge_workers, threads=threads)
