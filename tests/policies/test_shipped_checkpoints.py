"""The closed-loop checkpoints shipped with the package (``ckpt:shipped=NAME``): the validity study's
image-conditioned population members load from the manifest, act within bounds from pixels, and
a name that is not in the manifest (or a path dressed as a name) is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from kosmos_env.hashing import sha256_file
from kosmos_env.policies import make_policy
from kosmos_env.policies.checkpoint import shipped_checkpoint_path, shipped_checkpoints


def test_manifest_lists_files_whose_sha256_matches():
    shipped = shipped_checkpoints()
    assert len(shipped) >= 5
    for name, entry in shipped.items():
        path = shipped_checkpoint_path(name)
        assert path.is_file(), name
        assert sha256_file(path) == entry["sha256"], name
        assert entry["stage"] in ("bc", "ppo")


def test_named_checkpoint_acts_from_pixels_and_hashes_like_its_file():
    name = sorted(shipped_checkpoints())[0]
    by_name = make_policy("ckpt", shipped=name)
    by_path = make_policy("ckpt", path=str(shipped_checkpoint_path(name)))
    assert by_name.content_hash() == by_path.content_hash()
    instruction = by_name.instructions[0]
    rng = np.random.default_rng(0)
    obs = {
        "image": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
        "instruction": instruction,
        "ee_pos": np.array([0.3, 0.0, 0.15], np.float32),
        "ee_euler": np.zeros(3, np.float32),
        "gripper": np.ones(1, np.float32),
    }
    by_name.reset(instruction)
    a = by_name.act(obs)
    assert a.shape == (7,) and np.all(a >= by_name.low) and np.all(a <= by_name.high)
    obs2 = dict(obs, image=np.zeros((64, 64, 3), np.uint8))
    by_name.reset(instruction)
    assert not np.allclose(by_name.act(obs2), a)  # closed loop: the image changes the action


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"shipped": "no_such_checkpoint"}, "unknown shipped checkpoint"),
        ({"shipped": "../checkpoints/manifest"}, "unknown shipped checkpoint"),
        ({}, "exactly one of path=FILE"),
        ({"shipped": "x", "path": "y"}, "exactly one of path=FILE"),
    ],
)
def test_bad_checkpoint_arguments_fail_in_one_line(kwargs, words):
    with pytest.raises(ValueError, match=words) as err:
        make_policy("ckpt", **kwargs)
    assert "\n" not in str(err.value)
