"""Which judge a published campaign's success numbers come from, and the judge's share of the bill.

``results.json`` always holds the campaign's own verdicts: its hashes are what a leaderboard
verifies, so publishing never rewrites it. ``kosmos-env publish DIR --judge ID_OR_NAME`` chooses
another judge stored with the campaign (``kosmos-env judge DIR --judge SPEC``): the campaign card
then leads with that judge's ranking (named by label and identity), and the judge's verdicts go
into the commit as ``judgments/<judge id>.json`` (hash-bound by the published manifest), so
anyone can recompute that ranking from the published files. The card also states the time and
money per stage with the judge's share of the bill, for whichever judge it shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JUDGMENTS_SCHEMA = "kosmos-env/judgments"


@dataclass
class JudgeChoice:
    """The judge whose numbers a card leads with, the campaign's own judge, and their cost figures."""

    judge: dict[str, Any]  # {label, id, spec, source, episodes}
    own: dict[str, Any]
    cost: dict[str, Any]  # kosmos_env.report.summary.cost_breakdown of the chosen judge's view
    ranking: list[dict[str, Any]] = field(default_factory=list)  # the chosen judge's ranking (another judge only)
    verdicts_file: tuple[str, bytes] | None = None  # (relative path, bytes) to publish (another judge only)
    notes: list[str] = field(default_factory=list)

    @property
    def is_campaign_judge(self) -> bool:
        return self.judge.get("source") == "campaign"


def choose_judge(root: str | Path, judge: str | None = None) -> JudgeChoice:
    """The judge ``judge`` names in campaign folder ``root`` (None: the campaign's own); an
    unknown name is a ValueError that lists the stored judges."""
    from kosmos_env.report.bundle import load_bundle
    from kosmos_env.report.judge_view import campaign_judge, select_judge
    from kosmos_env.report.summary import cost_breakdown, per_policy, ranking

    bundle = load_bundle(root)
    view, info = select_judge(bundle, judge)
    choice = JudgeChoice(judge=info, own=campaign_judge(bundle), cost=cost_breakdown(view))
    if choice.is_campaign_judge:
        return choice
    rates = per_policy(view)
    choice.ranking = [
        {
            "policy": p,
            "n": rates[p].n,
            "decided": rates[p].decided,
            "successes": rates[p].counts["success"],
            "success_rate": rates[p].rate,
            "wilson_95": list(rates[p].wilson) if rates[p].rate is not None else None,
            "abstained": rates[p].counts["abstained"],
        }
        for p in ranking(rates)
    ]
    verdicts = [
        {
            "episode_id": r["episode_id"],
            "policy": r["policy"],
            "task": r["task"],
            "seed": r["seed"],
            "repeat": r["repeat"],
            "outcome": r["outcome"],
            "success": r["success"],
            "score": r["score"],
            "judge_seconds": (r.get("timings") or {}).get("judge"),
        }
        for r in view.rows
        if r["outcome"] in ("success", "failure", "abstained")
    ]
    doc = {
        "schema": JUDGMENTS_SCHEMA,
        "schema_version": 1,
        "campaign": bundle.campaign.get("id"),
        "judge": {k: info[k] for k in ("label", "id", "spec")},
        "campaign_judge": {k: choice.own[k] for k in ("label", "id", "spec")},
        "verdicts": verdicts,
    }
    choice.verdicts_file = (f"judgments/{info['id']}.json", (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
    choice.notes = [n for n in view.notes if n not in bundle.notes]
    return choice


def judge_name(info: dict[str, Any]) -> str:
    return f"{info['label']} [{info['id']}]"


def cost_markdown(choice: JudgeChoice) -> list[str]:
    """Card lines: warm seconds per rollout by stage, model loads apart, the judge's share of the bill."""
    from kosmos_env.report.text import cost_lines

    return [f"- {line}" for line in cost_lines(choice.cost)]


def judge_shares(choice: JudgeChoice) -> dict[str, float | None]:
    """The judge's share of the time and (with a price table) of the money, warm and with model loads."""
    c = choice.cost
    m = c.get("money") or {}
    return {
        "time": c.get("judge_share"),
        "time_with_loads": c.get("judge_share_with_loads"),
        "money": m.get("judge_share"),
        "money_with_loads": m.get("judge_share_with_loads"),
    }
