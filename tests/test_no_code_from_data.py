"""Issue 31 item 4: content hashes come from files, never from building the model. Registering a
protocol that names a checkpoint hashes the checkpoint's files: no weights are loaded and none of
the checkpoint's code runs, even where the person running the command allowed remote code."""

from __future__ import annotations

import json

import pytest

from kosmos_env.plugins import TRUST_REMOTE_CODE_ENV
from kosmos_env.policies import make_policy, policy_hash_from_files
from kosmos_env.registration.protocol import policy_content_hash
from tests.conftest import requires_extra

EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"


def _evil_checkpoint(tmp_path):
    """A checkpoint folder whose config asks transformers to import its own module (which would
    leave a marker file if it ever ran), with a weights file and statistics to hash."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    marker = tmp_path / "marker"
    (ckpt / "evil_config.py").write_text(EVIL.format(marker=str(marker)))
    (ckpt / "config.json").write_text(
        json.dumps(
            {
                "model_type": "evil",
                "auto_map": {"AutoConfig": "evil_config.EvilConfig", "AutoModelForVision2Seq": "evil_config.Evil"},
            }
        )
    )
    (ckpt / "model.safetensors").write_bytes(b"\0" * 64)
    return ckpt, marker


def _refuse_loading(monkeypatch):
    from kosmos_env.policies.openvla import OpenVLAPolicy

    def load(self):
        raise AssertionError("the model was loaded to compute its content hash")

    monkeypatch.setattr(OpenVLAPolicy, "_load", load)


@pytest.mark.parametrize("name", ["openvla", "minivla"])
def test_registering_hashes_the_checkpoint_files_and_runs_none_of_its_code(tmp_path, monkeypatch, name):
    """The attack: ``openvla:model_path=DIR,trust_remote_code=true`` in a protocol ran DIR's Python
    during register (the policy was built to hash it). Even with remote code allowed by the
    person running the command, hashing now reads files only."""
    monkeypatch.setenv(TRUST_REMOTE_CODE_ENV, "1")
    ckpt, marker = _evil_checkpoint(tmp_path)
    _refuse_loading(monkeypatch)
    first = policy_content_hash(name, {"model_path": str(ckpt), "trust_remote_code": True})
    assert not marker.exists()
    assert len(first) == 64 and first == policy_hash_from_files(
        name, {"model_path": str(ckpt), "trust_remote_code": True}
    )
    # the hash is the files' and the settings': a changed weight file or setting is another policy
    assert (
        policy_content_hash(name, {"model_path": str(ckpt), "trust_remote_code": True, "unnorm_key": "other"}) != first
    )
    (ckpt / "model.safetensors").write_bytes(b"\1" * 64)
    assert policy_content_hash(name, {"model_path": str(ckpt), "trust_remote_code": True}) != first
    assert not marker.exists()


def test_without_permission_a_protocol_asking_for_remote_code_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv(TRUST_REMOTE_CODE_ENV, raising=False)
    ckpt, marker = _evil_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="trust_remote_code.*--trust-remote-code"):
        policy_content_hash("openvla", {"model_path": str(ckpt), "trust_remote_code": True})
    assert not marker.exists()


def test_a_missing_checkpoint_or_bad_setting_is_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint folder"):
        policy_content_hash("openvla", {"model_path": str(tmp_path / "nowhere")})
    with pytest.raises(ValueError, match="policy openvla: .*bogus"):
        policy_content_hash("openvla", {"model_path": str(tmp_path), "bogus": 1})


def test_a_shipped_checkpoint_hashes_the_same_from_its_file_as_built():
    from kosmos_env.policies.checkpoint import shipped_checkpoints

    shipped = sorted(shipped_checkpoints())[0]
    for kwargs in ({"shipped": shipped}, {"shipped": shipped, "sample": True, "seed": 3}):
        built = make_policy("ckpt", **kwargs)
        assert policy_hash_from_files("ckpt", kwargs) == built.content_hash()


def test_policies_that_load_nothing_hash_as_built():
    assert policy_hash_from_files("scripted", {"skill": 0.6}) == make_policy("scripted", skill=0.6).content_hash()
    assert policy_hash_from_files("random", {}) == make_policy("random").content_hash()


@pytest.mark.slow
@requires_extra("models")
def test_openvla_hash_from_files_equals_the_built_policys_on_a_tiny_vlm(tmp_path):
    """Registration compares the file hash with the built policy's at eval: they must agree."""
    from kosmos_env.policies.openvla import OPENVLA_PROMPT
    from tests.support.openvla import save_tiny_openvla

    unit_stats = {"bridge_orig": {"action": {"q01": [-1.0] * 7, "q99": [1.0] * 7, "mask": [True] * 6 + [False]}}}
    save_tiny_openvla(tmp_path, unit_stats)
    kwargs = {"model_path": str(tmp_path), "prompt": "<image>" + OPENVLA_PROMPT, "empty_token_id": None}
    built = make_policy("openvla", **kwargs)
    assert policy_hash_from_files("openvla", kwargs) == built.content_hash()
    settings = {**kwargs, "gripper_threshold": 0.5}
    assert (
        policy_hash_from_files("openvla", settings)
        == make_policy("openvla", **settings).content_hash()
        != built.content_hash()
    )
