"""Recheck a campaign folder: every artifact's hash, the ledger's consistency, the bundle.

What is checked (each failure is named in :attr:`VerifyReport.problems`):

- the ledger's frozen config still hashes to its recorded config hash;
- the ledger holds exactly the planned episodes (none missing, none extra, none twice) and
  every one is done, recorded once (one successful completion per non-error episode);
- outcomes are valid and agree with ``success``; error episodes carry their error;
- each outcome agrees with the episode's own stored evidence: its judgment (verdict, score and
  judge name), its gate verdict (a discarded episode was rejected by the gate, a judged one
  was not) and, where the simulator's state judge decided, the ground truth; its step count
  agrees with its actions artifact;
- every artifact an episode references exists and its bytes hash to its name, as does every
  file in the store and every artifact row;
- ``manifest.json`` lists every bundle file with its current sha256, and ``results.json`` /
  ``episodes.parquet`` hold the ledger's episodes with the same values in every field that can
  change a result (outcome, success, score, judge, judgment, gate, ground truth, steps,
  artifacts, error) and the same spec hash;
- every aggregate of ``results.json`` (counts, rates, intervals per policy and per policy ×
  task, the ranking) equals what the episodes give when recounted.

- SQLite's ``PRAGMA integrity_check`` passes (the ledger is opened read-only and never written:
  ``immutable`` when no write-ahead log exists, so a read-only copy is verified as it is);
- the spec rebuilt from ``env_id`` and the recorded overrides hashes to the recorded spec hash,
  as does the stored spec; ``results.json``'s campaign block (env id, spec with its world, judge,
  gate, design, policies) equals the ledger's config; each episode's provenance names the
  campaign's spec hash, world type and judge;
- **re-derivation** (:mod:`kosmos_env.campaign.rederive`): the campaign's judge, when
  deterministic, is re-run on every episode's stored actions, robot log and frames (the state
  judge on the ground truth the stored log records), as is every other deterministic judge whose
  verdicts ``kosmos-env judge`` filed; ``replay`` replays a sample of episodes from their stored
  actions and seed on a simulator world (actions, log and frames bit for bit, the video's decoded
  frames within :data:`kosmos_env.utils.video.MIN_LUMA_PSNR_DB`) and re-runs their policies. The
  sample is drawn with the verifier's own salt (random unless given), so whoever wrote the campaign
  cannot place forged episodes outside it; the report gives the chance that k forged episodes all
  escape it. ``rerun`` re-runs sampled episodes' policies in the recorded world from the recorded
  seeds: on a generated world, whose generation cannot be replayed, the only check that the stored
  episode is what the policy does there;
- results.json's cost, timing, worker and version fields repeat the ledger's; no evidence covers
  them, and the report lists them as self-reported (:data:`SELF_REPORTED`);
- nothing is contacted over the network unless asked (``allow_network``): a remote policy named by
  the campaign's record is not rebuilt, and connections are refused while policies are built and run.

So a ledger edited by hand is caught even after ``kosmos-env eval`` rebuilt the bundle from
it, even when the outcome, score, judgment and ground truth were all edited to agree: the
episode's own stored log says otherwise, and a forged log does not replay.

Orphan artifacts (written by a worker that was killed before it could record its episode)
are reported as warnings: they are harmless and never referenced.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kosmos_env.campaign.artifacts import ArtifactStore
from kosmos_env.campaign.bundle import (
    MANIFEST_NAME,
    PARQUET_NAME,
    RESULTS_NAME,
    RESULTS_SCHEMA,
    aggregate,
    episode_entry,
)
from kosmos_env.campaign.failures import is_infrastructure_error_text
from kosmos_env.campaign.ledger import LEDGER_NAME
from kosmos_env.hashing import sha256_file

_SUCCESS_OF = {"success": True, "failure": False, "discarded": None, "abstained": None, "error": None}


#: what a campaign states about itself that no stored evidence can confirm: verify checks that
#: results.json repeats the ledger's values, but whoever wrote the ledger chose them
SELF_REPORTED = (
    "package_version (the kosmos-env that wrote results.json)",
    "created and written times",
    "price_table and the cost block (money, seconds, rollouts per hour)",
    "per-episode timings",
    "per-episode worker and attempts",
    "worker_threads",
)


@dataclass
class VerifyReport:
    """Problems make the folder invalid; warnings do not.

    ``sample``: the replay sample (its salt, size, the episodes drawn and the chance that k
    forged episodes all escape it); ``rerun``: the policy re-runs in the recorded world and what
    agreement was expected; ``self_reported``: fields no evidence covers (:data:`SELF_REPORTED`)."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)
    sample: dict[str, Any] = field(default_factory=dict)
    rerun: dict[str, Any] = field(default_factory=dict)
    self_reported: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": self.problems,
            "warnings": self.warnings,
            "checked": self.checked,
            "sample": self.sample,
            "rerun": self.rerun,
            "self_reported": self.self_reported,
        }


