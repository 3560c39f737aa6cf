"""The leaderboard: entries the board earned by running the policy, and self-reported ones apart.

Two standings, never ranked together (a board is one standing, env id, spec hash and judge):

* **Verified by re-run** (:func:`run_leaderboard`, ``kosmos-env leaderboard run``): the submission
  names a runnable policy (:mod:`kosmos_env.publish.board`); the board stages it, draws challenge
  seeds from its own secret after the submission arrives, runs its own campaign and lists the
  numbers of its own episodes. The policy's identity is what the board hashed (or, for a remote
  endpoint, what its server states), never the submitter's label.
* **Self-reported** (:func:`build_leaderboard`, ``kosmos-env leaderboard build``, and results that
  came without a policy the board could run): a results bundle is checked as before (every file's
  sha256, the spec hash, the design, every aggregate recomputed:
  :func:`~kosmos_env.publish.validate.verify_submission`) and its outcomes must re-derive from its
  artifacts (:func:`~kosmos_env.publish.validate.rederive_submission`: the deterministic judge
  re-run on every episode, a sample of simulator episodes replayed bit for bit). That shows the
  evidence is self-consistent; it cannot show which policy produced it, so these entries say the
  policy's identity is the submitter's claim. The replay sample is drawn with a salt the submitter
  cannot compute (a seed the build draws, or the board's secret), so padding a file cannot steer it.

Each entry says what was **re-run** (by this board), what was **re-derived** (from stored evidence)
and what was **taken on trust**.

**Episodes count once.** An entry pools every episode of one policy on one board: re-run entries by
the identity the board established, self-reported entries by the identity the results state. An
episode's identity is (env id, spec hash, judge, policy identity, task, env seed): the same
policy on the same scene under the same judge is the same episode, whoever submitted it and
however often, so a resubmission that shares episodes with an earlier one adds only its new ones.
Self-reported evidence is also matched by content (the sha256 of its actions and robot log), so
the same evidence filed under another policy counts once, for the first. A submission whose
design hash (env, spec hash, judge, policies, tasks, seeds, repeats) or whose every episode's
evidence was already accepted is refused as a duplicate.

Within a board, entries are ranked by success rate (successes / decided episodes), then by the
lower Wilson 95% bound, then by name. Neighbours are marked *not separable* when the 95% interval
of their difference contains zero: Newcombe's hybrid score interval (method 10 of Newcombe 1998)
from the two Wilson intervals, treating the two policies as independent (conservative for the
positively correlated policies of one paired campaign: it may call a pair inseparable that a
paired test would separate, never the reverse).

:func:`write_leaderboard` writes ``leaderboard.json`` and a self-contained ``index.html``
(:mod:`kosmos_env.publish.page`).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

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
LEADERBOARD_SCHEMA_VERSION = 2
#: the two standings an entry can have; boards of one never hold entries of the other
VERIFIED, SELF_REPORTED = "verified_by_rerun", "self_reported"
STATS_KEYS = (
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
#: what every self-reported entry takes on trust, whatever its evidence re-derived
IDENTITY_CLAIMED = (
    "which policy produced the evidence: its label and content hash are the submitter's claim (this board never ran it)"
)


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


def episode_identity(board_key: Sequence[str], pool_key: str, row: dict[str, Any]) -> str:
    """sha256 of what makes two episodes the same episode: the board (env id, spec hash, judge hash),
    the policy's identity, the task and the seed the env and policy were reset with."""
    env_id, spec_hash, judge_hash = board_key
    return canonical_hash(
        {
            "env_id": env_id,
            "spec_hash": spec_hash,
            "judge": judge_hash,
            "policy": pool_key,
            "task": row.get("task"),
            "env_seed": row.get("env_seed"),
        }
    )


