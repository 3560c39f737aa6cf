"""A learned-tabletop weights file's model config is checked against its tensors' shapes (read from
the safetensors header) and a parameter budget before any network is allocated (issue 43 item 4)."""

from __future__ import annotations

import json

import pytest

from kosmos_env.worlds.tabletop_learned.model import load_weights
from kosmos_env.worlds.tabletop_learned.world import weights_dir


def _with_config(tmp_path, name: str, **changes) -> str:
    """A copy of the shipped weights (tensors unchanged) whose config metadata says otherwise."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    src = weights_dir() / "world.safetensors"
    with safe_open(str(src), framework="pt") as fh:
        header = dict(fh.metadata())
    header["config"] = json.dumps({**json.loads(header["config"]), **changes})
    path = tmp_path / name
    save_file(load_file(str(src)), str(path), metadata=header)
    return str(path)


def test_a_huge_layer_in_the_config_is_refused_from_its_shapes_alone(tmp_path):
    path = _with_config(tmp_path, "huge.safetensors", hidden=6_000_000)
    with pytest.raises(ValueError) as err:  # before: torch tried to allocate 144 TB
        load_weights(path)
    assert str(err.value).startswith(f"{path}: its model config makes ")
    assert "parameters, more than the 64,000,000 allowed" in str(err.value)


def test_a_config_its_tensors_do_not_fit_is_one_value_error_line(tmp_path):
    path = _with_config(tmp_path, "wider.safetensors", hidden=256)  # in budget, but not what the file holds
    with pytest.raises(ValueError) as err:
        load_weights(path)
    assert str(err.value).startswith(f"{path}: its tensors do not fit its model config (first difference: ")
    assert "\n" not in str(err.value)
    for bad, words in (("x", "cannot be built"), ([1] * 17, "at most 16 sizes")):
        key = "hidden" if bad == "x" else "channels"
        with pytest.raises(ValueError, match=words):
            load_weights(_with_config(tmp_path, f"bad-{key}.safetensors", **{key: bad}))
