"""Campaign rows -> paired (policy x (task, seed, repeat)) matrix."""

from __future__ import annotations

import numpy as np
import pytest

from kosmos_env.stats.matrix import success_matrix


def _row(policy, seed, outcome, task="t", repeat=0, score=None):
    success = {"success": True, "failure": False}.get(outcome)
    return {
        "policy": policy,
        "task": task,
        "seed": seed,
        "repeat": repeat,
        "outcome": outcome,
        "success": success,
        "score": score if score is not None else (None if success is None else float(success)),
    }


def test_success_matrix_pairs_by_task_seed_repeat():
    rows = [
        _row("b", 1, "success"),
        _row("a", 1, "failure"),
        _row("a", 0, "success"),
        _row("b", 0, "discarded"),
        _row("a", 0, "success", repeat=1),  # b has no episode here
        _row("a", 0, "failure", task="u"),
        _row("b", 0, "success", task="u"),
    ]
    pm = success_matrix(rows)
    assert pm.policies == ["a", "b"]
    assert pm.keys == [("t", 0, 0), ("t", 0, 1), ("t", 1, 0), ("u", 0, 0)]
    expected = np.array([[1, 1, 0, 0], [np.nan, np.nan, 1, 1]], dtype=float)
    np.testing.assert_array_equal(pm.values, expected)
    full = pm.complete_columns()
    assert full.keys == [("t", 1, 0), ("u", 0, 0)]
    only_u = success_matrix(rows, task="u")
    assert only_u.keys == [("u", 0, 0)] and only_u.row("a").tolist() == [0.0]


def test_score_matrix_and_errors():
    rows = [_row("a", 0, "success", score=0.75), _row("b", 0, "failure", score=0.25)]
    pm = success_matrix(rows, value="score")
    assert pm.values[:, 0].tolist() == [0.75, 0.25]
    with pytest.raises(ValueError, match="duplicate"):
        success_matrix(rows + [_row("a", 0, "failure")])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        success_matrix([_row("a", 0, "success", score=1.5)], value="score")
    with pytest.raises(ValueError, match="lacks 'seed'"):
        success_matrix([{"policy": "a", "task": "t"}])
    with pytest.raises(ValueError, match="value must be"):
        success_matrix(rows, value="reward")
