"""Read-only access to a campaign ledger while campaigns write to it.

:func:`connect_readonly` opens the ledger with SQLite's ``mode=ro`` URI and ``PRAGMA
query_only``: such a connection can neither change a campaign nor checkpoint its write-ahead
log (a writable connection that closes last would). :class:`ReadOnlyLedger` gives the
:class:`~kosmos_env.campaign.ledger.Ledger` reading methods over one (its writing methods fail
inside SQLite). Used by ``kosmos-env serve`` and by ``verify_campaign(read_only=True)``.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from pathlib import Path

from kosmos_env.campaign.ledger import Ledger


def connect_readonly(path: str | os.PathLike, timeout: float = 5.0, immutable: bool = False) -> sqlite3.Connection:
    """A read-only SQLite connection to ``path`` (``mode=ro`` URI, query_only); FileNotFoundError if absent.

    ``immutable``: also tell SQLite the file cannot change (``immutable=1``), so it takes no lock
    and needs no ``-shm`` file: the only way to read a WAL-mode ledger in a read-only folder
    (a copy on a read-only mount), where ``mode=ro`` alone fails to open the database."""
    p = Path(path).resolve()
    if not p.is_file():
        raise FileNotFoundError(f"no campaign ledger at {p}")
    uri = "file:" + urllib.parse.quote(str(p)) + "?mode=ro" + ("&immutable=1" if immutable else "")
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    conn.execute("PRAGMA query_only = 1")
    return conn


class ReadOnlyLedger(Ledger):
    """The ledger's reading methods over a read-only connection."""

    def __init__(self, path: str | os.PathLike, timeout: float = 5.0, immutable: bool = False):  # noqa: D107 - super() would open read-write
        self.path = os.fspath(path)
        self.conn = connect_readonly(path, timeout, immutable)
