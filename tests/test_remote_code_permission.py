"""No code from data: a policy string, protocol or judge spec may *ask* for trust_remote_code, but a
checkpoint's own Python runs only when the person running the command passes --trust-remote-code."""

from __future__ import annotations

import json

import pytest
import yaml

from kosmos_env.plugins import TRUST_REMOTE_CODE_ENV
from tests.conftest import requires_extra

EVIL = """
import pathlib
pathlib.Path({marker!r}).write_text("ran")
"""


def _evil_checkpoint(tmp_path):
    """A checkpoint folder whose config asks transformers to import its own module, which would
    leave a marker file if it ever ran."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    marker = tmp_path / "marker"
    (ckpt / "evil_config.py").write_text(EVIL.format(marker=str(marker)))
    (ckpt / "config.json").write_text(
        json.dumps({"model_type": "evil", "auto_map": {"AutoConfig": "evil_config.EvilConfig"}})
    )
    return ckpt, marker


@pytest.fixture(autouse=True)
def _no_permission(monkeypatch):
    monkeypatch.delenv(TRUST_REMOTE_CODE_ENV, raising=False)


def test_a_protocol_asking_for_remote_code_is_refused_and_runs_nothing(tmp_path, capsys):
    from kosmos_env.cli import main
    from tests.support.registration import base_protocol

    ckpt, marker = _evil_checkpoint(tmp_path)
    proto = base_protocol()
    proto["policies"].append({"policy": f"openvla:model_path={ckpt},trust_remote_code=true", "content_hash": "0" * 64})
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(proto))
    assert main(["register", str(path), "--out", str(tmp_path / "reg.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trust_remote_code" in err[0] and "--trust-remote-code" in err[0], err
    assert not marker.exists() and not (tmp_path / "reg.json").exists()


@requires_extra("models")  # without transformers eval refuses the VLM judge earlier, naming the extra
def test_a_judge_spec_asking_for_remote_code_is_refused_before_any_episode(tmp_path, capsys):
    from kosmos_env.cli import main

    ckpt, marker = _evil_checkpoint(tmp_path)
    judge = json.dumps({"type": "vlm", "model": str(ckpt), "trust_remote_code": True})
    out = tmp_path / "run"
    rc = main(
        [
            "eval",
            "--env",
            "Kosmos-Tabletop-v1",
            "--policy",
            "random",
            "--tasks",
            "carrot_on_plate",
            "--seeds",
            "1",
            "--judge",
            judge,
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "trust_remote_code" in err[0], err
    assert not marker.exists() and not (out / "ledger.sqlite").exists()


def test_the_flag_is_the_only_switch(monkeypatch):
    from kosmos_env.cli import build_parser
    from kosmos_env.plugins import check_remote_code, remote_code_allowed

    assert not remote_code_allowed()
    assert check_remote_code(False, "x") is False
    with pytest.raises(ValueError, match="cannot turn that on"):
        check_remote_code(True, "policy openvla")
    assert build_parser().parse_args(["--trust-remote-code", "doctor"]).trust_remote_code
    monkeypatch.setenv(TRUST_REMOTE_CODE_ENV, "1")
    assert check_remote_code(True, "policy openvla") is True
