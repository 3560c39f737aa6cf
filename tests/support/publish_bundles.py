"""Real results bundles for the publish, leaderboard and W&B tests.

Campaigns are run with the real ``kosmos-env eval`` on the embedded tabletop (a few seconds each,
cached per test session). Tests copy a campaign before changing it; :func:`edit_results` changes
results.json *and* re-hashes it in the manifest, so a test of a later check (a forged aggregate,
a forged spec hash) is not caught by the sha256 check first.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Callable

CAMPAIGNS = {
    # name: eval arguments (tabletop, carrot_on_plate); seeds from 0, so the campaign ids and design
    # hashes pinned in tests/test_hashing_pins.py stay those of the bundles they were pinned on
    "a": ["--policy", "scripted:skill=1.0", "--policy", "random", "--seeds", "3", "--seed-offset", "0"],
    "b": ["--policy", "scripted:skill=0.7", "--policy", "random", "--seeds", "4", "--seed-offset", "0"],
}


def run_eval(out: Path, name: str) -> Path:
    from kosmos_env.cli import main

    argv = [
        "eval",
        "--env",
        "Kosmos-Tabletop-v1",
        "--tasks",
        "carrot_on_plate",
        "--out",
        str(out),
        "--no-progress",
        *CAMPAIGNS[name],
    ]
    rc = main(argv)
    assert rc == 0, f"kosmos-env eval {' '.join(argv)} exited {rc}"
    assert (out / "results.json").is_file() and (out / "manifest.json").is_file()
    return out


def copy_bundle(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def rehash(root: Path, rel: str) -> None:
    """Update the manifest entry of ``rel`` to the file's current sha256."""
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"][rel] = hashlib.sha256((root / rel).read_bytes()).hexdigest()
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def edit_results(root: Path, change: Callable[[dict], None]) -> dict:
    """Apply ``change`` to results.json in place and re-hash it in the manifest."""
    results = json.loads((root / "results.json").read_text())
    change(results)
    (root / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    rehash(root, "results.json")
    return results


def flip_byte(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def first_video(root: Path) -> str:
    results = json.loads((root / "results.json").read_text())
    return next(r["artifacts"]["video"] for r in results["per_episode"] if r["artifacts"]["video"])


_CACHE: dict[str, Path] = {}


def campaign(tmp_path_factory, name: str) -> Path:
    """The finished campaign ``name`` (run once per test session, then reused read-only)."""
    if name not in _CACHE:
        _CACHE[name] = run_eval(tmp_path_factory.mktemp(f"campaign-{name}") / "camp", name)
    return _CACHE[name]


def forge_consistently(root: Path, change: Callable[[dict], None]) -> dict:
    """Edit results.json's episodes as a forger would, leaving every check of consistency passing:
    ``change`` edits the results, then the aggregates are recounted, episodes.parquet rewritten and
    both re-hashed in the manifest."""
    import pyarrow.parquet as pq

    from kosmos_env.campaign.bundle import aggregate, parquet_table

    def forge(results):
        change(results)
        c = results["campaign"]
        results["aggregated"].update(aggregate(results["per_episode"], [p["label"] for p in c["policies"]], c["tasks"]))

    results = edit_results(root, forge)
    pq.write_table(parquet_table(results["per_episode"]), root / "episodes.parquet")
    rehash(root, "episodes.parquet")
    return results
