"""The results bundle, rebuilt from the ledger at the end of every eval run (resumes included).

- ``results.json``: ``{"schema": "kosmos-env/results", "schema_version": 1, "package_version",
  "campaign": {id, config_hash, env_id, spec_hash, spec, policies [{label, name, kwargs,
  content_hash, hub_model_id}], tasks, seeds, seed_provenance, repeats, judge, gate, created,
  price_table, planned, complete, worker_threads [{worker, role, torch_threads, source, ...}], ...}, "per_episode": [one :func:`episode_entry` per finished episode],
  "aggregated": {"per_policy", "per_policy_task", "ranking", "cost"}}``;
- ``episodes.parquet``: one flat row per episode (nested values as JSON strings);
- ``manifest.json``: ``{"schema": "kosmos-env/manifest", "campaign", "files": {relpath: sha256}}``
  over results.json, episodes.parquet and every artifact.

The ledger itself is not in the manifest: it is a live database; ``kosmos-env verify`` checks
it for consistency instead. Files are replaced atomically, and writers hold an exclusive lock
on ``DIR/.bundle.lock`` so two processes finishing together leave one consistent bundle.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from kosmos_env.campaign.artifacts import ArtifactStore
from kosmos_env.campaign.cost import PriceTable, cost_summary
from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger
from kosmos_env.utils.fileio import atomic_write, file_lock
from kosmos_env.utils.seed_ranges import seed_provenance
from kosmos_env.hashing import sha256_file

RESULTS_SCHEMA = "kosmos-env/results"
RESULTS_SCHEMA_VERSION = 1
MANIFEST_SCHEMA = "kosmos-env/manifest"
RESULTS_NAME = "results.json"
PARQUET_NAME = "episodes.parquet"
MANIFEST_NAME = "manifest.json"
OUTCOME_COUNTS = (
    ("success", "successes"),
    ("failure", "failures"),
    ("discarded", "discarded"),
    ("abstained", "abstained"),
    ("error", "errors"),
)


@contextmanager
def bundle_lock(out_dir: str | os.PathLike) -> Iterator[None]:
    """Exclusive advisory lock on ``DIR/.bundle.lock`` while the bundle is written."""
    with file_lock(os.path.join(os.fspath(out_dir), ".bundle.lock")):
        yield


def episode_entry(row: Mapping[str, Any], spec_hash: str | None = None) -> dict[str, Any]:
    """One ``per_episode`` item of results.json from a ledger row (``spec_hash``: the campaign's)."""
    from kosmos_env.campaign.cost import LOAD_PREFIX, stage_seconds

    timings = row.get("timings")
    t = stage_seconds(timings) if timings is not None else None
    if t is not None:  # model builds this worker filed with the episode (load_policy, load_world, load_judge)
        t.update({k: float(v) for k, v in timings.items() if k.startswith(LOAD_PREFIX)})
    return {
        "episode_id": row["episode_id"],
        "spec_hash": spec_hash,
        "identity_sha256": (row.get("provenance") or {}).get("identity_sha256"),
        "policy": row["policy"],
        "task": row["task"],
        "seed": row["seed"],
        "repeat": row["repeat"],
        "env_seed": row["env_seed"],
        "outcome": row["outcome"],
        "success": row["success"],
        "score": row["score"],
        "judge": row["judge"],
        "judgment": row["judgment"],
        "gate": row["gate"],
        "ground_truth": row["ground_truth"],
        "steps": row["steps"],
        "timings": None if t is None else {k: v for k, v in t.items() if k != "overhead"},
        "artifacts": {"video": row["video"], "actions": row["actions"], "log": row["log"]},
        "error": row["error"],
        "attempts": row["attempts"],
        "worker": row["worker"],
        "provenance": row.get("provenance"),
    }


def summarize_counts(outcomes: Sequence[str]) -> dict[str, Any]:
    """n, counts per outcome, raw success rate with Wilson 95%, and worst-case 95% bounds."""
    from kosmos_env.stats import summarize_rate

    s = summarize_rate(list(outcomes))
    counts = s.counts
    decided = counts["success"] + counts["failure"]
    out: dict[str, Any] = {"n": len(outcomes)}
    for outcome, name in OUTCOME_COUNTS:
        out[name] = counts[outcome]
    out["success_rate"] = counts["success"] / decided if decided else None
    out["wilson_95"] = [s.raw.lower, s.raw.upper] if decided else None
    out["worst_case_95"] = list(s.worst_case_ci) if s.worst_case_ci is not None else None
    return out


def aggregate(episodes: Sequence[Mapping[str, Any]], labels: Sequence[str], tasks: Sequence[str]) -> dict[str, Any]:
    """Per policy and per (policy, task) summaries, and the ranking (best success rate first)."""
    per_policy, per_task = {}, {}
    for label in labels:
        mine = [e for e in episodes if e["policy"] == label]
        per_policy[label] = summarize_counts([e["outcome"] for e in mine])
        per_task[label] = {t: summarize_counts([e["outcome"] for e in mine if e["task"] == t]) for t in tasks}
    order = {label: i for i, label in enumerate(labels)}

    def key(label: str):
        s = per_policy[label]
        rate = s["success_rate"]
        lower = s["wilson_95"][0] if s["wilson_95"] else -1.0
        return (rate is None, -(rate or 0.0), -lower, order[label])

    return {"per_policy": per_policy, "per_policy_task": per_task, "ranking": sorted(labels, key=key)}


def build_results(ledger: Ledger, price_table: PriceTable | None = None) -> dict[str, Any]:
    """results.json's content from the ledger (finished episodes only)."""
    from kosmos_env import __version__

    config = ledger.config()
    meta = ledger.meta()
    policies = ledger.policies()
    done = ledger.episodes("done")
    per_episode = [episode_entry(r, config.spec_hash) for r in done]
    labels = [p.label for p in config.policies]
    agg = aggregate(per_episode, labels, config.tasks)
    agg["cost"] = cost_summary(done, ledger.runs(), price_table)
    counts = ledger.counts()
    results = {
        "schema": RESULTS_SCHEMA,
        "schema_version": RESULTS_SCHEMA_VERSION,
        "package_version": __version__,
        "campaign": {
            "id": meta["campaign_id"],
            "config_hash": meta["config_hash"],
            "env_id": config.env_id,
            "spec_hash": config.spec_hash,
            "spec": dict(config.spec),
            "spec_overrides": dict(config.spec_overrides),
            "policies": [
                {
                    **p.to_dict(),
                    "content_hash": policies.get(p.label, {}).get("content_hash"),
                    "hub_model_id": policies.get(p.label, {}).get("hub_model_id"),
                }
                for p in config.policies
            ],
            "tasks": list(config.tasks),
            "seeds": list(config.seeds),
            # how many seeds lie in the declared training, tuning and evaluation ranges, and whether
            # all are held out: a result on training scenes says so in its own record
            "seed_provenance": seed_provenance(config.seeds),
            "repeats": config.repeats,
            "judge": dict(config.judge),
            "gate": dict(config.gate),
            "video": config.video,
            "created": meta["created"],
            "price_table": price_table.to_dict() if price_table else None,
            "planned": counts["planned"],
            "complete": counts["done"] == counts["planned"],
            # queue depth per stage when the bundle was written (all done for a finished campaign)
            "queue": ledger.stage_depths(),
            # each worker's torch intra-op threads and why (kosmos_env.utils.threads): they can change
            # the last bits of a network's floats, and they explain its speed; every run's workers
            "worker_threads": ledger.worker_threads(),
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "per_episode": per_episode,
        "aggregated": agg,
    }
    if meta.get("registration"):  # a pre-registered study (kosmos-env eval --registration): the whole record
        results["campaign"]["registration"] = json.loads(meta["registration"])
    return results


def parquet_table(per_episode: Sequence[Mapping[str, Any]]):
    """A pyarrow Table with one flat row per episode (nested values as JSON strings)."""
    import pyarrow as pa

    def js(value):
        return None if value is None else json.dumps(value, sort_keys=True)

    plain = (
        "episode_id",
        "spec_hash",
        "identity_sha256",
        "policy",
        "task",
        "seed",
        "repeat",
        "env_seed",
        "outcome",
        "success",
        "score",
        "judge",
        "steps",
        "attempts",
        "worker",
        "error",
    )
    as_json = ("judgment", "gate", "ground_truth", "timings", "artifacts", "provenance")
    stages = ("policy", "world", "gate", "judge", "io", "total")
    files = ("video", "actions", "log")
    cols: dict[str, list] = {k: [] for k in (*plain, *as_json, *(f"t_{k}" for k in stages), *files)}
    for e in per_episode:
        for k in plain:
            cols[k].append(e.get(k))
        for k in as_json:
            cols[k].append(js(e.get(k)))
        t = e.get("timings") or {}
        for k in stages:
            cols[f"t_{k}"].append(t.get(k))
        for k in files:
            cols[k].append((e.get("artifacts") or {}).get(k))
    types = {
        "seed": pa.int64(),
        "repeat": pa.int64(),
        "env_seed": pa.int64(),
        "steps": pa.int64(),
        "attempts": pa.int64(),
        "success": pa.bool_(),
        "score": pa.float64(),
        **{f"t_{k}": pa.float64() for k in stages},
    }
    return pa.table({k: pa.array(v, type=types.get(k, pa.string())) for k, v in cols.items()})


def write_bundle(out_dir: str | os.PathLike, price_table: PriceTable | None = None) -> dict[str, Any]:
    """Rebuild results.json, episodes.parquet and manifest.json from the ledger; returns results."""
    import io

    out = Path(out_dir)
    with bundle_lock(out):
        ledger = Ledger(out / LEDGER_NAME, create=False)
        try:
            if price_table is None:
                stored = ledger.meta().get("price_table")
                price_table = PriceTable.from_dict(json.loads(stored)) if stored else None
            results = build_results(ledger, price_table)
            ledger.checkpoint()
        finally:
            ledger.close()
        atomic_write(out / RESULTS_NAME, (json.dumps(results, indent=1, sort_keys=False) + "\n").encode())
        files = [RESULTS_NAME]
        try:
            import pyarrow.parquet as pq
        except ImportError:  # pragma: no cover - pyarrow is a declared dependency of campaigns
            import warnings

            warnings.warn("pyarrow is not installed: episodes.parquet was not written (pip install pyarrow)")
        else:
            buf = io.BytesIO()
            pq.write_table(parquet_table(results["per_episode"]), buf)
            atomic_write(out / PARQUET_NAME, buf.getvalue())
            files.append(PARQUET_NAME)
        files += ArtifactStore(out).files()
        manifest = {
            "schema": MANIFEST_SCHEMA,
            "campaign": results["campaign"]["id"],
            "files": {rel: sha256_file(out / rel) for rel in files},
        }
        atomic_write(out / MANIFEST_NAME, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return results


def format_ranking(results: Mapping[str, Any]) -> str:
    """The ranking table: policy, n, success rate, Wilson 95% CI, discards, abstentions, errors.

    A policy with episodes in error is marked ``(!)``: its rate leaves those episodes out, so
    it may rank where it does only because its failures were errors; a note under the table
    says so."""
    agg = results["aggregated"]
    header = ("rank", "policy", "n", "success", "wilson 95% CI", "discarded", "abstained", "errors")
    rows = []
    marked = False
    for i, label in enumerate(agg["ranking"], 1):
        s = agg["per_policy"][label]
        rate = "-" if s["success_rate"] is None else f"{s['success_rate']:.3f}"
        ci = "-" if s["wilson_95"] is None else f"[{s['wilson_95'][0]:.3f}, {s['wilson_95'][1]:.3f}]"
        name = f"{label} (!)" if s["errors"] else label
        marked = marked or bool(s["errors"])
        rows.append((str(i), name, str(s["n"]), rate, ci, str(s["discarded"]), str(s["abstained"]), str(s["errors"])))
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) if j == 1 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in (header, *rows)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if marked:
        lines.append(
            "(!) episodes in error: this policy's rate leaves them out; see `errors` and rerun with --retry-errors"
        )
    return "\n".join(lines)


def error_summary(results: Mapping[str, Any]) -> str | None:
    """One line saying how many episodes ended in error, for which policies and why (None: none did)."""
    errors = [e for e in results["per_episode"] if e["outcome"] == "error"]
    if not errors:
        return None
    per_policy: dict[str, int] = {}
    for e in errors:
        per_policy[e["policy"]] = per_policy.get(e["policy"], 0) + 1
    who = ", ".join(f"{label}: {n}" for label, n in per_policy.items())
    return (
        f"{len(errors)} of {results['campaign']['planned']} episodes ended in error ({who}); first: "
        f"{_last_error_line(errors[0].get('error'))}; rerun with --retry-errors to try them again"
    )


def _last_error_line(text: str | None) -> str:
    """The line of a traceback that names the exception (its last non-empty line)."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else "(no message)"
    return line if len(line) <= 200 else line[:197] + "..."
