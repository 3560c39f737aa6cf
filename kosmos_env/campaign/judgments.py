"""Verdicts of several judges on one campaign's rollouts, side by side in its ledger.

The campaign's own judgment stays where the run recorded it (the ``episodes`` row). Every
other judge that looks at the same stored rollouts (``kosmos-env judge RUN --judge SPEC``)
writes to an additive table of the same ledger database::

    judgments(episode_id, judge_id, judge_label, judge_spec, outcome, success, score,
              judgment, seconds, owner, created)   PRIMARY KEY (episode_id, judge_id)

``judge_id`` is the judge's identity: a hash of its spec (type and every setting, see
:func:`judge_identity`), so two judges differing in any setting (model, prompt, k, seed) are
two columns, and the same judge run twice is one. Rows are inserted with
``INSERT OR IGNORE`` inside ``BEGIN IMMEDIATE`` transactions: an episode is judged exactly
once per judge however often a killed re-judging run is restarted, and a second process
judging the same rollouts cannot add a second verdict.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable, Mapping

from kosmos_env.campaign.ledger import Ledger
from kosmos_env.hashing import canonical_hash, canonical_json

TABLE = "judgments"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    episode_id TEXT NOT NULL,
    judge_id TEXT NOT NULL,
    judge_label TEXT NOT NULL,
    judge_spec TEXT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('success', 'failure', 'abstained')),
    success INTEGER, score REAL, judgment TEXT NOT NULL, seconds REAL, owner TEXT, created REAL,
    PRIMARY KEY (episode_id, judge_id)
);
"""
#: name under which the campaign's own judge is addressed (``compare --judges RUN campaign B``)
CAMPAIGN_JUDGE = "campaign"


def judge_identity(spec: Mapping[str, Any]) -> str:
    """A judge's id: the first 16 hex digits of the sha256 of its canonical spec."""
    return canonical_hash(dict(spec))[:16]


def judge_label(spec: Mapping[str, Any]) -> str:
    """A short human name: the type, plus the model id where there is one."""
    label = str(spec.get("type", "?"))
    model = spec.get("model_id") or spec.get("model")
    return f"{label}:{model}" if isinstance(model, str) else label


def ensure_table(ledger: Ledger) -> None:
    with ledger.transaction() as conn:
        conn.execute(_SCHEMA)  # one statement: executescript would commit the open transaction


def has_table(ledger: Ledger) -> bool:
    row = ledger.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)).fetchone()
    return row is not None


def judged_episode_ids(ledger: Ledger, judge_id: str) -> set[str]:
    if not has_table(ledger):
        return set()
    return {r[0] for r in ledger.conn.execute(f"SELECT episode_id FROM {TABLE} WHERE judge_id = ?", (judge_id,))}


def record(
    ledger: Ledger,
    judge_id: str,
    spec: Mapping[str, Any],
    owner: str,
    verdicts: Iterable[tuple[str, Mapping[str, Any]]],
) -> int:
    """Insert (episode_id, judgment dict) verdicts of one judge; returns how many were new."""
    spec_json, label = canonical_json(dict(spec)), judge_label(spec)
    now = time.time()
    added = 0
    with ledger.transaction() as conn:
        for episode_id, judgment in verdicts:
            success = judgment.get("success")
            outcome = "abstained" if success is None else ("success" if success else "failure")
            cur = conn.execute(
                f"INSERT OR IGNORE INTO {TABLE} (episode_id, judge_id, judge_label, judge_spec, outcome, success, "
                "score, judgment, seconds, owner, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    episode_id,
                    judge_id,
                    label,
                    spec_json,
                    outcome,
                    None if success is None else int(bool(success)),
                    float(judgment.get("score", 0.0)),
                    json.dumps(dict(judgment), sort_keys=True),
                    float(judgment.get("seconds", 0.0)),
                    owner,
                    now,
                ),
            )
            added += cur.rowcount
    return added


def judges(ledger: Ledger) -> list[dict[str, Any]]:
    """Every judge with verdicts in the table: id, label, spec and how many episodes it judged."""
    if not has_table(ledger):
        return []
    rows = ledger.conn.execute(
        f"SELECT judge_id, judge_label, judge_spec, COUNT(*) AS n FROM {TABLE} GROUP BY judge_id ORDER BY MIN(created)"
    )
    return [{"judge_id": r[0], "label": r[1], "spec": json.loads(r[2]), "episodes": r[3]} for r in rows]


