"""Teacher labels: a judge's full judgments of a campaign's rollouts, as a resumable parquet dataset.

The dataset is a folder (``LABELS/``) of parquet part files plus ``dataset.json``. Each row is
one rollout judged by one judge identity, keyed by ``(rollout_hash, spec_hash)``:
``rollout_hash`` is the sha256 of the video artifact and ``spec_hash`` the hash of the judge's
spec and weights (:func:`~kosmos_env.distill.judgespec.judge_identity`). Rows keep the verdict,
every vote's parsed fields or parse error, the full raw answers, the generated-token counts,
the prompt hash and the model id.

Resuming: every batch of judged rollouts is written as a new part file (temp file, fsync,
atomic rename), so a killed run loses at most the batch in flight and a rerun skips every
rollout whose key is already there. Readers ignore unfinished temp files and keep the first
row of a key if two runs raced on the same folder.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kosmos_env.utils.fileio import atomic_write, fsync_dir

LABELS_SCHEMA = "kosmos-env/judge-labels"
LABELS_SCHEMA_VERSION = 1
_PART_GLOB = "part-*.parquet"

# column -> pyarrow type name (nested values are JSON strings)
COLUMNS = {
    "rollout_hash": "string",
    "spec_hash": "string",
    "episode_id": "string",
    "policy": "string",
    "task": "string",
    "seed": "int64",
    "repeat": "int64",
    "instruction": "string",
    "video": "string",
    "campaign_id": "string",
    "campaign_dir": "string",
    "env_spec_hash": "string",
    "ground_truth": "bool",
    "judge": "string",
    "model": "string",
    "model_id": "string",
    "prompt_sha256": "string",
    "judge_spec": "string",
    "success": "bool",
    "verdict": "string",
    "score": "float64",
    "rationale": "string",
    "n_valid": "int64",
    "k": "int64",
    "votes": "string",
    "raw_answers": "string",
    "generated_tokens": "string",
    "answer_json": "string",
    "seconds": "float64",
    "generate_seconds": "float64",
    "labelled_at": "string",
}
KEY = ("rollout_hash", "spec_hash")


def _schema():
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "bool": pa.bool_(), "float64": pa.float64()}
    return pa.schema([(name, types[t]) for name, t in COLUMNS.items()])


def verdict_of(success: bool | None) -> str:
    return "abstained" if success is None else ("success" if success else "failure")


def majority_answer(votes: Sequence[Mapping[str, Any]], success: bool | None) -> str | None:
    """The teacher's answer as bare JSON: the first valid vote on the winning side, or None.

    Key order and spacing follow the prompt's example, so the distillation target is exactly
    one JSON object with nothing around it. An abstention has no answer to learn.
    """
    if success is None:
        return None
    from kosmos_env.judges.answer import ANSWER_FIELDS

    for v in votes:
        if v.get("valid") and v.get("video_ok") and v.get("success") is success:
            return json.dumps({k: v[k] for k in ANSWER_FIELDS}, ensure_ascii=False)
    return None


def judgment_row(
    ref, judgment, identity: Mapping[str, Any], spec_hash: str, model: str, campaign_dir: str = ""
) -> dict[str, Any]:
    """One dataset row for rollout ``ref`` (a :class:`~kosmos_env.distill.rollouts.RolloutRef`).

    ``campaign_dir`` (absolute, where the video was read) lets ``judge-distill`` find the
    videos again; it can be overridden there when the campaign folder moves.
    """
    extras = dict(judgment.extras)
    votes = [dict(v) for v in judgment.votes]
    return {
        "rollout_hash": ref.rollout_hash,
        "spec_hash": spec_hash,
        "episode_id": ref.episode_id,
        "policy": ref.policy,
        "task": ref.task,
        "seed": ref.seed,
        "repeat": ref.repeat,
        "instruction": ref.instruction,
        "video": ref.video,
        "campaign_id": ref.campaign_id,
        "campaign_dir": campaign_dir,
        "env_spec_hash": ref.env_spec_hash,
        "ground_truth": ref.ground_truth,
        "judge": judgment.judge,
        "model": model,
        "model_id": judgment.model_id,
        "prompt_sha256": judgment.prompt_sha256,
        "judge_spec": json.dumps(identity, sort_keys=True, default=str),
        "success": judgment.success,
        "verdict": verdict_of(judgment.success),
        "score": float(judgment.score),
        "rationale": judgment.rationale,
        "n_valid": int(extras.get("n_valid", sum(bool(v.get("valid")) for v in votes))),
        "k": int(extras.get("k", len(votes))),
        "votes": json.dumps(votes, default=str),
        "raw_answers": json.dumps(list(extras.get("raw_answers", []))),
        "generated_tokens": json.dumps([int(t) for t in extras.get("generated_tokens", [])]),
        "answer_json": majority_answer(votes, judgment.success),
        "seconds": float(judgment.seconds),
        "generate_seconds": float(extras.get("generate_seconds", judgment.seconds)),
        "labelled_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


class LabelStore:
    """The parquet dataset folder of teacher labels (append-only, resumable)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise ValueError(f"labels path {self.root} is a file; it must be a folder (a parquet dataset)")

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        meta = self.root / "dataset.json"
        if meta.exists():
            self._check_meta()
            return
        atomic_write(
            meta,
            json.dumps(
                {
                    "schema": LABELS_SCHEMA,
                    "schema_version": LABELS_SCHEMA_VERSION,
                    "key": list(KEY),
                    "columns": COLUMNS,
                },
                indent=1,
            ),
        )

    def _check_meta(self) -> None:
        meta = self.root / "dataset.json"
        if not meta.is_file():
            raise FileNotFoundError(
                f"{self.root} is not a judge-labels dataset ({meta} is missing; run kosmos-env judge-label)"
            )
        data = json.loads(meta.read_text(encoding="utf-8"))
        if data.get("schema") != LABELS_SCHEMA or data.get("schema_version") != LABELS_SCHEMA_VERSION:
            raise ValueError(
                f"{meta} is {data.get('schema')!r} v{data.get('schema_version')}, "
                f"expected {LABELS_SCHEMA!r} v{LABELS_SCHEMA_VERSION}"
            )

    def parts(self) -> list[Path]:
        return sorted(self.root.glob(_PART_GLOB)) if self.root.is_dir() else []

    def append(self, rows: Sequence[Mapping[str, Any]]) -> Path | None:
        """Write ``rows`` as one new part file, atomically (temp file, fsync, rename)."""
        if not rows:
            return None
        import pyarrow as pa
        import pyarrow.parquet as pq

        missing = [c for c in COLUMNS if any(c not in r for r in rows)]
        if missing:
            raise ValueError(f"label rows lack column(s) {missing}")
        table = pa.Table.from_pylist([{c: r[c] for c in COLUMNS} for r in rows], schema=_schema())
        name = f"part-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:8]}.parquet"
        tmp = self.root / f".tmp-{name}"
        pq.write_table(table, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        final = self.root / name
        os.replace(tmp, final)
        fsync_dir(self.root)
        return final

    def read(self) -> list[dict[str, Any]]:
        """Every row, first row per key kept, sorted by (rollout_hash, spec_hash)."""
        import pyarrow.parquet as pq

        self._check_meta()
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for part in self.parts():
            for row in pq.read_table(part, schema=_schema()).to_pylist():
                seen.setdefault((row["rollout_hash"], row["spec_hash"]), row)
        return [seen[k] for k in sorted(seen)]

    def keys(self) -> set[tuple[str, str]]:
        import pyarrow.parquet as pq

        keys: set[tuple[str, str]] = set()
        for part in self.parts():
            t = pq.read_table(part, columns=list(KEY))
            keys.update(zip(t.column("rollout_hash").to_pylist(), t.column("spec_hash").to_pylist(), strict=True))
        return keys


def labels_sha256(rows: Iterable[Mapping[str, Any]]) -> str:
    """Content hash of a label set: every column but the write time, rows in key order."""
    from kosmos_env.distill.judgespec import identity_hash

    body = sorted(
        ({k: v for k, v in r.items() if k != "labelled_at"} for r in rows),
        key=lambda r: (r["rollout_hash"], r["spec_hash"]),
    )
    return identity_hash(body)


def label_campaign(
    judge: Any,
    identity: Mapping[str, Any],
    campaign_dir: str | os.PathLike,
    labels_dir: str | os.PathLike,
    *,
    model: str = "",
    batch_size: int | None = None,
    limit: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Judge every not-yet-labelled rollout of a campaign and append the judgments to ``labels_dir``.

    Returns counts: ``total`` judgeable rollouts, ``already`` labelled before this run,
    ``labelled`` now, ``duplicates`` (episodes whose video is byte-identical to another's:
    one label serves them all), and ``skipped`` episodes without a video.
    """
    from kosmos_env.distill.judgespec import spec_hash as _hash
    from kosmos_env.distill.rollouts import load_campaign, load_rollout
    from kosmos_env.judges import judge_many

    campaign = load_campaign(campaign_dir)
    store = LabelStore(labels_dir)
    store.init()
    shash = _hash(identity)
    done = {rh for rh, sh in store.keys() if sh == shash}
    todo, seen = [], set(done)
    duplicates = 0
    for ref in campaign.rollouts:
        if ref.rollout_hash in seen:
            duplicates += ref.rollout_hash not in done
            continue
        seen.add(ref.rollout_hash)
        todo.append(ref)
    if limit is not None:
        todo = todo[: max(0, int(limit))]
    size = int(batch_size or getattr(judge, "batch_size", 1) or 1)
    labelled = 0
    from tqdm.auto import tqdm

    with tqdm(total=len(todo), desc="judge-label", unit="rollout", disable=not progress) as bar:
        for start in range(0, len(todo), size):
            chunk = todo[start : start + size]
            judgments = judge_many(judge, [load_rollout(campaign, ref) for ref in chunk])
            store.append(
                [
                    judgment_row(ref, j, identity, shash, model, str(campaign.root.resolve()))
                    for ref, j in zip(chunk, judgments, strict=True)
                ]
            )
            labelled += len(chunk)
            bar.update(len(chunk))
    return {
        "campaign_id": campaign.campaign_id,
        "spec_hash": shash,
        "total": len({r.rollout_hash for r in campaign.rollouts}),
        "already": len(done & {r.rollout_hash for r in campaign.rollouts}),
        "labelled": labelled,
        "duplicates": duplicates,
        "skipped": dict(campaign.skipped),
        "labels": str(store.root),
    }
