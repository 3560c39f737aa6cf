"""Kosmos-Bridge-v1 as registered: NVIDIA's statistics, real hash-bound frames, checks that name their fix,
a tiny random checkpoint saved to a folder running the registered spec, and provenance."""

import hashlib
import json
from importlib import resources
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import kosmos_env  # noqa: F401
from kosmos_env.actions import ActionStatsError, read_action_stats
from kosmos_env.spec import load_spec
from kosmos_env.tasks import load_suite
from kosmos_env.worlds import WORLD_VERSIONS, cosmos3
from tests.conftest import requires_extra
from tests.support.paths import DATA, ROOT

STATS_COPY = DATA / "cosmos3_action_stats.json"
# the original reference file, when the shared folder sits beside the checkout
STATS_ORIGINAL = ROOT.parent / "shared" / "reference" / "cosmos3_action_stats.json"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from kosmos_env.testing.cosmos_tiny import save_tiny_pipeline

    return save_tiny_pipeline(tmp_path_factory.mktemp("tiny") / "cosmos3")


# -- statistics ---------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [STATS_COPY, STATS_ORIGINAL], ids=["tests-data-copy", "shared-original"])
def test_registered_statistics_equal_the_reference_file(path):
    if not path.is_file():
        pytest.skip(f"{path} is not beside this checkout")
    norm = load_spec("Kosmos-Bridge-v1").world["bridge"]["normalization"]
    ref = read_action_stats(path, "bridge_orig_lerobot")
    assert norm["q01"] == ref["q01"] and norm["q99"] == ref["q99"]
    assert norm["method"] == "quantile" and norm["clamp"] is False
    raw = json.loads(path.read_text())
    assert raw["used_by"].startswith("BridgeOrigLeRobotDataset(action_normalization='quantile')")
    commit = raw["source"].split("commit ")[1].split(")")[0]
    from kosmos_env import actions
    from kosmos_env.env import KosmosEnv

    assert commit in norm["source"] and commit in actions.__doc__ and commit in KosmosEnv.__doc__


def test_statistics_file_errors_name_the_fix(tmp_path):
    with pytest.raises(ActionStatsError, match="not found: get NVIDIA's cosmos-framework statistics"):
        read_action_stats(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ActionStatsError, match="not valid JSON"):
        read_action_stats(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"droid_lerobot": {"q01": [0] * 10, "q99": [1] * 10}}))
    with pytest.raises(ActionStatsError, match="no q01/q99 for domain 'bridge_orig_lerobot'"):
        read_action_stats(tmp_path / "other.json")
    (tmp_path / "short.json").write_text(json.dumps({"bridge_orig_lerobot": {"q01": [0] * 9, "q99": [1] * 10}}))
    with pytest.raises(ActionStatsError, match="q01 must be a list of 10 finite numbers"):
        read_action_stats(tmp_path / "short.json")


def test_cli_names_the_statistics_fix(tmp_path, capsys):
    """A spec file with null statistics: the doctor's statistics check fails with the fix, no traceback."""
    from kosmos_env.checks.doctor import check_stats

    spec = load_spec("Kosmos-Bridge-v1")
    world = dict(spec.world)
    world["bridge"] = dict(world["bridge"], normalization=dict(world["bridge"]["normalization"], q99=None))
    check = check_stats(spec.with_overrides(world=world))
    assert check.status == "FAIL" and "q99 is null" in check.detail and "registered spec" in check.fix


# -- real frames --------------------------------------------------------------------------------
def test_registered_suite_holds_only_real_hash_bound_frames_with_license():
    suite = load_suite("bridge")
    root = resources.files("kosmos_env.tasks")
    assert {"stack_green_block_on_yellow_block", "move_can_to_left"} <= set(suite.names)
    for task in suite.tasks.values():
        frame = task.params["frame"]
        assert frame["kind"] == "real"
        assert hashlib.sha256((root / frame["path"]).read_bytes()).hexdigest() == frame["sha256"]
    assert "Apache License" in (root / "bridge_real" / "LICENSE-ManiSkill2_real2sim").read_text()
    assert "can_episode_first_frame.png" in (root / "bridge_real" / "NOTICE").read_text()
    # the can task starts from the first frame of the real episode, pixel for pixel
    import cv2

    from kosmos_env.checks.bridge_reference import load_real_episode

    png = (root / suite.tasks["move_can_to_left"].params["frame"]["path"]).read_bytes()
    first = cv2.cvtColor(cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    np.testing.assert_array_equal(first, load_real_episode().frames[0])
    assert suite.tasks["move_can_to_left"].instruction == load_real_episode().instruction


@requires_extra("models")  # reads diffusers' resolution bins
def test_scene_keeps_4_3_inside_the_tier_canvas():
    spec = load_spec("Kosmos-Bridge-v1")
    h, w = spec.world["input_size"]
    assert h * 4 == w * 3 and tuple(spec.image_size) == (h, w)
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import _ACTION_RESOLUTION_BINS
    from diffusers.video_processor import VideoProcessor

    ch, cw = VideoProcessor.classify_height_width_bin(h, w, ratios=_ACTION_RESOLUTION_BINS["256"])
    assert (ch, cw) == (256, 320) and h <= ch and w == cw  # padded, never rescaled or cropped
    cosmos3._check_canvas(dict(spec.world))
    with pytest.raises(ValueError, match="does not fit resolution tier 256"):
        cosmos3._check_canvas(dict(spec.world, input_size=[480, 640]))


# -- bad input ----------------------------------------------------------------------------------
@requires_extra("models")  # make checks the world's packages before it opens the folder
def test_wrong_architecture_is_one_clear_error(tmp_path):
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    with pytest.raises(
        cosmos3.WrongArchitectureError, match="'StableDiffusionPipeline' checkpoint, not a Cosmos3OmniPipeline"
    ):
        gym.make("Kosmos-Bridge-v1", world_kwargs={"weights_path": str(tmp_path)}, judge="state", defer_judging=True)
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "Cosmos3OmniPipeline"}))
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "config.json").write_text(json.dumps({"_class_name": "Cosmos3OmniTransformer"}))
    with pytest.raises(cosmos3.WrongArchitectureError, match="without an action head"):
        cosmos3.check_architecture(tmp_path)


