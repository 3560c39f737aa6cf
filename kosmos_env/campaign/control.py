"""Cooperative control of a running campaign through its ledger: cancel, and resume on rerun.

The request lives in the ledger itself (one small table, ``control``, created when first
needed), so it reaches every worker that shares the folder: pool processes, Ray's dispatcher,
or another machine. Each row is one action, ``cancel`` or ``resume``, with when and by whom;
the campaign counts as cancelled while the latest action is ``cancel``.

Workers check :func:`cancel_requested` between episodes (never in the middle of one): an
episode already running finishes and is recorded, nothing new is claimed, and the workers
return. Pending episodes stay pending, so nothing is lost; rerunning the same ``kosmos-env
eval`` command records ``resume`` (:func:`clear_cancel`) and finishes exactly the missing
episodes.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

CONTROL_SCHEMA = """
CREATE TABLE IF NOT EXISTS control (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    action TEXT NOT NULL CHECK (action IN ('cancel', 'resume')),
    at REAL NOT NULL,
    by TEXT
);
"""


def _latest(conn: sqlite3.Connection) -> dict[str, Any] | None:
    try:
        row = conn.execute("SELECT action, at, by FROM control ORDER BY id DESC LIMIT 1").fetchone()
    except sqlite3.OperationalError as exc:  # a ledger that was never cancelled has no control table
        if "no such table" in str(exc):
            return None
        raise
    if row is None:
        return None
    return {"action": row[0], "at": row[1], "by": row[2]}


def cancel_requested(ledger) -> bool:
    """True while the latest control action on ``ledger`` (a Ledger or a sqlite3 connection) is cancel."""
    conn = getattr(ledger, "conn", ledger)
    latest = _latest(conn)
    return latest is not None and latest["action"] == "cancel"


def control_state(ledger) -> dict[str, Any] | None:
    """The latest control action ``{"action", "at", "by"}``, or None when there was none."""
    return _latest(getattr(ledger, "conn", ledger))


def request_cancel(ledger, by: str) -> bool:
    """Record a cancel request; returns False when the campaign was already cancelled."""
    with ledger.transaction() as conn:
        conn.execute(CONTROL_SCHEMA.strip().rstrip(";"))
        latest = _latest(conn)
        if latest is not None and latest["action"] == "cancel":
            return False
        conn.execute("INSERT INTO control (action, at, by) VALUES ('cancel', ?, ?)", (time.time(), by))
        return True


def clear_cancel(ledger, by: str) -> bool:
    """Record that the campaign resumes (a rerun); returns True when it had been cancelled."""
    if not cancel_requested(ledger):
        return False
    with ledger.transaction() as conn:
        if not cancel_requested(conn):
            return False
        conn.execute("INSERT INTO control (action, at, by) VALUES ('resume', ?, ?)", (time.time(), by))
        return True
