"""The VLM progress judge on tiny random Qwen2.5-VL / Qwen3-VL models built offline: its pinned prompt, the
strict answer parser, one generate call for a batch of episodes, abstention on an unparseable answer."""

import inspect
import os
import re

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="needs the models extra (pip install -e '.[models]')")

from kosmos_env.judges import make_judge  # noqa: E402
from kosmos_env.judges.answer import AnswerError  # noqa: E402
from kosmos_env.judges.base import ProgressJudge, ProgressScore, Rollout  # noqa: E402
from kosmos_env.judges.vlm_progress import VLMProgressJudge  # noqa: E402
from kosmos_env.judges.vlm_progress_prompt import PROMPT_SHA256, parse_progress_answer  # noqa: E402
from kosmos_env.testing import qwen_tiny  # noqa: E402
from kosmos_env.worlds.base import MissingWeightsError  # noqa: E402

torch.set_num_threads(1)
SMALL = {"max_pixels": 56 * 56, "min_pixels": 28 * 28, "max_new_tokens": 8}
INSTRUCTION = "move the can to the left"


def episodes(n, seed=0, frames=4):
    rng = np.random.default_rng(seed)
    chunks = [rng.integers(0, 255, (frames, 48, 64, 3), dtype=np.uint8) for _ in range(n)]
    firsts = [rng.integers(0, 255, (48, 64, 3), dtype=np.uint8) for _ in range(n)]
    return chunks, firsts


class CountingGenerate:
    """Counts calls of the model's real ``generate`` (and the rows of each); the model still runs."""

    def __init__(self, model):
        self.real, self.rows = model.generate, []
        model.generate = self

    def __call__(self, *args, **kwargs):
        self.rows.append(int(kwargs["input_ids"].shape[0]))
        return self.real(*args, **kwargs)


@pytest.fixture(scope="module")
def qwen25():
    return qwen_tiny.build_qwen2_5_vl()


# -- the answer ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"progress": 0.4, "success": false}', (0.4, False)),
        ('<think>the can moved</think><answer>{"progress": 1, "success": true}</answer>', (1.0, True)),
        ('```json\n{"success": true, "progress": 0.8}\n```', (0.8, True)),
    ],
)
def test_answers_that_parse(text, expected):
    a = parse_progress_answer(text)
    assert (a.progress, a.success) == expected


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "empty answer"),
        ("progress 0.5", "not a single JSON object"),
        ('{"progress": 0.5}', "missing field"),
        ('{"progress": 0.5, "success": false, "reason": "x"}', "unexpected field"),
        ('{"progress": 1.5, "success": true}', "in [0, 1]"),
        ('{"progress": NaN, "success": false}', "NaN is not allowed"),
        ('{"progress": "half", "success": false}', "must be a number"),
        ('{"progress": 0.5, "success": "yes"}', "true or false"),
        ('{"progress": 0.2, "success": true}', "contradicts"),
        ('{"progress": 1.0, "success": false}', "contradicts"),
        ('{"progress": 0.5, "progress": 0.6, "success": false}', "duplicate"),
        ("<think>unfinished", "unterminated"),
    ],
)
def test_answers_that_do_not_parse_name_the_problem(text, problem):
    with pytest.raises(AnswerError, match=re.escape(problem)):
        parse_progress_answer(text)


# -- the pinned prompt and settings ------------------------------------------------------------------
def test_the_spec_pins_the_prompt_and_the_env_spec_carries_the_judges_own_defaults(qwen25):
    model, tok = qwen25
    judge = VLMProgressJudge(model=model, tokenizer=tok, **SMALL)
    assert isinstance(judge, ProgressJudge) and judge.trust_remote_code is False
    assert judge.spec["prompt_sha256"] == PROMPT_SHA256 and judge.spec["decoding"] == "greedy"
    with pytest.raises(ValueError, match="spec pins VLM progress judge prompt"):
        VLMProgressJudge(model=model, tokenizer=tok, prompt_sha256="0" * 64)
    # the spec layer's copy (it sits below the judges) is exactly the judge's defaults and prompt
    from kosmos_env.spec import STEP_JUDGE_PINS

    defaults = {k: p.default for k, p in inspect.signature(VLMProgressJudge).parameters.items()}
    pins = dict(STEP_JUDGE_PINS["vlm_progress"])
    assert pins.pop("prompt_sha256") == PROMPT_SHA256
    assert pins == {k: defaults[k] for k in pins}