def verify_campaign(
    out_dir: str | os.PathLike,
    max_listed: int = 20,
    read_only: bool = True,
    replay: int | str = 0,
    replay_seed: int = 0,
    rederive: bool = True,
    rerun_policies: bool = True,
    replay_salt: str | None = None,
    rerun: int | str = 0,
    allow_network: bool = False,
) -> VerifyReport:
    """Verify ``out_dir``; never raises for a broken folder, it reports.

    The ledger is always read through a read-only connection (``read_only`` is kept for callers
    that pass it): verifying never writes, so a folder campaigns still write to, or a read-only
    copy, is verified as it is. ``rederive`` re-runs the campaign's deterministic judge on every
    episode's stored artifacts; ``replay`` (a number or ``"all"``) replays a sample of that many
    episodes from their stored actions on a simulator world and, with ``rerun_policies``, re-runs
    each sampled episode's policy (where it can be built here) to check that the stored actions are
    the ones it takes. The sample is drawn with ``replay_salt`` (and ``replay_seed``): None draws a
    fresh random salt, so whoever wrote the campaign cannot know which episodes will be replayed;
    the salt is in :attr:`VerifyReport.sample`, and passing it again repeats the sample.

    ``rerun`` (a number or ``"all"``) re-runs that many sampled episodes' policies in the recorded
    world from the recorded seeds and compares what they do with the stored episodes: on a
    generated world, the only way to check that the stored generation is what the policy gets
    (:data:`kosmos_env.campaign.rederive.EXPECTED_AGREEMENT` says how agreement is judged).

    Nothing is contacted over the network unless ``allow_network``: a ``remote`` policy is not
    re-run (its URL is never opened), and while policies are built and re-run, connections are
    refused (:func:`no_network`).
    """
    out = Path(out_dir)
    report = VerifyReport()
    path = out / LEDGER_NAME
    if not path.is_file():
        report.problems.append(f"no ledger at {path}: not a campaign folder")
        return report
    hashes: dict[str, str | None] = {}

    def digest(rel: str) -> str | None:
        if rel not in hashes:
            p = out / rel
            hashes[rel] = sha256_file(p) if p.is_file() else None
        return hashes[rel]

    def check_artifact(rel: str, where: str) -> None:
        name = Path(rel).name.split(".")[0]
        actual = digest(rel)
        if actual is None:
            report.problems.append(f"{where}: artifact {rel} is missing")
        elif actual != name:
            report.problems.append(
                f"{where}: artifact {rel} is corrupt (its sha256 is {actual[:16]}..., its name says {name[:16]}...)"
            )

    try:
        # never written to: verify opens the ledger read-only (a read-only copy is verified as it is)
        with _open_readonly(path, report) as ledger:
            integrity = [tuple(r)[0] for r in ledger.conn.execute("PRAGMA integrity_check").fetchall()]
            if integrity != ["ok"]:
                report.problems.append(f"the ledger {path} fails SQLite's integrity check: {_listing(integrity, 5)}")
                return report
            meta = ledger.meta()
            try:
                config = ledger.config()
            except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
                report.problems.append(f"ledger config unreadable: {exc}")
                return report
            if config.config_hash != meta.get("config_hash"):
                report.problems.append(
                    f"ledger config hashes to {config.config_hash[:16]}..., but the ledger records "
                    f"{str(meta.get('config_hash'))[:16]}... (the stored config was edited)"
                )
            if config.spec_hash != meta.get("spec_hash"):
                report.problems.append("ledger spec hash differs from its config's spec hash")
            episodes = ledger.episodes()
            attempts = ledger.attempts()
            artifact_rows = ledger.artifacts()
            counts = ledger.counts()
            policy_rows = ledger.policies()
            # verdicts of other judges (kosmos-env judge): each filed under its own spec's identity
            from kosmos_env.campaign.judgments import check as check_judgments

            report.problems.extend(check_judgments(ledger))
            from kosmos_env.campaign import judgments as judgment_table

            # other judges' verdicts (kosmos-env judge), re-derived below where the judge is deterministic
            other_verdicts = [
                (j, judgment_table.verdicts(ledger, j["judge_id"])) for j in judgment_table.judges(ledger)
            ]
            judge_queue = ledger.judge_queue()  # two-stage campaigns: the judge stage's own record
            runs = ledger.runs()
            worker_threads = ledger.worker_threads()
    except (sqlite3.Error, json.JSONDecodeError, OSError) as exc:  # a corrupt ledger is a finding, not a crash
        report.problems.append(
            f"the ledger {path} cannot be read ({type(exc).__name__}: {exc}); it is corrupt or not a campaign ledger"
        )
        return report

    report.problems.extend(spec_problems(config))
    try:
        from kosmos_env.spec import EnvSpec

        chunk = EnvSpec.from_dict(dict(config.spec)).action_chunk
    except Exception:  # noqa: BLE001 - without a readable spec the step count is not cross-checked
        chunk = None
    n_errors = sum(1 for r in episodes if r["status"] == "done" and r["outcome"] == "error")
    if n_errors:
        report.warnings.append(
            f"{n_errors} episodes ended in error (the policy failed on them); rerun kosmos-env eval "
            "with --retry-errors to try them again"
        )

    # -- the plan: every planned episode exactly once --------------------------------------
    planned = {k.episode_id: k for k in config.episodes()}
    seen: dict[str, int] = {}
    for row in episodes:
        seen[row["episode_id"]] = seen.get(row["episode_id"], 0) + 1
    missing = sorted(set(planned) - set(seen))
    extra = sorted(set(seen) - set(planned))
    twice = sorted(k for k, n in seen.items() if n > 1)
    cells = {}
    for row in episodes:
        cells.setdefault((row["policy"], row["task"], row["seed"], row["repeat"]), []).append(row["episode_id"])
    twice += sorted(str(c) for c, ids in cells.items() if len(ids) > 1)
    for what, items in (
        ("planned episodes missing from the ledger", missing),
        ("episodes in the ledger that were never planned", extra),
        ("episodes recorded more than once", twice),
    ):
        if items:
            report.problems.append(f"{len(items)} {what}: {_listing(items, max_listed)}")
    unfinished = [r["episode_id"] for r in episodes if r["status"] != "done"]
    if unfinished:
        report.problems.append(
            f"{len(unfinished)} episodes not finished (pending {counts['pending']}, leased "
            f"{counts['leased']}): {_listing(unfinished, max_listed)}; rerun the same kosmos-env eval "
            "command to finish them"
        )
    ok_attempts: dict[str, int] = {}
    for a in attempts:
        if a["status"] == "ok":
            ok_attempts[a["episode_id"]] = ok_attempts.get(a["episode_id"], 0) + 1

    # -- each finished episode ---------------------------------------------------------------
    for row in episodes:
        if row["status"] != "done":
            continue
        eid, outcome = row["episode_id"], row["outcome"]
        key = planned.get(eid)
        if key is not None and row["env_seed"] != key.env_seed:
            report.problems.append(f"{eid}: env seed {row['env_seed']} is not the design's {key.env_seed}")
        if outcome not in _SUCCESS_OF:
            report.problems.append(f"{eid}: invalid outcome {outcome!r}")
            continue
        if row["success"] != _SUCCESS_OF[outcome]:
            report.problems.append(f"{eid}: outcome {outcome} but success = {row['success']!r}")
        if outcome == "error":
            if not row["error"]:
                report.problems.append(f"{eid}: error outcome without an error message")
            elif is_infrastructure_error_text(row["error"]):
                report.problems.append(
                    f"{eid}: closed as an error by an infrastructure failure ({row['error'][:80]}); "
                    "rerun the same kosmos-env eval command to retry it"
                )
            continue
        for problem in evidence_problems(row):
            report.problems.append(f"{eid}: {problem}")
        n_ok = ok_attempts.get(eid, 0)
        if n_ok != 1:
            report.problems.append(f"{eid}: recorded as completed {n_ok} times (expected once)")
        if not row["actions"]:
            report.problems.append(f"{eid}: no actions artifact")
        if config.video and not row["video"]:
            report.problems.append(f"{eid}: no video although the campaign keeps videos")
        for kind in ("video", "actions", "log"):
            if row[kind]:
                check_artifact(row[kind], eid)
        if row["actions"] and chunk and digest(row["actions"]) is not None:
            n_rows = _actions_rows(out / row["actions"])
            if n_rows is None:
                report.problems.append(f"{eid}: actions artifact {row['actions']} is not a numeric .npy array")
            elif row["steps"] is None or n_rows != row["steps"] * chunk:
                report.problems.append(
                    f"{eid}: {row['steps']} steps recorded, but its actions artifact holds "
                    f"{n_rows} actions ({chunk} per step)"
                )
    report.checked["episodes"] = len(episodes)
    done_rows = [dict(episode_entry(r), episode_id=r["episode_id"]) for r in episodes if r["status"] == "done"]
    frames_of = {q["episode_id"]: q.get("frames") for q in judge_queue} if judge_queue else {}
    report.problems.extend(provenance_problems(config, done_rows))
    if rederive:
        _rederive(out, config, done_rows, frames_of, report)
        _rederive_other_judges(out, config, done_rows, frames_of, other_verdicts, report)
    from kosmos_env.campaign.rederive import new_salt, world_is_simulator

    salt = new_salt() if replay_salt is None else str(replay_salt)
    if replay or rerun:
        policies = _Policies(config, policy_rows, report, allow_network, build=rerun_policies or bool(rerun))
        try:
            with no_network(allowed=allow_network):
                if replay:
                    _replay(
                        out,
                        config,
                        done_rows,
                        frames_of,
                        replay,
                        replay_seed,
                        salt,
                        report,
                        policies,
                        rerun_policies,
                        rerun=bool(rerun),
                    )
                if rerun:
                    _rerun(out, config, done_rows, rerun, replay_seed, salt, report, policies)
        finally:
            policies.close()
    elif not world_is_simulator(config.spec):
        report.warnings.append(_not_rederived_line(config, len(done_rows)))
    if judge_queue:
        from kosmos_env.campaign.stage_check import check_stage

        report.problems.extend(check_stage(episodes, judge_queue, attempts))
        report.checked["judge_stage"] = len(judge_queue)

    # -- the artifact store -----------------------------------------------------------------
    known = set()
    for a in artifact_rows:
        known.add(a["relpath"])
        if Path(a["relpath"]).name.split(".")[0] != a["sha256"]:
            report.problems.append(
                f"artifact row {a['relpath']} records sha256 {a['sha256'][:16]}... that its name contradicts"
            )
        check_artifact(a["relpath"], "ledger artifact table")
    store_files = ArtifactStore(out).files()
    orphans = []
    for rel in store_files:
        check_artifact(rel, "artifact store")
        if rel not in known:
            orphans.append(rel)
    if orphans:
        report.warnings.append(
            f"{len(orphans)} artifacts no episode references (a killed worker's unrecorded "
            f"episode; harmless): {_listing(orphans, max_listed)}"
        )
    report.checked["artifacts"] = len(set(store_files) | known)

    # -- the bundle ----------------------------------------------------------------------------
    _verify_bundle(out, config, meta, episodes, store_files, digest, report, max_listed, policy_rows)
    _check_self_reported(out, meta, episodes, runs, worker_threads, report)
    # keep problem lists deterministic and unique
    report.problems = list(dict.fromkeys(report.problems))
    return report


