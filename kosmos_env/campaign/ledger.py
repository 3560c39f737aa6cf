"""The campaign ledger: one SQLite database (WAL) in the output folder, the source of truth.

It holds the frozen config and spec hash (``meta``), one row per planned episode
(``episodes``: inputs, status, lease, outcome, judgment, timings, artifact paths), every
attempt with its error (``attempts``), the content-addressed artifacts (``artifacts``), each
policy's content hash as the workers computed it (``policies``) and each eval invocation
(``runs``, for wall-clock throughput).

Work is handed out by *lease*: ``claim`` marks an episode ``leased`` by an owner id
(``host:pid:tag``) until an expiry that the worker renews while it runs. A lease whose expiry
has passed, or whose owner is a dead process on this host, can be taken over, so any number
of processes on one ledger neither duplicate nor lose an episode. Each claim, completion and
failure is one ``BEGIN IMMEDIATE`` transaction with ``synchronous=FULL``: once ``complete``
returns, the episode survives a kill -9 or a power cut.

Two-stage campaigns (``eval --judge-workers N``): a rollout worker that finishes an episode
files it with :meth:`Ledger.stage_rollout` (its record and artifacts, judgment still to come);
the episode stays ``leased`` but is owned by the judge stage (:data:`JUDGE_STAGE`), so no
rollout worker ever claims it again. Judge workers lease such episodes in batches
(:meth:`claim_judging`, the same lease rules per stage) and close them with
:meth:`complete_judging`. Each stage's step is one transaction, so a kill at any point loses
no finished stage and redoes none.

SQLite in WAL mode needs a local file system (not NFS); a cluster executor shares the
ledger through one host's disk or a coordinator process.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import time
import uuid
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

from kosmos_env.campaign.design import CampaignConfig, EpisodeKey, describe_difference
from kosmos_env.campaign.failures import INFRA_TAG, is_infrastructure_error_text
from kosmos_env.utils.fileio import file_lock
from kosmos_env.hashing import canonical_json

LEDGER_NAME = "ledger.sqlite"
LEDGER_SCHEMA_VERSION = 1
STATUSES = ("pending", "leased", "done")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (
    episode_id TEXT PRIMARY KEY,
    campaign TEXT NOT NULL,
    ord INTEGER NOT NULL,
    policy TEXT NOT NULL, task TEXT NOT NULL, seed INTEGER NOT NULL, repeat INTEGER NOT NULL,
    env_seed INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'leased', 'done')),
    owner TEXT, lease_expires REAL, attempts INTEGER NOT NULL DEFAULT 0,
    outcome TEXT CHECK (outcome IS NULL OR outcome IN ('success', 'failure', 'discarded', 'abstained', 'error')),
    success INTEGER, score REAL, judge TEXT, judgment TEXT, gate TEXT, ground_truth TEXT,
    steps INTEGER, timings TEXT, video TEXT, actions TEXT, log TEXT, error TEXT, worker TEXT,
    started REAL, finished REAL, provenance TEXT,
    UNIQUE (policy, task, seed, repeat)
);
CREATE INDEX IF NOT EXISTS episodes_status ON episodes (status, ord);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, episode_id TEXT NOT NULL, attempt INTEGER NOT NULL,
    worker TEXT, started REAL, finished REAL, status TEXT NOT NULL, error TEXT
);
CREATE TABLE IF NOT EXISTS artifacts (
    sha256 TEXT NOT NULL, relpath TEXT PRIMARY KEY, size INTEGER NOT NULL, kind TEXT NOT NULL, created REAL
);
CREATE TABLE IF NOT EXISTS policies (
    label TEXT PRIMARY KEY, content_hash TEXT NOT NULL, hub_model_id TEXT, worker TEXT
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, owner TEXT, executor TEXT, workers INTEGER, started REAL, finished REAL,
    argv TEXT, done_before INTEGER, done_after INTEGER
);
CREATE TABLE IF NOT EXISTS judge_queue (
    episode_id TEXT PRIMARY KEY,
    status TEXT NOT NULL CHECK (status IN ('awaiting', 'judging', 'judged')),
    record TEXT NOT NULL, frames TEXT, fps REAL, rolled_by TEXT, rolled_at REAL,
    owner TEXT, lease_expires REAL, attempts INTEGER NOT NULL DEFAULT 0,
    judged_by TEXT, judged_at REAL
);
CREATE INDEX IF NOT EXISTS judge_queue_status ON judge_queue (status);
"""

