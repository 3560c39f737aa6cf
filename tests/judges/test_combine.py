"""Veto, fusion and the optimistic baseline; judge selection by name in the tabletop env."""

import numpy as np
import pytest

from kosmos_env.judges import JUDGES, make_judge
from kosmos_env.judges.base import Judgment, Rollout
from kosmos_env.judges.combine import FusionJudge, balanced_accuracy, false_pass_rate
from tests.support.robot_logs import LogBuilder, approach, pick_and_place


def make_rollout(log):
    return Rollout(
        frames=np.zeros((1, 8, 8, 3), np.uint8), instruction="put it there", actions=np.zeros((0, 7)), fps=5, log=log
    )


class Fixed:
    """A judge with a fixed verdict (the judges under combination are real; this one is the input)."""

    def __init__(self, success, score, name="fixed"):
        self.success, self.score, self.name = success, score, name

    def judge(self, rollout):
        return Judgment(self.success, self.score, "fixed", judge=self.name, model_id="m", prompt_sha256="abc")


def test_registered_names():
    assert {"state", "vlm", "robot_log", "veto", "fusion", "optimistic"} <= set(JUDGES)


def test_optimistic_always_passes():
    j = make_judge("optimistic").judge(make_rollout({}))
    assert j.success is True and j.score == 1.0


def test_veto_blocks_success_without_a_hold():
    empty = approach(LogBuilder()).close_on(0.0).open().log()
    veto = make_judge({"type": "veto", "judge": "optimistic"})
    j = veto.judge(make_rollout(empty))
    assert j.success is False and j.score < 0.5 and j.extras["vetoed"] and "vetoed" in j.rationale
    assert j.extras["inner_success"] is True and j.judge == "veto(optimistic)"


def test_veto_keeps_success_with_a_hold_and_never_promotes():
    veto = make_judge({"type": "veto", "judge": "optimistic"})
    j = veto.judge(make_rollout(pick_and_place()))
    assert j.success is True and j.score == 1.0 and not j.extras["vetoed"]
    for inner in (Fixed(False, 0.1), Fixed(None, 0.0)):
        v = make_judge({"type": "veto", "judge": inner}).judge(make_rollout(pick_and_place()))
        assert v.success is inner.success and v.prompt_sha256 == "abc"


def test_veto_needs_a_log():
    with pytest.raises(ValueError, match="robot's log"):
        make_judge({"type": "veto", "judge": "optimistic"}).judge(make_rollout({}))


def test_veto_thresholds_pass_through():
    log = approach(LogBuilder()).close_on(0.06).step(n=2).log()  # short by 0.06: a hold at margin 0.05
    assert make_judge({"type": "veto", "judge": "optimistic"}).judge(make_rollout(log)).success is True
    assert (
        make_judge({"type": "veto", "judge": "optimistic", "hold_margin": 0.1}).judge(make_rollout(log)).success
        is False
    )


def test_fusion_weighted_mean_and_abstention_rule():
    r = make_rollout({})
    f = FusionJudge([Fixed(True, 0.9), Fixed(False, 0.2)], weights=[3, 1])
    j = f.judge(r)
    assert j.score == pytest.approx(0.75 * 0.9 + 0.25 * 0.2) and j.success is True
    # an abstaining judge is left out and the others renormalised
    j = FusionJudge([Fixed(None, 0.0), Fixed(False, 0.2), Fixed(True, 1.0)], weights=[1, 1, 2]).judge(r)
    assert j.score == pytest.approx((0.2 + 2.0) / 3) and j.success is True
    # abstainers holding more than half of the weight: abstain
    j = FusionJudge([Fixed(None, 0.0), Fixed(True, 1.0)], weights=[2, 1]).judge(r)
    assert j.success is None
    assert FusionJudge([Fixed(None, 0.0)]).judge(r).success is None
    with pytest.raises(ValueError):
        FusionJudge([Fixed(True, 1.0)], weights=[1, 2])
    with pytest.raises(ValueError):
        FusionJudge([])


def test_fusion_of_log_and_optimistic_from_specs():
    f = make_judge({"type": "fusion", "judges": ["robot_log", "optimistic"], "weights": [2, 1], "threshold": 0.6})
    empty = approach(LogBuilder()).close_on(0.0).open().log()
    j = f.judge(make_rollout(empty))
    # log score (Z = -0.25 -> 1.75/6) weighted 2, optimistic 1.0 weighted 1
    assert j.score == pytest.approx((2 * 1.75 / 6 + 1.0) / 3) and j.success is False


def test_metrics():
    js = [Judgment(True, 1.0), Judgment(False, 0.0), Judgment(None, 0.0), Judgment(True, 1.0)]
    truth = [True, False, False, False]
    assert false_pass_rate(js, truth) == pytest.approx(1 / 3)
    assert balanced_accuracy(js, truth) == pytest.approx((1.0 + 1 / 3) / 2)


def test_tabletop_env_picks_a_judge_by_name():
    gymnasium = pytest.importorskip("gymnasium")
    import kosmos_env  # noqa: F401
    from kosmos_env.policies import make_policy

    for name in ("robot_log", {"type": "veto", "judge": "optimistic"}):
        env = gymnasium.make("Kosmos-Tabletop-v1", image_size=[64, 64], judge=name)
        policy = make_policy("scripted", skill=1.0, seed=0)
        obs, _ = env.reset(seed=0)
        policy.reset(obs["instruction"], seed=0)
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(policy.act(obs))
            done = terminated or truncated
        truth = info["ground_truth"]["success"]
        assert info["judgment"]["success"] in (True, False)
        assert info["judgment"]["judge"] in ("robot_log", "veto(optimistic)")
        assert reward == info["judgment"]["score"]
        if truth:  # a skilled policy's success shows a hold in the log
            assert info["judgment"]["extras"].get("held", info["judgment"]["extras"].get("log_events", {}).get("held"))
        env.close()
