"""Closed-loop training data for the learned tabletop: simulator rollouts of any policy, recorded
one resumable piece per policy and merged into one episodes file that keeps each episode's policy.

Why: ``Kosmos-TabletopLearned-v1`` learned from scripted and random policies only, and loses the
closed-loop signal of image-conditioned policies (issue 41). Adding the simulator's rollouts of
such policies to its training mix is data aggregation, as world-model RL co-trains a world and
its policies. The policies whose rollouts train a world must stay apart from the policies it is
then asked to rank: :func:`pool_overlaps` checks a pool manifest for that, by name, spec, weights
and training lineage.

A piece is what :func:`kosmos_env.worlds.tabletop_learned.dataset.record` records for ONE policy
(any spec ``make_policy`` builds: ``scripted:skill=0.6``, ``ckpt:path=FILE``, ...) on every task
for ``seeds_per_task`` seeds ``seed_offset + 1000 * task_index + i``: the same layouts for every
piece, so a seed held out by ``split_by_seed`` is held out for every policy. Seeds must lie in the
project's training range (``kosmos_env/study/seed_ranges.json``).

A piece's file name holds a key over the spec, the policy's content hash (for ``ckpt:`` the
checkpoint file's sha256, so a retrained file at the same path is recorded again) and the
recording settings. :func:`collect` keeps every piece whose file exists under its key, so a killed
collection loses only the pieces in flight; a piece is written under a temporary name and renamed,
so a file that exists is whole. :func:`merge_pieces` concatenates pieces in the policies' order.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kosmos_env.worlds.tabletop_learned import dataset as ds

PIECE_FORMAT = "kosmos-world-data-piece"
MERGED_FORMAT = "kosmos-world-data"
#: the pool a world may be trained on; every other pool of a manifest is held out from it
WORLD_POOL = "world"


@dataclass(frozen=True)
class RecordSettings:
    """How every piece is recorded (the same for all pieces of one dataset)."""

    seeds_per_task: int = 16
    seed_offset: int = 0
    horizon: int = 40
    image_size: tuple[int, int] = (64, 64)

    def seeds(self, n_tasks: int) -> list[int]:
        return [self.seed_offset + 1000 * t + i for t in range(n_tasks) for i in range(self.seeds_per_task)]

    def problem(self) -> str | None:
        """One line on what is wrong with these settings, or None."""
        from kosmos_env.utils.seed_ranges import RANGES_FILE, spans_text, stage_of
        from kosmos_env.worlds.tabletop_learned.objects import TASKS

        if not 1 <= self.seeds_per_task <= 1000:
            return f"seeds per task must be in 1..1000 (seeds are offset + 1000 * task + i), got {self.seeds_per_task}"
        if self.horizon < 1:
            return f"horizon must be >= 1, got {self.horizon}"
        if self.seed_offset < 0:
            return f"the seed offset must be >= 0, got {self.seed_offset}"
        outside = [s for s in self.seeds(len(TASKS)) if stage_of(s) != "training"]
        if outside:
            return (
                f"world-training rollouts must use training seeds {spans_text('training')} ({RANGES_FILE}); "
                f"seed offset {self.seed_offset} gives {len(outside)} outside it, first {outside[0]}"
            )
        return None


@dataclass(frozen=True)
class Piece:
    """One policy's recording: its spec (the episodes' policy label), content hash, key and file."""

    spec: str
    policy_hash: str
    key: str
    path: Path


def policy_identity(spec: str) -> tuple[str, dict[str, Any], str]:
    """(adapter name, kwargs, content hash) of a policy spec, without loading any model weights;
    ValueError with one line when the spec does not name a policy that can be built."""
    from kosmos_env.policies import parse_policy_arg, policy_hash_from_files

    try:
        name, kwargs = parse_policy_arg(spec)
        return name, kwargs, policy_hash_from_files(name, kwargs)
    except (ValueError, FileNotFoundError, KeyError, ImportError) as exc:
        raise ValueError(f"policy {spec!r}: {exc}") from None


def piece_for(spec: str, out_dir: str | Path, settings: RecordSettings, policy_hash: str | None = None) -> Piece:
    """Where ``spec``'s piece lives under ``out_dir`` for these settings."""
    h = policy_hash if policy_hash is not None else policy_identity(spec)[2]
    payload = json.dumps({"spec": spec, "policy_hash": h, "settings": asdict(settings)}, sort_keys=True)
    key = hashlib.sha256(payload.encode()).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9._=-]+", "_", spec.replace("ckpt:path=", "ckpt_"))[-60:].strip("_.") or "policy"
    return Piece(spec, h, key, Path(out_dir) / f"{slug}-{key}.npz")


