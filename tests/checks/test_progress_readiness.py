"""Progress-judge readiness (kosmos-env judge-check --progress): the real Bridge episode's progress must rise
chunk by chunk, a frozen copy's must not; a tiny random model runs end to end and is reported not ready."""

import json

import numpy as np
import pytest

import kosmos_env  # noqa: F401
from kosmos_env.checks.progress_readiness import CHUNK_FRAMES, check_progress_judge, episode_chunks, progress_cases
from kosmos_env.judges.base import ProgressScore
from tests.conftest import requires_extra

SIZE = (60, 80)


class EpisodeIndexJudge:
    """Progress = where the chunk's last frame sits in the real episode (a judge that knows the answer):
    the real episode rises from 1/36 to 1, the frozen copy (its first frame) stays at 0."""

    name = "episode_index_test"
    frame_size = tasks = None

    def __init__(self):
        (_, self.frames), _ = progress_cases(SIZE)

    def score_progress(self, chunks, instructions, tasks, first_frames=None):
        out = []
        for chunk in chunks:
            i = next(i for i, f in enumerate(self.frames) if np.array_equal(f, chunk[-1]))
            p = i / (len(self.frames) - 1)
            out.append(ProgressScore(p, p >= 0.9))
        return out


class FixedJudge:
    """Progress from a rule that ignores the pixels: constant, rising with the chunk's place, or abstaining."""

    name = "fixed_test"
    frame_size = tasks = None

    def __init__(self, rule):
        self.rule = rule

    def score_progress(self, chunks, instructions, tasks, first_frames=None):
        n = len(chunks)
        if self.rule == "abstain":
            return [ProgressScore(None, None, "???")] * n
        if self.rule == "constant":
            return [ProgressScore(0.5, False)] * n
        return [ProgressScore(i / (n - 1), False) for i in range(n)]  # "rising", whatever it sees


def test_the_episode_is_cut_as_the_env_steps_it():
    (real, frames), (frozen, still) = progress_cases(SIZE)
    chunks = episode_chunks(frames)
    assert len(chunks) == 9 and all(c.shape == (CHUNK_FRAMES, *SIZE, 3) for c in chunks)
    assert np.array_equal(np.concatenate(chunks), frames[1:])
    assert real.expect_rise and not frozen.expect_rise
    assert all(np.array_equal(f, frames[0]) for f in still)


def test_ready_only_when_the_real_curve_rises_and_the_frozen_one_does_not():
    report = check_progress_judge(EpisodeIndexJudge(), SIZE)
    real, frozen = report.cases
    assert report.ready and real.rises and not frozen.rises
    assert real.spearman == pytest.approx(1.0) and real.rise > 0.7 and frozen.rise == 0.0
    assert "READY: " in report.format() and report.to_dict()["mode"] == "progress"

    rising = check_progress_judge(FixedJudge("rising"), SIZE)  # rises on a world that never moved
    assert not rising.ready and [c.passed for c in rising.cases] == [True, False]
    assert "failed: frozen" in rising.format()
    constant = check_progress_judge(FixedJudge("constant"), SIZE)  # never rises
    assert not constant.ready and [c.passed for c in constant.cases] == [False, True]
    assert constant.to_dict()["cases"][0]["spearman"] is None  # a flat curve has no rank correlation
    abstaining = check_progress_judge(FixedJudge("abstain"), SIZE)
    assert not abstaining.ready and not any(c.passed for c in abstaining.cases)
    assert "abstained on most chunks" in abstaining.format()
    assert abstaining.to_dict()["cases"][0]["abstained"] == 9


def test_a_judge_that_scores_no_progress_is_one_clear_error(capsys):
    from kosmos_env.cli import main

    rc = main(["judge-check", "--progress", "--judge", "state"])
    err = capsys.readouterr().err
    assert rc == 2 and "scores no task progress" in err and "Traceback" not in err


@requires_extra("models")  # a tiny random Qwen2.5-VL
def test_judge_check_progress_on_a_tiny_random_model_runs_and_says_not_ready(tmp_path, capsys):
    from kosmos_env.cli import main
    from kosmos_env.testing.tiny_run import tiny_judge_dir

    spec = {
        "type": "vlm_progress",
        "local_path": tiny_judge_dir(tmp_path),
        "model_id": "kosmos-env/tiny-random-qwen2.5-vl",
        "revision": None,
        "max_new_tokens": 6,
        "max_pixels": 28 * 28 * 4,
    }
    rc = main(["judge-check", "--progress", "--judge", json.dumps(spec), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["ready"] is False and report["mode"] == "progress"
    assert [c["name"] for c in report["cases"]] == ["real", "frozen"]
    # random weights never answer in the schema: every chunk is an abstention, reported as such
    assert all(len(c["progress"]) == 9 and c["abstained"] == 9 for c in report["cases"])
    assert report["judge"]["spec"]["prompt_sha256"] and report["judge"]["model"]["source"] == "folder"
