"""The project's seed ranges (``seed_ranges.json`` beside this module): training, tuning and
evaluation, declared once and checked disjoint.

A seed fixes a simulator episode's initial scene. Training seeds fit models, judges, learned
baselines and policies; tuning seeds choose thresholds, rules and recipes; evaluation seeds only
produce reported results and never choose anything. ``kosmos-env register --study`` refuses
evaluation seeds outside the evaluation range.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from itertools import pairwise
from typing import Iterable

STAGES = ("training", "tuning", "evaluation")


@lru_cache(maxsize=1)
def seed_ranges() -> dict[str, tuple[tuple[int, int], ...]]:
    """Stage -> inclusive (first, last) ranges, validated: integers, first <= last, stages disjoint."""
    raw = json.loads((resources.files("kosmos_env.study") / "seed_ranges.json").read_text())
    return validate_ranges(raw)


def validate_ranges(raw: dict) -> dict[str, tuple[tuple[int, int], ...]]:
    out: dict[str, tuple[tuple[int, int], ...]] = {}
    for stage in STAGES:
        spans = raw.get(stage)
        if not isinstance(spans, list) or not spans:
            raise ValueError(f"seed ranges: {stage!r} must be a non-empty list of [first, last] pairs")
        pairs = []
        for span in spans:
            ok = (
                isinstance(span, list)
                and len(span) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in span)
                and 0 <= span[0] <= span[1]
            )
            if not ok:
                raise ValueError(
                    f"seed ranges: {stage!r} has {span!r}; each range is [first, last] with 0 <= first <= last"
                )
            pairs.append((span[0], span[1]))
        out[stage] = tuple(pairs)
    flat = sorted((a, b, s) for s, spans in out.items() for a, b in spans)
    for (a1, b1, s1), (a2, b2, s2) in pairwise(flat):
        if a2 <= b1:
            raise ValueError(f"seed ranges overlap: {s1} [{a1}, {b1}] and {s2} [{a2}, {b2}]")
    return out


def stage_of(seed: int) -> str | None:
    """The stage whose range holds ``seed``, or None if no declared range does."""
    for stage, spans in seed_ranges().items():
        if any(a <= seed <= b for a, b in spans):
            return stage
    return None


def check_seeds(seeds: Iterable[int], stage: str, what: str = "seeds") -> None:
    """One ValueError line if any seed lies outside ``stage``'s ranges."""
    if stage not in STAGES:
        raise ValueError(f"unknown seed stage {stage!r}; stages: {', '.join(STAGES)}")
    bad = sorted({int(s) for s in seeds if stage_of(int(s)) != stage})
    if bad:
        spans = " and ".join(f"[{a}, {b}]" for a, b in seed_ranges()[stage])
        where = stage_of(bad[0]) or "no declared range"
        raise ValueError(
            f"{what} must lie in the {stage} seed range {spans} (kosmos_env/study/seed_ranges.json); "
            f"{len(bad)} do not, first {bad[0]} (in {where})"
        )
