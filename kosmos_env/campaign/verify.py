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
  verdicts ``kosmos-env judge`` filed; ``replay`` replays a seeded sample of episodes from their
  stored actions and seed on a simulator world (actions, log and frames bit for bit, the video's
  decoded frames within :data:`kosmos_env.utils.video.MIN_LUMA_PSNR_DB`) and re-runs their policies.

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
from typing import Any

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


@dataclass
class VerifyReport:
    """Problems make the folder invalid; warnings do not."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": self.problems, "warnings": self.warnings, "checked": self.checked}


def verify_campaign(
    out_dir: str | os.PathLike,
    max_listed: int = 20,
    read_only: bool = True,
    replay: int | str = 0,
    replay_seed: int = 0,
    rederive: bool = True,
    rerun_policies: bool = True,
) -> VerifyReport:
    """Verify ``out_dir``; never raises for a broken folder, it reports.

    The ledger is always read through a read-only connection (``read_only`` is kept for callers
    that pass it): verifying never writes, so a folder campaigns still write to, or a read-only
    copy, is verified as it is. ``rederive`` re-runs the campaign's deterministic judge on every
    episode's stored artifacts; ``replay`` (a number or ``"all"``) replays a sample of that many
    episodes drawn with ``replay_seed`` from their stored actions on a simulator world and, with
    ``rerun_policies``, re-runs each sampled episode's policy (where it can be built here) to check
    that the stored actions are the ones it takes.
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
    if replay:
        _replay(out, config, done_rows, frames_of, replay, replay_seed, report, policy_rows, rerun_policies)
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
    # keep problem lists deterministic and unique
    report.problems = list(dict.fromkeys(report.problems))
    return report


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
                for k in ("outcome", "success", "score", "judge", "steps", "error", "policy", "task", "seed", "repeat"):
                    bad = bad or not _same(mine.get(k), flat.get(k))
                for k in ("judgment", "gate", "ground_truth", "artifacts"):
                    bad = bad or not _same(mine.get(k), None if flat.get(k) is None else json.loads(flat[k]))
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


def _replay(
    out: Path,
    config,
    rows,
    frames_of,
    replay,
    seed: int,
    report: VerifyReport,
    policy_rows=None,
    rerun_policies: bool = True,
) -> None:
    from kosmos_env.campaign.rederive import Replayer, sample_rows, world_is_simulator

    if not world_is_simulator(config.spec):
        report.warnings.append(
            f"--replay: {config.env_id}'s world ({(config.spec.get('world') or {}).get('type')}) "
            "is not a simulator; its generation cannot be replayed and is taken on trust"
        )
        return
    candidates = [r for r in rows if r.get("outcome") != "error"]
    picked = sample_rows(candidates, replay, seed)
    try:
        replayer = Replayer(config.env_id, config.spec_overrides, config.judge, config.spec_hash)
    except Exception as exc:  # noqa: BLE001
        report.problems.append(f"--replay: the campaign's world cannot be rebuilt ({type(exc).__name__}: {exc})")
        return
    policies: dict[str, Any] = {}
    refs = {p.label: p for p in config.policies}

    def policy_of(label: str):
        """The campaign's policy, built once, or None (with a warning) where it cannot be built here or
        is not the policy the campaign ran (its content hash differs)."""
        if not rerun_policies or label not in refs:
            return None
        if label not in policies:
            ref = refs[label]
            try:
                from kosmos_env.policies import make_policy

                pol = make_policy(ref.name, **dict(ref.kwargs))
                recorded = (policy_rows or {}).get(label, {}).get("content_hash")
                if recorded and pol.content_hash() != recorded:
                    report.warnings.append(
                        f"--replay: policy {label!r} here has content hash "
                        f"{pol.content_hash()[:12]}, the campaign ran {recorded[:12]}: not re-run"
                    )
                    pol = None
            except Exception as exc:  # noqa: BLE001 - a policy that cannot be built here is not re-run
                report.warnings.append(
                    f"--replay: policy {label!r} cannot be built here ({type(exc).__name__}: "
                    f"{exc}); its actions were replayed in the world but the policy not re-run"
                )
                pol = None
            policies[label] = pol
        return policies[label]

    try:
        for row in picked:
            for p in replayer.replay(out, row, frames_of.get(row["episode_id"]), policy_of(row["policy"])):
                report.problems.append(f"{row['episode_id']}: replay: {p}")
    finally:
        replayer.close()
        for pol in policies.values():
            if pol is not None:
                try:
                    pol.close()
                except Exception:  # noqa: BLE001 - closing must not hide the report
                    pass
    report.checked["replayed"] = len(picked)
    report.checked["policies_rerun"] = sum(1 for r in picked if policies.get(r["policy"]) is not None)


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
