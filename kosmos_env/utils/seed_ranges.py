"""The project's seed ranges (``kosmos_env/study/seed_ranges.json``): training, tuning and
evaluation, declared once and checked disjoint.

A seed fixes a simulator episode's initial scene. Training seeds fit models, judges, learned
baselines and policies; tuning seeds choose thresholds, rules and recipes; evaluation seeds only
produce reported results and never choose anything. ``kosmos-env eval`` and ``rollout`` start at
the first evaluation seed by default; a campaign on training or tuning seeds says so when it
starts and in its results (:func:`seed_provenance`), and ``eval --registration`` and ``register``
refuse one. ``kosmos-env register --study`` refuses study seeds outside the evaluation range.

This module sits in the lowest layer so that campaigns (which may not import
:mod:`kosmos_env.study`) can read the ranges too; the JSON is read as a file of the package, not
imported, and :mod:`kosmos_env.study.seed_ranges` re-exports these names.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from itertools import pairwise
from typing import Any, Iterable

STAGES = ("training", "tuning", "evaluation")
#: where the ranges are declared, as messages name it
RANGES_FILE = "kosmos_env/study/seed_ranges.json"


@lru_cache(maxsize=1)
def seed_ranges() -> dict[str, tuple[tuple[int, int], ...]]:
    """Stage -> inclusive (first, last) ranges, validated: integers, first <= last, stages disjoint."""
    raw = json.loads((resources.files("kosmos_env") / "study" / "seed_ranges.json").read_text())
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


def spans_text(stage: str) -> str:
    """``[100000, 199999] and [330000, 399999]``: a stage's ranges as messages print them."""
    return " and ".join(f"[{a}, {b}]" for a, b in seed_ranges()[stage])


def check_seeds(seeds: Iterable[int], stage: str, what: str = "seeds") -> None:
    """One ValueError line if any seed lies outside ``stage``'s ranges."""
    if stage not in STAGES:
        raise ValueError(f"unknown seed stage {stage!r}; stages: {', '.join(STAGES)}")
    bad = sorted({int(s) for s in seeds if stage_of(int(s)) != stage})
    if bad:
        where = stage_of(bad[0]) or "no declared range"
        raise ValueError(
            f"{what} must lie in the {stage} seed range {spans_text(stage)} ({RANGES_FILE}); "
            f"{len(bad)} do not, first {bad[0]} (in {where})"
        )


def evaluation_start() -> int:
    """The first evaluation seed: where ``eval`` and ``rollout`` start by default."""
    return seed_ranges()["evaluation"][0][0]


def evaluation_seeds(count: int, offset: int | None = None) -> list[int]:
    """``count`` consecutive seeds from ``offset`` (default :func:`evaluation_start`)."""
    first = evaluation_start() if offset is None else int(offset)
    return list(range(first, first + int(count)))


def stage_counts(seeds: Iterable[int]) -> dict[str, int]:
    """How many of ``seeds`` lie in each stage's ranges, and in none (``undeclared``)."""
    counts = dict.fromkeys((*STAGES, "undeclared"), 0)
    for s in seeds:
        counts[stage_of(int(s)) or "undeclared"] += 1
    return counts


def seed_provenance(seeds: Iterable[int]) -> dict[str, Any]:
    """What a campaign's results record about its seeds: counts per stage and whether every seed is
    held out (in the evaluation range), with the ranges they were counted against."""
    counts = stage_counts(seeds)
    return {
        "counts": counts,
        "held_out": counts["training"] == 0 and counts["tuning"] == 0 and counts["undeclared"] == 0,
        "ranges": {stage: [list(span) for span in spans] for stage, spans in seed_ranges().items()},
        "declared_in": RANGES_FILE,
    }


def seeds_text(seeds: Iterable[int]) -> str:
    """``100000-100004`` for a run of consecutive seeds, else the first few listed."""
    seeds = sorted(int(s) for s in seeds)
    if not seeds:
        return "no seeds"
    if seeds == list(range(seeds[0], seeds[-1] + 1)):
        return str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    shown = ", ".join(map(str, seeds[:4]))
    return shown + (f", ... ({len(seeds)} seeds)" if len(seeds) > 4 else "")


def overlap_line(seeds: Iterable[int]) -> str | None:
    """One line when seeds lie in the training or tuning range (None when all are held out).

    The ranges are the project's, shared by every learned world, judge, baseline and policy it
    trains: a seed in them is a scene one of them was fit or tuned on, so a result there is not
    held out."""
    seeds = [int(s) for s in seeds]
    counts = stage_counts(seeds)
    parts = [
        f"{counts[stage]} in the {stage} range ({spans_text(stage).replace(' and ', ', ')})"
        for stage in ("training", "tuning")
        if counts[stage]
    ]
    if not parts:
        return None
    return (
        f"seeds {seeds_text(seeds)}, {len(seeds)} in all: {' and '.join(parts)} of {RANGES_FILE}, scenes the "
        f"learned worlds, judges and policies were trained or tuned on, so results on them are not held out"
    )
