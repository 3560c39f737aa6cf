"""A leaderboard built only from submissions it has verified itself.

:func:`build_leaderboard` runs :func:`~kosmos_env.publish.validate.verify_submission` on every
submission folder (hashes, spec hash, design, recomputed aggregates; see that module), drops
duplicates, and groups accepted results into boards by
(env id, spec hash, judge). Official results (the registered spec and judge) and results with
overrides never share a board; with ``allow_overrides=False`` (the default) the latter are
rejected outright.

Within a board every (campaign, policy) is one entry, ranked by its recomputed success rate
(successes / decided episodes), then by the lower Wilson 95% bound, then by label. Neighbours
in the ranking are marked *not separable* when the 95% interval of their difference in success
rate contains zero. That interval is Newcombe's hybrid score interval (method 10 of Newcombe
1998), built from the two Wilson intervals and treating the two policies as independent. Two
policies of one paired campaign are positively correlated in practice, so this is
conservative: it may call a pair inseparable that a paired test would separate, never the
reverse.

:func:`write_leaderboard` writes ``leaderboard.json`` and a self-contained ``index.html``
(:mod:`kosmos_env.publish.page`).

A submission is listed only when its outcomes **re-derive** from its artifacts
(:func:`~kosmos_env.publish.validate.rederive_submission`): every episode must carry the artifacts
its outcome is drawn from (actions, robot log, frames where the judge reads them; a submission
without them is refused, saying so), the campaign's deterministic judge is re-run on them, and a
seeded sample of ``replay_sample`` simulator episodes per submission is replayed from its stored
actions and seed, bit for bit. Hashes alone prove nothing: a forger recomputes them. For generated
worlds the page says what was re-derived (the judge on the stored frames and log) and what is
taken on trust (the generation itself).

Duplicates are found by content, never by what a submission says about itself (a campaign id or
a policy content hash is just a string in results.json): a submission whose *design hash* (env,
spec hash, judge, policies, tasks, seeds, repeats) was already accepted is a duplicate, and so is
one whose every episode's evidence was already accepted (its *episode content hashes*: the env,
the spec hash and the sha256 of the bytes of its actions and robot log) — the same evidence
relabelled. A submission that shares only some episodes with another is accepted with a note
naming the overlap.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Sequence

from kosmos_env.hashing import canonical_hash, canonical_json
from kosmos_env.publish.validate import (
    DEFAULT_REPLAY_SAMPLE,
    SubmissionRejected,
    VerifiedSubmission,
    episode_content_hashes,
    rederive_submission,
    verify_submission,
)

LEADERBOARD_SCHEMA = "kosmos-env/leaderboard"
LEADERBOARD_SCHEMA_VERSION = 1


def newcombe_diff(p1: float, ci1: Sequence[float], p2: float, ci2: Sequence[float]) -> tuple[float, float]:
    """95% interval of p1 - p2 from each rate's Wilson interval (Newcombe's hybrid score method)."""
    d = p1 - p2
    lower = d - math.sqrt((p1 - ci1[0]) ** 2 + (ci2[1] - p2) ** 2)
    upper = d + math.sqrt((ci1[1] - p1) ** 2 + (p2 - ci2[0]) ** 2)
    return (max(-1.0, lower), min(1.0, upper))


def judge_cost(sub: VerifiedSubmission) -> dict[str, Any]:
    """The campaign judge's name and its share of the campaign's time and money (from the rows'
    stage timings and the campaign's price table; warm inference, and with model loads)."""
    from kosmos_env.campaign import judgments
    from kosmos_env.campaign.cost import PriceTable, cost_summary

    spec = sub.campaign.get("judge")
    spec = dict(spec) if isinstance(spec, dict) else {"type": str(spec)}
    table = sub.campaign.get("price_table")
    try:
        prices = PriceTable.from_dict(table) if table else None
    except ValueError:
        prices = None
    cost = cost_summary([r for r in sub.rows if r.get("timings")], (), prices)
    money = cost.get("money") or {}
    return {
        "judge_name": f"{judgments.judge_label(spec)} [{judgments.judge_identity(spec)}]",
        "judge_share_time": cost["judge_share_of_time"]["warm"],
        "judge_share_time_with_loads": cost["judge_share_of_time"]["with_loads"],
        "judge_share_money": (money.get("judge") or {}).get("share"),
        "judge_share_money_with_loads": (money.get("judge") or {}).get("share_with_loads"),
    }


def _entry(sub: VerifiedSubmission, policy: dict, cost: dict[str, Any] | None = None) -> dict[str, Any]:
    label = policy["label"]
    s = sub.aggregated["per_policy"][label]
    return {
        **(cost if cost is not None else judge_cost(sub)),
        "policy": label,
        "policy_name": policy.get("name"),
        "kwargs": policy.get("kwargs") or {},
        "content_hash": policy.get("content_hash"),
        "hub_model_id": policy.get("hub_model_id"),
        "campaign_id": sub.campaign_id,
        "submission": sub.root.name or str(sub.root),
        **{
            k: s[k]
            for k in (
                "n",
                "successes",
                "failures",
                "discarded",
                "abstained",
                "errors",
                "success_rate",
                "wilson_95",
                "worst_case_95",
            )
        },
        "tasks": list(sub.campaign["tasks"]),
        "seeds": len(sub.campaign["seeds"]),
        "repeats": sub.campaign["repeats"],
        "per_task": {
            t: {
                k: v
                for k, v in sub.aggregated["per_policy_task"][label][t].items()
                if k in ("n", "successes", "failures", "success_rate", "wilson_95")
            }
            for t in sub.campaign["tasks"]
        },
    }


def rank_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sort best first, number the ranks, and mark which neighbours are not separable."""

    def key(e):
        rate = e["success_rate"]
        lower = e["wilson_95"][0] if e["wilson_95"] else -1.0
        return (rate is None, -(rate or 0.0), -lower, e["policy"], e["campaign_id"])

    ranked = sorted(entries, key=key)
    for i, e in enumerate(ranked):
        e["rank"] = i + 1
        nxt = ranked[i + 1] if i + 1 < len(ranked) else None
        e["diff_95_to_next"] = None
        e["separable_from_next"] = None
        if nxt is not None and e["success_rate"] is not None and nxt["success_rate"] is not None:
            lo, hi = newcombe_diff(e["success_rate"], e["wilson_95"], nxt["success_rate"], nxt["wilson_95"])
            e["diff_95_to_next"] = [lo, hi]
            e["separable_from_next"] = bool(lo > 0 or hi < 0)
    return ranked


def _policy_identity(policy: dict) -> Any:
    return policy.get("content_hash") or [policy.get("name"), policy.get("kwargs")]


def design_hash(sub: VerifiedSubmission) -> str:
    """sha256 of what a campaign's design is, read from its content (not its stated id)."""
    c = sub.campaign
    return canonical_hash(
        {
            "env_id": c["env_id"],
            "spec_hash": c["spec_hash"],
            "judge": c["judge"],
            "policies": sorted(canonical_json(_policy_identity(p), spaced=True, allow_nan=True) for p in c["policies"]),
            "tasks": sorted(c["tasks"]),
            "seeds": sorted(c["seeds"]),
            "repeats": c["repeats"],
        }
    )


def episode_hashes(sub: VerifiedSubmission) -> set[str]:
    """One sha256 per episode with an outcome, from its evidence's content (see
    :func:`~kosmos_env.publish.validate.episode_content_hashes`)."""
    return episode_content_hashes(sub)


def build_leaderboard(
    submissions: Sequence[str | os.PathLike],
    *,
    allow_overrides: bool = False,
    progress: bool = False,
    replay_sample: int | str = DEFAULT_REPLAY_SAMPLE,
    replay_seed: int = 0,
) -> dict[str, Any]:
    """Verify every submission, re-derive its outcomes, and build the leaderboard data (what
    leaderboard.json holds). ``replay_sample`` simulator episodes per submission (a number or
    ``"all"``) are replayed, drawn with ``replay_seed`` and the submission's own content hash."""
    from kosmos_env import __version__

    accepted: list[VerifiedSubmission] = []
    rejected: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    seen_episodes: dict[str, str] = {}
    items = list(submissions)
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc="verifying submissions", unit="submission")
    for path in items:
        try:
            sub = verify_submission(path, strict=True, allow_overrides=allow_overrides)
            sub.rederivation = rederive_submission(sub, replay_sample=replay_sample, replay_seed=replay_seed)
        except SubmissionRejected as exc:
            rejected.append({"submission": str(path), "check": exc.check, "reason": exc.reason})
            continue
        design = design_hash(sub)
        if design in seen:
            rejected.append(
                {
                    "submission": str(path),
                    "check": "duplicate",
                    "reason": f"campaign {sub.campaign_id} has the same design (env, spec, policies, tasks, "
                    f"seeds, repeats, judge; hash {design[:12]}) as {seen[design]}, already "
                    "submitted; a design counts once, so add evidence with other seeds or repeats",
                }
            )
            continue
        episodes = episode_hashes(sub)
        shared = sorted({seen_episodes[h] for h in episodes if h in seen_episodes})
        if episodes and all(h in seen_episodes for h in episodes):
            rejected.append(
                {
                    "submission": str(path),
                    "check": "duplicate",
                    "reason": f"every episode of campaign {sub.campaign_id} ({len(episodes)}) was already "
                    f"submitted in {', '.join(shared)} (the same actions and robot logs, byte for "
                    "byte): the same evidence counts once",
                }
            )
            continue
        if shared:
            n = sum(1 for h in episodes if h in seen_episodes)
            sub.notes.append(f"{n} of its {len(episodes)} judged episodes also appear in {', '.join(shared)}")
        seen[design] = str(path)
        for h in episodes:
            seen_episodes.setdefault(h, str(path))
        accepted.append(sub)

    groups: dict[tuple, list[VerifiedSubmission]] = {}
    for sub in accepted:
        groups.setdefault(sub.board_key, []).append(sub)
    boards = []
    for (env_id, spec_hash, judge_hash), subs in groups.items():
        costs = {id(sub): judge_cost(sub) for sub in subs}
        entries = [_entry(sub, p, costs[id(sub)]) for sub in subs for p in sub.campaign["policies"]]
        task_sets = {tuple(sorted(sub.campaign["tasks"])) for sub in subs}
        notes = []
        if len(task_sets) > 1:
            notes.append("submissions on this board cover different task sets; compare per-task rates too")
        first = subs[0]
        rederivation = {
            "rederived": sorted({x for sub in subs for x in (sub.rederivation or {}).get("rederived", [])}),
            "on_trust": sorted({x for sub in subs for x in (sub.rederivation or {}).get("on_trust", [])}),
            "replayed": sum((sub.rederivation or {}).get("replayed", 0) for sub in subs),
        }
        boards.append(
            {
                "env_id": env_id,
                "spec_hash": spec_hash,
                "official": first.official,
                "registered_spec_hash": first.registered_spec_hash,
                "judge": first.campaign["judge"],
                "judge_hash": judge_hash,
                "spec_overrides": first.campaign.get("spec_overrides") or {},
                "campaigns": [s.campaign_id for s in subs],
                "notes": notes,
                "rederivation": rederivation,
                "entries": rank_entries(entries),
            }
        )
    boards.sort(key=lambda b: (not b["official"], b["env_id"], b["spec_hash"], b["judge_hash"]))
    return {
        "schema": LEADERBOARD_SCHEMA,
        "schema_version": LEADERBOARD_SCHEMA_VERSION,
        "package_version": __version__,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "method": {
            "success_rate": "successes / (successes + failures), recomputed from per-episode rows",
            "interval": "Wilson score 95%",
            "worst_case": "95% bounds counting discarded/abstained/errored episodes as failures, then as successes",
            "separable": "95% Newcombe hybrid score interval of the difference to the next entry excludes 0 "
            "(independent samples; conservative for paired campaigns)",
            "grouping": "one board per (env id, spec hash, judge); official = registered spec and judge",
            "rederivation": "listed only when outcomes re-derive from the submission's artifacts: the campaign's "
            "deterministic judge re-run on every episode, and a seeded sample of simulator episodes "
            "replayed from their stored actions bit for bit",
            "replay_sample": replay_sample,
            "replay_seed": replay_seed,
            "duplicates": "by the sha256 of each episode's actions and robot log, never by stated ids or hashes",
        },
        "boards": boards,
        "accepted": [
            {
                "submission": str(s.root),
                "campaign_id": s.campaign_id,
                "env_id": s.env_id,
                "spec_hash": s.spec_hash,
                "official": s.official,
                "results_sha256": s.results_sha256,
                "rederivation": s.rederivation,
                "notes": s.notes,
            }
            for s in accepted
        ],
        "rejected": rejected,
    }


def write_leaderboard(data: dict[str, Any], out: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``leaderboard.json`` and ``index.html`` into ``out``; returns both paths."""
    from kosmos_env.publish.page import render_html

    from kosmos_env.utils.fileio import writable_folder

    out = writable_folder(out, "--out")
    js = out / "leaderboard.json"
    js.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    page = out / "index.html"
    page.write_text(render_html(data), encoding="utf-8")
    return js, page