def piece_done(piece: Piece) -> bool:
    """A piece is done when its file exists and says it was recorded under this key."""
    if not piece.path.is_file():
        return False
    try:
        meta = ds.read_meta(piece.path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):  # cut short or not ours: record it again
        return False
    return bool(meta) and meta.get("format") == PIECE_FORMAT and meta.get("key") == piece.key


def record_piece(piece: Piece, settings: RecordSettings, progress: bool = False) -> dict[str, Any]:
    """Record ``piece.spec`` in the simulator and write the piece; returns the meta it was saved with."""
    from kosmos_env.policies import make_policy, parse_policy_arg

    name, kwargs = parse_policy_arg(piece.spec)
    policy = make_policy(name, **kwargs)
    t0 = time.perf_counter()
    try:
        episodes = ds.record(
            {piece.spec: policy},
            seeds_per_task=settings.seeds_per_task,
            seed_offset=settings.seed_offset,
            horizon=settings.horizon,
            image_size=settings.image_size,
            progress=progress,
        )
        config = policy.config()
    finally:
        policy.close()
    meta = {
        "format": PIECE_FORMAT,
        "key": piece.key,
        "policy": piece.spec,
        "policy_hash": piece.policy_hash,
        "policy_config": json.loads(json.dumps(config, default=str)),
        "settings": asdict(settings),
        "seeds": f"{settings.seed_offset} + 1000*task + [0, {settings.seeds_per_task})",
        "episodes": len(episodes),
        # the simulator's verdict at the horizon, on these training seeds (never a reported result)
        "success_at_horizon": round(float(episodes.success[:, -1].mean()), 4),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    meta = json.loads(json.dumps(meta))  # as it reads back from the file (tuples become lists)
    tmp = piece.path.with_name(piece.path.name + f".tmp{os.getpid()}")
    episodes.save(tmp, meta)
    os.replace(tmp, piece.path)
    return meta


def _record_in_worker(piece: Piece, settings: RecordSettings, threads: int) -> dict[str, Any]:
    """A pool worker's job: one piece, with torch held to ``threads`` (the rule for W workers)."""
    from kosmos_env.utils.threads import apply_threads

    apply_threads(threads)
    return record_piece(piece, settings)


def collect(
    specs: Sequence[str],
    out_dir: str | Path,
    settings: RecordSettings,
    workers: int = 1,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> list[Piece]:
    """Record every policy in ``specs`` that has no finished piece under ``out_dir``; returns all
    pieces in ``specs`` order. ``workers`` > 1 records pieces in that many processes (spawned)."""
    problem = settings.problem()
    if problem:
        raise ValueError(problem)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    dupes = sorted({s for s in specs if list(specs).count(s) > 1})
    if dupes:
        raise ValueError(f"policy {dupes[0]!r} is listed twice: each policy is one piece")
    if not specs:
        raise ValueError("no policies to record")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pieces = [piece_for(s, out, settings, policy_identity(s)[2]) for s in specs]
    todo = [p for p in pieces if not piece_done(p)]
    log(f"{len(pieces) - len(todo)} of {len(pieces)} pieces already recorded in {out}; recording {len(todo)}")

    def done_line(i: int, meta: Mapping[str, Any]) -> None:
        log(
            f"[{i}/{len(todo)}] {meta['policy']}: {meta['episodes']} episodes, success at the horizon "
            f"{meta['success_at_horizon']:.2f}, {meta['seconds']:.0f} s"
        )

    if workers == 1 or len(todo) <= 1:
        for i, piece in enumerate(todo, 1):
            done_line(i, record_piece(piece, settings, progress=progress))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        from kosmos_env.utils.threads import threads_per_worker

        n = min(workers, len(todo))
        threads = threads_per_worker(n)
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_record_in_worker, p, settings, threads) for p in todo]
            for i, fut in enumerate(as_completed(futures), 1):
                done_line(i, fut.result())
    return pieces


def merge_pieces(pieces: Sequence[Piece | str | Path]) -> tuple[ds.Episodes, dict[str, Any]]:
    """The pieces' episodes in the given order (each episode keeps its policy label) and the meta
    of the merged set: every piece's meta and the episodes per policy."""
    paths = [p.path if isinstance(p, Piece) else Path(p) for p in pieces]
    parts, metas = [], []
    for path in paths:
        meta = ds.read_meta(path) if path.is_file() else None
        if not meta or meta.get("format") != PIECE_FORMAT:
            raise ValueError(f"{path} is not a recorded piece (record it with train-world --pieces)")
        parts.append(ds.Episodes.load(path))
        metas.append(meta)
    settings = {json.dumps(m["settings"], sort_keys=True) for m in metas}
    if len(settings) > 1:
        raise ValueError("pieces recorded with different settings (seeds, horizon, image size) cannot be merged")
    merged = ds.concatenate(parts)
    counts = np.bincount(merged.policy, minlength=len(merged.policy_names))
    meta = {
        "format": MERGED_FORMAT,
        "settings": metas[0]["settings"],
        "policies": {
            name: {"episodes": int(c), "policy_hash": next(m["policy_hash"] for m in metas if m["policy"] == name)}
            for name, c in zip(merged.policy_names, counts, strict=True)
        },
        "pieces": metas,
    }
    return merged, meta