def test_wrong_architecture_from_the_cli_is_one_line(tmp_path, capsys):
    from kosmos_env.cli import main

    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    rc = main(["doctor", "--weights", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "[FAIL] world weights:" in out and "'FluxPipeline' checkpoint" in out and "Traceback" not in out


@requires_extra("models")
def test_gpu_without_enough_memory_is_one_clear_error(tiny_dir, monkeypatch):
    monkeypatch.setattr(cosmos3, "_cuda_available", lambda: True)
    monkeypatch.setattr(cosmos3, "cuda_free_bytes", lambda device="cuda": (1 * 2**30, 24 * 2**30))  # injected figure
    env = gym.make("Kosmos-Bridge-v1", world_kwargs={"weights_path": tiny_dir}, judge="state", defer_judging=True)
    assert env.unwrapped.world.config["device"] == "cuda" and env.unwrapped.world.config["dtype"] == "bfloat16"
    with pytest.raises(
        cosmos3.InsufficientMemoryError,
        match=r"cuda has 1.00 GiB free of 24.00 GiB, but one Cosmos 3 world call needs about 2.0\d GiB "
        r"\(safetensors tensors at bfloat16 .*Free the GPU",
    ):
        env.reset(seed=0)
    need = cosmos3.memory_need(tiny_dir, "bfloat16")
    cosmos3.check_memory(need, (need["need_bytes"], need["need_bytes"]))  # exactly enough passes


# -- the registered spec on a tiny checkpoint saved to a folder --------------------------------
@pytest.mark.slow
@requires_extra("models")
def test_registered_spec_runs_full_episodes_from_a_weights_folder(tiny_dir):
    env = gym.make("Kosmos-Bridge-v1", world_kwargs={"weights_path": tiny_dir}, judge="state", defer_judging=True)
    base = env.unwrapped
    assert base.spec_hash == load_spec("Kosmos-Bridge-v1").hash  # no spec override
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (240, 320, 3)
    hold = np.zeros((4, 7), np.float32)
    hold[:, 6] = 1.0
    steps, done = 0, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(hold)
        assert info["frames"].shape == (4, 240, 320, 3)
        steps += 1
        done = terminated or truncated
    # the episode ends as the env defines: truncated at the horizon, or discarded by the gate. A
    # failed gate check ends the episode (the contract), and hold commands demand no visible
    # motion, so the one check that may end it is image collapse: random weights draw no scene
    if info["outcome"] == "discarded":
        assert info["gate"]["check"] == "collapse", info["gate"]["reason"]
    else:
        assert (info["outcome"], steps) == ("pending", base.kosmos_spec.horizon)
    world = base.provenance["world"]
    assert world["source"] == "folder" and world["path"] == str(Path(tiny_dir).resolve())
    assert world["version"] == WORLD_VERSIONS["cosmos3"] == cosmos3.WORLD_VERSION
    assert len(world["weights_sha256"]) == 64 and world["device"] == "cpu" and world["dtype"] == "float32"
    env.close()


# -- provenance ---------------------------------------------------------------------------------
def test_world_version_enters_the_spec_hash(monkeypatch):
    import kosmos_env.spec as spec_module

    spec = load_spec("Kosmos-Bridge-v1")
    before = spec.hash
    monkeypatch.setitem(spec_module.WORLD_VERSIONS, "cosmos3", "999")
    assert spec.hash != before
    tabletop = load_spec("Kosmos-Tabletop-v1")
    assert '"world_version"' not in tabletop.canonical()  # unlisted worlds keep their published hashes


@requires_extra("models")
def test_injected_world_or_judge_override_changes_the_recorded_identity():
    from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline

    spec = tiny_bridge_spec()
    a = gym.make(
        "Kosmos-Bridge-v1", env_spec=spec, world_kwargs={"pipeline": tiny_pipeline()}, defer_judging=True, judge="state"
    ).unwrapped
    b = gym.make(
        "Kosmos-Bridge-v1",
        env_spec=spec,
        world_kwargs={"pipeline": tiny_pipeline()},
        defer_judging=True,
        judge="robot_log",
    ).unwrapped
    assert a.spec_hash == b.spec_hash
    pa, pb = a.provenance, b.provenance
    assert pa["world"]["source"] == "injected" and pa["world"]["injected"] is True
    assert pa["world"]["weights_sha256"] == pb["world"]["weights_sha256"]
    assert pa["judge"]["name"] == "state" and pb["judge"]["name"] == "robot_log"
    assert pa["identity_sha256"] != pb["identity_sha256"]
    tab = gym.make("Kosmos-Tabletop-v1", image_size=(64, 64)).unwrapped
    from kosmos_env.worlds.tabletop.world import TabletopWorld

    injected = gym.make("Kosmos-Tabletop-v1", image_size=(64, 64), world_model=TabletopWorld(tab.kosmos_spec)).unwrapped
    assert tab.spec_hash == injected.spec_hash
    assert tab.provenance["identity_sha256"] != injected.provenance["identity_sha256"]