def _evidence_hash(sub: VerifiedSubmission, row: dict[str, Any]) -> str | None:
    """The episode's evidence by content (as :func:`episode_content_hashes` hashes it), or None."""
    listed = sub.manifest["files"]
    arts = row.get("artifacts") or {}
    if row.get("outcome") == "error" or arts.get("actions") not in listed:
        return None
    return canonical_hash(
        {
            "env_id": sub.env_id,
            "spec_hash": sub.spec_hash,
            "actions": listed[arts["actions"]],
            "log": listed.get(arts.get("log")),
        }
    )


# ----------------------------------------------------------------------------- pooled entries


@dataclass
class PoolItem:
    """One policy of one checked bundle, to be pooled into its entry: the bundle, the policy's label
    in it, its identity (``pool_key``) and name on the page, and what the entry says about it."""

    sub: VerifiedSubmission
    label: str
    pool_key: str
    display: str
    policy: dict[str, Any]
    checks: dict[str, list[str]]
    extra: dict[str, Any] = field(default_factory=dict)


def _stats(outcomes: Sequence[str]) -> dict[str, Any]:
    from kosmos_env.campaign.bundle import summarize_counts

    s = summarize_counts(list(outcomes))
    return {k: s[k] for k in STATS_KEYS}


def _merge_checks(items: Sequence[PoolItem]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"re_run": [], "re_derived": [], "on_trust": []}
    for item in items:
        for key in out:
            for line in item.checks.get(key, []):
                if line not in out[key]:
                    out[key].append(line)
    return out


def pooled_boards(items: Sequence[PoolItem], standing: str, *, by_evidence: bool) -> list[dict[str, Any]]:
    """Boards of ``standing`` from ``items``: one board per (env id, spec hash, judge), one entry per
    policy identity, every episode counted once (:func:`episode_identity`; with ``by_evidence`` also
    once per evidence content, so evidence filed twice counts for the first item that filed it)."""
    seen: set[str] = set()
    groups: dict[tuple, dict[str, list[tuple[PoolItem, list[dict]]]]] = {}
    dropped: dict[tuple, int] = {}
    for item in items:
        kept = []
        for row in item.sub.rows:
            if row.get("policy") != item.label:
                continue
            keys = [episode_identity(item.sub.board_key, item.pool_key, row)]
            evidence = _evidence_hash(item.sub, row) if by_evidence else None
            if evidence is not None:
                keys.append("evidence:" + evidence)
            if any(k in seen for k in keys):
                dropped[(item.sub.board_key, item.pool_key)] = dropped.get((item.sub.board_key, item.pool_key), 0) + 1
                continue
            seen.update(keys)
            kept.append(row)
        groups.setdefault(item.sub.board_key, {}).setdefault(item.pool_key, []).append((item, kept))
    boards = []
    for board_key, entries_by_key in groups.items():
        entries = []
        subs: list[VerifiedSubmission] = []
        for pool_key, parts in entries_by_key.items():
            entry = _pooled_entry(parts, standing, dropped.get((board_key, pool_key), 0))
            if entry is not None:
                entries.append(entry)
            subs += [item.sub for item, _ in parts if item.sub not in subs]
        if not entries:
            continue
        first = subs[0]
        env_id, spec_hash, judge_hash = board_key
        notes = []
        if len({tuple(sorted(s.campaign["tasks"])) for s in subs}) > 1:
            notes.append("submissions on this board cover different task sets; compare per-task rates too")
        board = {
            "standing": standing,
            "env_id": env_id,
            "spec_hash": spec_hash,
            "official": first.official,
            "registered_spec_hash": first.registered_spec_hash,
            "judge": first.campaign["judge"],
            "judge_hash": judge_hash,
            "spec_overrides": first.campaign.get("spec_overrides") or {},
            "campaigns": [s.campaign_id for s in subs],
            "notes": notes,
            "rederivation": None,
            "entries": rank_entries(entries),
        }
        if standing == SELF_REPORTED:
            board["rederivation"] = {
                "rederived": sorted({x for s in subs for x in (s.rederivation or {}).get("rederived", [])}),
                "on_trust": sorted({x for s in subs for x in (s.rederivation or {}).get("on_trust", [])}),
                "replayed": sum((s.rederivation or {}).get("replayed", 0) for s in subs),
            }
        boards.append(board)
    boards.sort(key=lambda b: (not b["official"], b["env_id"], b["spec_hash"], b["judge_hash"]))
    return boards


