"""Progress calibration: the numbers against hand computations on synthetic episodes (a perfect judge
scores +1, an anti-judge -1, the time baseline what scipy says, intervals resample whole episodes,
abstentions and unmoved objects are counted apart), and one real episode end to end."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from kosmos_env.checks import progress_calibration as pc

HORIZON = 6


def episode(distance, progress, *, start=None, judged=None, truth=None, policy="p", seed=0, task="carrot_on_plate"):
    distance = np.asarray(distance, dtype=float)
    progress = np.asarray(progress, dtype=float)
    n = len(distance)
    return pc.CalibrationEpisode(
        policy=policy,
        task=task,
        seed=seed,
        horizon=n,
        progress=progress,
        judged_success=np.asarray(judged if judged is not None else (progress >= 0.5), dtype=float),
        true_success=np.asarray(truth if truth is not None else np.zeros(n), dtype=bool),
        distance_3d=distance,
        distance_horizontal=distance,
        start_distance_3d=float(start if start is not None else distance[0] + 0.01),
        start_distance_horizontal=float(start if start is not None else distance[0] + 0.01),
    )


# distances in metres, two episodes of different layouts that approach the goal unevenly
D1 = np.array([0.20, 0.18, 0.12, 0.15, 0.05, 0.03])
D2 = np.array([0.30, 0.31, 0.25, 0.10, 0.08, 0.09])


def closeness(distances, start):
    return -np.asarray(distances) / start


def test_a_perfect_judge_scores_one_and_an_anti_judge_minus_one():
    perfect = [episode(d, 1 - d / (d[0] + 0.01)) for d in (D1, D2)]
    anti = [episode(d, d / (d[0] + 0.01) / 2) for d in (D1, D2)]
    for eps, sign in ((perfect, 1.0), (anti, -1.0)):
        r = pc.analyze(eps, n_boot=200)
        for key in ("pooled_spearman", "within_episode_spearman"):
            est = r["judge"][key]
            assert est["estimate"] == pytest.approx(sign)
            assert est["lower"] == pytest.approx(sign) and est["upper"] == pytest.approx(sign)


def test_the_time_baseline_and_the_difference_are_what_a_hand_computation_gives():
    eps = [episode(D1, 1 - D1 / (D1[0] + 0.01)), episode(D2, 1 - D2 / (D2[0] + 0.01))]
    r = pc.analyze(eps, n_boot=200)
    time = np.concatenate([np.arange(1, 7) / 6, np.arange(1, 7) / 6])
    close = np.concatenate([closeness(D1, D1[0] + 0.01), closeness(D2, D2[0] + 0.01)])
    pooled_time = spearmanr(time, close).statistic
    assert r["time_baseline"]["pooled_spearman"]["estimate"] == pytest.approx(pooled_time)
    within_time = np.mean([spearmanr(np.arange(6), closeness(d, d[0] + 0.01)).statistic for d in (D1, D2)])
    assert r["time_baseline"]["within_episode_spearman"]["estimate"] == pytest.approx(within_time)
    assert r["judge_minus_time"]["pooled_spearman"]["estimate"] == pytest.approx(1 - pooled_time)
    assert r["judge_minus_time"]["within_episode_spearman"]["estimate"] == pytest.approx(1 - within_time)
    assert r["n_episodes"] == 2 and r["n_steps"] == 12 and r["abstained_steps"] == 0


def test_the_interval_resamples_whole_episodes():
    """One episode agrees perfectly, the other is its mirror: within-episode means are -1, 0 or +1 on
    every resample, so the interval is exactly [-1, 1] around 0."""
    eps = [episode(D1, 1 - D1 / 0.21), episode(D2, D2 / 0.31)]
    r = pc.analyze(eps, n_boot=400)["judge"]["within_episode_spearman"]
    assert r["estimate"] == pytest.approx(0.0)
    assert r["lower"] == pytest.approx(-1.0) and r["upper"] == pytest.approx(1.0)
    assert r["n_clusters"] == 2 and "whole clusters" in r["method"]


def test_unmoved_objects_and_abstentions_are_counted_apart():
    jitter = 0.25 + np.array([0.0, 0.0002, -0.0003, 0.0001, 0.0, 0.0004])  # settling, not progress
    progress = 1 - D1 / 0.21
    progress[2] = np.nan  # the judge abstained on step 3
    eps = [episode(D1, progress), episode(jitter, np.linspace(0, 0.1, 6), start=0.25)]
    r = pc.analyze(eps, n_boot=100)
    assert r["abstained_steps"] == 1
    within = r["judge"]["within_episode_spearman"]
    assert within["episodes_with_a_correlation"] == 1  # the jitter rounds to one distance: no correlation
    assert within["estimate"] == pytest.approx(1.0)
    assert within["lower"] is None and "no interval" in within["reason"]  # one value cannot bound itself
    assert np.all(eps[1].normalised_distance() == 1.0)


def test_the_success_flag_against_the_simulator():
    flags = [0, 0, 1, 1, np.nan, 1]
    truth = [0, 0, 0, 1, 1, 1]
    eps = [
        episode(D1, [0.1, 0.2, 0.6, 0.9, np.nan, 0.95], judged=flags, truth=truth),
        episode(D2, [0.0, 0.1, 0.1, 0.2, 0.3, 0.4], truth=[0] * 6),
    ]
    s = pc.analyze(eps, n_boot=200)["success_flag"]
    # decided steps: 5 of episode 1 (one wrong: step 3) and 6 of episode 2 (all right)
    assert s["step_accuracy"]["estimate"] == pytest.approx(10 / 11)
    assert s["final_accuracy"]["estimate"] == 1.0 and s["final_accuracy"]["n"] == 2
    assert s["final_true_success_rate"] == 0.5
    # progress ranks the 2 true-success steps with a score above all 8 unsuccessful ones
    assert s["step_auroc_of_progress"]["estimate"] == pytest.approx(1.0)
    assert s["true_success_step_rate"] == pytest.approx(3 / 12)


def test_episodes_round_trip_through_json():
    import json

    eps = [episode(D1, [0.1, np.nan, 0.3, 0.2, 0.8, 0.9], policy="a"), episode(D2, np.zeros(6), policy="b")]
    back = [pc.CalibrationEpisode.from_dict(json.loads(json.dumps(e.to_dict()))) for e in eps]
    assert pc.analyze(back, n_boot=50) == pc.analyze(eps, n_boot=50)
    assert set(pc.analyze(back, n_boot=50)["by_policy"]) == {"a", "b"}


def test_interval_text():
    assert pc.interval_text({"estimate": 0.5, "lower": 0.25, "upper": 0.75}, signed=True) == "+0.50 [+0.25, +0.75]"
    assert (
        pc.interval_text({"estimate": None, "reason": "undefined on these data"})
        == "undefined (undefined on these data)"
    )
    assert "no interval" in pc.interval_text({"estimate": 1.0, "lower": None, "reason": "only 1 episode"})


def test_seeds_follow_the_project_layout():
    assert pc.calibration_seeds(["a", "b"], 2, 390000) == {"a": [390000, 390001], "b": [391000, 391001]}
    with pytest.raises(ValueError, match="seeds per task"):
        pc.calibration_seeds(["a"], 0, 390000)


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"type": "state"}, "ProgressJudge"),
        ({"type": "no_such_judge"}, "no_such_judge"),
        ({"type": "vision_frame", "temperature": 2}, r"unknown setting\(s\) \['temperature'\]"),
        ({"type": "os:system"}, "never 'module:attr'"),
        ("vision_frame", "spec mapping"),
    ],
)
def test_a_spec_that_is_not_a_progress_judge_is_one_clear_error(spec, match):
    with pytest.raises(ValueError, match=match):
        pc.build_progress_judge(spec)


def test_one_real_episode_end_to_end():
    """The scripted expert on carrot_on_plate: the simulator's distances shrink, it ends solved, the
    frame classifier's progress ends high, and every series has one entry per step."""
    judge = pc.build_progress_judge({"type": "vision_frame"})
    eps = pc.collect(judge, ["scripted:skill=1.0"], {"carrot_on_plate": [390000]}, horizon=30)
    [ep] = eps
    assert ep.steps == 30 and ep.horizon == 30
    assert len(ep.distance_3d) == len(ep.true_success) == len(ep.judged_success) == 30
    assert 0.05 < ep.start_distance_3d < 0.6  # metres: the layout puts the carrot some way from the plate
    assert ep.true_success[-1] and ep.normalised_distance()[-1] < 0.3
    assert ep.progress[-1] >= 0.5 and ep.judged_success[-1] == 1.0
    assert np.all(ep.distance_horizontal <= ep.distance_3d + 1e-9)
    r = pc.analyze(eps, n_boot=50)
    assert r["judge"]["pooled_spearman"]["estimate"] > 0.5


