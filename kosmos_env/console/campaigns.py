"""Finding campaign folders and reading their ledgers read-only, while campaigns write to them.

Every read opens the ledger read-only (:mod:`kosmos_env.campaign.readonly`: SQLite's
``mode=ro`` URI and ``PRAGMA query_only``). Each request opens its own short-lived connection, so a
page never holds a read transaction open while workers commit.

A folder is a campaign when it holds ``ledger.sqlite``. Each folder given to the console is
either a campaign or a parent whose sub-folders (two levels deep) are searched for campaigns.
A campaign is named in URLs by a short hash of its resolved path, never by the path itself.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from kosmos_env.campaign.control import control_state
from kosmos_env.campaign.ledger import LEDGER_NAME, owner_alive
from kosmos_env.campaign.readonly import connect_readonly as _connect_readonly
from kosmos_env.hashing import sha256_hex

OUTCOMES = ("success", "failure", "discarded", "abstained", "error")
QUEUE_STATES = ("pending", "leased", "done")
STAGES = ("policy", "world", "gate", "judge", "io")
#: a run on another host with no recorded episode for this long is no longer counted as running
REMOTE_QUIET_SECONDS = 600.0
SEARCH_DEPTH = 2


class CampaignError(Exception):
    """A campaign folder that cannot be read (missing, not a campaign, corrupt ledger)."""


def connect_readonly(path: str | os.PathLike, timeout: float = 5.0) -> sqlite3.Connection:
    """:func:`kosmos_env.campaign.readonly.connect_readonly`, raising :class:`CampaignError`."""
    try:
        return _connect_readonly(path, timeout)
    except FileNotFoundError as exc:
        raise CampaignError(str(exc)) from None
    except sqlite3.Error as exc:
        raise CampaignError(f"cannot open {path}: {exc}") from None


@dataclass(frozen=True)
class CampaignRef:
    """One campaign folder the console serves (or an error in place of one)."""

    key: str
    path: Path
    error: str | None = None

    @property
    def ledger_path(self) -> Path:
        return self.path / LEDGER_NAME

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)


def folder_key(path: Path) -> str:
    return sha256_hex(str(path.resolve()).encode("utf-8", "surrogateescape"))[:12]


def discover(roots: Iterable[str | os.PathLike]) -> list[CampaignRef]:
    """Every campaign under ``roots`` (see module doc); a root that is missing or holds no
    campaign is listed with an error so the console can say so."""
    found: dict[str, CampaignRef] = {}

    def add(ref: CampaignRef) -> None:
        found.setdefault(ref.key, ref)

    for root in roots:
        root = Path(root)
        if not root.exists():
            add(CampaignRef(folder_key(root), root, f"folder not found: {root}"))
            continue
        if not root.is_dir():
            add(CampaignRef(folder_key(root), root, f"not a folder: {root}"))
            continue
        if (root / LEDGER_NAME).exists():
            add(CampaignRef(folder_key(root), root))
            continue
        before = len(found)
        for path in _search(root, SEARCH_DEPTH):
            if (path / LEDGER_NAME).exists():
                add(CampaignRef(folder_key(path), path))
            else:  # a results bundle without its ledger (e.g. copied without it)
                add(
                    CampaignRef(
                        folder_key(path),
                        path,
                        f"{path} holds results.json but no {LEDGER_NAME}: "
                        "the console reads campaigns from their ledger",
                    )
                )
        if len(found) == before:
            add(CampaignRef(folder_key(root), root, f"no campaign (no {LEDGER_NAME}) under {root}"))
    return sorted(found.values(), key=lambda r: str(r.path))


def _search(root: Path, depth: int) -> list[Path]:
    out = []
    try:
        children = sorted(
            p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != "artifacts"
        )
    except OSError:
        return out
    for child in children:
        if (child / LEDGER_NAME).exists() or (child / "results.json").exists():
            out.append(child)
        elif depth > 1:
            out.extend(_search(child, depth - 1))
    return out


# ----------------------------------------------------------------------------- summaries


@dataclass
class Summary:
    """What the campaigns page and the live view show about one campaign."""

    ref: CampaignRef
    campaign_id: str = ""
    env_id: str = ""
    spec_hash: str = ""
    config_hash: str = ""
    created: str = ""
    policies: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    seeds: int = 0
    repeats: int = 0
    queue: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    per_policy: dict[str, dict[str, int]] = field(default_factory=dict)
    running: bool = False
    control: dict[str, Any] | None = None
    price_table: dict | None = None
    judge: dict = field(default_factory=dict)

    @property
    def planned(self) -> int:
        return sum(self.queue.get(s, 0) for s in QUEUE_STATES)

    @property
    def done(self) -> int:
        return self.queue.get("done", 0)

    @property
    def complete(self) -> bool:
        return self.planned > 0 and self.done == self.planned

    @property
    def cancelled(self) -> bool:
        return bool(self.control and self.control.get("action") == "cancel")

    def state(self, verification: str | None = None) -> str:
        """running, cancelling, finished, failed verification, cancelled or stopped."""
        if self.complete:
            return "failed verification" if verification == "failed" else "finished"
        if self.running:
            return "cancelling" if self.cancelled else "running"
        return "cancelled" if self.cancelled else "stopped"

    def success_so_far(self) -> dict[str, dict[str, Any]]:
        """Per policy: successes, decided, rate and its Wilson 95% interval so far."""
        out = {}
        for p in self.policies:
            c = self.per_policy.get(p, {})
            k, decided = c.get("success", 0), c.get("success", 0) + c.get("failure", 0)
            n = sum(c.values())
            ci = _wilson(k, decided) if decided else None
            out[p] = {
                "successes": k,
                "decided": decided,
                "done": n,
                "rate": k / decided if decided else None,
                "wilson": [ci.lower, ci.upper] if ci is not None else None,
                "undecided": n - decided,
            }
        return out


@functools.lru_cache(maxsize=4096)
def _wilson(k: int, n: int):
    """Wilson 95% interval, memoised: the live view asks for the same few (k, n) every tick."""
    from kosmos_env.stats.intervals import wilson

    return wilson(k, n)


def read_summary(ref: CampaignRef, conn: sqlite3.Connection | None = None) -> Summary:
    """Counts and design of one campaign, by SQL aggregates (fast on large ledgers)."""
    if ref.error:
        raise CampaignError(ref.error)
    own = conn is None
    try:
        conn = conn or connect_readonly(ref.ledger_path)
    except sqlite3.Error as exc:
        raise CampaignError(f"cannot open {ref.ledger_path}: {exc}") from None
    try:
        meta = {r["key"]: r["value"] for r in conn.execute("SELECT key, value FROM meta")}
        if "config" not in meta:
            raise CampaignError(f"{ref.ledger_path} holds no campaign config")
        config = json.loads(meta["config"])
        s = Summary(
            ref,
            campaign_id=meta.get("campaign_id", ""),
            env_id=str(config.get("env_id", "")),
            spec_hash=str(config.get("spec_hash", "")),
            config_hash=meta.get("config_hash", ""),
            created=meta.get("created", ""),
            policies=[str(p.get("label")) for p in config.get("policies", [])],
            tasks=[str(t) for t in config.get("tasks", [])],
            seeds=len(config.get("seeds", [])),
            repeats=int(config.get("repeats", 1)),
            judge=dict(config.get("judge") or {}),
        )
        s.price_table = json.loads(meta["price_table"]) if meta.get("price_table") else None
        s.queue = {st: 0 for st in QUEUE_STATES}
        for row in conn.execute("SELECT status, COUNT(*) AS n FROM episodes GROUP BY status"):
            s.queue[row["status"]] = row["n"]
        s.outcomes = {o: 0 for o in OUTCOMES}
        for row in conn.execute(
            "SELECT policy, outcome, COUNT(*) AS n FROM episodes WHERE status = 'done' GROUP BY policy, outcome"
        ):
            if row["outcome"] in s.outcomes:
                s.outcomes[row["outcome"]] += row["n"]
                s.per_policy.setdefault(row["policy"], {})[row["outcome"]] = row["n"]
        s.control = control_state(conn)
        s.running = _running(conn)
        return s
    except sqlite3.DatabaseError as exc:
        raise CampaignError(f"{ref.ledger_path} is not a readable campaign ledger: {exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CampaignError(f"{ref.ledger_path} holds an unreadable campaign config: {exc}") from None
    finally:
        if own:
            conn.close()


def _running(conn: sqlite3.Connection) -> bool:
    """Does any worker still work on this campaign? A live lease, or an unfinished eval run
    whose process is alive (this host) or recently active (another host)."""
    now = time.time()
    for row in conn.execute("SELECT owner, lease_expires FROM episodes WHERE status = 'leased'"):
        if row["lease_expires"] is not None and row["lease_expires"] >= now and owner_alive(row["owner"]):
            return True
    last = conn.execute("SELECT MAX(finished) FROM episodes").fetchone()[0] or 0.0
    host = socket.gethostname()
    for row in conn.execute("SELECT owner, started FROM runs WHERE finished IS NULL"):
        owner = row["owner"] or ""
        if not owner_alive(owner):
            continue
        if owner.split(":")[0] == host or now - max(last, row["started"] or 0.0) < REMOTE_QUIET_SECONDS:
            return True
    return False


# ----------------------------------------------------------------------------- live numbers


def live_stats(ref: CampaignRef, window_seconds: float = 600.0) -> dict[str, Any]:
    """Everything the live view pushes, read from the ledger in one short connection."""
    conn = connect_readonly(ref.ledger_path)
    try:
        s = read_summary(ref, conn)
        now = time.time()
        # throughput: the current (or last) eval run's episodes over its wall clock, else the recent window
        runs = [dict(r) for r in conn.execute("SELECT started, finished, workers, executor FROM runs ORDER BY started")]
        current = runs[-1] if runs else None
        since = current["started"] if current else now - window_seconds
        until = (current["finished"] or now) if current else now
        n_recent, first, _last = conn.execute(
            "SELECT COUNT(*), MIN(finished), MAX(finished) FROM episodes WHERE status = 'done' AND finished >= ? "
            "AND finished <= ?",
            (since, until + 1e-6),
        ).fetchone()
        # Warm-up (model loads, the first episode's compile) is the time from the run's start to its
        # first finished episode; the rate counts only episodes finished after it, over the time
        # since it, so a slow start never inflates the ETA (n - 1 episodes in (first, until]).
        warmup = (first - since) if first is not None and current else None
        rate = (n_recent - 1) / max(until - first, 1e-9) * 3600.0 if n_recent and n_recent >= 2 else None
        remaining = s.planned - s.done
        eta = remaining / rate * 3600.0 if rate and remaining and s.running else None
        n_timed, stages = _stage_sums(ref, conn)
        stages["overhead"] = max(0.0, stages["total"] - sum(stages[k] for k in STAGES))
        per_rollout = {k: (v / n_timed if n_timed else None) for k, v in stages.items()}
        money = _money(stages, s.price_table)
        return {
            "key": ref.key,
            "campaign_id": s.campaign_id,
            "state": s.state(),
            "running": s.running,
            "planned": s.planned,
            "queue": s.queue,
            "stage_queue": _judge_stage_depth(conn),
            "outcomes": s.outcomes,
            "rollouts_per_hour": rate,
            "eta_seconds": eta,
            "remaining": remaining,
            "warmup_seconds": warmup,
            "warming_up": bool(current and s.running and not n_recent),
            "run": None
            if current is None
            else {
                "started": current["started"],
                "finished": current["finished"],
                "workers": current["workers"],
                "executor": current["executor"],
                "episodes": n_recent,
                "warmup_seconds": warmup,
            },
            "history": _history(conn),
            "seconds_per_stage": stages,
            "seconds_per_rollout": per_rollout,
            "timed": n_timed,
            "money": money,
            "ranking": ranking_so_far(s),
            "control": s.control,
            "now": now,
            "verdict": live_verdict(conn, s),
        }
    finally:
        conn.close()


HISTORY_BINS = 40


def live_verdict(conn: sqlite3.Connection, s: Summary) -> dict[str, Any]:
    """The analysis page's headline verdict on the episodes finished so far: the top two
    policies, success per (task, seed) with repeats averaged, by the same rule
    (:func:`kosmos_env.report.analysis.pair_verdict`), so the live view and the analysis page
    never disagree; ``{"skipped": why}`` before two policies have decided episodes."""
    ranked = [r["policy"] for r in ranking_so_far(s) if r["decided"]]
    if len(ranked) < 2:
        return {
            "skipped": "needs two policies with decided episodes",
            "headline": "verdict: none yet (needs two policies with decided episodes)",
        }
    from kosmos_env.report.analysis import pair_verdict, seed_matrix

    rows = [
        {
            "policy": r["policy"],
            "task": r["task"],
            "seed": r["seed"],
            "repeat": r["repeat"],
            "success": {"success": True, "failure": False}.get(r["outcome"]),
        }
        for r in conn.execute(
            "SELECT policy, task, seed, repeat, outcome FROM episodes WHERE status = 'done' AND policy IN (?, ?)",
            (ranked[0], ranked[1]),
        )
    ]
    try:
        return pair_verdict(seed_matrix(rows, ranked[:2]), ranked[0], ranked[1])
    except ValueError as exc:  # e.g. repeats averaged to a fraction: say why, never crash the live view
        return {"skipped": str(exc), "headline": f"verdict: none ({exc})"}


def _history(conn: sqlite3.Connection, bins: int = HISTORY_BINS) -> list[dict[str, Any]]:
    """Success so far and throughput over time, in at most ``bins`` equal slices of the span from
    the first run's start to the last finished episode: per slice its end time, the episodes done
    by then, successes and decided by then, and episodes finished per minute within the slice."""
    start = conn.execute("SELECT MIN(started) FROM runs").fetchone()[0]
    rows = conn.execute(
        "SELECT finished, outcome FROM episodes WHERE status = 'done' AND finished IS NOT NULL ORDER BY finished"
    ).fetchall()
    if not rows:
        return []
    t0 = min(start, rows[0][0]) if start is not None else rows[0][0]
    t1 = rows[-1][0]
    span = max(t1 - t0, 1e-6)
    n_bins = max(1, min(bins, len(rows)))
    width = span / n_bins
    out, i, done, succ, decided = [], 0, 0, 0, 0
    for b in range(n_bins):
        end = t1 if b == n_bins - 1 else t0 + width * (b + 1)
        in_bin = 0
        while i < len(rows) and rows[i][0] <= end + 1e-9:
            done += 1
            in_bin += 1
            succ += rows[i][1] == "success"
            decided += rows[i][1] in ("success", "failure")
            i += 1
        out.append(
            {"t": end - t0, "done": done, "successes": succ, "decided": decided, "per_minute": in_bin / width * 60.0}
        )
    return out


def _judge_stage_depth(conn: sqlite3.Connection) -> dict[str, int]:
    """Of the leased episodes, those rolled out and awaiting a judge, and those being judged
    (two-stage campaigns, ``eval --judge-workers``; zero elsewhere)."""
    out = {"rolled_out": 0, "judging": 0}
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'judge_queue'").fetchone():
        for status, n in conn.execute(
            "SELECT q.status, COUNT(*) FROM judge_queue q JOIN episodes e USING (episode_id) "
            "WHERE e.status = 'leased' GROUP BY q.status"
        ):
            key = {"awaiting": "rolled_out", "judging": "judging"}.get(status)
            if key:
                out[key] = n
    return out


_STAGE_CACHE: dict[str, tuple[int, float, int, dict[str, float]]] = {}
_STAGE_LOCK = threading.Lock()


def _stage_sums(ref: CampaignRef, conn: sqlite3.Connection) -> tuple[int, dict[str, float]]:
    """(timed episodes, seconds per stage summed over them), updated incrementally.

    Decoding every episode's timings on each live tick would cost a large campaign's console
    a core; instead the sums are kept per ledger and only episodes finished after the last
    tick are added. If the counts do not add up (an episode recorded with an older timestamp,
    e.g. from another host's clock), everything is summed again.
    """
    keys = (*STAGES, "total")
    cols = ", ".join(f"SUM(json_extract(timings, '$.{k}')) AS {k}" for k in keys)
    base = "FROM episodes WHERE status = 'done' AND timings IS NOT NULL"
    n_all, last = conn.execute(f"SELECT COUNT(*), MAX(finished) {base}").fetchone()
    last = last or 0.0
    with _STAGE_LOCK:
        cached = _STAGE_CACHE.get(ref.key)
    if cached and cached[0] == n_all and cached[1] == last:
        return n_all, dict(cached[3])
    if cached and cached[0] < n_all:
        row = conn.execute(f"SELECT COUNT(*) AS n, {cols} {base} AND finished > ?", (cached[1],)).fetchone()
        if cached[2] + (row["n"] or 0) == n_all:
            sums = {k: cached[3][k] + float(row[k] or 0.0) for k in keys}
            with _STAGE_LOCK:
                _STAGE_CACHE[ref.key] = (n_all, last, n_all, sums)
            return n_all, dict(sums)
    row = conn.execute(f"SELECT COUNT(*) AS n, {cols} {base}").fetchone()
    sums = {k: float(row[k] or 0.0) for k in keys}
    with _STAGE_LOCK:
        _STAGE_CACHE[ref.key] = (row["n"], last, row["n"], sums)
    return row["n"], dict(sums)


def _money(stages: dict[str, float], table: dict | None) -> dict[str, Any] | None:
    if not table:
        return None
    from kosmos_env.campaign.cost import PriceTable

    try:
        prices = PriceTable.from_dict(table)
    except ValueError as exc:
        return {"error": f"price table: {exc}"}
    per_stage = {k: stages[k] * prices.price_per_second(k) for k in (*STAGES, "overhead")}
    total = sum(per_stage.values())
    return {
        "currency": prices.currency,
        "per_stage": per_stage,
        "total": total,
        "judge": per_stage["judge"],
        "judge_share": per_stage["judge"] / total if total > 0 else None,
    }


def judge_name(spec: dict) -> str:
    """``label [identity]`` of a judge spec: how the console names the judge of a success number."""
    from kosmos_env.campaign import judgments

    return f"{judgments.judge_label(spec)} [{judgments.judge_identity(spec)}]"


def stored_judges(ref: CampaignRef) -> list[dict[str, Any]]:
    """Judges other than the campaign's own with verdicts in its ledger (``kosmos-env judge``)."""
    from kosmos_env.campaign import judgments
    from kosmos_env.campaign.readonly import ReadOnlyLedger

    try:
        with ReadOnlyLedger(ref.ledger_path) as ledger:
            return judgments.judges(ledger)
    except (OSError, sqlite3.Error):
        return []


def ranking_so_far(s: Summary) -> list[dict[str, Any]]:
    """Policies best first (rate, then Wilson lower bound, then campaign order), with intervals."""
    rates = s.success_so_far()
    pos = {p: i for i, p in enumerate(s.policies)}

    def key(p):
        r = rates[p]
        return (r["rate"] is None, -(r["rate"] or 0.0), -(r["wilson"][0] if r["wilson"] else 0.0), pos[p])

    return [{"policy": p, **rates[p]} for p in sorted(rates, key=key)]


# ----------------------------------------------------------------------------- episodes

EPISODE_COLUMNS = (
    "ord",
    "episode_id",
    "policy",
    "task",
    "seed",
    "repeat",
    "status",
    "outcome",
    "score",
    "steps",
    "attempts",
    "finished",
)


def list_episodes(
    ref: CampaignRef,
    *,
    policy: str | None = None,
    task: str | None = None,
    seed: int | None = None,
    outcome: str | None = None,
    offset: int = 0,
    limit: int = 100,
) -> tuple[list[dict], int]:
    """One page of episodes matching the filters (claim order), and how many match in all."""
    where, args = [], []
    for col, val in (("policy", policy), ("task", task), ("seed", seed)):
        if val is not None and val != "":
            where.append(f"{col} = ?")
            args.append(val)
    if outcome:
        if outcome in QUEUE_STATES[:2]:
            where.append("status = ?")
        else:
            where.append("outcome = ?")
        args.append(outcome)
    clause = (" WHERE " + " AND ".join(where)) if where else ""
    conn = connect_readonly(ref.ledger_path)
    try:
        total = conn.execute("SELECT COUNT(*) FROM episodes" + clause, args).fetchone()[0]
        rows = conn.execute(
            f"SELECT {', '.join(EPISODE_COLUMNS)} FROM episodes{clause} ORDER BY ord LIMIT ? OFFSET ?",
            (*args, int(limit), int(offset)),
        ).fetchall()
        return [dict(r) for r in rows], total
    finally:
        conn.close()


def read_episode(ref: CampaignRef, ord_: int) -> dict[str, Any] | None:
    """One episode (JSON fields decoded) with its attempts, its policy's hash and artifact rows."""
    conn = connect_readonly(ref.ledger_path)
    try:
        row = conn.execute("SELECT * FROM episodes WHERE ord = ?", (int(ord_),)).fetchone()
        if row is None:
            return None
        ep = dict(row)
        for k in ("judgment", "gate", "ground_truth", "timings", "provenance"):
            try:
                ep[k] = json.loads(ep[k]) if ep.get(k) is not None else None  # older ledgers lack provenance
            except json.JSONDecodeError:
                ep[k] = {"unreadable": ep[k]}
        ep["attempt_rows"] = [
            dict(r)
            for r in conn.execute(
                "SELECT attempt, worker, started, finished, status, error FROM attempts WHERE episode_id = ? ORDER BY id",
                (ep["episode_id"],),
            )
        ]
        pol = conn.execute("SELECT * FROM policies WHERE label = ?", (ep["policy"],)).fetchone()
        ep["policy_row"] = dict(pol) if pol else None
        arts = {}
        for kind in ("video", "actions", "log"):
            rel = ep.get(kind)
            if rel:
                a = conn.execute("SELECT sha256, size, kind FROM artifacts WHERE relpath = ?", (rel,)).fetchone()
                arts[kind] = {
                    "relpath": rel,
                    "sha256": a["sha256"] if a else Path(rel).name.split(".")[0],
                    "size": a["size"] if a else None,
                    "in_ledger": a is not None,
                }
        ep["artifact_rows"] = arts
        meta = {r["key"]: r["value"] for r in conn.execute("SELECT key, value FROM meta")}
        ep["campaign_meta"] = {k: meta.get(k) for k in ("campaign_id", "config_hash", "spec_hash", "created")}
        ep["config"] = json.loads(meta["config"]) if meta.get("config") else {}
        return ep
    finally:
        conn.close()


def artifact_relpath(ref: CampaignRef, sha256: str) -> tuple[str, str] | None:
    """(relpath, kind) of the artifact with content hash ``sha256`` in this campaign's ledger."""
    conn = connect_readonly(ref.ledger_path)
    try:
        row = conn.execute("SELECT relpath, kind FROM artifacts WHERE sha256 = ? LIMIT 1", (sha256,)).fetchone()
        return None if row is None else (row["relpath"], row["kind"])
    finally:
        conn.close()


def _filter_clause(
    policy: str | None = None, task: str | None = None, seed: int | None = None, outcome: str | None = None
) -> tuple[list[str], list[Any]]:
    where, args = [], []
    for col, val in (("policy", policy), ("task", task), ("seed", seed)):
        if val is not None and val != "":
            where.append(f"{col} = ?")
            args.append(val)
    if outcome:
        where.append("status = ?" if outcome in QUEUE_STATES[:2] else "outcome = ?")
        args.append(outcome)
    return where, args


def neighbours(ref: CampaignRef, ord_: int, **filters: Any) -> dict[str, int | None]:
    """The previous and next episode among those matching ``filters`` (the episode browser's
    order, by claim order), and the next *failure* after this one under the same filters
    (outcome filter aside), wrapping to the first failure when none comes later."""
    where, args = _filter_clause(**filters)
    base = " AND ".join(where) if where else "1"
    f_where, f_args = _filter_clause(**{**filters, "outcome": "failure"})
    conn = connect_readonly(ref.ledger_path)
    try:
        prev = conn.execute(f"SELECT MAX(ord) FROM episodes WHERE {base} AND ord < ?", (*args, ord_)).fetchone()[0]
        nxt = conn.execute(f"SELECT MIN(ord) FROM episodes WHERE {base} AND ord > ?", (*args, ord_)).fetchone()[0]
        fb = " AND ".join(f_where)
        fail = conn.execute(f"SELECT MIN(ord) FROM episodes WHERE {fb} AND ord > ?", (*f_args, ord_)).fetchone()[0]
        wrapped = False
        if fail is None:
            fail = conn.execute(f"SELECT MIN(ord) FROM episodes WHERE {fb} AND ord < ?", (*f_args, ord_)).fetchone()[0]
            wrapped = fail is not None
        return {"prev": prev, "next": nxt, "next_failure": fail, "failure_wrapped": wrapped}
    finally:
        conn.close()


def episode_judgments(ref: CampaignRef, episode_id: str) -> list[dict[str, Any]]:
    """Every stored verdict of other judges (``kosmos-env judge``) on one episode, oldest judge first."""
    conn = connect_readonly(ref.ledger_path)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'judgments'").fetchone():
            return []
        out = []
        for r in conn.execute(
            "SELECT judge_id, judge_label, judge_spec, outcome, score, judgment, seconds, created "
            "FROM judgments WHERE episode_id = ? ORDER BY created, judge_id",
            (episode_id,),
        ):
            row = dict(r)
            for k in ("judge_spec", "judgment"):
                try:
                    row[k] = json.loads(row[k]) if row[k] else {}
                except json.JSONDecodeError:
                    row[k] = {"unreadable": row[k]}
            out.append(row)
        return out
    finally:
        conn.close()


def cells(ref: CampaignRef, judge: str | None = None) -> dict[str, dict[tuple, dict[str, Any]]]:
    """policy -> (task, seed, repeat) -> {ord, outcome, success (1/0/None), score} of finished
    episodes, under the campaign's own judge (``judge`` None or "campaign") or a stored judge id."""
    conn = connect_readonly(ref.ledger_path)
    try:
        out: dict[str, dict[tuple, dict[str, Any]]] = {}
        if judge in (None, "", "campaign"):
            rows = conn.execute(
                "SELECT ord, policy, task, seed, repeat, outcome, score FROM episodes WHERE status = 'done'"
            )
        else:
            rows = conn.execute(
                "SELECT e.ord, e.policy, e.task, e.seed, e.repeat, j.outcome, j.score FROM episodes e "
                "JOIN judgments j USING (episode_id) WHERE e.status = 'done' AND j.judge_id = ?",
                (judge,),
            )
        for r in rows:
            o = r["outcome"]
            out.setdefault(r["policy"], {})[(r["task"], r["seed"], r["repeat"])] = {
                "ord": r["ord"],
                "outcome": o,
                "score": r["score"],
                "success": 1 if o == "success" else 0 if o == "failure" else None,
            }
        return out
    except sqlite3.OperationalError as exc:  # no judgments table
        raise CampaignError(f"no stored verdicts of judge {judge!r}: {exc}") from None
    finally:
        conn.close()


def run_rows(ref: CampaignRef) -> list[dict[str, Any]]:
    """The eval runs recorded in the ledger (start, end, argv), oldest first."""
    conn = connect_readonly(ref.ledger_path)
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM runs ORDER BY started")]
    finally:
        conn.close()
