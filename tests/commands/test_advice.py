"""The common mistakes each get one line with the right fix: a policy setting without its `key=`,
a permission flag after the command, a flag whose extra is missing (before any work)."""

from __future__ import annotations

import sys

import pytest

from kosmos_env.cli import main


def _one_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    "policy, fix",
    [
        ("ckpt:runs/x.safetensors", "write 'ckpt:path=runs/x.safetensors'"),
        ("sb3:runs/ppo.zip", "write 'sb3:path=runs/ppo.zip'"),
        ("remote:http://127.0.0.1:8000", "write 'remote:url=http://127.0.0.1:8000'"),
    ],
)
def test_a_setting_without_its_key_names_the_key(tmp_path, capsys, policy, fix):
    assert main(["eval", "--policy", policy, "--out", str(tmp_path / "c")]) == 2
    line = _one_line(capsys)
    assert fix in line and "--allow-import" not in line
    assert not (tmp_path / "c").exists()


def test_a_module_class_name_still_asks_for_the_opt_in(tmp_path, capsys):
    assert main(["eval", "--policy", "my_policies:MyVLA", "--out", str(tmp_path / "c")]) == 2
    assert "kosmos-env --allow-import" in _one_line(capsys)


@pytest.mark.parametrize("flag", ["--allow-import", "--trust-remote-code"])
@pytest.mark.parametrize("command", ["eval", "rollout", "judge-check", "serve-policy", "train-policy"])
def test_a_permission_flag_after_the_command_says_where_it_goes(capsys, command, flag):
    with pytest.raises(SystemExit) as exit_:
        main([command, flag])
    assert exit_.value.code == 2
    line = _one_line(capsys)
    assert line == f"kosmos-env {command}: error: {flag} goes before the command: kosmos-env {flag} {command} ..."


def test_the_flag_before_the_command_works(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KOSMOS_ENV_ALLOW_IMPORT", raising=False)
    # the opt-in reaches the policy check: the module is imported, and is not a policy
    assert main(["--allow-import", "eval", "--policy", "json:JSONDecoder", "--out", str(tmp_path / "c")]) == 2
    line = _one_line(capsys)
    assert "is the class json.decoder.JSONDecoder, which is not a subclass" in line, line


@pytest.mark.parametrize(
    "module, flags, extra",
    [("wandb", ["--wandb"], "wandb"), ("ray", ["--executor", "ray"], "ray")],
)
def test_a_flags_missing_extra_is_named_before_any_work(tmp_path, capsys, monkeypatch, module, flags, extra):
    monkeypatch.setitem(sys.modules, module, None)  # as on an install without the extra: import fails
    out = tmp_path / "c"
    assert main(["eval", "--policy", "random", "--seeds", "1", *flags, "--out", str(out)]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"kosmos-env eval: error: {module} is not installed; {' '.join(flags)} needs it")
    assert f"pip install 'kosmos-env[{extra}]'" in line
    assert not out.exists()  # nothing ran, nothing was written
