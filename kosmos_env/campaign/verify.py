"""Recheck a campaign folder: every artifact's hash, the ledger's consistency, the bundle.

What is checked (each failure is named in :attr:`VerifyReport.problems`):

- the ledger's frozen config still hashes to its recorded config hash;
- the ledger holds exactly the planned episodes (none missing, none extra, none twice) and
  every one is done, recorded once (one successful completion per non-error episode);
- outcomes are valid and agree with ``success``; error episodes carry their error;
- every artifact an episode references exists and its bytes hash to its name, as does every
  file in the store and every artifact row;
- ``manifest.json`` lists every bundle file with its current sha256, and ``results.json`` /
  ``episodes.parquet`` hold the ledger's episodes with the same outcomes and spec hash.

Orphan artifacts (written by a worker that was killed before it could record its episode)
are reported as warnings: they are harmless and never referenced.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kosmos_env.campaign.artifacts import ArtifactStore, sha256_file
from kosmos_env.campaign.bundle import MANIFEST_NAME, PARQUET_NAME, RESULTS_NAME, RESULTS_SCHEMA
from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger

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


def verify_campaign(out_dir: str | os.PathLike, max_listed: int = 20, read_only: bool = False) -> VerifyReport:
    """Verify ``out_dir``; never raises for a broken folder, it reports.

    ``read_only`` reads the ledger through a read-only connection (the console verifies
    folders that campaigns may still write to).
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
            report.problems.append(f"{where}: artifact {rel} is corrupt (its sha256 is {actual[:16]}..., "
                                   f"its name says {name[:16]}...)")

    if read_only:
        from kosmos_env.campaign.readonly import ReadOnlyLedger

        opened = ReadOnlyLedger(path)
    else:
        opened = Ledger(path, create=False)
    with opened as ledger:
        meta = ledger.meta()
        try:
            config = ledger.config()
        except (ValueError, KeyError, json.JSONDecodeError) as exc:
            report.problems.append(f"ledger config unreadable: {exc}")
            return report
        if config.config_hash != meta.get("config_hash"):
            report.problems.append(f"ledger config hashes to {config.config_hash[:16]}..., but the ledger records "
                                   f"{str(meta.get('config_hash'))[:16]}... (the stored config was edited)")
        if config.spec_hash != meta.get("spec_hash"):
            report.problems.append("ledger spec hash differs from its config's spec hash")
        episodes = ledger.episodes()
        attempts = ledger.attempts()
        artifact_rows = ledger.artifacts()
        counts = ledger.counts()
        # verdicts of other judges (kosmos-env judge): each filed under its own spec's identity
        from kosmos_env.campaign.judgments import check as check_judgments

        report.problems.extend(check_judgments(ledger))

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
    for what, items in (("planned episodes missing from the ledger", missing),
                        ("episodes in the ledger that were never planned", extra),
                        ("episodes recorded more than once", twice)):
        if items:
            report.problems.append(f"{len(items)} {what}: {_listing(items, max_listed)}")
    unfinished = [r["episode_id"] for r in episodes if r["status"] != "done"]
    if unfinished:
        report.problems.append(f"{len(unfinished)} episodes not finished (pending {counts['pending']}, leased "
                               f"{counts['leased']}): {_listing(unfinished, max_listed)}; rerun the same kosmos-env eval "
                               "command to finish them")
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
            continue
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
    report.checked["episodes"] = len(episodes)

    # -- the artifact store -----------------------------------------------------------------
    known = set()
    for a in artifact_rows:
        known.add(a["relpath"])
        if Path(a["relpath"]).name.split(".")[0] != a["sha256"]:
            report.problems.append(f"artifact row {a['relpath']} records sha256 {a['sha256'][:16]}... that its name contradicts")
        check_artifact(a["relpath"], "ledger artifact table")
    store_files = ArtifactStore(out).files()
    orphans = []
    for rel in store_files:
        check_artifact(rel, "artifact store")
        if rel not in known:
            orphans.append(rel)
    if orphans:
        report.warnings.append(f"{len(orphans)} artifacts no episode references (a killed worker's unrecorded "
                               f"episode; harmless): {_listing(orphans, max_listed)}")
    report.checked["artifacts"] = len(set(store_files) | known)

    # -- the bundle ----------------------------------------------------------------------------
    _verify_bundle(out, config, meta, episodes, store_files, digest, report, max_listed)
    # keep problem lists deterministic and unique
    report.problems = list(dict.fromkeys(report.problems))
    return report


def _verify_bundle(out: Path, config, meta, episodes, store_files, digest, report: VerifyReport, max_listed: int) -> None:
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
        report.problems.append(f"{len(unlisted)} bundle files are not in manifest.json (stale bundle: rerun "
                               f"kosmos-env eval): {_listing(unlisted, max_listed)}")
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
        report.problems.append(f"results.json spec hash {str(camp.get('spec_hash'))[:12]} != ledger {config.spec_hash[:12]}")
    if camp.get("id") != meta.get("campaign_id"):
        report.problems.append(f"results.json campaign {camp.get('id')} != ledger {meta.get('campaign_id')}")
    in_results = {e.get("episode_id"): e.get("outcome") for e in results.get("per_episode", [])}
    in_ledger = {r["episode_id"]: r["outcome"] for r in episodes if r["status"] == "done"}
    if len(in_results) != len(results.get("per_episode", [])):
        report.problems.append("results.json lists an episode twice")
    if in_results != in_ledger:
        differ = sorted(k for k in set(in_results) | set(in_ledger) if in_results.get(k) != in_ledger.get(k))
        report.problems.append(f"results.json disagrees with the ledger on {len(differ)} episodes: "
                               f"{_listing(differ, max_listed)}")
    if (out / PARQUET_NAME).exists():
        try:
            import pyarrow.parquet as pq

            table = pq.read_table(out / PARQUET_NAME, columns=["episode_id", "outcome"])
            rows = dict(zip(table.column("episode_id").to_pylist(), table.column("outcome").to_pylist()))
            if rows != in_ledger or table.num_rows != len(in_ledger):
                report.problems.append("episodes.parquet disagrees with the ledger")
        except ImportError:
            report.warnings.append("pyarrow is not installed: episodes.parquet not checked")
        except Exception as exc:  # a corrupt parquet file is a finding, not a crash
            report.problems.append(f"episodes.parquet is unreadable: {exc}")


def _listing(items, limit: int) -> str:
    items = list(items)
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")