def _pooled_entry(parts: list[tuple[PoolItem, list[dict]]], standing: str, dropped: int) -> dict[str, Any] | None:
    rows = [r for _, kept in parts for r in kept]
    items = [item for item, _ in parts]
    first = items[0]
    tasks: list[str] = []
    for item in items:
        tasks += [t for t in item.sub.campaign["tasks"] if t not in tasks]
    labels = list(dict.fromkeys(item.extra.get("submitted_as") or item.label for item in items))
    policy = first.policy
    entry = {
        **judge_cost(first.sub),
        "standing": standing,
        "policy": first.display,
        "policy_name": policy.get("name"),
        "kwargs": policy.get("kwargs") or {},
        "content_hash": policy.get("content_hash"),
        "hub_model_id": policy.get("hub_model_id"),
        "pool_key": first.pool_key,
        "submitted_as": labels,
        "campaign_id": first.sub.campaign_id,
        "campaigns": list(dict.fromkeys(item.sub.campaign_id for item in items)),
        "submission": first.extra.get("submission") or first.sub.root.name or str(first.sub.root),
        "submissions": list(dict.fromkeys(item.extra.get("submission") or str(item.sub.root) for item in items)),
        **_stats([r["outcome"] for r in rows]),
        "counted_once": dropped,
        "tasks": tasks,
        "seeds": len({r.get("seed") for r in rows}),
        "episode_seeds": sorted({int(r["env_seed"]) for r in rows if r.get("env_seed") is not None}),
        "repeats": max(int(item.sub.campaign["repeats"]) for item in items),
        "per_task": {
            t: {
                k: v
                for k, v in _stats([r["outcome"] for r in rows if r.get("task") == t]).items()
                if k in ("n", "successes", "failures", "success_rate", "wilson_95")
            }
            for t in tasks
        },
        "checks": _merge_checks(items),
    }
    for item in items:  # per-kind details (identity, arrivals, claims) from the items that made it
        for key, value in item.extra.items():
            if key in ("submitted_as", "submission"):
                continue
            if isinstance(value, list):
                entry.setdefault(key, [])
                entry[key] += [v for v in value if v not in entry[key]]
            else:
                entry.setdefault(key, value)
    if dropped:
        entry["checks"]["re_derived"].append(
            f"{dropped} episode(s) already counted from an earlier submission (same policy, task and seed, or the "
            "same evidence): counted once"
        )
    if not rows:
        return None
    return entry


# ----------------------------------------------------------------------------- self-reported results


def check_self_reported(
    submissions: Sequence[str | os.PathLike],
    *,
    allow_overrides: bool,
    replay_sample: int | str,
    replay_seed: int,
    salt_for: Callable[[VerifiedSubmission], str],
    progress: bool = False,
) -> tuple[list[VerifiedSubmission], list[dict[str, Any]]]:
    """Verify and re-derive each results bundle; (accepted, rejected). Duplicates by design or by
    every episode's evidence are refused; partial overlaps are accepted (pooling counts them once)."""
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
            sub.rederivation = rederive_submission(
                sub, replay_sample=replay_sample, replay_seed=replay_seed, sample_salt=salt_for(sub)
            )
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
            sub.notes.append(
                f"{n} of its {len(episodes)} judged episodes also appear in {', '.join(shared)}: counted once"
            )
        seen[design] = str(path)
        for h in episodes:
            seen_episodes.setdefault(h, str(path))
        accepted.append(sub)
    return accepted, rejected