def test_missing_weights_name_the_judge_and_where_to_point_it(monkeypatch, tmp_path):
    monkeypatch.delenv("KOSMOS_VLM_JUDGE_PATH", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(MissingWeightsError, match="VLM progress judge weights") as err:
        make_judge({"type": "vlm_progress", "model_id": "nobody/nothing-7B"})
    assert "'type': 'vlm_progress'" in str(err.value) and "KOSMOS_VLM_JUDGE_PATH" in str(err.value)


# -- scoring -----------------------------------------------------------------------------------------
def test_a_batch_of_episodes_is_one_generate_call_and_a_random_model_abstains(qwen25):
    model, tok = qwen25
    judge = make_judge({"type": "vlm_progress", **SMALL}, model=model, tokenizer=tok)
    counter = CountingGenerate(model)
    try:
        chunks, firsts = episodes(3)
        out = judge.score_progress(chunks, [INSTRUCTION] * 3, ["t"] * 3, first_frames=firsts)
        assert counter.rows == [3] and judge.calls == 1 and judge.rows == 3
        # random weights write random bytes: every episode abstains, its raw answer kept
        assert all(isinstance(s, ProgressScore) and s.abstained and s.success is None and s.raw for s in out)
        # greedy: the same inputs give the same answers, alone or in a batch
        alone = [
            judge.score_progress([c], [INSTRUCTION], ["t"], first_frames=[f])[0]
            for c, f in zip(chunks, firsts, strict=True)
        ]
        assert [s.raw for s in alone] == [s.raw for s in out]
        assert counter.rows == [3, 1, 1, 1]
        # episodes with and without a first frame share a batch (rows of different lengths, left padded)
        mixed = judge.score_progress(chunks[:2], [INSTRUCTION] * 2, ["t"] * 2, first_frames=[firsts[0], None])
        assert len(mixed) == 2 and counter.rows[-1] == 2
        assert judge.score_progress([], [], []) == []
    finally:
        model.generate = counter.real


def test_the_chunk_the_first_frame_and_the_instruction_reach_the_model(qwen25):
    model, tok = qwen25
    judge = VLMProgressJudge(model=model, tokenizer=tok, **dict(SMALL, max_new_tokens=1))
    seen = []
    hook = model.register_forward_hook(lambda m, a, k, out: seen.append(out.logits[0, -1].clone()), with_kwargs=True)
    try:
        (c0, c1), (f0, f1) = episodes(2)
        for chunk, first, instruction in [
            (c0, f0, INSTRUCTION),
            (c1, f0, INSTRUCTION),
            (c0, f1, INSTRUCTION),
            (c0, None, INSTRUCTION),
            (c0, f0, "put the eggplant into the pot"),
        ]:
            judge.score_progress([chunk], [instruction], ["t"], first_frames=[first])
    finally:
        hook.remove()
    assert len(seen) == 5
    for other in seen[1:]:
        assert not torch.allclose(seen[0], other)


def test_judging_a_rollout_is_its_frames_after_the_first_against_the_first(qwen25):
    model, tok = qwen25
    judge = VLMProgressJudge(model=model, tokenizer=tok, **SMALL)
    rng = np.random.default_rng(1)
    rollout = Rollout(
        frames=rng.integers(0, 255, (13, 48, 64, 3), dtype=np.uint8),
        instruction=INSTRUCTION,
        actions=np.zeros((12, 7), np.float32),
        fps=5.0,
    )
    (j,) = judge.judge_batch([rollout])
    assert j.abstained and j.score == 0.0 and j.rationale.startswith("abstain: ")
    assert j.extras["frames_shown"] == 8 and j.extras["first_frame_shown"] is True  # 12 thinned to max_frames
    assert j.prompt_sha256 == PROMPT_SHA256 and j.extras["model"]["source"] == "injected"


def test_qwen3_vl_family_runs_the_same_path():
    model, tok = qwen_tiny.build_qwen3_vl()
    judge = VLMProgressJudge(model=model, tokenizer=tok, **SMALL)
    chunks, firsts = episodes(2, frames=3)  # an odd chunk is padded to whole temporal patches
    out = judge.score_progress(chunks, [INSTRUCTION] * 2, ["t"] * 2, first_frames=firsts)
    assert len(out) == 2 and judge.calls == 1 and judge.family == "qwen3_vl"


def test_bad_inputs_are_one_clear_error(qwen25):
    model, tok = qwen25
    judge = VLMProgressJudge(model=model, tokenizer=tok, **SMALL)
    chunks, firsts = episodes(2)
    with pytest.raises(ValueError, match="2 chunks, 1 instructions"):
        judge.score_progress(chunks, [INSTRUCTION], ["t"] * 2)
    with pytest.raises(ValueError, match="2 chunks and 1 first frames"):
        judge.score_progress(chunks, [INSTRUCTION] * 2, ["t"] * 2, first_frames=firsts[:1])
    with pytest.raises(ValueError, match="uint8"):
        judge.score_progress([chunks[0].astype(np.float32)], [INSTRUCTION], ["t"])
    with pytest.raises(ValueError, match="non-empty instruction"):
        judge.score_progress([chunks[0]], ["  "], ["t"])
    with pytest.raises(ValueError, match="fps > 0"):
        VLMProgressJudge(model=model, tokenizer=tok, fps=0)
