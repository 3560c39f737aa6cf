"""Every missing weight of an env is named at once, by `make`, `eval` and `doctor` (one shared check),
and `eval` writes nothing before that check."""

from __future__ import annotations

import gymnasium as gym
import pytest

from kosmos_env.errors import MissingWeightsError
from kosmos_env.required_weights import missing_weights
from kosmos_env.spec import load_spec
from tests.conftest import requires_extra


@pytest.fixture
def no_weights(monkeypatch, tmp_path):
    """An empty Hugging Face cache and no weights variables: nothing of Cosmos 3 or the VLM judge on disk."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("KOSMOS_COSMOS3_NANO_PATH", raising=False)
    monkeypatch.delenv("KOSMOS_VLM_JUDGE_PATH", raising=False)
    try:  # huggingface_hub read HF_HUB_CACHE when it was imported; a core install has none to patch
        import huggingface_hub.constants as c
    except ModuleNotFoundError:
        return
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))


def _names_both(msg: str) -> None:
    assert "nvidia/Cosmos3-Nano" in msg and "hf download nvidia/Cosmos3-Nano --revision main" in msg
    assert "KOSMOS_COSMOS3_NANO_PATH" in msg
    assert "nvidia/Cosmos-Reason1-7B" in msg and "hf download nvidia/Cosmos-Reason1-7B" in msg
    assert "KOSMOS_VLM_JUDGE_PATH" in msg


@requires_extra("models")  # make checks the world's packages before its weights
def test_make_names_the_world_and_the_judge_weights(no_weights):
    with pytest.raises(MissingWeightsError) as err:
        gym.make("Kosmos-Bridge-v1")
    _names_both(str(err.value))
    assert str(err.value).startswith("Kosmos-Bridge-v1 needs 2 weight folder(s)")


def test_a_judge_that_needs_no_weights_is_not_listed(no_weights):
    problems = missing_weights(load_spec("Kosmos-Bridge-v1"), judge={"type": "state"})
    assert len(problems) == 1 and problems[0].startswith("world weights nvidia/Cosmos3-Nano")
    assert missing_weights(load_spec("Kosmos-Tabletop-v1")) == []
    assert missing_weights(load_spec("Kosmos-TabletopLearned-v1")) == []  # shipped weights


@requires_extra("models")  # eval checks the world's packages before its weights
def test_eval_names_both_and_writes_nothing(no_weights, tmp_path, capsys):
    from kosmos_env.cli import main

    out = tmp_path / "runs" / "bridge"
    rc = main(["eval", "--env", "Kosmos-Bridge-v1", "--policy", "random:chunk=4", "--seeds", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    _names_both(err)
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_doctor_lists_every_missing_weight_in_one_check(no_weights):
    from kosmos_env.checks.doctor import check_weights_present

    spec = load_spec("Kosmos-Bridge-v1")
    check = check_weights_present(spec, None, dict(spec.judge))
    assert check.status == "FAIL" and check.detail.startswith("2 missing: ")
    _names_both(check.detail)


def test_a_folder_without_a_checkpoint_is_named(no_weights, tmp_path, monkeypatch):
    monkeypatch.setenv("KOSMOS_VLM_JUDGE_PATH", str(tmp_path))
    problems = missing_weights(load_spec("Kosmos-Bridge-v1"))
    assert len(problems) == 2 and f"({tmp_path} holds no config.json)" in problems[1]
    (tmp_path / "config.json").write_text("{}")
    assert len(missing_weights(load_spec("Kosmos-Bridge-v1"))) == 1


def test_the_cache_is_read_without_huggingface_hub(no_weights, tmp_path, monkeypatch):
    """A core install has no huggingface_hub; the cache layout is read directly."""
    import sys

    snap = tmp_path / "hub" / "models--nvidia--Cosmos-Reason1-7B" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--nvidia--Cosmos-Reason1-7B" / "refs").mkdir()
    (tmp_path / "hub" / "models--nvidia--Cosmos-Reason1-7B" / "refs" / "main").write_text("abc")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    problems = missing_weights(load_spec("Kosmos-Bridge-v1"), check_world=False)
    assert problems == []
    (snap / "config.json").unlink()
    assert len(missing_weights(load_spec("Kosmos-Bridge-v1"), check_world=False)) == 1


def test_make_on_an_install_without_the_models_extra_names_the_extra(monkeypatch, tmp_path):
    """Kosmos-Bridge-v1 is registered on every install; without the models extra `make` says which
    extra to install, before it looks for weights or loads anything."""
    import sys

    monkeypatch.setitem(sys.modules, "diffusers", None)  # None in sys.modules: import (and find_spec) fail
    with pytest.raises(ModuleNotFoundError) as err:
        gym.make("Kosmos-Bridge-v1", world_kwargs={"weights_path": str(tmp_path)})
    msg = str(err.value)
    assert err.value.name == "diffusers" and "\n" not in msg
    assert "pip install -e '.[models]' (in a clone) or pip install 'kosmos-env[models]'" in msg
    # a world handed in needs no world packages; the state judge none
    from kosmos_env.required_weights import missing_packages

    assert missing_packages(load_spec("Kosmos-Bridge-v1"), {"pipeline": object()}, "state") == []
    assert missing_packages(load_spec("Kosmos-Tabletop-v1")) == []
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert missing_packages(load_spec("Kosmos-Bridge-v1")) == ["diffusers", "transformers"]