class PixelChangeJudge:
    """Any progress judge, not only the frame classifier: the share of pixels that differ from the
    episode's first frame; abstains without a first frame. Reads any frame size and task."""

    name = "pixel_change"
    frame_size = None
    tasks = None

    def score_progress(self, chunks, instructions, tasks, first_frames=None):
        from kosmos_env.judges.base import ProgressScore

        if first_frames is None:
            return [ProgressScore(None, None) for _ in chunks]
        return [
            ProgressScore(float((np.asarray(c[-1]) != f).any(axis=-1).mean()), False)
            for c, f in zip(chunks, first_frames, strict=True)
        ]


def test_any_progress_judge_runs_through_it_at_the_envs_frame_size():
    judge = pc.build_progress_judge(PixelChangeJudge())
    [ep] = pc.collect(judge, ["scripted:skill=1.0"], {"spoon_on_towel": [390001]}, horizon=8)
    assert ep.steps == 8 and not np.isnan(ep.progress).any()  # it was given the first frame
    assert ep.progress[-1] > 0  # the arm moved: pixels changed
    assert np.all(ep.judged_success == 0.0)
    r = pc.analyze([ep], n_boot=20)
    assert r["abstained_steps"] == 0 and r["success_flag"]["step_accuracy"]["estimate"] == 1.0


def test_bad_runs_are_one_clear_error():
    judge = pc.build_progress_judge({"type": "vision_frame"})
    with pytest.raises(ValueError, match="knows tasks"):
        pc.collect(judge, ["random"], {"fold_laundry": [390000]})
    with pytest.raises(ValueError, match="policy 'nobody'"):
        pc.collect(judge, ["nobody"], {"carrot_on_plate": [390000]}, horizon=2)
    with pytest.raises(ValueError, match="reads 64x64 frames"):
        pc.collect(judge, ["random"], {"carrot_on_plate": [390000]}, image_size=(128, 128))
    with pytest.raises(ValueError, match="no score_progress"):
        pc.collect(object(), ["random"], {"carrot_on_plate": [390000]})