def _percent(p: float) -> str:
    if p == 0 or p >= 0.001:
        return f"{100 * p:.1f}%"
    return f"{100 * p:.2g}%"


def _escape_text(info: Mapping[str, Any], size: int, total: int) -> str:
    if size >= total:
        return "0 for any k: every episode was checked"
    escape = info.get("escape") or {}
    text = ", ".join(f"k={k} {_percent(v)}" for k, v in escape.items())
    reorder = info.get("reorder")
    if reorder:
        text += (
            f"; k={reorder['k']} (the fewest false outcomes that could put {reorder['higher']!r} above "
            f"{reorder['lower']!r}) {_percent(reorder['escape'])}"
        )
    return text


def describe(report: VerifyReport, where: str) -> list[str]:
    """What ``kosmos-env verify`` prints besides problems and warnings: the replay sample (its salt,
    so the run can be repeated, and the chance k forged episodes all escape it), the policy
    re-runs and the agreement they were held to, and the fields that stay self-reported."""
    lines = []
    sample = report.sample
    if sample:
        lines.append(
            f"replay sample: {sample['size']} of {sample['of']} episodes, salt {sample['salt']} (repeat it: "
            f"kosmos-env verify {where} --replay {sample['size']} --replay-salt {sample['salt']})"
        )
        lines.append(
            f"  chance that k forged episodes all escape this sample: {_escape_text(sample, sample['size'], sample['of'])}"
        )
        if sample.get("policies_not_rerun"):
            names = ", ".join(repr(x) for x in sample["policies_not_rerun"])
            lines.append(
                f"  policies not re-run: {names}: their sampled episodes were replayed in the world only, so "
                "evidence moved to them from another policy on the same seed is not caught"
            )
    rerun = report.rerun
    if rerun:
        lines.append(
            f"re-run in the recorded world: {rerun.get('rerun', 0)} of {rerun['of']} episodes' policies from their "
            f"recorded seeds (salt {rerun['salt']}): {rerun.get('reproduced', 0)} took the stored actions bit for "
            f"bit, {rerun.get('same_outcome', 0)} ended with the stored outcome"
        )
        lines.append(f"  expected: {rerun['expected']}")
        if rerun.get("escape"):
            lines.append(
                f"  chance that k moved episodes all escape the re-run: {_escape_text(rerun, rerun['rerun'], rerun['of'])}"
            )
    if report.self_reported:
        lines.append(
            "self-reported (results.json repeats the ledger, but no evidence confirms them): "
            + "; ".join(report.self_reported)
        )
    return lines


