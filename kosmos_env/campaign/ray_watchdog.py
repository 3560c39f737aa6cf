"""A watchdog that takes down a local Ray head when the campaign process that started it dies.

Why it exists: ``ray.init()`` fate-shares the head's direct children (gcs_server, raylet,
dashboard, monitors) with the driver through ``PR_SET_PDEATHSIG``, but not the raylet's own
children. After a SIGKILL of the driver, the dashboard and runtime-env agents notice the dead
raylet within seconds, then block on a report to the (dead) GCS until its RPC timeout: they
outlive the campaign by about a minute (issue 31). Actor processes usually follow within
seconds, but nothing guarantees it. Ray offers no setting that changes this (the agents' parent
check, by pid or by pipe, ends in the same report).

How it works: :class:`HeadGuard` runs this file as a separate, tiny process (no kosmos_env or
Ray import) *before* ``ray.init`` and marks the environment Ray's processes inherit with a
token unique to this head. Raylet, GCS, monitors and every worker carry the token in their
environment; the two agents rename themselves with setproctitle, which overwrites their
environment block, so they are found by the files they keep open under the head's session
folder (sent once Ray is up, and accepted only when a token-carrying process names it: a
cluster this campaign joined is never touched). The driver holds the write end of the
watchdog's stdin: end of file without a ``close`` line means the driver died, and the watchdog
SIGKILLs every process it can attribute to the head, rescanning until none is left. On a
normal end the driver shuts Ray down itself and sends ``close``.

Only processes of this head are killed: the token is random per head and the session folder
is Ray's per-head folder. Linux reads ``/proc`` directly; other platforms use psutil when it is
installed, and without it the watchdog only waits (Ray's own fate-sharing still applies).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

TOKEN_VAR = "KOSMOS_RAY_HEAD_TOKEN"


def _pids() -> list[int]:
    if os.path.isdir("/proc"):
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    import psutil

    return psutil.pids()


def _environ_has(pid: int, entry: bytes) -> bool:
    """Does process ``pid`` carry ``entry`` (``NAME=value``) in its environment?"""
    try:
        if os.path.isdir("/proc"):
            with open(f"/proc/{pid}/environ", "rb") as fh:
                return entry in fh.read().split(b"\0")
        import psutil

        name, value = entry.decode().split("=", 1)
        return psutil.Process(pid).environ().get(name) == value
    except Exception:  # gone, not ours, or unreadable: not attributable to this head
        return False


def _open_paths(pid: int) -> list[str]:
    """Paths of the files process ``pid`` holds open (empty when unreadable)."""
    try:
        if os.path.isdir("/proc"):
            fd_dir = f"/proc/{pid}/fd"
            out = []
            for fd in os.listdir(fd_dir):
                try:
                    out.append(os.readlink(os.path.join(fd_dir, fd)))
                except OSError:
                    pass
            return out
        import psutil

        return [f.path for f in psutil.Process(pid).open_files()]
    except Exception:
        return []


def _cmdline(pid: int) -> str:
    try:
        if os.path.isdir("/proc"):
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                return fh.read().replace(b"\0", b" ").decode(errors="replace")
        import psutil

        return " ".join(psutil.Process(pid).cmdline())
    except Exception:
        return ""


def _marked(token: str, exclude: set[int]) -> list[int]:
    entry = f"{TOKEN_VAR}={token}".encode()
    return [p for p in _pids() if p not in exclude and _environ_has(p, entry)]


def owns_session(token: str, session_dir: str) -> bool:
    """Is ``session_dir`` this head's? Only when one of its (token-carrying) processes names it on
    its command line: checked while the head runs, since raylet and GCS die with the driver."""
    return bool(session_dir) and any(session_dir in _cmdline(p) for p in _marked(token, {os.getpid()}))


def head_processes(token: str, session_dirs: list[str], exclude: set[int]) -> list[int]:
    """Pids of this head's processes: carrying the token, or holding a file open under one of
    ``session_dirs`` (folders :func:`owns_session` accepted)."""
    pids = [p for p in _pids() if p not in exclude]
    marked = _marked(token, exclude)
    dirs = [d.rstrip("/") + "/" for d in session_dirs]
    found = set(marked)
    if dirs:
        for p in pids:
            if p not in found and any(path.startswith(d) for path in _open_paths(p) for d in dirs):
                found.add(p)
    return sorted(found)


def sweep(token: str, session_dirs: list[str], exclude: set[int], rounds: int = 40, pause: float = 0.25) -> list[int]:
    """SIGKILL this head's processes until two scans in a row find none (a dying raylet may
    still start a worker); returns every pid killed."""
    killed: list[int] = []
    quiet = 0
    for _ in range(rounds):
        found = head_processes(token, session_dirs, exclude)
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
        quiet = quiet + 1 if not found else 0
        if quiet >= 2:
            break
        time.sleep(pause)
    return sorted(set(killed))


class HeadGuard:
    """The driver's side: starts the watchdog before ``ray.init`` and marks the head's processes.

    Use::

        guard = HeadGuard.start()
        with guard.marking():
            ray.init(...)
        guard.session(session_dir)
        ...
        ray.shutdown(); guard.close()
    """

    def __init__(self, proc, token: str):
        self.proc = proc
        self.token = token

    @classmethod
    def start(cls) -> "HeadGuard":
        import secrets
        import subprocess

        token = secrets.token_hex(16)
        env = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}
        # run by path: the watchdog imports nothing of kosmos_env (or Ray), so it starts in a blink;
        # its stdin is a pipe whose write end only this process holds (not inherited by Ray's
        # processes: Python opens it close-on-exec and Ray starts its processes with close_fds)
        proc = subprocess.Popen(
            [sys.executable, "-u", os.path.abspath(__file__), token, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        return cls(proc, token)

    def marking(self):
        """A context in which processes started from here (Ray's head) inherit the token."""
        import contextlib

        @contextlib.contextmanager
        def _mark():
            previous = os.environ.get(TOKEN_VAR)
            os.environ[TOKEN_VAR] = self.token
            try:
                yield
            finally:  # later subprocesses of the driver are not part of the head
                if previous is None:
                    os.environ.pop(TOKEN_VAR, None)
                else:
                    os.environ[TOKEN_VAR] = previous

        return _mark()

    def _send(self, line: str) -> None:
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):  # the watchdog is gone: nothing to tell it
            pass

    def session(self, session_dir: str | None) -> None:
        """Tell the watchdog the head's session folder (where its agents keep their logs open)."""
        if session_dir:
            self._send(f"session {session_dir}")

    def close(self) -> None:
        """The campaign ended normally (Ray already shut down): the watchdog exits, killing nothing."""
        self._send("close")
        try:
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()


def main(argv: list[str]) -> int:
    token, parent = argv[0], int(argv[1])
    # Ctrl-C in a terminal, a closed terminal or a supervisor's SIGTERM reach the whole process
    # group: the driver handles them or dies of them; the watchdog must outlive it to see how it
    # ends (it exits on its own right after, so nothing is left running)
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)
    session_dirs: list[str] = []
    buffer = b""
    fd = sys.stdin.fileno()
    while True:
        # a fork of the driver could keep the pipe open: the parent pid is checked as well
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            if os.getppid() != parent:
                break
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break  # end of file: the driver is gone
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            command, _, value = line.decode(errors="replace").partition(" ")
            if command == "close":
                return 0
            if command == "session" and owns_session(token, value):
                session_dirs.append(value)
    killed = sweep(token, session_dirs, exclude={os.getpid(), os.getppid()})
    if killed:
        print(
            f"kosmos-env: the campaign process {parent} died; stopped {len(killed)} process(es) of the "
            f"Ray head it started",
            file=sys.stderr,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
