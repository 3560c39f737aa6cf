"""Cosmos3World without running the model: missing weights, stats, frames, config checks, spec hash."""

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib import resources

import gymnasium as gym
import numpy as np
import pytest

import kosmos_env  # noqa: F401  (registers the env ids)
from kosmos_env.actions import ActionStatsError
from kosmos_env.spec import EnvSpec, SpecError, canonical_json, load_spec, sha256_hex
from kosmos_env.tasks import load_suite, suite_from_dict
from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec
from kosmos_env.worlds.base import MissingWeightsError
from kosmos_env.worlds.cosmos3 import Cosmos3World, WrongArchitectureError
from tests.conftest import requires_extra

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def no_weights(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.delenv("KOSMOS_COSMOS3_NANO_PATH", raising=False)
    try:  # huggingface_hub read HF_HUB_CACHE when it was imported; a core install has none to patch
        import huggingface_hub.constants as c
    except ModuleNotFoundError:
        return
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))


@requires_extra("models")  # make checks the world's packages before its weights
def test_make_without_weights_says_what_to_download(no_weights):
    with pytest.raises(MissingWeightsError) as err:
        gym.make("Kosmos-Bridge-v1", judge="state", defer_judging=True)
    msg = str(err.value)
    assert "nvidia/Cosmos3-Nano" in msg
    assert "revision 'main'" in msg
    assert "hf download nvidia/Cosmos3-Nano --revision main" in msg
    assert "huggingface-cli download" in msg
    assert "KOSMOS_COSMOS3_NANO_PATH" in msg
    assert "weights_path" in msg


def test_env_var_pointing_at_a_non_checkpoint_is_refused(no_weights, monkeypatch, tmp_path):
    monkeypatch.setenv("KOSMOS_COSMOS3_NANO_PATH", str(tmp_path))
    with pytest.raises(MissingWeightsError, match=r"\$KOSMOS_COSMOS3_NANO_PATH = .*\(no model_index.json\)"):
        Cosmos3World(load_spec("Kosmos-Bridge-v1"))
    with pytest.raises(MissingWeightsError, match=r"weights_path = .*\(no model_index.json\)"):
        Cosmos3World(load_spec("Kosmos-Bridge-v1"), weights_path=tmp_path / "nothing")


def test_local_checkout_of_another_model_is_refused(no_weights, tmp_path):
    (tmp_path / "model_index.json").write_text("{}")
    with pytest.raises(WrongArchitectureError, match="not a Cosmos3OmniPipeline .*hf download nvidia/Cosmos3-Nano"):
        Cosmos3World(load_spec("Kosmos-Bridge-v1"), weights_path=tmp_path)


def test_null_statistics_are_refused_naming_the_fix():
    spec = tiny_bridge_spec()
    norm = dict(spec.world["bridge"]["normalization"], q01=None)
    with pytest.raises(ActionStatsError, match=r"q01 is null.*registered Kosmos-Bridge-v1 spec.*read_action_stats"):
        Cosmos3World(
            spec.with_overrides(world={"bridge": dict(spec.world["bridge"], normalization=norm)}), pipeline=object()
        )


def test_registered_spec_validates_and_is_not_torch_heavy():
    code = (
        "import sys, kosmos_env; from kosmos_env.spec import load_spec; load_spec('Kosmos-Bridge-v1'); "
        "import kosmos_env.worlds.cosmos3; print('torch' in sys.modules, 'diffusers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_bad_world_fields_are_named():
    spec = tiny_bridge_spec()
    with pytest.raises(SpecError, match="world.dtype"):
        Cosmos3World(spec.with_overrides(world={"dtype": "int8"}), pipeline=object())
    with pytest.raises(SpecError, match="world.pad_actions"):
        Cosmos3World(spec.with_overrides(world={"pad_actions": "zeros"}), pipeline=object())
    with pytest.raises(ValueError, match="exceeds world.chunk_size"):
        Cosmos3World(tiny_bridge_spec(env_chunk=8, model_chunk=4), pipeline=object())


def test_initial_frames_kwarg_checks_task_names():
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        Cosmos3World(tiny_bridge_spec(), pipeline=object(), initial_frames={"nope": "x.png"})


def _task(name="move_can_to_left"):
    return load_suite("bridge").tasks[name]


def test_shipped_frames_match_their_hashes():
    root = resources.files("kosmos_env.tasks")
    for task in load_suite("bridge").tasks.values():
        frame = task.params["frame"]
        assert frame["kind"] == "real" and frame["path"].startswith("bridge_real/")
        data = (root / frame["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == frame["sha256"]


def test_user_frame_hash_is_checked(tmp_path):
    world = Cosmos3World(tiny_bridge_spec(), pipeline=object())
    src = resources.files("kosmos_env.tasks") / _task().params["frame"]["path"]
    good = tmp_path / "copy.png"
    shutil.copyfile(str(src), good)
    world._initial_frames = {"move_can_to_left": str(good)}
    frame = world._load_frame("move_can_to_left", _task().params)
    assert frame.shape == (480, 640, 3) and frame.dtype == np.uint8
    bad = tmp_path / "other.png"
    other = _task("stack_green_block_on_yellow_block").params["frame"]["path"]
    shutil.copyfile(str(resources.files("kosmos_env.tasks") / other), bad)
    world2 = Cosmos3World(tiny_bridge_spec(), pipeline=object(), initial_frames={"move_can_to_left": bad})
    with pytest.raises(ValueError, match="sha256 .* refusing"):
        world2._load_frame("move_can_to_left", _task().params)


# -- spec hash ------------------------------------------------------------------------------
BASE = load_spec("Kosmos-Bridge-v1")


@pytest.mark.parametrize(
    "override",
    [
        {"world": {"num_inference_steps": 35}},
        {"world": {"guidance_scale": 6.0}},
        {"world": {"resolution_tier": 480}},
        {"world": {"input_size": [480, 640]}},
        {"world": {"chunk_size": 12}},
        {"world": {"revision": "0123456789abcdef0123456789abcdef01234567"}},
        {"world": {"flow_shift": 5.0}},
        {"world": {"bridge": dict(BASE.world["bridge"], rotation_delta="euler_add")}},
        {"image_size": (128, 128)},
        {"action": dict(BASE.to_dict()["action"], chunk=2)},
        {"horizon": 11},
    ],
)
def test_spec_hash_changes_with_result_changing_fields(override):
    assert BASE.with_overrides(**override).hash != BASE.hash


def test_spec_hash_changes_with_a_task_frame_hash():
    raw = json.loads((resources.files("kosmos_env.tasks") / "bridge.json").read_text())
    assert sha256_hex(canonical_json(raw)) == BASE.task_suite_sha256
    raw["tasks"][0]["frame"]["sha256"] = "0" * 64
    new_suite = suite_from_dict(raw, sha256_hex(canonical_json(raw)))
    assert new_suite.sha256 != BASE.task_suite_sha256
    assert dataclasses.replace(BASE, task_suite_sha256=new_suite.sha256).hash != BASE.hash


def test_spec_hash_ignores_key_order_and_description():
    raw = json.loads((resources.files("kosmos_env.envs_registry") / "Kosmos-Bridge-v1.json").read_text())
    reordered = {k: raw[k] for k in reversed(list(raw))}
    reordered["world"] = {k: raw["world"][k] for k in reversed(list(raw["world"]))}
    assert EnvSpec.from_dict(reordered).hash == BASE.hash
    assert BASE.with_overrides(description="another description").hash == BASE.hash