def check_before_use(out_dir: str | os.PathLike, command: str) -> None:
    """Refuse (ValueError, one line) a campaign folder that fails verification.

    ``analyze``, ``report`` and ``publish`` call this first, so numbers are never drawn from an
    edited or damaged folder without the user saying so (``--no-verify``). A campaign folder
    (with a ledger) gets :func:`verify_campaign`; a folder without one (a bundle alone, e.g. a
    downloaded submission) has no ledger to verify against and is left to the loaders' own
    checks of its rows.
    """
    out = Path(out_dir)
    if (out / LEDGER_NAME).is_file():
        report = verify_campaign(out)
        if report.ok:
            return
        first = report.problems[0]
        first = first if len(first) <= 240 else first[:237] + "..."
        raise ValueError(
            f"{out} fails verification ({len(report.problems)} problem(s); first: {first}); see "
            f"`kosmos-env verify {out}`, or pass --no-verify to {command} it anyway"
        )


def _verify_bundle(
    out: Path, config, meta, episodes, store_files, digest, report: VerifyReport, max_listed: int, policy_rows=None
) -> None:
    manifest_path = out / MANIFEST_NAME
    if not manifest_path.is_file():
        report.problems.append("manifest.json is missing (rerun kosmos-env eval to rewrite the bundle)")
        return
    try:
        manifest = json.loads(manifest_path.read_text())
        files = dict(manifest["files"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        report.problems.append(f"manifest.json is unreadable: {exc}")
        return
    bad = []
    for rel, sha in sorted(files.items()):
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            report.problems.append(f"manifest.json lists a path outside the folder: {rel}")
            continue
        actual = digest(rel)
        if actual is None:
            bad.append(f"{rel} (missing)")
        elif actual != sha:
            bad.append(f"{rel} (sha256 {actual[:12]}... != manifest {str(sha)[:12]}...)")
    if bad:
        report.problems.append(f"{len(bad)} files do not match manifest.json: {_listing(bad, max_listed)}")
    expected = [RESULTS_NAME] + ([PARQUET_NAME] if (out / PARQUET_NAME).exists() else []) + list(store_files)
    unlisted = [rel for rel in expected if rel not in files]
    if unlisted:
        report.problems.append(
            f"{len(unlisted)} bundle files are not in manifest.json (stale bundle: rerun "
            f"kosmos-env eval): {_listing(unlisted, max_listed)}"
        )
    report.checked["manifest_files"] = len(files)

    results_path = out / RESULTS_NAME
    if not results_path.is_file():
        report.problems.append("results.json is missing")
        return
    try:
        results = json.loads(results_path.read_text())
    except json.JSONDecodeError as exc:
        report.problems.append(f"results.json is not valid JSON: {exc}")
        return
    if results.get("schema") != RESULTS_SCHEMA:
        report.problems.append(f"results.json has schema {results.get('schema')!r}, expected {RESULTS_SCHEMA!r}")
    camp = results.get("campaign", {})
    if camp.get("spec_hash") != config.spec_hash:
        report.problems.append(
            f"results.json spec hash {str(camp.get('spec_hash'))[:12]} != ledger {config.spec_hash[:12]}"
        )
    if camp.get("id") != meta.get("campaign_id"):
        report.problems.append(f"results.json campaign {camp.get('id')} != ledger {meta.get('campaign_id')}")
    # what the campaign was (env, spec, world, judge, gate, design) must be the ledger's config, field by field
    mine = config.to_dict()
    for key in ("env_id", "spec", "spec_overrides", "judge", "gate", "tasks", "seeds", "repeats", "video"):
        if not _same(mine.get(key), camp.get(key)):
            what = {"spec": "spec (world, tasks, judge, ...)"}.get(key, key)
            report.problems.append(f"results.json campaign {what} differs from the ledger's config")
    if camp.get("config_hash") != meta.get("config_hash"):
        report.problems.append("results.json config hash differs from the ledger's")
    theirs_p = [
        {k: p.get(k) for k in ("label", "name", "kwargs")} for p in camp.get("policies", []) if isinstance(p, dict)
    ]
    if not _same(theirs_p, [{k: p.get(k) for k in ("label", "name", "kwargs")} for p in mine["policies"]]):
        report.problems.append("results.json campaign policies differ from the ledger's config")
    stated = {p.get("label"): p.get("content_hash") for p in camp.get("policies", []) if isinstance(p, dict)}
    for label, row in (policy_rows or {}).items():
        if stated.get(label) != row["content_hash"]:
            report.problems.append(
                f"results.json states policy {label!r} has content hash "
                f"{str(stated.get(label))[:12]}, the ledger recorded {row['content_hash'][:12]}"
            )
    per_episode = results.get("per_episode")
    if not isinstance(per_episode, list) or not all(isinstance(e, dict) for e in per_episode):
        report.problems.append("results.json has no per_episode list of objects")
        return
    in_results = {e.get("episode_id"): e for e in per_episode}
    in_ledger = {r["episode_id"]: episode_entry(r) for r in episodes if r["status"] == "done"}
    if len(in_results) != len(per_episode):
        report.problems.append("results.json lists an episode twice")
    differ = []
    for eid in sorted(set(in_results) | set(in_ledger), key=str):
        mine, theirs = in_ledger.get(eid), in_results.get(eid)
        if mine is None or theirs is None:
            differ.append(f"{eid} (only in {'results.json' if mine is None else 'the ledger'})")
            continue
        fields = [k for k in RESULT_FIELDS if not _same(mine.get(k), theirs.get(k))]
        if fields:
            differ.append(f"{eid} ({', '.join(fields)})")
    if differ:
        report.problems.append(
            f"results.json disagrees with the ledger on {len(differ)} episodes: {_listing(differ, max_listed)}"
        )
    _verify_aggregates(results, config, list(in_ledger.values()), report)
    if (out / PARQUET_NAME).exists():
        try:
            import pyarrow.parquet as pq

            table = pq.read_table(out / PARQUET_NAME).to_pylist()
            rows = {r.get("episode_id"): r for r in table}
            bad = len(rows) != len(table) or set(rows) != set(in_ledger)
            for eid, mine in in_ledger.items():
                if bad:
                    break
                flat = rows[eid]
                plain = ("outcome", "success", "score", "judge", "steps", "error", "policy", "task", "seed", "repeat")
                for k in (*plain, "attempts", "worker"):  # the last two self-reported, but the ledger's
                    bad = bad or not _same(mine.get(k), flat.get(k))
                for k in ("judgment", "gate", "ground_truth", "artifacts", "timings"):
                    bad = bad or not _same(mine.get(k), None if flat.get(k) is None else json.loads(flat[k]))
                for stage, seconds in (mine.get("timings") or {}).items():
                    if f"t_{stage}" in flat:
                        bad = bad or not _same(seconds, flat[f"t_{stage}"])
            if bad:
                report.problems.append("episodes.parquet disagrees with the ledger")
        except ImportError:
            report.warnings.append("pyarrow is not installed: episodes.parquet not checked")
        except Exception as exc:  # a corrupt parquet file is a finding, not a crash
            report.problems.append(f"episodes.parquet is unreadable: {exc}")


#: per-episode fields of results.json that can change a result; each must equal the ledger's
RESULT_FIELDS = (
    "policy",
    "task",
    "seed",
    "repeat",
    "env_seed",
    "outcome",
    "success",
    "score",
    "judge",
    "judgment",
    "gate",
    "ground_truth",
    "steps",
    "artifacts",
    "error",
)
_OUTCOME_OF_VERDICT = {True: "success", False: "failure", None: "abstained"}


def evidence_problems(row) -> list[str]:
    """Where an episode's outcome or score contradicts its own judgment, gate or ground truth."""
    problems = []
    outcome, judgment, gate, truth = row.get("outcome"), row.get("judgment"), row.get("gate"), row.get("ground_truth")
    gate_rejected = isinstance(gate, dict) and gate.get("passed") is False
    if outcome == "discarded":
        if isinstance(gate, dict) and gate.get("passed") is True:
            problems.append("outcome discarded, but its gate verdict passed")
        return problems
    if gate_rejected:
        problems.append(f"outcome {outcome}, but its gate verdict rejected the generation (it must be discarded)")
    if not isinstance(judgment, dict):
        problems.append(f"outcome {outcome} without the judgment that decided it")
        return problems
    verdict = judgment.get("success")
    if verdict not in _OUTCOME_OF_VERDICT or _OUTCOME_OF_VERDICT[verdict] != outcome:
        problems.append(f"outcome {outcome} contradicts its stored judgment (success = {verdict!r})")
    want_score = None if verdict is None else judgment.get("score")
    if not _same(row.get("score"), want_score):
        problems.append(f"score {row.get('score')!r} differs from its judgment's score {want_score!r}")
    if judgment.get("judge") and row.get("judge") != judgment.get("judge"):
        problems.append(f"judge {row.get('judge')!r} differs from its judgment's judge {judgment.get('judge')!r}")
    if (
        judgment.get("judge") == "state"
        and isinstance(truth, dict)
        and "success" in truth
        and verdict is not None
        and bool(truth["success"]) != verdict
    ):
        problems.append(f"outcome {outcome} contradicts the simulator's ground truth (success = {truth['success']!r})")
    return problems


def _actions_rows(path: Path) -> int | None:
    """Rows of an actions .npy (loaded without pickle); None when it is not a numeric array."""
    import numpy as np

    try:
        arr = np.load(path, allow_pickle=False)
    except Exception:  # noqa: BLE001 - a corrupt artifact is a finding
        return None
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "fiu" or arr.ndim < 1:
        return None
    return int(arr.shape[0])


def _verify_aggregates(results, config, entries, report: VerifyReport) -> None:
    """results.json's aggregated block must be what the episodes give when recounted."""
    labels = [p.label for p in config.policies]
    mine = aggregate(entries, labels, list(config.tasks))
    theirs = results.get("aggregated")
    if not isinstance(theirs, dict):
        report.problems.append("results.json has no aggregated block")
        return
    wrong = []
    for label in labels:
        if not _same(mine["per_policy"][label], (theirs.get("per_policy") or {}).get(label)):
            wrong.append(f"per_policy[{label!r}]")
        for task in config.tasks:
            got = ((theirs.get("per_policy_task") or {}).get(label) or {}).get(task)
            if not _same(mine["per_policy_task"][label][task], got):
                wrong.append(f"per_policy_task[{label!r}][{task!r}]")
    if theirs.get("ranking") != mine["ranking"]:
        wrong.append("ranking")
    if wrong:
        report.problems.append(
            f"results.json aggregates differ from the recounted episodes: {_listing(wrong, 10)} "
            "(a stale or edited bundle: rerun kosmos-env eval to rebuild it)"
        )


def _same(a, b, tol: float = 1e-9) -> bool:
    """Equal as JSON values, floats within ``tol`` (a JSON round trip may change the last bits)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (a is None and b is None)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol * max(1.0, abs(a))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], tol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, tol) for x, y in zip(a, b, strict=True))
    return a == b


def _listing(items, limit: int) -> str:
    items = list(items)
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


class _open_readonly:
    """The ledger through a read-only connection that writes nothing, not even SQLite's reader files.

    Without a ``-wal`` file no connection has the ledger open in WAL mode (a writer keeps one while
    it runs), so the file is read as ``immutable``: no lock, no ``-shm``/``-wal`` created, and a
    read-only folder or mount reads as well as a writable one. With a ``-wal`` file (a campaign may
    be writing) it is read with ``mode=ro``, which sees the log's changes; where that cannot open
    it (a read-only folder that has no ``-shm``), ``immutable`` again, with a warning."""

    def __init__(self, path: Path, report: VerifyReport):
        self.path, self.report, self.ledger = path, report, None

    def __enter__(self):
        from kosmos_env.campaign.readonly import ReadOnlyLedger

        wal = Path(f"{self.path}-wal")
        if not wal.exists():
            self.ledger = ReadOnlyLedger(self.path, immutable=True)
            return self.ledger
        try:
            self.ledger = ReadOnlyLedger(self.path)
            self.ledger.conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            if self.ledger is not None:
                self.ledger.close()
            self.ledger = ReadOnlyLedger(self.path, immutable=True)
            if wal.is_file() and wal.stat().st_size > 0:
                self.report.warnings.append(
                    f"{wal.name} is not empty and the folder cannot be written: the ledger "
                    "was read without the changes still in its write-ahead log"
                )
        return self.ledger

    def __exit__(self, *exc) -> None:
        if self.ledger is not None:
            self.ledger.close()


def spec_problems(config) -> list[str]:
    """The spec the campaign recorded must be what its ``env_id`` and recorded overrides give, and
    hash to the recorded spec hash (a world or judge edited into the stored spec does not)."""
    from kosmos_env.spec import EnvSpec, load_spec

    problems = []
    try:
        stored = EnvSpec.from_dict(dict(config.spec))
    except Exception as exc:  # noqa: BLE001 - a stored spec that does not load is a finding
        return [f"the ledger's stored spec is not a valid spec ({exc})"]
    if stored.hash != config.spec_hash:
        problems.append(
            f"the ledger's stored spec hashes to {stored.hash[:12]}, but the campaign records spec hash "
            f"{config.spec_hash[:12]} (the stored spec was edited)"
        )
    if stored.id != config.env_id:
        problems.append(f"the ledger's stored spec is for {stored.id!r}, the campaign's env_id is {config.env_id!r}")
    try:
        expected = load_spec(config.env_id).with_overrides(**dict(config.spec_overrides))
    except Exception as exc:  # noqa: BLE001
        problems.append(f"the spec of {config.env_id!r} with the recorded overrides cannot be rebuilt here ({exc})")
        return problems
    if expected.hash != config.spec_hash:
        problems.append(
            f"{config.env_id} with the recorded overrides {dict(config.spec_overrides)} hashes to "
            f"{expected.hash[:12]}, but the campaign records spec hash {config.spec_hash[:12]}"
        )
    return problems


def _rederive(out: Path, config, rows, frames_of, report: VerifyReport) -> None:
    from kosmos_env.campaign.rederive import rederive_rows

    try:
        problems, warnings, n = rederive_rows(out, rows, config.judge, config.spec, frames_of.get)
    except Exception as exc:  # noqa: BLE001 - e.g. the judge's weights are unreadable here: a finding
        report.problems.append(
            f"outcomes could not be re-derived: judge {config.judge.get('type')!r} failed to "
            f"build ({type(exc).__name__}: {exc})"
        )
        return
    report.problems.extend(problems)
    report.warnings.extend(warnings)
    report.checked["rederived"] = n


class _Policies:
    """The campaign's policies, each built once where it can be built here and is the policy the
    campaign ran (its content hash matches the ledger's); otherwise None and a reason, said once.

    A ``remote`` policy is built only with ``allow_network``: its URL comes from the campaign's
    own record (a downloaded ledger names whatever its writer chose), and even then its identity
    is what the server states about itself."""

    def __init__(self, config, policy_rows, report: VerifyReport, allow_network: bool, build: bool = True):
        self.refs = {p.label: p for p in config.policies}
        self.recorded = {label: (row or {}).get("content_hash") for label, row in (policy_rows or {}).items()}
        self.report, self.allow_network, self.build = report, allow_network, build
        self.built: dict[str, Any] = {}
        self.why_not: dict[str, str] = {}

    def get(self, label: str):
        if not self.build or label not in self.refs:
            return None
        if label not in self.built:
            pol, why = None, None
            ref = self.refs[label]
            if ref.name == "remote" and not self.allow_network:
                why = (
                    f"it is served at {ref.kwargs.get('url', '?')} (named by the campaign's ledger), and verify "
                    "contacts nothing over the network unless given --allow-network"
                )
            else:
                try:
                    from kosmos_env.policies import make_policy

                    pol = make_policy(ref.name, **dict(ref.kwargs))
                    recorded = self.recorded.get(label)
                    if recorded and pol.content_hash() != recorded:
                        why = f"here it has content hash {pol.content_hash()[:12]}, the campaign ran {recorded[:12]}"
                        pol.close()
                        pol = None
                except Exception as exc:  # noqa: BLE001 - a policy that cannot be built here is not re-run
                    why = f"it cannot be built here ({type(exc).__name__}: {exc})"
                    pol = None
            self.built[label] = pol
            if pol is not None and ref.name == "remote":
                self.report.warnings.append(
                    f"policy {label!r} re-run through the server at {ref.kwargs.get('url', '?')}: which policy "
                    "answers is what that server states about itself"
                )
            if why:
                self.why_not[label] = why
                self.report.warnings.append(f"policy {label!r} not re-run: {why}")
        return self.built[label]

    def close(self) -> None:
        for pol in self.built.values():
            if pol is not None:
                try:
                    pol.close()
                except Exception:  # noqa: BLE001 - closing must not hide the report
                    pass


class NetworkRefused(OSError):
    """A connection attempted while :func:`no_network` holds."""


class no_network:
    """While it holds (unless ``allowed``), every Internet connection and name lookup made in this
    process is refused with :class:`NetworkRefused` (Unix sockets still work).

    verify builds and runs code the campaign names (policies, plug-ins); a downloaded campaign's
    record must not make the verifier's machine contact anyone. The remote policy is skipped by
    name (:class:`_Policies`); this catches whatever else would connect."""

    def __init__(self, allowed: bool = False):
        self.allowed = allowed
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self):
        if self.allowed:
            return self
        import socket

        def refuse(what):
            def refused(*args, **kwargs):
                raise NetworkRefused(
                    f"kosmos-env verify refused a network {what} (pass --allow-network to let it contact hosts)"
                )

            return refused

        def guarded_connect(original):
            def connect(sock, *args, **kwargs):
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    raise NetworkRefused(
                        "kosmos-env verify refused a network connection (pass --allow-network to let it contact hosts)"
                    )
                return original(sock, *args, **kwargs)

            return connect

        for owner, name, value in (
            (socket.socket, "connect", guarded_connect(socket.socket.connect)),
            (socket.socket, "connect_ex", guarded_connect(socket.socket.connect_ex)),
            (socket, "create_connection", refuse("connection")),
            (socket, "getaddrinfo", refuse("name lookup")),
        ):
            self._saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, value)
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved = []


def _not_rederived_line(config, n: int, rerun: bool = False) -> str:
    """What verify cannot re-derive on a generated world without re-running the policies."""
    kind = (config.spec.get("world") or {}).get("type")
    head = (
        f"{config.env_id}'s world ({kind}) is generated, not simulated: for its {n} episodes, the frames and "
        "robot log the world generated are taken as stored (the judge is re-run on them, but a generation "
        "cannot be replayed), and so is whether the stored actions are what each policy took on those frames"
    )
    if rerun:
        return head + "; only the episodes whose policies are re-run below are checked for it"
    return (
        head + ": evidence moved between policies passes. Re-running the policies in the world checks it: "
        "kosmos-env verify DIR --rerun N"
    )


def _escape_lines(total: int, size: int, config, rows) -> dict[str, Any]:
    """The chance that k forged episodes all escape a sample of ``size`` of ``total``: k = 1, 2, 3
    and the fewest forged outcomes that could have bought a ranking place (recounted here)."""
    from kosmos_env.campaign.bundle import aggregate
    from kosmos_env.campaign.rederive import escape_probability, flips_to_reorder

    escape = {str(k): escape_probability(total, size, k) for k in (1, 2, 3)}
    agg = aggregate(rows, [p.label for p in config.policies], list(config.tasks))
    flip = flips_to_reorder(agg["per_policy"], agg["ranking"])
    out: dict[str, Any] = {"escape": escape}
    if flip is not None:
        k, higher, lower = flip
        out["reorder"] = {"k": k, "higher": higher, "lower": lower, "escape": escape_probability(total, size, k)}
    return out


def _replay(
    out: Path,
    config,
    rows,
    frames_of,
    replay,
    seed: int,
    salt: str,
    report: VerifyReport,
    policies: _Policies,
    rerun_policies: bool = True,
    rerun: bool = False,
) -> None:
    from kosmos_env.campaign.rederive import Replayer, sample_rows, world_is_simulator

    if not world_is_simulator(config.spec):
        report.warnings.append(_not_rederived_line(config, len(rows), rerun=rerun))
        return
    candidates = [r for r in rows if r.get("outcome") != "error"]
    picked = sample_rows(candidates, replay, seed, salt)
    report.sample = {
        "salt": salt,
        "seed": seed,
        "size": len(picked),
        "of": len(candidates),
        "episodes": [r["episode_id"] for r in picked],
        **_escape_lines(len(candidates), len(picked), config, candidates),
    }
    try:
        replayer = Replayer(config.env_id, config.spec_overrides, config.judge, config.spec_hash)
    except Exception as exc:  # noqa: BLE001
        report.problems.append(f"--replay: the campaign's world cannot be rebuilt ({type(exc).__name__}: {exc})")
        return
    try:
        for row in picked:
            pol = policies.get(row["policy"]) if rerun_policies else None
            for p in replayer.replay(out, row, frames_of.get(row["episode_id"]), pol):
                report.problems.append(f"{row['episode_id']}: replay: {p}")
    finally:
        replayer.close()
    report.checked["replayed"] = len(picked)
    rerun = sum(1 for r in picked if rerun_policies and policies.built.get(r["policy"]) is not None)
    report.checked["policies_rerun"] = rerun
    not_rerun = sorted({r["policy"] for r in picked} - {k for k, v in policies.built.items() if v is not None})
    report.sample["policies_not_rerun"] = not_rerun if rerun_policies else sorted({r["policy"] for r in picked})


def _rerun(out: Path, config, rows, n, seed: int, salt: str, report: VerifyReport, policies: _Policies) -> None:
    """Re-run ``n`` sampled episodes' policies in the recorded world from their recorded seeds."""
    from kosmos_env.campaign.rederive import (
        EXPECTED_AGREEMENT,
        RERUN_SAMPLED,
        Rerunner,
        judge_reruns,
        rerun_expectation,
        sample_rows,
    )

    candidates = [r for r in rows if r.get("outcome") != "error"]
    picked = sample_rows(candidates, n, seed, f"{salt}:rerun")
    expectation = rerun_expectation(config.spec, config.judge)
    report.rerun = {
        "salt": salt,
        "expectation": expectation,
        "expected": EXPECTED_AGREEMENT[expectation],
        "of": len(candidates),
        "episodes": [r["episode_id"] for r in picked],
    }
    try:
        rerunner = Rerunner(config.env_id, config.spec_overrides, config.judge, config.spec_hash)
    except Exception as exc:  # noqa: BLE001
        report.problems.append(f"--rerun: the campaign's world cannot be rebuilt ({type(exc).__name__}: {exc})")
        return
    found = []
    try:
        for row in picked:
            pol = policies.get(row["policy"])
            if pol is not None:
                found.append(rerunner.rerun(out, row, pol))
    finally:
        rerunner.close()
    problems, notes = judge_reruns(found, expectation, rerunner.first_frame_ungenerated)
    report.problems.extend(problems)
    report.warnings.extend(notes)
    report.checked["rerun"] = len(found)
    report.rerun.update(
        rerun=len(found),
        reproduced=sum(1 for f in found if f.reproduced),
        same_outcome=sum(1 for f in found if not f.error and f.outcome == f.recorded),
        not_rerun=sorted(policies.why_not),
    )
    if expectation != RERUN_SAMPLED:  # each re-run catches a moved episode it draws: the sample's odds apply
        report.rerun.update(_escape_lines(len(candidates), len(found), config, candidates))


def _check_self_reported(out: Path, meta, episodes, runs, worker_threads, report: VerifyReport) -> None:
    """results.json's price table, cost block, worker threads, creation time and per-episode
    timings, workers and attempts must repeat the ledger's (an edit of results.json alone, the
    manifest re-hashed, is caught); all of them stay self-reported (:data:`SELF_REPORTED`)."""
    report.self_reported = list(SELF_REPORTED)
    try:
        results = json.loads((out / RESULTS_NAME).read_text())
    except (OSError, json.JSONDecodeError):
        return  # already reported by the bundle check
    if not isinstance(results, dict) or not isinstance(results.get("campaign"), dict):
        return
    from kosmos_env.campaign.cost import PriceTable, cost_summary

    camp = results["campaign"]
    wrong = []
    stored_price = meta.get("price_table")
    try:
        price = json.loads(stored_price) if stored_price else None
        table = PriceTable.from_dict(price) if price else None
    except (ValueError, TypeError, KeyError, json.JSONDecodeError):
        report.problems.append("the ledger's price table is unreadable")
        return
    if not _same(camp.get("price_table"), None if table is None else table.to_dict()):
        wrong.append("campaign.price_table")
    if not _same(camp.get("worker_threads"), worker_threads):
        wrong.append("campaign.worker_threads")
    if camp.get("created") != meta.get("created"):
        wrong.append("campaign.created")
    done = [r for r in episodes if r["status"] == "done"]
    cost = (results.get("aggregated") or {}).get("cost") if isinstance(results.get("aggregated"), dict) else None
    if not _same(cost, cost_summary(done, runs, table), tol=1e-6):
        wrong.append("aggregated.cost")
    theirs = {e.get("episode_id"): e for e in results.get("per_episode") or [] if isinstance(e, dict)}
    for row in done:
        mine, entry = episode_entry(row), theirs.get(row["episode_id"])
        if entry is None:
            continue  # already reported by the bundle check
        fields = [k for k in ("timings", "worker", "attempts") if not _same(mine.get(k), entry.get(k))]
        if fields:
            wrong.append(f"per_episode[{row['episode_id']!r}] {', '.join(fields)}")
    if wrong:
        report.problems.append(
            f"results.json's self-reported fields differ from the ledger's: {_listing(wrong, 10)} "
            "(an edited bundle: rerun kosmos-env eval to rebuild it)"
        )


def provenance_problems(config, rows) -> list[str]:
    """Each episode's provenance must name the campaign's spec hash, world type and judge."""
    problems = []
    world_type = (config.spec.get("world") or {}).get("type")
    for row in rows:
        prov = row.get("provenance")
        if not isinstance(prov, dict) or row.get("outcome") == "error":
            continue
        eid = row["episode_id"]
        if prov.get("spec_hash") != config.spec_hash:
            problems.append(
                f"{eid}: its provenance names spec hash {str(prov.get('spec_hash'))[:12]}, the campaign's "
                f"is {config.spec_hash[:12]}"
            )
        world = prov.get("world")
        if isinstance(world, dict) and world.get("type") is not None and world.get("type") != world_type:
            problems.append(
                f"{eid}: its provenance names world {world.get('type')!r}, the campaign's spec {world_type!r}"
            )
        judge = prov.get("judge")
        if (
            isinstance(judge, dict)
            and isinstance(judge.get("spec"), dict)
            and judge["spec"].get("type") != config.judge.get("type")
        ):
            problems.append(
                f"{eid}: its provenance names judge {judge['spec'].get('type')!r}, the campaign's is "
                f"{config.judge.get('type')!r}"
            )
    return problems


def _rederive_other_judges(out: Path, config, rows, frames_of, other_verdicts, report: VerifyReport) -> None:
    """Re-run every other deterministic judge whose verdicts the ledger holds (``kosmos-env judge``) on
    the episodes it judged, and compare with its recorded verdicts."""
    from kosmos_env.campaign.rederive import judge_is_deterministic, rederive_rows

    by_id = {r["episode_id"]: r for r in rows}
    n = 0
    for judge, verdicts in other_verdicts:
        if not judge_is_deterministic(judge["spec"]):
            continue
        try:  # a spec this kosmos-env cannot build (a judge object injected by code) cannot be re-run: said, not failed
            from kosmos_env.judges import make_judge

            make_judge(dict(judge["spec"]))
        except Exception as exc:  # noqa: BLE001
            report.warnings.append(
                f"verdicts of judge {judge['label']} not re-derived: its spec cannot be built here "
                f"({type(exc).__name__}: {exc})"
            )
            continue
        mine = [
            dict(by_id[eid], outcome=v["outcome"], success=v["success"], score=v["score"], judge=judge["label"])
            for eid, v in verdicts.items()
            if eid in by_id and by_id[eid].get("outcome") not in ("error", "discarded")
        ]
        try:
            problems, warnings, k = rederive_rows(out, mine, judge["spec"], config.spec, frames_of.get)
        except Exception as exc:  # noqa: BLE001 - a judge that cannot be built here is a finding
            report.problems.append(f"verdicts of judge {judge['label']} could not be re-derived ({exc})")
            continue
        report.problems.extend(
            f"{p} (verdict recorded by kosmos-env judge {judge['label']})" if "judge state" not in p else p
            for p in problems
        )
        report.warnings.extend(warnings)
        n += k
    if n:
        report.checked["rederived_other_judges"] = n
