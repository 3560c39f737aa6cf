"""The frame classifier as a progress judge: ``score_progress`` reads each chunk's last frame, batches
episodes of different tasks in one call, and leaves ``score_frames`` / ``judge`` as they were.

Frames are real: one scripted episode in the simulator at the classifier's 64x64, scored by the
shipped weights."""

from __future__ import annotations

import numpy as np
import pytest

from kosmos_env.judges.base import ProgressJudge, ProgressScore, Rollout
from kosmos_env.judges.vision_frame import TASKS, FrameVisionJudge

TASK = "carrot_on_plate"


@pytest.fixture(scope="module")
def episode():
    """(frames (T+1, 64, 64, 3), simulator success after the last step) of a scripted expert episode."""
    import gymnasium

    import kosmos_env  # noqa: F401
    from kosmos_env.policies import make_policy
    from kosmos_env.rollouts import run_episode

    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), gate={"enabled": False}, defer_judging=True)
    try:
        result = run_episode(env, make_policy("scripted", skill=1.0), seed=390000, task=TASK)
    finally:
        env.close()
    return result.rollout.frames, bool(result.ground_truth["success"])


@pytest.fixture(scope="module")
def judge():
    j = FrameVisionJudge()
    j.preflight()
    return j


def test_it_is_a_progress_judge(judge):
    assert isinstance(judge, ProgressJudge)
    assert judge.frame_size == (64, 64) and judge.tasks == TASKS


def test_progress_is_the_success_probability_of_each_chunks_last_frame(episode, judge):
    frames, _ = episode
    # three "episodes" of different tasks and chunk lengths in one call
    chunks = [frames[1:4], frames[-3:], frames[-1:]]
    tasks = [TASK, TASK, "eggplant_in_basket"]
    scores = judge.score_progress(chunks, ["i"] * 3, tasks, first_frames=[frames[0]] * 3)
    assert all(isinstance(s, ProgressScore) for s in scores) and len(scores) == 3
    for chunk, task, score in zip(chunks, tasks, scores, strict=True):
        expected = float(judge.score_frames(chunk[-1:], task)[0])
        assert score.progress == pytest.approx(expected, abs=1e-6)
        assert score.success is (score.progress >= judge.threshold)
        assert score.raw == "" and not score.abstained


def test_the_expert_episode_progresses_from_unsolved_to_solved(episode, judge):
    frames, solved = episode
    assert solved, "the scripted expert should solve seed 390000 (the frames of this test come from it)"
    scores = judge.score_progress([frames[1:2], frames[-1:]], ["", ""], [TASK, TASK])
    assert scores[0].progress < 0.5 <= scores[1].progress
    assert scores[0].success is False and scores[1].success is True


def test_threshold_sets_the_success_flag_and_judge_is_unchanged(episode):
    frames, _ = episode
    strict = FrameVisionJudge(threshold=0.999999)
    [score] = strict.score_progress([frames[-2:]], [""], [TASK])
    assert score.success is (score.progress >= 0.999999)
    rollout = Rollout(frames=frames, instruction="", actions=np.zeros((len(frames) - 1, 7)), fps=5.0, task=TASK)
    verdict = strict.judge(rollout)
    assert verdict.score == pytest.approx(score.progress, abs=1e-6)
    assert verdict.success is score.success


def test_no_episodes_no_scores(judge):
    assert judge.score_progress([], [], []) == []


@pytest.mark.parametrize(
    "chunks, instructions, tasks, first, match",
    [
        ([np.zeros((1, 64, 64, 3), np.uint8)], [], [TASK], None, "one instruction and one task per chunk"),
        ([np.zeros((1, 64, 64, 3), np.uint8)], [""], [TASK], [], "first frames"),
        ([np.zeros((1, 64, 64, 3), np.uint8)], [""], ["fold_laundry"], None, "knows tasks"),
        ([np.zeros((0, 64, 64, 3), np.uint8)], [""], [TASK], None, r"chunk 0 has shape \(0, 64, 64, 3\)"),
        ([np.zeros((1, 128, 128, 3), np.uint8)], [""], [TASK], None, "reads chunks of 64x64"),
        ([np.zeros((64, 64, 3), np.uint8)], [""], [TASK], None, "reads chunks of 64x64"),
    ],
)
def test_bad_input_is_one_clear_error(judge, chunks, instructions, tasks, first, match):
    with pytest.raises(ValueError, match=match):
        judge.score_progress(chunks, instructions, tasks, first_frames=first)