def verdicts(ledger: Ledger, judge: str) -> dict[str, dict[str, Any]]:
    """episode_id -> {outcome, success, score} of one judge.

    ``judge`` is :data:`CAMPAIGN_JUDGE` (the campaign's own verdicts, judged episodes only), a
    judge id, a unique prefix of one, or a unique label.
    """
    if judge == CAMPAIGN_JUDGE:
        return {
            r["episode_id"]: {"outcome": r["outcome"], "success": r["success"], "score": r["score"]}
            for r in ledger.episodes("done")
            if r["outcome"] in ("success", "failure", "abstained")
        }
    judge_id = resolve(ledger, judge)
    rows = ledger.conn.execute(
        f"SELECT episode_id, outcome, success, score FROM {TABLE} WHERE judge_id = ?", (judge_id,)
    )
    return {r[0]: {"outcome": r[1], "success": None if r[2] is None else bool(r[2]), "score": r[3]} for r in rows}


def resolve(ledger: Ledger, judge: str) -> str:
    """The judge id named by an id, id prefix or label; a clear error when none or several match."""
    known = judges(ledger)
    matches = [j for j in known if j["judge_id"].startswith(judge)] or [j for j in known if j["label"] == judge]
    if len(matches) == 1:
        return matches[0]["judge_id"]
    names = ", ".join(f"{j['judge_id']} ({j['label']})" for j in known) or "none yet"
    if not matches:
        raise ValueError(
            f"no judge {judge!r} in this campaign's ledger; judges: {CAMPAIGN_JUDGE} (the campaign's own), {names}"
        )
    raise ValueError(f"{judge!r} names several judges ({names}): give more of the judge id")


def _load_key(judge_id: str) -> str:
    return f"judge_load_seconds:{judge_id}"


def record_load(ledger: Ledger, judge_id: str, seconds: float) -> None:
    """Add one build of judge ``judge_id`` (its model load, in seconds) to the ledger's meta, so
    cost reports of this judge's numbers count its loads apart from its per-rollout seconds."""
    with ledger.transaction() as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (_load_key(judge_id),)).fetchone()
        loads = json.loads(row[0]) if row else []
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            (_load_key(judge_id), json.dumps(loads + [round(float(seconds), 6)])),
        )


def load_seconds(ledger: Ledger, judge_id: str) -> list[float]:
    """Seconds of every recorded build of judge ``judge_id`` by ``kosmos-env judge`` (one per run that judged)."""
    value = ledger.meta().get(_load_key(judge_id))
    return [float(x) for x in json.loads(value)] if value else []


def check(ledger: Ledger) -> list[str]:
    """Problems in the table: a row whose judge id is not its stored spec's hash, an unknown episode,
    or a verdict (outcome, success, score columns: what ``verdicts`` and ``compare --judges`` read)
    that its own stored judgment contradicts."""
    if not has_table(ledger):
        return []
    problems = []
    episodes = {r[0] for r in ledger.conn.execute("SELECT episode_id FROM episodes")}
    rows = ledger.conn.execute(
        f"SELECT episode_id, judge_id, judge_spec, outcome, success, score, judgment FROM {TABLE}"
    )
    for episode_id, judge_id, spec_json, outcome, success, score, judgment_json in rows:
        if judge_identity(json.loads(spec_json)) != judge_id:
            problems.append(
                f"judgment of {episode_id} is filed under judge {judge_id}, which is not its spec's identity"
            )
        if episode_id not in episodes:
            problems.append(f"judgment by {judge_id} names episode {episode_id}, which the campaign never planned")
        problem = _verdict_problem(outcome, success, score, judgment_json)
        if problem:
            problems.append(f"judgment of {episode_id} by judge {judge_id}: {problem}")
    return problems


def _verdict_problem(outcome: str, success: int | None, score: float | None, judgment_json: str) -> str | None:
    """Where a row's verdict columns disagree with its stored judgment (as :func:`record` writes them)."""
    try:
        judgment = json.loads(judgment_json)
    except (TypeError, json.JSONDecodeError):
        return "its stored judgment is not JSON"
    if not isinstance(judgment, dict):
        return "its stored judgment is not an object"
    verdict = judgment.get("success")
    want = "abstained" if verdict is None else ("success" if verdict else "failure")
    if outcome != want or success != (None if verdict is None else int(bool(verdict))):
        return f"outcome {outcome} (success = {success!r}) contradicts its stored judgment (success = {verdict!r})"
    want_score = float(judgment.get("score", 0.0))
    if score is None or abs(float(score) - want_score) > 1e-9:
        return f"score {score!r} differs from its stored judgment's score {want_score!r}"
    return None
