"""A ``ckpt:`` file's network settings are bounded, and checked against its tensors' shapes, before
anything is allocated: a JSON asking for a 6e6-wide layer beside small tensors took 2.5 GB before
it was refused (issue 43 item 4). ``build_net`` is where a network takes its memory; the tests make it
fail, so a network built before the checks fails them."""

from __future__ import annotations

import json

import pytest

from kosmos_env.policies import checkpoint
from kosmos_env.policies.checkpoint import NetConfig, load_checkpoint, shipped_checkpoint_path, shipped_checkpoints


def _with_net(tmp_path, name: str, **net) -> str:
    """A copy of a shipped checkpoint (its tensors unchanged) whose JSON asks for other network settings."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    src = shipped_checkpoint_path(sorted(shipped_checkpoints())[0])
    with safe_open(str(src), framework="pt") as fh:
        header = dict(fh.metadata())
    meta = json.loads(header["kosmos_policy"])
    meta["net"].update(net)
    header["kosmos_policy"] = json.dumps(meta)
    path = tmp_path / name
    save_file(load_file(str(src)), str(path), metadata=header)
    return str(path)


def _no_network(cfg):
    raise AssertionError(f"a {cfg.hidden} network was built before its settings and tensors were checked")


def test_a_6e6_wide_layer_is_refused_before_the_network_is_built(tmp_path, monkeypatch):
    path = _with_net(tmp_path, "wide.safetensors", hidden=[6_000_000])  # 2.4 GB of float32 before
    monkeypatch.setattr(checkpoint, "build_net", _no_network)
    with pytest.raises(ValueError) as err:
        load_checkpoint(path)
    assert str(err.value) == (
        f"policy checkpoint {path}: bad network settings (network setting 'hidden' must be an integer in "
        "[1, 16384], got 6000000)"
    )


def test_settings_in_bounds_that_the_tensors_do_not_have_are_refused_before_the_network_is_built(tmp_path, monkeypatch):
    path = _with_net(tmp_path, "mismatch.safetensors", hidden=[4096, 4096])  # 0.13 GB the file does not hold
    monkeypatch.setattr(checkpoint, "build_net", _no_network)
    with pytest.raises(ValueError) as err:
        load_checkpoint(path)
    assert str(err.value) == (
        f"policy checkpoint {path}: tensors do not fit its network settings "
        "(tensor 'pi_trunk.0.weight' is [128, 43], the settings make [4096, 43])"
    )


def test_a_network_over_the_parameter_budget_is_refused_from_its_shapes_alone():
    from kosmos_env.policies.checkpoint import MAX_PARAMETERS, net_shapes

    cfg = NetConfig(hidden=(16384, 16384))  # every size in bounds, 538 M parameters together
    with pytest.raises(ValueError, match=rf"make 538,498,029 parameters, more than the {MAX_PARAMETERS:,}"):
        net_shapes(cfg)
    with pytest.raises(ValueError, match=r"'frame_stack' must be an integer in \[1, 16\], got 0"):
        net_shapes(NetConfig(frame_stack=0))
    with pytest.raises(ValueError, match=r"'hidden' must be a list of at most 16 sizes"):
        NetConfig.from_dict({"hidden": [8] * 17})


def test_every_shipped_checkpoint_is_within_the_bounds_and_loads():
    from kosmos_env.policies.checkpoint import MAX_PARAMETERS

    for name in sorted(shipped_checkpoints()):
        net, meta = load_checkpoint(shipped_checkpoint_path(name))
        assert sum(p.numel() for p in net.state_dict().values()) < MAX_PARAMETERS, name
