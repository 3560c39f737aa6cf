"""Turn a campaign's per-episode rows into a paired (policy × seed) matrix.

A campaign row is a dict with at least ``policy``, ``task``, ``seed``, ``repeat``, ``outcome``
("success" | "failure" | "discarded" | "abstained" | "error"), ``success`` (True/False/None)
and ``score`` (float in [0, 1] or None). Episodes of different policies are *paired* when
they share (task, seed, repeat): same initial state, so per-seed differences cancel the
seed's difficulty. Every statistic in this package takes the plain arrays this returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np


@dataclass
class PairedMatrix:
    """``values[p, k]`` is policy ``policies[p]``'s value on pairing key ``keys[k]``.

    NaN marks a missing episode or an undecided one (discarded/abstained/error, i.e. success or
    score is None). ``keys`` are (task, seed, repeat) tuples in sorted order.
    """

    policies: list[str]
    keys: list[tuple]
    values: np.ndarray

    def row(self, policy: str) -> np.ndarray:
        return self.values[self.policies.index(policy)]

    def complete_columns(self) -> "PairedMatrix":
        """Only the keys where every policy has a value (fully paired)."""
        keep = ~np.isnan(self.values).any(axis=0)
        return PairedMatrix(
            list(self.policies), [k for k, ok in zip(self.keys, keep, strict=True) if ok], self.values[:, keep]
        )


def _value(row: Mapping, field: str):
    if field == "success":
        v = row.get("success")
        if v is None:
            return np.nan
        if not isinstance(v, (bool, np.bool_)) and v not in (0, 1):
            raise ValueError(f"success must be True/False/None, got {v!r} in row {dict(row)}")
        return float(bool(v))
    if field == "score":
        v = row.get("score")
        if v is None:
            return np.nan
        v = float(v)
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"score must lie in [0, 1], got {v} in row {dict(row)}")
        return v
    raise ValueError(f"value must be 'success' or 'score', got {field!r}")


def success_matrix(rows: Iterable[Mapping], value: str = "success", task: str | None = None) -> PairedMatrix:
    """Build the (policy × (task, seed, repeat)) matrix of ``value`` ("success" or "score").

    ``task`` keeps only that task's rows. A (policy, task, seed, repeat) seen twice is a
    ValueError (the campaign ledger should never hold duplicates).
    """
    cells: dict[tuple, float] = {}
    policies: set[str] = set()
    keys: set[tuple] = set()
    for row in rows:
        for req in ("policy", "task", "seed"):
            if req not in row:
                raise ValueError(f"episode row lacks {req!r}: {dict(row)}")
        if task is not None and row["task"] != task:
            continue
        key = (row["task"], row["seed"], row.get("repeat", 0))
        pol = str(row["policy"])
        if (pol, key) in cells:
            raise ValueError(f"duplicate episode for policy {pol!r} at (task, seed, repeat)={key}")
        cells[(pol, key)] = _value(row, value)
        policies.add(pol)
        keys.add(key)
    pols = sorted(policies)
    ks = sorted(keys, key=lambda k: tuple((0, x, "") if isinstance(x, (int, float)) else (1, 0, str(x)) for x in k))
    m = np.full((len(pols), len(ks)), np.nan)
    pi = {p: i for i, p in enumerate(pols)}
    ki = {k: j for j, k in enumerate(ks)}
    for (pol, key), v in cells.items():
        m[pi[pol], ki[key]] = v
    return PairedMatrix(pols, ks, m)
