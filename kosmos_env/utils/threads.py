"""How many CPU threads torch may use for one op (its intra-op threads): one rule for every process
kosmos-env runs torch in.

Why: torch's default is one thread per physical core in every process. Two campaign workers on
two cores then run four threads on two cores, and on a busy machine a small network (the learned
tabletop, a ``ckpt:`` policy) waits at every op for a thread that is not scheduled: measured on a
loaded 2-core machine, the learned world steps about 25-35x slower with 2 threads than with 1.

The rule: **W processes that share this machine's cores get max(1, cores // W) threads each**, so
workers x threads <= cores, unless the user says otherwise:

1. ``--threads N`` (``eval``, ``rollout``, ``serve-policy``, ``judge``; ``train-policy``, ``trust``,
   ``study`` and ``train-world`` have their own, default 1), or ``threads=N`` given to
   ``gymnasium.make`` / an executor;
2. else ``OMP_NUM_THREADS`` in the environment (torch itself reads it when it is imported);
3. else the rule above. ``cores`` is :func:`available_cores`: the physical cores this process may
   run on (its CPU affinity, hyperthread siblings counted once, capped by a cgroup v2 CPU quota).

Who applies it: each campaign worker process or Ray actor at its start (a process pool counts its
rollout and judge processes together; a Ray actor counts the CPUs it reserved, ``num_cpus``), the
in-process executor when it is given a count, and the commands above for their own process. A
plain ``gymnasium.make(...)`` leaves torch as it is unless given ``threads=N``: the process is the
user's, and torch's setting is global to it. Thread counts are runtime settings: none enters a
spec hash (they can change the last bits of a network's floats, so a campaign records each
worker's count in results.json, ``campaign.worker_threads``).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Mapping

#: the environment variable a user sets to choose the threads (torch and OpenMP read it too)
THREADS_ENV = "OMP_NUM_THREADS"
#: threads per CPU beyond which ``--threads`` is refused (torch crashes far above it)
MAX_THREADS_PER_CPU = 4


def available_cores() -> int:
    """Physical cores this process may run on: its CPU affinity with hyperthread siblings counted
    once (Linux sysfs; elsewhere every logical CPU counts), capped by a cgroup v2 CPU quota
    (``/sys/fs/cgroup/cpu.max``: a container limited to 2 CPUs of a 64-core host has 2). At least 1."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as fh:
                cores.add(fh.read().strip())
        except OSError:
            cores.add(str(cpu))
    count = len(cores)
    quota = _cgroup_cpu_quota()
    if quota is not None:
        count = min(count, quota)
    return max(1, count)


