"""Read-only access to a campaign ledger while campaigns write to it.

:func:`connect_readonly` opens the ledger with SQLite's ``mode=ro`` URI and ``PRAGMA
query_only``: such a connection can neither change a campaign nor checkpoint its write-ahead
log (a writable connection that closes last would). :class:`ReadOnlyLedger` gives the
:class:`~kosmos_env.campaign.ledger.Ledger` reading methods over one (its writing methods fail
inside SQLite). Used by ``kosmos-env serve``, ``export``, ``eval``'s resume check and
``verify_campaign(read_only=True)``.

A ledger in a folder this process cannot write (a read-only mount, a downloaded copy made
read-only) is a campaign no one can be writing to through that path; ``mode=ro`` alone cannot open
it when it is in WAL mode and its ``-shm`` file is absent (SQLite would have to create it), so
there it is read ``immutable`` (:func:`connect_readonly`'s default).
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from pathlib import Path

from kosmos_env.campaign.ledger import Ledger


def folder_is_writable(path: str | os.PathLike) -> bool:
    """Whether this process may create files beside ``path`` (False on a read-only mount: access(2)
    answers EROFS there even for root)."""
    return os.access(Path(path).resolve().parent, os.W_OK)


def connect_readonly(
    path: str | os.PathLike, timeout: float = 5.0, immutable: bool | None = None
) -> sqlite3.Connection:
    """A read-only SQLite connection to ``path`` (``mode=ro`` URI, query_only); FileNotFoundError if absent.

    ``immutable``: also tell SQLite the file cannot change (``immutable=1``), so it takes no lock
    and needs no ``-shm`` file: the only way to read a WAL-mode ledger in a read-only folder
    (a copy on a read-only mount), where ``mode=ro`` alone fails to open the database. ``None``
    (the default) decides by the folder: a writable folder is opened ``mode=ro`` only (a campaign
    may be writing there, and an immutable reader would not see its log); a folder that cannot be
    written is tried ``mode=ro`` first (it reads a ``-wal`` whose ``-shm`` is there) and opened
    ``immutable`` when SQLite cannot open it so."""
    p = Path(path).resolve()
    if not p.is_file():
        raise FileNotFoundError(f"no campaign ledger at {p}")
    if immutable is not None or folder_is_writable(p):
        return _connect(p, timeout, bool(immutable))
    conn = _connect(p, timeout, immutable=False)
    try:
        # SQLite opens lazily: the first read is where a WAL ledger without its -shm fails here
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:  # "unable to open database file": it would have to create the -shm
        conn.close()
        return _connect(p, timeout, immutable=True)
    except BaseException:
        conn.close()
        raise
    return conn


def _connect(p: Path, timeout: float, immutable: bool) -> sqlite3.Connection:
    uri = "file:" + urllib.parse.quote(str(p)) + "?mode=ro" + ("&immutable=1" if immutable else "")
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    conn.execute("PRAGMA query_only = 1")
    return conn


class ReadOnlyLedger(Ledger):
    """The ledger's reading methods over a read-only connection (``immutable`` as in :func:`connect_readonly`)."""

    def __init__(self, path: str | os.PathLike, timeout: float = 5.0, immutable: bool | None = None):  # noqa: D107 - super() would open read-write
        self.path = os.fspath(path)
        self.conn = connect_readonly(path, timeout, immutable)