def self_reported_items(subs: Sequence[VerifiedSubmission], why: dict[int, str] | None = None) -> list[PoolItem]:
    """One pool item per policy of each accepted bundle, identified by what its results state.
    ``why``: id(sub) -> a line saying why it was not re-run (a runnable submission the board refused)."""
    items = []
    for sub in subs:
        red = sub.rederivation or {}
        on_trust = [IDENTITY_CLAIMED, *red.get("on_trust", [])]
        if why and id(sub) in why:
            on_trust.insert(0, why[id(sub)])
        for policy in sub.campaign["policies"]:
            stated = canonical_json(_policy_identity(policy), spaced=True, allow_nan=True)
            items.append(
                PoolItem(
                    sub=sub,
                    label=policy["label"],
                    pool_key="stated:" + stated,
                    display=policy["label"],
                    policy=policy,
                    checks={
                        "re_run": [],
                        "re_derived": [f"{x} (campaign {sub.campaign_id})" for x in red.get("rederived", [])],
                        "on_trust": on_trust,
                    },
                    extra={"submission": sub.root.name or str(sub.root)},
                )
            )
    return items


def _method(replay_sample: int | str, replay_seed: int | None, salt: str) -> dict[str, Any]:
    return {
        "success_rate": "successes / (successes + failures), recomputed from per-episode rows",
        "interval": "Wilson score 95%",
        "worst_case": "95% bounds counting discarded/abstained/errored episodes as failures, then as successes",
        "separable": "95% Newcombe hybrid score interval of the difference to the next entry excludes 0 "
        "(independent samples; conservative for paired campaigns)",
        "grouping": "one board per (standing, env id, spec hash, judge); official = registered spec and judge",
        "standing": "verified_by_rerun: the board ran the policy on challenge seeds it drew after the submission "
        "arrived, and lists its own episodes; self_reported: results checked against their own evidence, "
        "listed apart and never ranked with re-run entries",
        "rederivation": "self-reported results are listed only when their outcomes re-derive from their "
        "artifacts: the campaign's deterministic judge re-run on every episode, and a sample of simulator "
        "episodes replayed from their stored actions bit for bit",
        "replay_sample": replay_sample,
        "replay_seed": replay_seed,
        "replay_salt": salt,
        "episodes": "each episode counted once per board: identity = (env id, spec hash, judge, policy identity, "
        "task, env seed); self-reported evidence also by the sha256 of its actions and robot log",
        "duplicates": "by design hash and by the sha256 of each episode's actions and robot log, never by stated ids",
    }


