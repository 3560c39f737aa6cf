"""Crash-safe file writes and cross-process locks shared by campaigns, labels and adapters.

A killed process must leave either the old file or the new one, never half of one: write a
temp file beside the target, fsync it, rename it over the target, fsync the folder.

``tempfile.mkstemp`` creates its file owner-only (0600) whatever the umask, and a rename keeps
that mode, so files written this way came out owner-only while files opened plainly (the ledger,
locks) followed the umask (0644 under the usual 022). :func:`default_file_mode` restores the plain
``open()`` mode on every temp file before it is renamed into place: one rule for a whole run folder.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename inside ``path`` durable (best effort: not every platform opens folders)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process umask, read without changing it where Linux exposes it (``os.umask`` can only be
    read by setting it, which races with other threads creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0666 less the umask."""
    return 0o666 & ~current_umask()


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` (text is UTF-8) to ``path`` atomically and durably, with the mode a plain
    ``open()`` would give it (the umask's, not mkstemp's owner-only 0600)."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}-", dir=path.parent)
    try:
        os.fchmod(fd, default_file_mode())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    fsync_dir(path.parent)


@contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive advisory lock (``flock``) on ``path`` — created if absent — for the block.

    Serialises steps that several processes sharing one folder must not interleave; the lock
    goes with the process, so a killed holder never blocks the others.
    """
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def check_writable_path(path: str | os.PathLike, what: str = "--out") -> None:
    """Like :func:`writable_folder`, but creates nothing: a command can check its output path
    before it validates the rest of its input (and leave no folder behind when that fails)."""
    p = Path(path)
    if p.exists():
        writable_folder(p, what)
        return
    ancestor = p.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"{what} {p}: cannot create the folder ({ancestor} is a file, not a folder)")
    writable_folder(ancestor, f"{what} {p}: its parent")


def writable_folder(path: str | os.PathLike, what: str = "--out") -> Path:
    """Create ``path`` (and parents) if needed and check it is a folder this process can write.

    Raises ValueError with one line naming the problem (a file in the way, a read-only or
    missing parent, no permission), so commands fail before any work starts.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{what} {p} is a file, not a folder: pass a folder path")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{what} {p}: cannot create the folder ({exc.strerror or exc})") from None
    try:  # a real write: os.access says yes to root on a read-only mount
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=p)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"{what} {p} is not writable ({exc.strerror or exc})") from None
    return p