_JSON_FIELDS = ("judgment", "gate", "ground_truth", "timings", "provenance")
_RECORD_FIELDS = (
    "outcome",
    "success",
    "score",
    "judge",
    "judgment",
    "gate",
    "ground_truth",
    "steps",
    "timings",
    "video",
    "actions",
    "log",
    "error",
    "provenance",
)
#: lease owner of an episode that is rolled out and belongs to the judge stage (never expires,
#: never taken over by a rollout worker; two fields only, so it never looks like a dead process)
JUDGE_STAGE = "stage:judge"
#: meta key of the workers' torch thread counts (:meth:`Ledger.record_worker_threads`)
WORKER_THREADS_KEY = "worker_threads"
#: queue depth per stage, in pipeline order (see :meth:`Ledger.counts`)
STAGE_DEPTHS = ("pending", "rolling_out", "rolled_out", "judging", "done")


#: SQLite's primary result codes for a file it cannot read as a database: SQLITE_CORRUPT ("database
#: disk image is malformed") and SQLITE_NOTADB ("file is not a database")
_CORRUPT_CODES = (11, 26)


class CorruptLedgerError(ValueError, sqlite3.DatabaseError):
    """A ledger file SQLite cannot read: damaged pages, or not a database at all (one line naming it).

    A ValueError, so a command prints it as its one error line; a ``sqlite3.DatabaseError`` too, so
    code that reports an unreadable ledger as a finding (verify, the console) still catches it."""


