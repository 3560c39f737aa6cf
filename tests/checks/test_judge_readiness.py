"""Judge readiness (kosmos-env judge-check), the doctor on CPU, and a --tiny campaign's provenance."""

import json

import numpy as np
import pytest

import kosmos_env  # noqa: F401
from kosmos_env.checks.judge_readiness import MISMATCHED_INSTRUCTION, check_judge, readiness_rollouts
from kosmos_env.judges.base import Judgment
from tests.conftest import requires_extra

SMALL_VLM = {"k": 2, "min_valid": 1, "max_new_tokens": 6, "max_frames": 4, "sample_fps": 1.0, "max_pixels": 28 * 28 * 4}


class MotionJudge:
    """A judge that does what a good judge should on these cases: success iff the frames move and the
    instruction is the episode's own."""

    name = "motion_test"

    def judge(self, rollout):
        moved = float(np.abs(rollout.frames[-1].astype(int) - rollout.frames[0].astype(int)).mean()) > 1.0
        ok = moved and rollout.instruction == "move the can to the left"
        return Judgment(success=ok, score=float(ok), judge=self.name)


class ConstantJudge:
    name = "constant_test"

    def __init__(self, success):
        self.success = success

    def judge(self, rollout):
        return Judgment(success=self.success, score=float(bool(self.success)), judge=self.name)


def test_cases_are_the_real_episode_a_frozen_copy_and_a_mismatched_instruction():
    cases = readiness_rollouts((60, 80))
    (real, r0), (frozen, r1), (mism, r2) = cases
    assert real.expected_success and not frozen.expected_success and not mism.expected_success
    assert r0.frames.shape == (37, 60, 80, 3) and r0.fps == 5.0
    assert not np.array_equal(r0.frames[0], r0.frames[-1])
    assert all(np.array_equal(f, r1.frames[0]) for f in r1.frames)
    assert r2.instruction == MISMATCHED_INSTRUCTION and np.array_equal(r2.frames, r0.frames)


def test_ready_only_when_all_three_come_out_right():
    assert check_judge(MotionJudge(), (60, 80)).ready
    for judge in (ConstantJudge(True), ConstantJudge(False), ConstantJudge(None)):
        report = check_judge(judge, (60, 80))
        assert not report.ready, judge.success
    abstaining = check_judge(ConstantJudge(None), (60, 80))
    assert all(c.outcome == "abstained" and not c.passed for c in abstaining.cases)
    assert "NOT READY" in abstaining.format() and "abstained: does not tell them apart" in abstaining.format()
    assert "READY: " in check_judge(MotionJudge(), (60, 80)).format()


@pytest.fixture(scope="module")
def tiny_judge_dir(tmp_path_factory):
    from kosmos_env.testing.tiny_run import tiny_judge_dir as build

    return build(tmp_path_factory.mktemp("tiny"))