def _data(
    boards: list[dict[str, Any]],
    accepted: Sequence[VerifiedSubmission],
    rejected: list[dict[str, Any]],
    method: dict[str, Any],
    board_info: dict[str, Any] | None = None,
    runs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    from kosmos_env import __version__

    boards = sorted(boards, key=lambda b: b["standing"] != VERIFIED)  # verified first, each group in its order
    return {
        "schema": LEADERBOARD_SCHEMA,
        "schema_version": LEADERBOARD_SCHEMA_VERSION,
        "package_version": __version__,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "method": method,
        "board": board_info,
        "boards": boards,
        "runs": runs or [],
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


def build_leaderboard(
    submissions: Sequence[str | os.PathLike],
    *,
    allow_overrides: bool = False,
    progress: bool = False,
    replay_sample: int | str = DEFAULT_REPLAY_SAMPLE,
    replay_seed: int = 0,
) -> dict[str, Any]:
    """A leaderboard of results bundles alone: every entry is **self-reported** (nothing is re-run;
    see :func:`run_leaderboard`). Each bundle is verified and re-derived; ``replay_sample`` simulator
    episodes per bundle (a number or ``"all"``) are replayed, drawn with ``replay_seed`` alone, never
    with anything the submission's bytes decide. A seed a forger knows tells them which episodes
    will be replayed: ``kosmos-env leaderboard build`` draws a fresh one per build unless given one
    (the library keeps 0 by default, so a caller's builds repeat)."""
    accepted, rejected = check_self_reported(
        submissions,
        allow_overrides=allow_overrides,
        replay_sample=replay_sample,
        replay_seed=int(replay_seed),
        salt_for=lambda sub: "",
        progress=progress,
    )
    boards = pooled_boards(self_reported_items(accepted), SELF_REPORTED, by_evidence=True)
    salt = "none: the sample is drawn with the replay seed alone"
    return _data(boards, accepted, rejected, _method(replay_sample, int(replay_seed), salt))


# ----------------------------------------------------------------------------- re-run by the board


def run_leaderboard(
    submissions: Sequence[str | os.PathLike],
    board_dir: str | os.PathLike,
    settings: Any = None,
    *,
    hub_mirror: str | os.PathLike | None = None,
    allow_remote: bool = False,
    allow_overrides: bool = False,
    replay_sample: int | str = DEFAULT_REPLAY_SAMPLE,
    progress: bool = False,
) -> dict[str, Any]:
    """Evaluate every runnable submission on the board's challenge seeds and build the leaderboard.

    A folder with ``submission.json`` is staged, given its arrival and challenge seeds, and run by
    the board (:func:`kosmos_env.publish.board.evaluate`); it is listed *verified by re-run* with
    the board's numbers. Its own results, if any, are checked and shown beside them as a claim,
    never ranked. A folder without ``submission.json`` is a results bundle: *self-reported*, listed
    apart. A runnable submission the board refuses is listed as rejected, and its results, if any,
    as self-reported (with the reason it was not re-run). ``settings``: a
    :class:`~kosmos_env.publish.board.BoardSettings`."""
    from kosmos_env.publish import board as boardmod

    settings = settings or boardmod.BoardSettings()
    board = boardmod.Board(board_dir)
    mirror = None if hub_mirror is None else Path(hub_mirror)
    runs: list[boardmod.BoardRun] = []
    results_only: list[Path] = []
    not_rerun: dict[str, str] = {}  # results folder -> why its policy was not re-run
    rejected: list[dict[str, Any]] = []
    for path in submissions:
        root = Path(path)
        if not (root / boardmod.SUBMISSION_FILE).exists() and not root.is_symlink():
            results_only.append(root)
            continue
        sub = None
        try:
            sub = boardmod.load_submission(root)
            identity = boardmod.stage_policy(board, sub, hub_mirror=mirror, allow_remote=allow_remote)
            runs.append(boardmod.evaluate(board, sub, identity, settings, progress=progress))
        except SubmissionRejected as exc:
            rejected.append({"submission": str(root), "check": exc.check, "reason": f"{exc.reason} (not re-run)"})
            if sub is not None and sub.results is not None:
                results_only.append(sub.results)
                not_rerun[str(sub.results)] = f"its policy was not re-run: {exc.check}: {exc.reason}"

    salt = lambda sub: board.replay_salt(sub.results_sha256)  # noqa: E731 - secret-keyed: unpredictable to a forger
    accepted, refused = check_self_reported(
        results_only,
        allow_overrides=allow_overrides,
        replay_sample=replay_sample,
        replay_seed=0,
        salt_for=salt,
        progress=progress,
    )
    rejected += refused
    why = {id(s): not_rerun[str(s.root)] for s in accepted if str(s.root) in not_rerun}
    self_boards = pooled_boards(self_reported_items(accepted, why), SELF_REPORTED, by_evidence=True)

    verified_items = []
    run_records = []
    for run in runs:
        claims = _claims(run, allow_overrides, replay_sample, salt)
        item = _verified_item(run, claims)
        verified_items.append(item)
        run_records.append(
            {
                "submission": str(run.sub.root),
                "submission_sha256": run.sub.digest,
                "label": run.sub.label,
                "arrival": run.arrival["number"],
                "arrived": run.arrival["arrived"],
                "challenge_seeds": run.arrival["challenge_seeds"],
                "identity": run.identity.to_dict(),
                "campaign_id": item.sub.campaign_id,
                "run": run.arrival["run"],
                "claims": claims,
            }
        )
    verified_boards = pooled_boards(verified_items, VERIFIED, by_evidence=False)
    from kosmos_env.utils.seed_ranges import spans_text

    board_info = {
        "secret_commitment": board.commitment,
        "challenge": "seeds of arrival k: HMAC-SHA256(board secret, 'kosmos-env/challenge:k:i'), i = 0, 1, ..., "
        f"mapped onto the evaluation seed range {spans_text('evaluation')}, skipping seeds the submission "
        "reported on; drawn when the submission arrived, recorded before its run",
        "settings": settings.key(),
    }
    method = _method(replay_sample, 0, "HMAC-SHA256 of the board's secret over the results' sha256")
    return _data(verified_boards + self_boards, accepted, rejected, method, board_info, run_records)


def _claims(run: Any, allow_overrides: bool, replay_sample: int | str, salt: Callable) -> list[dict[str, Any]]:
    """The submission's own results, checked as self-reported results are, shown beside the board's
    numbers (never ranked, never pooled)."""
    if run.sub.results is None:
        return []
    try:
        sub = verify_submission(run.sub.results, strict=True, allow_overrides=allow_overrides)
        sub.rederivation = rederive_submission(sub, replay_sample=replay_sample, sample_salt=salt(sub))
    except SubmissionRejected as exc:
        return [{"status": "refused", "check": exc.check, "reason": exc.reason}]
    return [
        {
            "status": "re-derived from its evidence",
            "policy": label,
            "n": s["n"],
            "success_rate": s["success_rate"],
            "seeds": sorted(int(x) for x in sub.campaign["seeds"]),
        }
        for label, s in sub.aggregated["per_policy"].items()
    ]


def _verified_item(run: Any, claims: list[dict[str, Any]]) -> PoolItem:
    """The board's own campaign as a pool item: checked like any bundle, identified by what the board
    staged, with what was re-run, re-derived and taken on trust."""
    from kosmos_env.campaign.rederive import world_is_simulator
    from kosmos_env.utils.seed_ranges import seeds_text

    sub = verify_submission(run.folder, strict=False, allow_overrides=True)  # the board's own bundle
    ident = run.identity
    seeds = run.arrival["challenge_seeds"]
    judge = sub.campaign["judge"].get("type")
    re_run = [
        f"run by this board on {len(seeds)} challenge seed(s) ({seeds_text(seeds)}) drawn from its secret after "
        f"arrival #{run.arrival['number']} ({run.arrival['arrived']}): {sub.env_id} spec {sub.spec_hash[:12]}, "
        f"judge {judge}, campaign {sub.campaign_id}"
    ]
    re_derived = [f"the policy's identity ({ident.what}), computed by the board from what it ran"]
    if ident.stated_by != "board":
        re_derived = []
    for claim in claims:
        if claim["status"] == "refused":
            re_derived.append(f"its self-reported results were refused ({claim['check']}: {claim['reason']}); not used")
        else:
            rate = "-" if claim["success_rate"] is None else f"{100 * claim['success_rate']:.1f}%"
            re_derived.append(
                f"its self-reported results for {claim['policy']} ({rate} on {claim['n']} episodes) re-derive from "
                "their evidence; shown only: the rank uses the board's episodes"
            )
    on_trust = [f"the label {run.sub.label!r}: the submitter's name for it (the identity is {ident.display})"]
    if ident.stated_by == "server":
        on_trust.append(
            f"what runs behind {ident.kwargs.get('url')}: its content hash {ident.digest[:12]} is the server's own "
            "statement, and the board cannot see the code behind an endpoint"
        )
    if not world_is_simulator(sub.campaign.get("spec") or {}):
        on_trust.append("the learned world's generation of each scene (the board ran the registered world)")
    policy = {
        "name": ident.kind,
        "kwargs": {},
        "content_hash": sub.campaign["policies"][0].get("content_hash"),
        "hub_model_id": ident.hub,
    }
    return PoolItem(
        sub=sub,
        label=run.label,
        pool_key=ident.pool_key,
        display=ident.display,
        policy=policy,
        checks={"re_run": re_run, "re_derived": re_derived, "on_trust": on_trust},
        extra={
            "submitted_as": run.sub.label,
            "submission": str(run.sub.root),
            "identity": ident.to_dict(),
            "arrivals": [run.arrival["number"]],
            "challenge_seeds": list(seeds),
            "claims": claims,
        },
    )


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
