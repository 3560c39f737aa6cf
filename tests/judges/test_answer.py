"""Strict answer parsing and the quorum rule of the VLM judge."""

import pytest

from kosmos_env.judges.answer import AnswerError, parse_answer, quorum, strip_wrappers

GOOD = '{"success": true, "progress": 0.9, "video_ok": true, "reason": "the carrot rests on the plate"}'
FAIL = '{"success": false, "progress": 0.2, "video_ok": true, "reason": "the gripper never touched the carrot"}'
BROKEN = '{"success": true, "progress": 1.0, "video_ok": false, "reason": "the carrot morphs into the plate"}'


def test_plain_json_parses():
    ans = parse_answer(GOOD)
    assert ans.success is True and ans.progress == 0.9 and ans.video_ok is True
    assert ans.reason == "the carrot rests on the plate"


@pytest.mark.parametrize(
    "text",
    [
        f"```json\n{GOOD}\n```",
        f"```\n{GOOD}\n```",
        f"<think>The arm moves right, then closes. {{not json}}</think>\n<answer>{GOOD}</answer>",
        f"<think>reasoning</think>{GOOD}",
        f"<answer>\n```json\n{GOOD}\n```\n</answer>",
        f"  \n{GOOD}\n ",
    ],
)
def test_usual_wrappers_are_stripped(text):
    assert parse_answer(text).success is True


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("Yes, the task succeeded.", "not a single JSON"),
        ('{"success": true, "progress": 0.9, "video_ok": true}', "missing field"),
        ('{"success": "yes", "progress": 0.9, "video_ok": true, "reason": "r"}', "'success' must be"),
        ('{"success": 1, "progress": 0.9, "video_ok": true, "reason": "r"}', "'success' must be"),
        ('{"success": true, "progress": 1.5, "video_ok": true, "reason": "r"}', "in [0, 1]"),
        ('{"success": true, "progress": NaN, "video_ok": true, "reason": "r"}', "NaN"),
        ('{"success": true, "progress": true, "video_ok": true, "reason": "r"}', "'progress'"),
        ('{"success": true, "progress": 0.5, "video_ok": "ok", "reason": "r"}', "'video_ok'"),
        ('{"success": true, "progress": 0.5, "video_ok": true, "reason": ""}', "'reason'"),
        ('{"success": true, "progress": 0.5, "video_ok": true, "reason": "r", "confidence": 1}', "unexpected field"),
        ('[{"success": true}]', "JSON object"),
        (GOOD + " Also the plate is blue.", "not a single JSON"),
        ('{"success": true, "progress": 0.9, "video_ok": true, "reason": "cut', "not a single JSON"),
        ("<think>the model ran out of tokens before answering", "unterminated"),
        (f"<answer>{GOOD}</answer><answer>{FAIL}</answer>", "2 <answer> blocks"),
        ('{"success": true, "progress": 0.9, "video_ok": true, "reason": "x"} {}', "not a single JSON"),
        ('{"success": false, "success": true, "progress": 0.9, "video_ok": true, "reason": "x"}', "duplicate field"),
    ],
)
def test_malformed_answers_raise_with_a_reason(text, message):
    with pytest.raises(AnswerError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_answer(text)


def test_strip_wrappers_keeps_inner_text():
    assert strip_wrappers(f"<answer>```json\n{GOOD}\n```</answer>") == GOOD


def test_majority_success():
    res = quorum([GOOD, GOOD, FAIL], min_valid=2)
    assert res.success is True and res.n_valid == 3 and res.n_success == 2
    assert 0.5 <= res.score <= 1.0 and res.score == pytest.approx(0.9)
    assert len(res.votes) == 3 and all(v["valid"] for v in res.votes)


def test_majority_failure_scores_below_half_even_if_progress_claims_more():
    high = FAIL.replace('"progress": 0.2', '"progress": 0.95')
    res = quorum([high, high, GOOD], min_valid=2)
    assert res.success is False and res.score < 0.5


def test_tie_abstains():
    res = quorum([GOOD, FAIL, "garbage", "garbage"], min_valid=2)
    assert res.success is None and "tie" in res.rationale and res.score == 0.0


def test_too_few_valid_answers_abstain_even_if_they_say_success():
    res = quorum([GOOD, "not json", '```json\n{"success": true}\n```'], min_valid=2)
    assert res.success is None and res.n_valid == 1
    assert [v["valid"] for v in res.votes] == [True, False, False]
    assert "missing field" in res.votes[2]["error"]


def test_broken_video_majority_abstains():
    res = quorum([BROKEN, BROKEN, GOOD], min_valid=2)
    assert res.success is None and "broken" in res.rationale


def test_broken_video_minority_does_not_vote():
    res = quorum([BROKEN, FAIL, FAIL], min_valid=2)
    assert res.success is False and res.n_broken_video == 1


def test_min_valid_must_be_positive():
    with pytest.raises(ValueError):
        quorum([GOOD], min_valid=0)