def _cgroup_cpu_quota(path: str = "/sys/fs/cgroup/cpu.max") -> int | None:
    """Whole CPUs a cgroup v2 quota allows (rounded up), or None without a quota."""
    try:
        with open(path) as fh:
            quota, period = fh.read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return max(1, -(-q // p)) if q > 0 and p > 0 else None


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """The rule: ``max(1, cores // workers)`` for ``workers`` processes sharing ``cores`` cores."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return max(1, (available_cores() if cores is None else int(cores)) // int(workers))


def threads_problem(value: Any, flag: str = "--threads") -> str | None:
    """What is wrong with a thread count a user gave, as one line, or None when it is fine.

    Shared by every command's ``--threads``: below 1 is refused, and so is more than
    :data:`MAX_THREADS_PER_CPU` per logical CPU (torch crashes far above it)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{flag} must be a whole number >= 1, got {value!r}"
    if value < 1:
        return f"{flag} must be >= 1, got {value}"
    cap = MAX_THREADS_PER_CPU * (os.cpu_count() or 1)
    if value > cap:
        return f"{flag} {value} is far more than this machine's {os.cpu_count() or 1} CPUs; at most {cap}"
    return None


def _from_environment(environ: Mapping[str, str]) -> int | None:
    """``OMP_NUM_THREADS`` as a positive count (its first entry: OpenMP allows ``4,2`` for nested
    levels), or None when it is unset or not a positive integer (OpenMP ignores such values too)."""
    raw = environ.get(THREADS_ENV, "").split(",")[0].strip()
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 1 else None


@dataclass(frozen=True)
class ThreadChoice:
    """A thread count and where it came from (``source``: ``--threads``, ``OMP_NUM_THREADS`` or
    ``rule``), with the ``cores`` and ``workers`` the rule divided."""

    threads: int
    source: str
    cores: int
    workers: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def choose_threads(
    workers: int,
    given: int | None = None,
    environ: Mapping[str, str] | None = None,
    cores: int | None = None,
    given_as: str = "--threads",
) -> ThreadChoice:
    """The rule with its exceptions: ``given`` (recorded as ``given_as``, e.g. ``--threads``), else
    ``OMP_NUM_THREADS``, else ``max(1, cores // workers)``. A bad ``given`` raises ValueError with
    :func:`threads_problem`'s line."""
    cores = available_cores() if cores is None else int(cores)
    if given is not None:
        problem = threads_problem(given, given_as)
        if problem:
            raise ValueError(problem)
        return ThreadChoice(int(given), given_as, cores, int(workers))
    from_env = _from_environment(os.environ if environ is None else environ)
    if from_env is not None:
        return ThreadChoice(from_env, THREADS_ENV, cores, int(workers))
    return ThreadChoice(threads_per_worker(workers, cores), "rule", cores, int(workers))


def apply_threads(threads: int) -> None:
    """Give torch ``threads`` intra-op threads in this process, without importing torch.

    Meant for processes kosmos-env owns (a campaign worker, a command's own process): torch, if
    already imported, is set now; ``OMP_NUM_THREADS`` is set too, so a torch imported later (the
    world or policy loading on first use) and any child process start with the same count."""
    os.environ[THREADS_ENV] = str(int(threads))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(int(threads))


def set_torch_threads(threads: int) -> None:
    """``torch.set_num_threads(threads)``, importing torch: for a process that is the user's (an
    env built with ``threads=N``), where no environment variable is changed behind their back."""
    import torch

    torch.set_num_threads(int(threads))


@contextmanager
def threads_applied(threads: int) -> Iterator[None]:
    """:func:`apply_threads` for a block of this process (the in-process executor): afterwards
    ``OMP_NUM_THREADS`` is as it was, and so is torch's count if torch was imported before (a
    torch first imported inside the block keeps ``threads``: it has no earlier count to go back to)."""
    before_env = os.environ.get(THREADS_ENV)
    before_torch, loaded = torch_threads_now()
    apply_threads(threads)
    try:
        yield
    finally:
        if before_env is None:
            os.environ.pop(THREADS_ENV, None)
        else:
            os.environ[THREADS_ENV] = before_env
        if loaded and before_torch is not None:
            sys.modules["torch"].set_num_threads(before_torch)


def torch_threads_now() -> tuple[int | None, bool]:
    """(torch's intra-op threads in this process, whether torch is imported); (None, False) when
    it is not: then nothing here has run torch, and importing it only to ask would cost seconds."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None, False
    return int(torch.get_num_threads()), True


def worker_record(
    owner: str, role: str, choice: ThreadChoice | None, measured: tuple[int | None, bool] | None = None
) -> dict[str, Any]:
    """What a campaign records for one worker (``results.json`` ``campaign.worker_threads``):
    the count torch used (``torch_threads``; the count set, when torch was never imported in the
    worker: ``torch_loaded`` false), and the choice behind it (None: the process was left as it was).
    ``measured``: :func:`torch_threads_now` as the worker answered it (a Ray actor); default: here."""
    now, loaded = torch_threads_now() if measured is None else measured
    if not loaded:
        now = None if choice is None else choice.threads
    out: dict[str, Any] = {"worker": owner, "role": role, "torch_threads": now, "torch_loaded": loaded}
    if choice is None:
        out.update(source="process", threads_set=None, cores=available_cores(), workers=None)
    else:
        out.update(source=choice.source, threads_set=choice.threads, cores=choice.cores, workers=choice.workers)
    return out


def busy_note(threads: int, cores: int | None = None, load: float | None = None) -> str | None:
    """A one-line hint when more than one thread per process runs on a machine already busier than
    its cores (1-minute load average above the core count), else None. Only a hint: the count is
    the user's choice or the rule, never the load (a result must not depend on the machine's load)."""
    if threads <= 1:
        return None
    cores = available_cores() if cores is None else int(cores)
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average on this platform
            return None
    if load <= cores:
        return None
    return (
        f"this machine is busy (load {load:.1f} on {cores} core(s)) and torch runs {threads} threads per worker; "
        "with a torch world or policy (learned tabletop, ckpt:, sb3:) --threads 1 is often several times faster"
    )


def add_threads_argument(parser: Any, default: str = "one per core") -> None:
    """The ``--threads N`` flag of a command that runs torch; ``default`` says what the rule gives it."""
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help=f"torch CPU threads (default: {THREADS_ENV} if set, else {default}; on a busy or shared machine 1 is "
        "often many times faster)",
    )