@requires_extra("models")  # a tiny random Qwen2.5-VL
def test_judge_check_cli_on_a_tiny_random_model_says_not_ready(tiny_judge_dir, capsys):
    from kosmos_env.cli import main

    spec = json.dumps({"type": "vlm", "local_path": tiny_judge_dir, **SMALL_VLM})
    rc = main(["judge-check", "--judge", spec, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["ready"] is False
    assert [c["name"] for c in report["cases"]] == ["real", "frozen", "mismatched"]
    model = report["judge"]["model"]
    assert model["source"] == "folder" and model["path"] == tiny_judge_dir and len(model["weights_sha256"]) == 64


@requires_extra("models")  # the doctor's packages line passes only with them
def test_doctor_without_weights_on_cpu_reports_what_is_missing(monkeypatch, tmp_path, capsys):
    from kosmos_env.cli import main

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("KOSMOS_COSMOS3_NANO_PATH", raising=False)
    monkeypatch.delenv("KOSMOS_VLM_JUDGE_PATH", raising=False)
    rc = main(["doctor"])
    out = capsys.readouterr().out
    assert rc == 1 and "Traceback" not in out
    lines = {ln.split("]")[1].split(":")[0].strip(): ln for ln in out.splitlines() if ln.startswith("[")}
    assert lines["packages"].startswith("[ok")
    assert lines["action statistics"].startswith("[ok") and "5eee9ed5" in lines["action statistics"]
    assert lines["initial frames"].startswith("[ok") and "3 task(s)" in lines["initial frames"]
    # each missing weight is listed once, under "weights on disk"; the checks that would load it point there
    assert lines["weights on disk"].startswith("[FAIL") and "2 missing" in lines["weights on disk"]
    assert out.count("hf download nvidia/Cosmos3-Nano") == 1 and out.count("hf download nvidia/Cosmos-Reason1-7B") == 1
    assert out.count("KOSMOS_VLM_JUDGE_PATH") == 1
    assert lines["world weights"].startswith("[skip") and "listed under 'weights on disk'" in lines["world weights"]
    assert lines["judge call"].startswith("[skip") and "listed under 'weights on disk'" in lines["judge call"]
    assert lines["world call"].startswith("[skip") and lines["judge readiness"].startswith("[skip")
    assert "RESULT: a real run would fail" in out


@requires_extra("models")
def test_doctor_is_offline_unless_asked(monkeypatch):
    """While the checks run, HF_HUB_OFFLINE is set (and huggingface_hub's own flag, read at its import),
    and both are restored after; --online leaves them as they were."""
    import os

    import huggingface_hub.constants as hub_constants

    from kosmos_env.checks import doctor

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    seen = []
    real = doctor.check_stats

    def check_stats_seeing_the_hub_setting(spec):
        seen.append((os.environ.get("HF_HUB_OFFLINE"), hub_constants.HF_HUB_OFFLINE))
        return real(spec)

    monkeypatch.setattr(doctor, "check_stats", check_stats_seeing_the_hub_setting)
    doctor.run_doctor("Kosmos-Bridge-v1")
    doctor.run_doctor("Kosmos-Bridge-v1", online=True)
    assert seen == [("1", True), (None, False)]
    assert "HF_HUB_OFFLINE" not in os.environ and hub_constants.HF_HUB_OFFLINE is False
    from kosmos_env.cli import build_parser

    assert build_parser().parse_args(["doctor", "--online"]).online is True


@pytest.mark.slow
@requires_extra("models")
def test_doctor_tiny_runs_every_step(tiny_judge_dir, tmp_path):
    """Every step of the doctor on tiny random models (small world settings to keep CI fast)."""
    from kosmos_env.checks.doctor import run_doctor
    from kosmos_env.testing.cosmos_tiny import save_tiny_pipeline, tiny_bridge_spec

    weights = save_tiny_pipeline(tmp_path / "c3")
    spec = tiny_bridge_spec(horizon=1, world={"device": "auto", "dtype": "auto"})
    judge = {"type": "vlm", "local_path": tiny_judge_dir, **SMALL_VLM}
    report = run_doctor(spec=spec, tiny=True, weights_path=weights, judge_spec=judge)
    status = {c.name: c.status for c in report.checks}
    assert status["world call"] == "ok" and status["judge call"] == "ok" and status["world weights"] == "ok"
    assert status["judge readiness"] == "info"  # NOT READY, as a random judge must be, reported honestly
    assert "NOT READY" in next(c.detail for c in report.checks if c.name == "judge readiness")
    world = next(c for c in report.checks if c.name == "world call").data
    assert world["load_seconds"] >= 0 and len(world["call_seconds"]) == 2 and world["frames_shape"] == [4, 48, 64, 3]
    assert report.ok and "RESULT: a run will work" in report.format()


@pytest.mark.slow
@requires_extra("models")
def test_tiny_campaign_records_spec_hash_and_provenance(tiny_judge_dir, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from kosmos_env.campaign import make_config, run_campaign
    from kosmos_env.testing.tiny_run import apply_tiny

    monkeypatch.setenv("KOSMOS_TINY_DIR", str(tmp_path / "tiny"))
    monkeypatch.delenv("KOSMOS_COSMOS3_NANO_PATH", raising=False)
    judge = apply_tiny("Kosmos-Bridge-v1")  # sets $KOSMOS_COSMOS3_NANO_PATH to the tiny checkpoint
    import os

    assert os.environ["KOSMOS_COSMOS3_NANO_PATH"].endswith("cosmos3")
    judge.update(SMALL_VLM)
    small = {
        "world": {"num_inference_steps": 2, "chunk_size": 4, "input_size": [48, 64]},
        "image_size": [48, 64],
        "horizon": 1,
        "gate": {"enabled": False},
    }
    cfg = make_config(
        "Kosmos-Bridge-v1", ["random:chunk=4"], tasks=["move_can_to_left"], seeds=1, judge=judge, spec_overrides=small
    )
    results = run_campaign(cfg, tmp_path / "run", progress=False)
    (ep,) = results["per_episode"]
    assert ep["error"] is None, ep["error"]
    assert ep["spec_hash"] == cfg.spec_hash and ep["outcome"] in ("success", "failure", "abstained")
    prov = ep["provenance"]
    assert prov["world"]["path"] == os.environ["KOSMOS_COSMOS3_NANO_PATH"]
    assert prov["judge"]["model"]["path"] == str(tmp_path / "tiny" / "qwen2_5_vl")
    assert ep["judgment"]["extras"]["model"]["weights_sha256"] == prov["judge"]["model"]["weights_sha256"]
    table = pq.read_table(tmp_path / "run" / "episodes.parquet").to_pylist()
    assert table[0]["spec_hash"] == cfg.spec_hash and table[0]["identity_sha256"] == prov["identity_sha256"]


def test_tiny_refuses_an_env_with_nothing_to_shrink(capsys):
    from kosmos_env.cli import main

    rc = main(["eval", "--env", "Kosmos-Tabletop-v1", "--tiny", "--policy", "random", "--out", "unused"])
    err = capsys.readouterr().err
    assert rc == 2 and "--tiny replaces a Cosmos 3 world or a VLM judge" in err and "Traceback" not in err
