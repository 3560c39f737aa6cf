"""What ``kosmos-env verify`` checks in a two-stage campaign's ledger (``eval --judge-workers N``).

Kept apart from :mod:`kosmos_env.campaign.judge_stage` so that verifying a folder never imports
the code that judges (and re-judging, which verifies first, imports no cycle).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

#: rollout fields a judge worker must carry over unchanged from the staged record
_ROLLOUT_FIELDS = ("gate", "ground_truth", "steps", "video", "actions", "log")


def check_stage(
    episodes: Sequence[Mapping[str, Any]], queue: Sequence[Mapping[str, Any]], attempts: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Problems in a two-stage campaign's ledger (``kosmos-env verify`` reports them).

    Every judge-queue row names a planned episode and agrees with its status (judged exactly
    when the episode is done); each staged episode was rolled out once (since ``--retry-errors``
    last reopened it); its recorded rollout fields are the ones its rollout worker filed; its
    provenance hashes to its identity and names the same judge as every other judged episode of
    the campaign (one judge per campaign, whichever stage judged it).
    """
    from kosmos_env.hashing import canonical_json, sha256_hex

    problems: list[str] = []
    by_id = {r["episode_id"]: r for r in episodes}
    rolled: dict[str, int] = {}
    for a in sorted(attempts, key=lambda a: a["id"]):
        if a["status"] == "reopened":  # --retry-errors ran the episode again from the start
            rolled[a["episode_id"]] = 0
        elif a["status"] == "rolled-out":
            rolled[a["episode_id"]] = rolled.get(a["episode_id"], 0) + 1
    staged_ids = set()
    for q in queue:
        eid = q["episode_id"]
        staged_ids.add(eid)
        ep = by_id.get(eid)
        if ep is None:
            problems.append(f"the judge queue names episode {eid}, which the campaign never planned")
            continue
        if (q["status"] == "judged") != (ep["status"] == "done"):
            problems.append(f"{eid}: judge queue says {q['status']}, but the episode is {ep['status']}")
        if rolled.get(eid, 0) != 1:
            problems.append(f"{eid}: rolled out {rolled.get(eid, 0)} times for the judge stage (expected once)")
        if ep["status"] != "done" or ep["outcome"] == "error":
            continue
        changed = [k for k in _ROLLOUT_FIELDS if q["record"].get(k) != ep.get(k)]
        if changed:
            problems.append(f"{eid}: recorded {', '.join(changed)} differ from what its rollout worker filed")
    identities: dict[str, list[str]] = {}
    for ep in episodes:
        prov = ep.get("provenance")
        if (
            ep["status"] != "done"
            or ep.get("outcome") in ("error", "discarded")
            or not isinstance(prov, Mapping)
            or "judge" not in prov
        ):
            continue
        core = {k: prov.get(k) for k in ("spec_hash", "world", "judge")}
        if ep["episode_id"] in staged_ids and sha256_hex(canonical_json(core)) != prov.get("identity_sha256"):
            problems.append(f"{ep['episode_id']}: its provenance does not hash to its identity_sha256")
        identities.setdefault(canonical_json(prov["judge"]), []).append(ep["episode_id"])
    if staged_ids and len(identities) > 1:
        listed = "; ".join(f"{len(ids)} episodes (e.g. {ids[0]})" for ids in identities.values())
        problems.append(f"judged episodes name {len(identities)} different judges ({listed}): one campaign, one judge")
    return problems
