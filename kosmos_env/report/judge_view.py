"""Which judge a campaign's success numbers come from, and a bundle seen through another judge.

A campaign's own verdicts are the ``per_episode`` rows of results.json; other judges' verdicts
on the same stored rollouts (``kosmos-env judge RUN --judge SPEC``) sit in the ledger's
``judgments`` table, keyed by the judge's identity (:mod:`kosmos_env.campaign.judgments`).
``analyze``, ``report``, ``serve`` and ``publish`` name the judge of every number as
``label [identity]`` and take ``--judge ID_OR_NAME`` to read the numbers of another stored judge:

- the campaign's own judge is ``campaign``, its identity (or a prefix of it) or its label;
- another judge is its identity, a unique prefix of it, or its unique label.

Seen through another judge, each judged episode (success, failure, abstained) takes that judge's
outcome, score and seconds (the ``judge`` stage of its timings); the campaign judge's model
loads are replaced by this judge's (each ``kosmos-env judge`` run that judged records one);
gate discards and errors stay as they are (no judge saw them); a judged episode the chosen judge
has not judged yet (re-judging still running) is left out, with a note saying how many.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from kosmos_env.campaign import judgments as table
from kosmos_env.campaign.ledger import LEDGER_NAME
from kosmos_env.report.bundle import Bundle

JUDGED = ("success", "failure", "abstained")
#: folder of a campaign that holds reports and analyses by judges other than the campaign's own
JUDGES_DIR = "judges"


def campaign_judge(bundle: Bundle) -> dict[str, Any]:
    """Name, identity and spec of the judge that judged the campaign while it ran."""
    spec = bundle.campaign.get("judge")
    spec = dict(spec) if isinstance(spec, dict) else {"type": str(spec)}
    return {
        "label": table.judge_label(spec),
        "id": table.judge_identity(spec),
        "spec": spec,
        "source": table.CAMPAIGN_JUDGE,
    }


def judge_name(info: dict[str, Any]) -> str:
    """``label [identity]``: how every report names a judge."""
    return f"{info['label']} [{info['id']}]"


def judge_output_dir(root, info: dict[str, Any]):
    """Where a report or analysis by judge ``info`` is written: the campaign folder for the
    campaign's own judge, ``judges/<judge id>/`` inside it for another (created)."""
    if info.get("source") == table.CAMPAIGN_JUDGE:
        return root
    out = root / JUDGES_DIR / info["id"]
    out.mkdir(parents=True, exist_ok=True)
    return out


def stored_judges(bundle: Bundle) -> list[dict[str, Any]]:
    """The other judges with verdicts in the campaign's ledger (none when there is no ledger)."""
    path = bundle.root / LEDGER_NAME
    if not path.is_file():
        return []
    from kosmos_env.campaign.readonly import ReadOnlyLedger

    ledger = ReadOnlyLedger(path)
    try:
        return table.judges(ledger)
    finally:
        ledger.close()


def _unknown(bundle: Bundle, name: str, others: list[dict[str, Any]], why: str) -> ValueError:
    own = campaign_judge(bundle)
    listed = [f"{table.CAMPAIGN_JUDGE} = {judge_name(own)} (the campaign's own)"]
    listed += [
        f"{j['label']} [{j['judge_id']}] ({j['episodes']} episodes)" for j in others if j["judge_id"] != own["id"]
    ]
    return ValueError(f"--judge {name!r} {why}; stored judges: {'; '.join(listed)}")


def select_judge(bundle: Bundle, name: str | None) -> tuple[Bundle, dict[str, Any]]:
    """``bundle`` with the success numbers of judge ``name`` (None: the campaign's own), and
    that judge's description ``{label, id, spec, source, episodes, ...}`` (see the module doc)."""
    own = campaign_judge(bundle)
    decided = sum(r["outcome"] in JUDGED for r in bundle.rows)
    if name is None or name == table.CAMPAIGN_JUDGE:
        return bundle, {**own, "episodes": decided}
    if not name.strip():
        raise ValueError("--judge needs a judge id, a prefix of one, a label, or 'campaign'")
    stored = stored_judges(bundle)
    # the campaign's own judge first; a stored judge with its identity is the same judge (same verdict source)
    candidates = [{"judge_id": own["id"], "label": own["label"], "own": True}]
    candidates += [j for j in stored if j["judge_id"] != own["id"]]
    matches = [j for j in candidates if j["judge_id"].startswith(name)] or [j for j in candidates if j["label"] == name]
    if not matches:
        raise _unknown(bundle, name, stored, "names no judge of this campaign")
    if len(matches) > 1:
        raise _unknown(bundle, name, stored, "names several judges: give more of the judge id")
    chosen = matches[0]
    if chosen.get("own"):
        return bundle, {**own, "episodes": decided}
    from kosmos_env.campaign.readonly import ReadOnlyLedger

    ledger = ReadOnlyLedger(bundle.root / LEDGER_NAME)
    try:
        cur = ledger.conn.execute(
            f"SELECT episode_id, outcome, success, score, judgment, seconds FROM {table.TABLE} WHERE judge_id = ?",
            (chosen["judge_id"],),
        )
        verdicts = {r[0]: r for r in cur}
        loads = table.load_seconds(ledger, chosen["judge_id"])
    finally:
        ledger.close()
    rows, missing = [], 0
    for row in bundle.rows:
        if row["outcome"] not in JUDGED:
            rows.append(row)
            continue
        v = verdicts.get(row["episode_id"])
        if v is None:
            missing += 1
            continue
        _, outcome, success, score, judgment, seconds = v
        timings = dict(row.get("timings") or {})
        if timings:
            old = timings.get("judge", 0.0)
            timings["judge"] = float(seconds or 0.0)
            if "total" in timings:
                timings["total"] = max(0.0, timings["total"] - old) + timings["judge"]
            timings.pop("load_judge", None)
            if loads:  # this judge's own builds (kosmos-env judge runs), filed with its first verdict
                timings["load_judge"] = sum(loads)
                loads = []
        rows.append(
            {
                **row,
                "outcome": outcome,
                "success": None if success is None else bool(success),
                "score": None if score is None else min(1.0, max(0.0, float(score))),
                "judge": chosen["label"],
                "judgment": json.loads(judgment),
                "timings": timings,
            }
        )
    if not any(r["outcome"] in JUDGED for r in rows):
        raise ValueError(
            f"judge {chosen['label']} [{chosen['judge_id']}] has judged none of this campaign's judged "
            f"episodes yet: run kosmos-env judge {bundle.root} --judge SPEC first"
        )
    notes = list(bundle.notes)
    if missing:
        notes.append(
            f"judge {chosen['label']} [{chosen['judge_id']}] has not judged {missing} of the campaign's "
            f"{sum(r['outcome'] in JUDGED for r in bundle.rows)} judged episodes yet; they are left out "
            f"(finish with kosmos-env judge {bundle.root} --judge SPEC)"
        )
    notes.append(
        f"success numbers come from judge {chosen['label']} [{chosen['judge_id']}], which re-judged the "
        f"stored rollouts; the campaign's own judge is {judge_name(own)}"
    )
    info = {
        "label": chosen["label"],
        "id": chosen["judge_id"],
        "spec": chosen["spec"],
        "source": "judgments",
        "episodes": len(verdicts),
        "not_yet_judged": missing,
    }
    return dataclasses.replace(bundle, rows=rows, notes=notes), info
