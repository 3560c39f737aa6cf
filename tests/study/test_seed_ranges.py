"""The declared seed ranges: disjoint, checked, and every default seed in the stage it claims."""

import inspect
from itertools import pairwise

import pytest

from kosmos_env.study.seed_ranges import STAGES, check_seeds, seed_ranges, stage_of, validate_ranges


def test_declared_ranges_are_disjoint_and_cover_the_known_blocks():
    ranges = seed_ranges()
    assert set(ranges) == set(STAGES)
    spans = sorted((a, b) for v in ranges.values() for a, b in v)
    assert all(b1 < a2 for (_, b1), (a2, _) in pairwise(spans))
    assert stage_of(50000) == "training" and stage_of(250000) == "tuning" and stage_of(140000) == "evaluation"
    assert stage_of(10**7) is None


def test_overlap_and_malformed_ranges_are_refused():
    with pytest.raises(ValueError, match="overlap"):
        validate_ranges({"training": [[0, 10]], "tuning": [[5, 20]], "evaluation": [[30, 40]]})
    with pytest.raises(ValueError, match="first <= last"):
        validate_ranges({"training": [[10, 0]], "tuning": [[15, 20]], "evaluation": [[30, 40]]})
    with pytest.raises(ValueError, match="'evaluation' must be"):
        validate_ranges({"training": [[0, 1]], "tuning": [[2, 3]]})


def test_check_seeds_names_the_first_offender_in_one_line():
    check_seeds([100000, 100001], "evaluation")
    with pytest.raises(ValueError) as e:
        check_seeds([100000, 250003], "evaluation", "study seeds")
    msg = str(e.value)
    assert "\n" not in msg and "250003" in msg and "tuning" in msg and "study seeds" in msg


def _default(func, name):
    return inspect.signature(func).parameters[name].default


def test_defaults_fall_in_the_stage_they_claim():
    import argparse

    from kosmos_env.commands import study as study_cmd
    from kosmos_env.commands import train_policy
    from kosmos_env.study.run import StudyConfig
    from kosmos_env.worlds.tabletop_learned.dataset import record

    # the study evaluates: its default seeds (4 tasks x 5 seeds) are evaluation seeds
    cfg = StudyConfig()
    check_seeds([cfg.seed_offset + 1000 * t + i for t in range(4) for i in range(cfg.seeds)], "evaluation")
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    study_cmd.add_parser(sub)
    train_policy.add_parser(sub)
    args = parser.parse_args(["study"])
    assert stage_of(args.seed_offset) == "evaluation"
    # the world model and the policies train on training seeds
    offset, per_task = _default(record, "seed_offset"), 16
    check_seeds([offset + 1000 * t + i for t in range(4) for i in range(per_task)], "training")
    args = parser.parse_args(["train-policy"])
    check_seeds(range(args.demo_seed_start, args.demo_seed_start + args.demo_seeds), "training")
