"""The learned action-only baseline judge: shipped coefficients, features, verdicts, bad files."""

import json

import numpy as np
import pytest

from kosmos_env.judges import make_judge
from kosmos_env.judges.action_learned import BASE_FEATURES, LearnedActionJudge, action_features, load_coefficients
from kosmos_env.judges.base import Rollout


def _pick_and_place(n=40):
    """Down, close, lift, carry, open: the command pattern of a clean pick and place."""
    a = np.zeros((n, 7))
    a[:, 6] = 1.0
    a[0:8, 2] = -0.017  # descend
    a[8:12, 6] = 0.0  # close
    a[12:18, 2] = 0.015  # lift
    a[12:30, 6] = 0.0
    a[18:28, 1] = 0.012  # carry
    return a


def _rollout(actions, task):
    return Rollout(
        frames=np.zeros((len(actions) + 1, 8, 8, 3), np.uint8), instruction="", actions=actions, fps=5, task=task
    )


def test_shipped_coefficients_load_and_carry_their_fit():
    c = load_coefficients()
    assert c["features"][: len(BASE_FEATURES)] == list(BASE_FEATURES)
    assert len(c["coef"]) == len(BASE_FEATURES) + len(c["tasks"]) and len(c["sha256"]) == 64
    assert "training_seeds" in c["fit"] and c["fit"]["training_seeds"].startswith("50000")


def test_features_read_the_commands_only():
    tasks = ["a", "b"]
    x = action_features(_pick_and_place(), "b", tasks)
    assert x.shape == (len(BASE_FEATURES) + 2,) and x[-2:].tolist() == [0.0, 1.0]
    f = dict(zip(BASE_FEATURES, x, strict=False))  # the base features only, not the task one-hot after them
    assert f["n_closed_runs"] == 1 and f["released"] == 1 and f["max_rise_closed"] > 0.05
    assert action_features(np.zeros((40, 7)) + [0, 0, 0, 0, 0, 0, 1], "zzz", tasks)[-2:].tolist() == [0.0, 0.0]


def test_a_clean_pick_and_place_scores_above_an_arm_that_never_closes():
    judge = make_judge("action_learned")
    task = judge.coefficients["tasks"][0]
    idle = np.zeros((40, 7))
    idle[:, 6] = 1.0
    good, bad = judge.judge(_rollout(_pick_and_place(), task)), judge.judge(_rollout(idle, task))
    assert good.score > bad.score and not bad.success
    assert "fitted P(success)" in good.rationale and good.judge == "action_learned"


def test_a_bad_coefficients_file_is_one_line(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        LearnedActionJudge(str(bad))
    c = json.loads(json.dumps(load_coefficients()))
    c["scale"][0] = 0.0
    bad.write_text(json.dumps(c))
    with pytest.raises(ValueError, match="scale > 0"):
        LearnedActionJudge(str(bad))
    with pytest.raises(FileNotFoundError, match="fit them"):
        LearnedActionJudge(str(tmp_path / "missing.json"))