def is_corruption(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite saying the file is damaged or not a database (never a lock or busy error)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in _CORRUPT_CODES


def check_not_corrupt(ledger: "Ledger") -> None:
    """Raise :class:`CorruptLedgerError` when SQLite's ``quick_check`` finds damaged pages in ``ledger``
    (a resume reads every table sooner or later: better one line now than a traceback in a worker)."""
    try:
        found = [tuple(r)[0] for r in ledger.conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc):
            raise corrupt_ledger_error(ledger.path, exc) from None
        raise
    if found != ["ok"]:
        raise corrupt_ledger_error(
            ledger.path, f"quick_check: {found[0]}" + (f" (+{len(found) - 1} more)" if len(found) > 1 else "")
        )


def corrupt_ledger_error(path: str | os.PathLike, exc: BaseException | str) -> CorruptLedgerError:
    """The one line for a ledger that cannot be read: the file, SQLite's words, and what to do."""
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    return CorruptLedgerError(
        f"the campaign ledger {os.fspath(path)} is corrupt (SQLite: {exc}), so this campaign cannot be resumed: "
        f"`kosmos-env verify {folder}` says what is left in it; run the campaign again with a new --out folder "
        "(or restore this folder from a copy)"
    )


class ConfigMismatchError(ValueError):
    """The output folder holds a different campaign (config or spec hash differ)."""


def make_owner(tag: str | None = None) -> str:
    """A lease owner id ``host:pid:tag``; the host and pid let others detect a dead owner."""
    return f"{socket.gethostname()}:{os.getpid()}:{tag or uuid.uuid4().hex[:8]}"


def owner_alive(owner: str | None) -> bool:
    """False only when ``owner`` is a process on this host that no longer runs (or is a zombie)."""
    if not owner:
        return False
    parts = owner.split(":")
    if len(parts) < 3 or parts[0] != socket.gethostname():
        return True  # another host: only the lease expiry can tell
    try:
        pid = int(parts[1])
    except ValueError:
        return True
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child not yet reaped still answers kill(0): read its state
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return True


def _expiry(value) -> float:
    """A stored lease expiry; a missing or non-finite one (written by an older version that let
    ``--lease-seconds nan`` through) counts as expired, so the lease is taken over and repaired
    instead of breaking every later claim."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return float("-inf")
    return v if math.isfinite(v) else float("-inf")


def _check_ttl(ttl: float) -> None:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"a lease must last a finite positive number of seconds, got {ttl!r}")


class Ledger:
    """One connection to a campaign ledger. Not shared between threads or processes."""

    def __init__(self, path: str | os.PathLike, *, create: bool = True, timeout: float = 120.0):
        self.path = os.fspath(path)
        if not create and not os.path.exists(self.path):
            raise FileNotFoundError(f"no campaign ledger at {self.path}")
        self.conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        try:
            self._set_up(create, timeout)
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            if is_corruption(exc):
                raise corrupt_ledger_error(self.path, exc) from None
            raise

    def _set_up(self, create: bool, timeout: float) -> None:
        self.conn.row_factory = sqlite3.Row
        self.conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        self.conn.execute("PRAGMA synchronous = FULL")
        if create:
            # Switching to WAL needs an exclusive lock and SQLite does not wait on its busy handler
            # for it: two processes opening a new campaign folder at once would see "database is
            # locked". Set-up is serialised across processes instead.
            with file_lock(f"{self.path}-setup.lock"):
                mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode.lower() != "wal":
                    raise RuntimeError(
                        f"could not put the ledger {self.path} in WAL mode (got {mode}); is it on a local disk?"
                    )
                self.conn.executescript(_SCHEMA)
                # ledgers written before the provenance column existed get it (NULL for their rows)
                columns = {r["name"] for r in self.conn.execute("PRAGMA table_info(episodes)")}
                if "provenance" not in columns:
                    self.conn.execute("ALTER TABLE episodes ADD COLUMN provenance TEXT")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rollback on error): one writer at a time."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # -- config -------------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        return {r["key"]: r["value"] for r in self.conn.execute("SELECT key, value FROM meta")}

    def config(self) -> CampaignConfig:
        meta = self.meta()
        if "config" not in meta:
            raise ValueError(f"the ledger {self.path} holds no campaign config (was it created by kosmos-env eval?)")
        return CampaignConfig.from_dict(json.loads(meta["config"]))

    def initialise(self, config: CampaignConfig) -> bool:
        """Freeze ``config`` in a new ledger and plan its episodes, or check it matches.

        Returns True when the ledger was new. A different config raises
        :class:`ConfigMismatchError` naming the fields that differ.
        """
        with self.transaction() as conn:
            meta = {r["key"]: r["value"] for r in conn.execute("SELECT key, value FROM meta")}
            if "config_hash" in meta:
                if meta["config_hash"] != config.config_hash:
                    old = json.loads(meta["identity"])
                    raise ConfigMismatchError(
                        f"{os.path.dirname(self.path) or '.'} already holds campaign {meta.get('campaign_id')} "
                        f"with a different config ({describe_difference(old, config.identity())}); "
                        "results of different configs are never mixed: use a new --out directory"
                    )
                return False
            rows = {
                "schema_version": str(LEDGER_SCHEMA_VERSION),
                "campaign_id": config.campaign_id,
                "config_hash": config.config_hash,
                "spec_hash": config.spec_hash,
                "identity": canonical_json(config.identity()),
                "config": canonical_json(config.to_dict()),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", rows.items())
            conn.executemany(
                "INSERT OR IGNORE INTO episodes (episode_id, campaign, ord, policy, task, seed, repeat, env_seed) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (k.episode_id, config.campaign_id, k.order, k.policy, k.task, k.seed, k.repeat, k.env_seed)
                    for k in config.episodes()
                ],
            )
        return True

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # -- leases -------------------------------------------------------------------------
    def claim(self, owner: str, ttl: float, max_attempts: int) -> EpisodeKey | None:
        """Lease the next episode to ``owner``: a stale lease first (taken over), then a pending one.

        A stale lease (its owner died or went silent) is an infrastructure failure, never the
        episode's: it is logged as an ``abandoned`` attempt and the episode is run again, however
        often that happens (a worker that keeps dying is bounded by the executor's respawn
        limit, and its episodes stay unfinished for the next run). ``max_attempts`` bounds only
        the policy's own failures (see :meth:`fail`). Returns None when nothing is claimable.
        """
        with self.transaction() as conn:
            now = time.time()
            for row in conn.execute(
                "SELECT * FROM episodes WHERE status = 'leased' AND owner IS NOT ? ORDER BY ord", (JUDGE_STAGE,)
            ).fetchall():
                expires = _expiry(row["lease_expires"])
                if expires >= now and owner_alive(row["owner"]):
                    continue
                why = "lease expired" if expires < now else "owner process died"
                conn.execute(
                    "INSERT INTO attempts (episode_id, attempt, worker, started, finished, status, error) "
                    "VALUES (?, ?, ?, ?, ?, 'abandoned', ?)",
                    (
                        row["episode_id"],
                        row["attempts"],
                        row["owner"],
                        row["started"],
                        now,
                        f"{INFRA_TAG} {why}; taken over by {owner}",
                    ),
                )
                return self._lease(conn, row, owner, ttl, now)
            row = conn.execute("SELECT * FROM episodes WHERE status = 'pending' ORDER BY ord LIMIT 1").fetchone()
            if row is None:
                return None
            return self._lease(conn, row, owner, ttl, now)

    @staticmethod
    def _lease(conn, row, owner: str, ttl: float, now: float) -> EpisodeKey:
        _check_ttl(ttl)
        conn.execute(
            "UPDATE episodes SET status = 'leased', owner = ?, lease_expires = ?, attempts = attempts + 1, started = ? "
            "WHERE episode_id = ?",
            (owner, now + ttl, now, row["episode_id"]),
        )
        return EpisodeKey(row["policy"], row["task"], row["seed"], row["repeat"], row["ord"])

    def renew(self, episode_id: str, owner: str, ttl: float) -> bool:
        """Extend ``owner``'s lease; False when the lease was lost (taken over or finished)."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE episodes SET lease_expires = ? WHERE episode_id = ? AND owner = ? AND status = 'leased'",
                (time.time() + ttl, episode_id, owner),
            )
            return cur.rowcount == 1

    def complete(
        self,
        episode_id: str,
        owner: str,
        record: Mapping[str, Any],
        artifacts: Sequence[tuple[str, str, int, str]] = (),
    ) -> bool:
        """Record a finished episode (first finisher wins; a second completion is ignored).

        ``artifacts`` are (sha256, relpath, size, kind) of files already in the store.
        Returns False when the episode was already done (by a worker that took it over).
        """
        with self.transaction() as conn:
            now = time.time()
            conn.executemany(
                "INSERT OR IGNORE INTO artifacts (sha256, relpath, size, kind, created) VALUES (?, ?, ?, ?, ?)",
                [(sha, rel, size, kind, now) for sha, rel, size, kind in artifacts],
            )
            values = _record_values(record)
            cur = conn.execute(
                "UPDATE episodes SET status = 'done', owner = NULL, lease_expires = NULL, worker = ?, finished = ?, "
                + ", ".join(f"{k} = ?" for k in values)
                + " WHERE episode_id = ? AND status != 'done'",
                (owner, now, *values.values(), episode_id),
            )
            done = cur.rowcount == 1
            _log_finish(conn, episode_id, owner, now, done)
            return done

    def release(self, episode_id: str, owner: str) -> None:
        """Hand a lease back unused (the worker could not start): pending again, attempt not counted."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE episodes SET status = 'pending', owner = NULL, lease_expires = NULL, "
                "attempts = MAX(attempts - 1, 0) WHERE episode_id = ? AND owner = ? AND status = 'leased'",
                (episode_id, owner),
            )

    def fail(self, episode_id: str, owner: str, error: str, max_attempts: int, infrastructure: bool = False) -> str:
        """Record a failed attempt: back to pending, or ``error`` once the policy failed ``max_attempts`` times.

        An ``infrastructure`` failure (see :mod:`kosmos_env.campaign.failures`) is never final: the
        episode always goes back to pending and the attempt does not count. Only the policy's
        own failures since the last ``--retry-errors`` count towards ``max_attempts``.
        Returns the episode's new status ("pending" or "done"), or "lost" when ``owner`` no
        longer held the lease (nothing is changed then).
        """
        with self.transaction() as conn:
            now = time.time()
            row = conn.execute("SELECT * FROM episodes WHERE episode_id = ?", (episode_id,)).fetchone()
            if row is None or row["status"] != "leased" or row["owner"] != owner:
                return "lost"
            if infrastructure and not error.startswith(INFRA_TAG):
                error = f"{INFRA_TAG} {error}"
            conn.execute(
                "INSERT INTO attempts (episode_id, attempt, worker, started, finished, status, error) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    episode_id,
                    row["attempts"],
                    owner,
                    row["started"],
                    now,
                    "infra-error" if infrastructure else "error",
                    error,
                ),
            )
            if not infrastructure and self._policy_failures(conn, episode_id) >= max_attempts:
                conn.execute(
                    "UPDATE episodes SET status = 'done', outcome = 'error', owner = NULL, lease_expires = NULL, "
                    "error = ?, worker = ?, finished = ? WHERE episode_id = ?",
                    (error, owner, now, episode_id),
                )
                return "done"
            conn.execute(
                "UPDATE episodes SET status = 'pending', owner = NULL, lease_expires = NULL WHERE episode_id = ?",
                (episode_id,),
            )
            return "pending"

    @staticmethod
    def _policy_failures(conn, episode_id: str) -> int:
        """The policy's own failed attempts on ``episode_id`` since its errors were last reopened."""
        last = conn.execute(
            "SELECT MAX(id) FROM attempts WHERE episode_id = ? AND status = 'reopened'", (episode_id,)
        ).fetchone()[0]
        return conn.execute(
            "SELECT COUNT(*) FROM attempts WHERE episode_id = ? AND status = 'error' AND id > ?",
            (episode_id, last or 0),
        ).fetchone()[0]

    def reopen_errors(self, all_errors: bool = False) -> int:
        """Put ``error`` episodes back to pending so the next workers retry them; returns how many.

        Always reopened: errors an infrastructure failure caused (older ledgers closed an episode
        whose worker died three times as an error). With ``all_errors`` (``--retry-errors``) the
        policy's own errors too; their failed attempts stop counting towards ``max_attempts``.
        """
        with self.transaction() as conn:
            now = time.time()
            rows = conn.execute(
                "SELECT episode_id, error, attempts FROM episodes WHERE status = 'done' AND outcome = 'error'"
            ).fetchall()
            chosen = [r for r in rows if all_errors or is_infrastructure_error_text(r["error"])]
            for r in chosen:
                conn.execute(
                    "INSERT INTO attempts (episode_id, attempt, worker, started, finished, status, error) "
                    "VALUES (?, ?, NULL, NULL, ?, 'reopened', ?)",
                    (r["episode_id"], r["attempts"], now, f"error reopened for a retry: {(r['error'] or '')[:200]}"),
                )
                conn.execute(
                    "UPDATE episodes SET status = 'pending', outcome = NULL, success = NULL, score = NULL, judge = NULL, "
                    "judgment = NULL, gate = NULL, ground_truth = NULL, steps = NULL, timings = NULL, video = NULL, "
                    "actions = NULL, log = NULL, error = NULL, worker = NULL, owner = NULL, lease_expires = NULL, "
                    "finished = NULL WHERE episode_id = ?",
                    (r["episode_id"],),
                )
        return len(chosen)

    # -- the judge stage ----------------------------------------------------------------
    def stage_rollout(
        self,
        episode_id: str,
        owner: str,
        record: Mapping[str, Any],
        artifacts: Sequence[tuple[str, str, int, str]] = (),
        frames: str | None = None,
        fps: float | None = None,
    ) -> bool:
        """File a rolled-out episode for the judge stage (its rollout is final from here on).

        ``record`` is the episode's record without its judgment; ``frames`` the relpath of the
        frames the judge is to see (lossless), ``fps`` their rate. The episode stays ``leased``,
        owned by :data:`JUDGE_STAGE`. Returns False (nothing changed) when ``owner`` no longer
        holds the rollout lease (a worker that took it over files it instead).
        """
        with self.transaction() as conn:
            now = time.time()
            row = conn.execute(
                "SELECT status, owner, attempts FROM episodes WHERE episode_id = ?", (episode_id,)
            ).fetchone()
            if row is None or row["status"] != "leased" or row["owner"] != owner:
                return False
            conn.executemany(
                "INSERT OR IGNORE INTO artifacts (sha256, relpath, size, kind, created) VALUES (?, ?, ?, ?, ?)",
                [(sha, rel, size, kind, now) for sha, rel, size, kind in artifacts],
            )
            conn.execute(
                "INSERT OR REPLACE INTO judge_queue (episode_id, status, record, frames, fps, rolled_by, rolled_at) "
                "VALUES (?, 'awaiting', ?, ?, ?, ?, ?)",
                (episode_id, json.dumps(dict(record), sort_keys=True), frames, fps, owner, now),
            )
            conn.execute(
                "UPDATE episodes SET owner = ?, lease_expires = NULL WHERE episode_id = ?", (JUDGE_STAGE, episode_id)
            )
            conn.execute(
                "INSERT INTO attempts (episode_id, attempt, worker, started, finished, status, error) "
                "VALUES (?, ?, ?, NULL, ?, 'rolled-out', NULL)",
                (episode_id, row["attempts"], owner, now),
            )
            return True

    def claim_judging(self, owner: str, ttl: float, limit: int) -> list[dict[str, Any]]:
        """Lease up to ``limit`` rolled-out episodes to judge ``owner``: stale judge leases first.

        A judge lease whose owner died or went silent is taken over (logged as an
        ``judge-abandoned`` attempt; it never counts against the episode). Returns the queue rows
        joined with their episode (``record`` decoded), in claim order; empty when none is free.
        """
        if limit < 1:
            raise ValueError(f"a judge batch holds at least one rollout, got {limit}")
        with self.transaction() as conn:
            now = time.time()
            picked = []
            for row in conn.execute(
                "SELECT q.episode_id, q.status, q.owner, q.lease_expires, q.attempts "
                "FROM judge_queue q JOIN episodes e USING (episode_id) "
                "WHERE q.status = 'judging' ORDER BY e.ord"
            ).fetchall():
                if len(picked) >= limit:
                    break
                expires = _expiry(row["lease_expires"])
                if expires >= now and owner_alive(row["owner"]):
                    continue
                why = "judge lease expired" if expires < now else "judge process died"
                conn.execute(
                    "INSERT INTO attempts (episode_id, attempt, worker, started, finished, status, error) "
                    "VALUES (?, ?, ?, NULL, ?, 'judge-abandoned', ?)",
                    (
                        row["episode_id"],
                        row["attempts"],
                        row["owner"],
                        now,
                        f"{INFRA_TAG} {why}; taken over by {owner}",
                    ),
                )
                picked.append(row["episode_id"])
            if len(picked) < limit:
                picked += [
                    r[0]
                    for r in conn.execute(
                        "SELECT q.episode_id FROM judge_queue q JOIN episodes e USING (episode_id) "
                        "WHERE q.status = 'awaiting' ORDER BY e.ord LIMIT ?",
                        (limit - len(picked),),
                    )
                ]
            for episode_id in picked:
                conn.execute(
                    "UPDATE judge_queue SET status = 'judging', owner = ?, lease_expires = ?, "
                    "attempts = attempts + 1 WHERE episode_id = ?",
                    (owner, now + ttl, episode_id),
                )
            return [self._queue_row(conn, episode_id) for episode_id in picked]

    @staticmethod
    def _queue_row(conn, episode_id: str) -> dict[str, Any]:
        row = conn.execute(
            "SELECT q.*, e.policy, e.task, e.seed, e.repeat, e.env_seed, e.ord FROM judge_queue q "
            "JOIN episodes e USING (episode_id) WHERE episode_id = ?",
            (episode_id,),
        ).fetchone()
        out = dict(row)
        out["record"] = json.loads(out["record"])
        return out

    def renew_judging(self, episode_ids: Sequence[str], owner: str, ttl: float) -> bool:
        """Extend ``owner``'s judge leases; False when any of them was lost."""
        with self.transaction() as conn:
            expires = time.time() + ttl
            kept = sum(
                conn.execute(
                    "UPDATE judge_queue SET lease_expires = ? WHERE episode_id = ? AND owner = ? "
                    "AND status = 'judging'",
                    (expires, e, owner),
                ).rowcount
                for e in episode_ids
            )
            return kept == len(episode_ids)

    def complete_judging(self, episode_id: str, owner: str, record: Mapping[str, Any]) -> bool:
        """Record the judged episode (its full record): done. First finisher wins, as in :meth:`complete`."""
        with self.transaction() as conn:
            now = time.time()
            values = _record_values(record)
            cur = conn.execute(
                "UPDATE episodes SET status = 'done', owner = NULL, lease_expires = NULL, finished = ?, "
                + ", ".join(f"{k} = ?" for k in values)
                + " WHERE episode_id = ? AND status = 'leased' AND owner = ?",
                (now, *values.values(), episode_id, JUDGE_STAGE),
            )
            done = cur.rowcount == 1
            if done:
                conn.execute(
                    "UPDATE judge_queue SET status = 'judged', owner = NULL, lease_expires = NULL, "
                    "judged_by = ?, judged_at = ? WHERE episode_id = ?",
                    (owner, now, episode_id),
                )
            _log_finish(conn, episode_id, owner, now, done)
            return done

    def release_judging(self, episode_ids: Sequence[str], owner: str) -> None:
        """Hand judge leases back unused (the judge could not start): awaiting again, no attempt counted."""
        with self.transaction() as conn:
            for episode_id in episode_ids:
                conn.execute(
                    "UPDATE judge_queue SET status = 'awaiting', owner = NULL, lease_expires = NULL, "
                    "attempts = MAX(attempts - 1, 0) WHERE episode_id = ? AND owner = ? AND status = 'judging'",
                    (episode_id, owner),
                )

    def fail_judging(
        self, episode_id: str, owner: str, error: str, max_attempts: int, infrastructure: bool = False
    ) -> str:
        """A judge raised on this rollout: back to ``awaiting``, or the episode ends in ``error``
        once the judge failed ``max_attempts`` times (infrastructure failures never count).
        Returns "awaiting", "done" or "lost" (``owner`` no longer held the judge lease)."""
        with self.transaction() as conn:
            now = time.time()
            row = conn.execute(
                "SELECT status, owner, attempts FROM judge_queue WHERE episode_id = ?", (episode_id,)
            ).fetchone()
            if row is None or row["status"] != "judging" or row["owner"] != owner:
                return "lost"
            if infrastructure and not error.startswith(INFRA_TAG):
                error = f"{INFRA_TAG} {error}"
            conn.execute(
                "INSERT INTO attempts (episode_id, attempt, worker, started, finished, status, error) "
                "VALUES (?, ?, ?, NULL, ?, ?, ?)",
                (
                    episode_id,
                    row["attempts"],
                    owner,
                    now,
                    "judge-infra-error" if infrastructure else "judge-error",
                    error,
                ),
            )
            failures = conn.execute(
                "SELECT COUNT(*) FROM attempts WHERE episode_id = ? AND status = 'judge-error'", (episode_id,)
            ).fetchone()[0]
            if not infrastructure and failures >= max_attempts:
                conn.execute(
                    "UPDATE episodes SET status = 'done', outcome = 'error', owner = NULL, lease_expires = NULL, "
                    "error = ?, worker = ?, finished = ? WHERE episode_id = ?",
                    (f"the judge failed on this rollout {failures} times; last: {error}", owner, now, episode_id),
                )
                conn.execute("DELETE FROM judge_queue WHERE episode_id = ?", (episode_id,))
                return "done"
            conn.execute(
                "UPDATE judge_queue SET status = 'awaiting', owner = NULL, lease_expires = NULL WHERE episode_id = ?",
                (episode_id,),
            )
            return "awaiting"

    def has_judge_queue(self) -> bool:
        """Does this ledger have the judge stage's table (ledgers written before it existed do not)?"""
        return (
            self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'judge_queue'").fetchone()
            is not None
        )

    def judge_queue(self) -> list[dict[str, Any]]:
        """Every row of the judge stage's queue (``record`` decoded), in claim order."""
        if not self.has_judge_queue():
            return []
        ids = [
            r[0]
            for r in self.conn.execute(
                "SELECT q.episode_id FROM judge_queue q JOIN episodes e USING (episode_id) ORDER BY e.ord"
            )
        ]
        return [self._queue_row(self.conn, e) for e in ids]

    # -- policies and runs --------------------------------------------------------------
    def register_policy(self, label: str, content_hash: str, hub_model_id: str | None, worker: str) -> None:
        """Record a policy's content hash; a worker that built a *different* policy is refused."""
        with self.transaction() as conn:
            row = conn.execute("SELECT content_hash FROM policies WHERE label = ?", (label,)).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO policies (label, content_hash, hub_model_id, worker) VALUES (?, ?, ?, ?)",
                    (label, content_hash, hub_model_id, worker),
                )
            elif row["content_hash"] != content_hash:
                raise ConfigMismatchError(
                    f"policy {label!r} now has content hash {content_hash[:12]}, but this campaign ran it with "
                    f"{row['content_hash'][:12]} (weights or code changed): use a new --out directory"
                )

    def policies(self) -> dict[str, dict[str, Any]]:
        return {r["label"]: dict(r) for r in self.conn.execute("SELECT * FROM policies")}

    def start_run(self, owner: str, executor: str, workers: int, argv: Sequence[str] | None) -> str:
        run_id = uuid.uuid4().hex[:12]
        with self.transaction() as conn:
            done = conn.execute("SELECT COUNT(*) FROM episodes WHERE status = 'done'").fetchone()[0]
            conn.execute(
                "INSERT INTO runs (run_id, owner, executor, workers, started, argv, done_before) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, owner, executor, workers, time.time(), json.dumps(list(argv or [])), done),
            )
        return run_id

    def finish_run(self, run_id: str) -> None:
        with self.transaction() as conn:
            done = conn.execute("SELECT COUNT(*) FROM episodes WHERE status = 'done'").fetchone()[0]
            conn.execute("UPDATE runs SET finished = ?, done_after = ? WHERE run_id = ?", (time.time(), done, run_id))

    def runs(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM runs ORDER BY started")]

    def record_worker_threads(self, entry: Mapping[str, Any]) -> None:
        """Add one worker's torch thread count (:func:`kosmos_env.utils.threads.worker_record`) to the
        campaign's list in meta (every run's workers, in the order they finished)."""
        with self.transaction() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (WORKER_THREADS_KEY,)).fetchone()
            entries = json.loads(row[0]) if row else []
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                (WORKER_THREADS_KEY, json.dumps(entries + [dict(entry)], sort_keys=True)),
            )

    def worker_threads(self) -> list[dict[str, Any]]:
        """Every recorded worker's torch threads (see :meth:`record_worker_threads`); [] if none."""
        value = self.meta().get(WORKER_THREADS_KEY)
        return list(json.loads(value)) if value else []

    # -- reading ------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Episodes per status and, for done ones, per outcome; ``planned`` is the total.

        ``leased`` counts every episode some stage holds; ``rolling_out``, ``rolled_out``
        (awaiting a judge) and ``judging`` split it by stage.
        """
        out = {s: 0 for s in STATUSES}
        for row in self.conn.execute("SELECT status, COUNT(*) AS n FROM episodes GROUP BY status"):
            out[row["status"]] = row["n"]
        for name in ("success", "failure", "discarded", "abstained", "error"):
            out[name] = 0
        for row in self.conn.execute(
            "SELECT outcome, COUNT(*) AS n FROM episodes WHERE status = 'done' GROUP BY outcome"
        ):
            if row["outcome"]:
                out[row["outcome"]] = row["n"]
        out["planned"] = out["pending"] + out["leased"] + out["done"]
        # queue depth per stage: ``leased`` splits into rolling out and the judge stage's two queues
        out["rolled_out"] = out["judging"] = 0
        if self.has_judge_queue():
            for row in self.conn.execute(
                "SELECT q.status, COUNT(*) AS n FROM judge_queue q JOIN episodes e "
                "USING (episode_id) WHERE e.status = 'leased' GROUP BY q.status"
            ):
                key = {"awaiting": "rolled_out", "judging": "judging"}.get(row["status"])
                if key:
                    out[key] = row["n"]
        out["rolling_out"] = out["leased"] - out["rolled_out"] - out["judging"]
        return out

    def stage_depths(self) -> dict[str, int]:
        """Episodes in each stage of the pipeline (:data:`STAGE_DEPTHS`); they add up to the plan."""
        counts = self.counts()
        return {k: counts[k] for k in STAGE_DEPTHS}

    def episodes(self, status: str | None = None) -> list[dict[str, Any]]:
        """Episode rows (JSON fields decoded, success as bool/None), in claim order."""
        sql = "SELECT * FROM episodes" + (" WHERE status = ?" if status else "") + " ORDER BY ord"
        rows = []
        for r in self.conn.execute(sql, (status,) if status else ()):
            row = dict(r)
            for key in _JSON_FIELDS:
                row[key] = json.loads(row[key]) if row.get(key) is not None else None
            row["success"] = None if row["success"] is None else bool(row["success"])
            rows.append(row)
        return rows

    def attempts(self, episode_id: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM attempts" + (" WHERE episode_id = ?" if episode_id else "") + " ORDER BY id"
        return [dict(r) for r in self.conn.execute(sql, (episode_id,) if episode_id else ())]

    def artifacts(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM artifacts ORDER BY relpath")]

    def checkpoint(self) -> None:
        """Fold the WAL into the main file (best effort) so a copied folder is self-contained."""
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError:
            pass


def _record_values(record: Mapping[str, Any]) -> dict[str, Any]:
    """An episode record as the ``episodes`` columns store it (JSON fields encoded, success 0/1)."""
    values = {
        k: (None if record.get(k) is None else json.dumps(record[k], sort_keys=True))
        if k in _JSON_FIELDS
        else record.get(k)
        for k in _RECORD_FIELDS
    }
    if values["success"] is not None:
        values["success"] = int(bool(values["success"]))
    return values


def _log_finish(conn, episode_id: str, owner: str, now: float, done: bool) -> None:
    """One attempts row for a finishing write: ``ok``, or ``duplicate-ignored`` when the episode was already done."""
    attempt = conn.execute("SELECT attempts FROM episodes WHERE episode_id = ?", (episode_id,)).fetchone()
    conn.execute(
        "INSERT INTO attempts (episode_id, attempt, worker, started, finished, status, error) "
        "VALUES (?, ?, ?, NULL, ?, ?, NULL)",
        (episode_id, attempt["attempts"] if attempt else 0, owner, now, "ok" if done else "duplicate-ignored"),
    )
