"""The held-out split, fixed by rollout hash before any training.

A rollout is held out when ``int(sha256(rollout_hash), 16) % 100 < heldout_pct``. The rule
depends on the rollout's own hash only, not on the label set, the seed or the order, so the
same clip lands on the same side in every run, and a clip that appears in two campaigns (same
video bytes, same hash) can never be trained on in one and audited in the other.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from kosmos_env.utils.fileio import atomic_write
from kosmos_env.hashing import sha256_hex

SPLIT_FILE = "split.json"
RULE = "int(sha256(rollout_hash).hexdigest(), 16) % 100 < heldout_pct -> held out"


def bucket(rollout_hash: str) -> int:
    """0..99, from the sha256 of the rollout hash's text."""
    if not isinstance(rollout_hash, str) or not rollout_hash:
        raise ValueError(f"a rollout hash must be a non-empty string, got {rollout_hash!r}")
    return int(sha256_hex(rollout_hash), 16) % 100


def is_heldout(rollout_hash: str, heldout_pct: int) -> bool:
    return bucket(rollout_hash) < heldout_pct


def make_split(rollout_hashes: Iterable[str], heldout_pct: int = 20) -> dict[str, Any]:
    """{"rule", "heldout_pct", "train": [...], "heldout": [...]} (hashes sorted, duplicates merged)."""
    if isinstance(heldout_pct, bool) or not isinstance(heldout_pct, int) or not 0 < heldout_pct < 100:
        raise ValueError(f"heldout_pct must be a whole number in 1..99, got {heldout_pct!r}")
    hashes = sorted(set(rollout_hashes))
    held = [h for h in hashes if is_heldout(h, heldout_pct)]
    train = [h for h in hashes if not is_heldout(h, heldout_pct)]
    return {"rule": RULE, "heldout_pct": heldout_pct, "train": train, "heldout": held}


def write_split(folder: str | os.PathLike, split: Mapping[str, Any]) -> Path:
    path = Path(folder) / SPLIT_FILE
    atomic_write(path, json.dumps(dict(split), indent=1))
    return path


def read_split(path: str | os.PathLike) -> dict[str, Any]:
    """A split file, or the one in an adapter folder; checked against the rule."""
    path = Path(path)
    if path.is_dir():
        path = path / SPLIT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no split file at {path} (judge-distill writes split.json into the adapter folder)")
    split = json.loads(path.read_text(encoding="utf-8"))
    pct = split.get("heldout_pct")
    overlap = set(split.get("train", [])) & set(split.get("heldout", []))
    if overlap:
        raise ValueError(f"{path}: {len(overlap)} rollout(s) are both in train and held out")
    wrong = [h for h in split.get("heldout", []) if not is_heldout(h, pct)] + [
        h for h in split.get("train", []) if is_heldout(h, pct)
    ]
    if wrong:
        raise ValueError(
            f"{path}: {len(wrong)} rollout(s) are on the wrong side of the rule {RULE} with heldout_pct={pct}"
        )
    return split
