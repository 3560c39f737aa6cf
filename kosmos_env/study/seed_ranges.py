"""The project's seed ranges (``seed_ranges.json`` beside this module): training, tuning and
evaluation, declared once and checked disjoint.

The code lives in :mod:`kosmos_env.utils.seed_ranges`, in the lowest layer, so that campaigns can
read the ranges too; this module keeps the names where the study and the training code import them.
"""

from __future__ import annotations

from kosmos_env.utils.seed_ranges import (
    STAGES,
    check_seeds,
    evaluation_start,
    seed_ranges,
    stage_of,
    validate_ranges,
)

__all__ = ["STAGES", "check_seeds", "evaluation_start", "seed_ranges", "stage_of", "validate_ranges"]