def weights_digest(path: str | Path) -> str:
    """sha256 over a safetensors file's tensors (names, dtypes, shapes, bytes), metadata left out:
    two files of the same network hash alike even when their metadata (say, the path of the clone
    a run started from) differ."""
    from safetensors.numpy import load_file

    tensors = load_file(str(path))
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = np.ascontiguousarray(tensors[name])
        h.update(f"{name}|{t.dtype.str}|{t.shape}|".encode())
        h.update(t.tobytes())
    return h.hexdigest()


def load_manifest(path: str | Path) -> dict[str, Any]:
    """A policy-pool manifest (JSON), checked: ``pools`` holds the :data:`WORLD_POOL` and at least
    one other pool, each a list of entries with ``name`` and ``spec``, and no two pools overlap
    (:func:`pool_overlaps`). ValueError with one line otherwise."""
    try:
        manifest = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"policy-pool manifest {path}: cannot be read as JSON ({exc})") from None
    pools = manifest.get("pools") if isinstance(manifest, dict) else None
    if not isinstance(pools, dict) or WORLD_POOL not in pools or len(pools) < 2:
        raise ValueError(f"policy-pool manifest {path}: needs 'pools' with {WORLD_POOL!r} and a held-out pool")
    for pool, entries in pools.items():
        if not isinstance(entries, list) or not all(
            isinstance(e, dict) and "name" in e and "spec" in e for e in entries
        ):
            raise ValueError(f"policy-pool manifest {path}: pool {pool!r} must list entries with 'name' and 'spec'")
    overlaps = pool_overlaps(manifest)
    if overlaps:
        raise ValueError(f"policy-pool manifest {path}: pools overlap: {overlaps[0]}")
    return manifest


def pool_overlaps(manifest: Mapping[str, Any]) -> list[str]:
    """Every way a policy of one pool is also in another: the same name, spec, checkpoint path,
    weights digest (an alias file of the same network counts, via its ``aliases``) or training
    lineage. Empty when the pools are disjoint."""
    fields = ("name", "spec", "path", "weights_digest", "lineage")
    seen: dict[tuple[str, str], str] = {}
    found = []
    for pool, entries in manifest["pools"].items():
        for entry in entries:
            values = [(f, entry.get(f)) for f in fields if entry.get(f)]
            values += [("path", a["path"]) for a in entry.get("aliases", []) if a.get("path")]
            values += [
                ("weights_digest", a["weights_digest"]) for a in entry.get("aliases", []) if a.get("weights_digest")
            ]
            for field, value in values:
                other = seen.setdefault((field, str(value)), pool)
                if other != pool:
                    found.append(f"{field} {value!r} is in pool {other!r} and pool {pool!r} ({entry['name']})")
    return found


def world_pool(manifest_path: str | Path) -> list[dict[str, Any]]:
    """The manifest's world-training entries, checked against the files on disk: every checkpoint is
    present, holds the weights the manifest names (``weights_digest``), and those weights are no
    held-out policy's (a file copied or renamed since the manifest was written is caught here, not
    only by the names it lists). ValueError with one line otherwise."""
    manifest = load_manifest(manifest_path)
    held = {
        digest: entry["name"]
        for pool, entries in manifest["pools"].items()
        if pool != WORLD_POOL
        for entry in entries
        for digest in [entry.get("weights_digest")] + [a.get("weights_digest") for a in entry.get("aliases", [])]
        if digest
    }
    entries = manifest["pools"][WORLD_POOL]
    for entry in entries:
        path = entry.get("path")
        if not path:
            continue
        if not Path(path).is_file():
            how = entry.get("regenerate") or "see the manifest"
            raise ValueError(f"world-pool policy {entry['name']}: no file {path} (run from the repository root; {how})")
        digest = weights_digest(path)
        if digest in held:
            raise ValueError(f"world-pool policy {entry['name']}: {path} holds the weights of held-out {held[digest]}")
        if digest != entry.get("weights_digest"):
            raise ValueError(
                f"world-pool policy {entry['name']}: {path} does not hold the weights the manifest names "
                f"(weights_digest); write the manifest again from the files"
            )
    return entries
