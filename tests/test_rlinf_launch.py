"""kosmos_env.rlinf_launch: the registration logic, against a small package laid out as RLinf 0.3.0
lays out the parts it patches (a closed ``SupportedEnvType`` enum with ``get_env_cls`` in
``<pkg>.envs``, ``prepare_actions`` in ``<pkg>.envs.action_utils``, and a worker module that imported
both by name before the extension module runs, as ``rlinf.workers.env.env_worker`` does), and the
launcher's command line. RLinf itself is not needed here: the real run on RLinf's own env workers
is tests/test_rlinf_run.py (opt-in, in RLinf's own environment)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import uuid
from enum import Enum
from pathlib import Path

import numpy as np
import pytest

from kosmos_env import rlinf_launch
from tests.support.paths import ROOT

ENVS = """
from enum import Enum


class SupportedEnvType(Enum):
    MANISKILL = "maniskill"
    ROBOTWIN = "robotwin"


def get_env_cls(env_type, env_cfg=None):
    env_type = SupportedEnvType(env_type)
    if env_type == SupportedEnvType.MANISKILL:
        return "ManiskillEnv"
    if env_type == SupportedEnvType.ROBOTWIN:
        return "RoboTwinEnv"
    raise NotImplementedError(f"Environment type {env_type} not implemented")
"""
ACTION_UTILS = """
from PKG.envs import SupportedEnvType


def prepare_actions(raw_chunk_actions, env_type, model_type, num_action_chunks, action_dim, **kwargs):
    env_type = SupportedEnvType(env_type)
    if env_type == SupportedEnvType.MANISKILL:
        return ("maniskill-mapped", raw_chunk_actions)
    return raw_chunk_actions
"""
WORKER = """
from PKG.envs import get_env_cls
from PKG.envs.action_utils import prepare_actions
"""


def _make_package(root: Path, name: str) -> None:
    (root / name / "envs").mkdir(parents=True)
    (root / name / "workers").mkdir()
    (root / name / "__init__.py").write_text("")
    (root / name / "workers" / "__init__.py").write_text("")
    (root / name / "envs" / "__init__.py").write_text(ENVS)
    (root / name / "envs" / "action_utils.py").write_text(ACTION_UTILS.replace("PKG", name))
    (root / name / "workers" / "env_worker.py").write_text(WORKER.replace("PKG", name))


@pytest.fixture
def fake_rlinf(tmp_path, monkeypatch):
    """A fresh package per test (its modules are dropped afterwards, so no patch leaks)."""
    name = f"fake_rlinf_{uuid.uuid4().hex[:8]}"
    _make_package(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    worker = importlib.import_module(f"{name}.workers.env_worker")  # imported before register()
    yield name, worker
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def test_register_maps_kosmos_to_the_adapter_in_modules_imported_before_it(fake_rlinf):
    import importlib

    from kosmos_env.rlinf_adapter import KosmosRLinfEnv

    name, worker = fake_rlinf
    envs = importlib.import_module(f"{name}.envs")
    done = rlinf_launch.register(package=name)
    assert done["member"] is envs.SupportedEnvType.KOSMOS
    assert sorted(done["rebound"]["get_env_cls"]) == [f"{name}.envs", f"{name}.workers.env_worker"]
    # the worker module's own names, bound at its import, now answer for kosmos ...
    assert worker.get_env_cls("kosmos") is KosmosRLinfEnv
    assert worker.get_env_cls(envs.SupportedEnvType.KOSMOS, {"env_id": "x"}) is KosmosRLinfEnv
    # ... and still hand every other type to RLinf's own function
    assert worker.get_env_cls("robotwin") == "RoboTwinEnv"
    with pytest.raises(ValueError, match="'libero' is not a valid SupportedEnvType"):
        worker.get_env_cls("libero")
    # actions reach the Kosmos env as they left the policy (a float32 array); others are mapped
    torch = pytest.importorskip("torch")
    chunk = torch.arange(14, dtype=torch.bfloat16).reshape(1, 2, 7)
    passed = worker.prepare_actions(chunk, "kosmos", "mlp_policy", 2, 7)
    assert isinstance(passed, np.ndarray) and passed.dtype == np.float32
    np.testing.assert_array_equal(passed, np.arange(14, dtype=np.float32).reshape(1, 2, 7))
    assert worker.prepare_actions("a", "maniskill", "mlp_policy", 1, 7) == ("maniskill-mapped", "a")
    # a module imported after register() gets the wrapped functions from the package itself
    late = importlib.import_module(f"{name}.envs.action_utils")
    assert late.prepare_actions is worker.prepare_actions


def test_the_enum_member_behaves_as_one_declared_in_the_class(fake_rlinf):
    import importlib

    name, _ = fake_rlinf
    enum_cls = importlib.import_module(f"{name}.envs").SupportedEnvType
    rlinf_launch.register(package=name)
    member = enum_cls("kosmos")
    assert member is enum_cls["KOSMOS"] is enum_cls.KOSMOS
    assert isinstance(member, enum_cls) and isinstance(member, Enum)
    assert (member.name, member.value) == ("KOSMOS", "kosmos")
    assert [m.value for m in enum_cls] == ["maniskill", "robotwin", "kosmos"]
    assert member != enum_cls.ROBOTWIN and enum_cls("robotwin") is enum_cls.ROBOTWIN
    assert {member: 1}[enum_cls("kosmos")] == 1


def test_register_again_changes_nothing(fake_rlinf):
    """RLinf calls register() once per Worker; a process may hold several (and the driver too)."""
    import importlib

    name, worker = fake_rlinf
    rlinf_launch.register(package=name)
    wrapped = worker.get_env_cls
    again = rlinf_launch.register(package=name)
    assert worker.get_env_cls is wrapped and again["rebound"]["get_env_cls"] == []
    assert [m.value for m in importlib.import_module(f"{name}.envs").SupportedEnvType].count("kosmos") == 1


def test_extend_enum_refuses_a_clash():
    class Kind(Enum):
        A = "a"

    with pytest.raises(ValueError, match="Kind already has value 'a' as A"):
        rlinf_launch.extend_enum(Kind, "B", "a")
    with pytest.raises(ValueError, match=r"Kind.A already exists with value 'a'"):
        rlinf_launch.extend_enum(Kind, "A", "b")
    assert rlinf_launch.extend_enum(Kind, "A", "a") is Kind.A


def test_export_for_workers_names_this_module_and_keeps_another_users_module():
    environ: dict[str, str] = {}
    rlinf_launch.export_for_workers(environ)
    assert environ == {"RLINF_EXT_MODULE": "kosmos_env.rlinf_launch"}
    rlinf_launch.export_for_workers(environ)  # ours already: fine
    with pytest.raises(ValueError, match="RLINF_EXT_MODULE is already 'my_ext'; RLinf loads one extension module"):
        rlinf_launch.export_for_workers({"RLINF_EXT_MODULE": "my_ext"})


def _launch(args: list[str], tmp_path: Path, extra_path: str = "", env_extra: dict | None = None):
    env = {k: v for k, v in os.environ.items() if k != "RLINF_EXT_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "kosmos_env.rlinf_launch", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )


def test_the_launcher_registers_exports_and_runs_the_entry_script_with_its_arguments(tmp_path):
    """As with RLinf's train_embodied_agent.py: the script runs as __main__ with Hydra's arguments,
    after the driver's registration, with RLINF_EXT_MODULE set for the workers it starts."""
    pkg_root = tmp_path / "pkgs"
    _make_package(pkg_root, "rlinf")
    script = tmp_path / "entry.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, os, sys
            from rlinf.envs import SupportedEnvType, get_env_cls
            print(json.dumps({
                "name": __name__,
                "argv": sys.argv,
                "ext": os.environ.get("RLINF_EXT_MODULE"),
                "env_cls": get_env_cls(SupportedEnvType("kosmos")).__name__,
            }))
            """
        )
    )
    run = _launch(
        [str(script), "--config-name", "kosmos_tabletop_ppo_mlp", "runner.max_epochs=1"], tmp_path, str(pkg_root)
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen == {
        "name": "__main__",
        "argv": [str(script), "--config-name", "kosmos_tabletop_ppo_mlp", "runner.max_epochs=1"],
        "ext": "kosmos_env.rlinf_launch",
        "env_cls": "KosmosRLinfEnv",
    }


def test_the_launcher_refuses_bad_input_in_one_line(tmp_path):
    usage = _launch([], tmp_path)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: python -m kosmos_env.rlinf_launch")
    missing = _launch([str(tmp_path / "nope.py")], tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines() == [
        f"rlinf_launch: no entry script at {str(tmp_path / 'nope.py')!r} "
        "(RLinf's e.g. examples/embodiment/train_embodied_agent.py)"
    ]
    script = tmp_path / "entry.py"
    script.write_text("print('ran')\n")
    if importlib.util.find_spec("rlinf") is None:
        no_rlinf = _launch([str(script)], tmp_path)
        assert no_rlinf.returncode == 2 and "Traceback" not in no_rlinf.stderr and "ran" not in no_rlinf.stdout
        assert "rlinf is not importable in this interpreter" in no_rlinf.stderr
    pkg_root = tmp_path / "pkgs"
    _make_package(pkg_root, "rlinf")
    taken = _launch([str(script)], tmp_path, str(pkg_root), env_extra={"RLINF_EXT_MODULE": "my_ext"})
    assert taken.returncode == 2 and taken.stderr.strip().splitlines() == [
        "rlinf_launch: RLINF_EXT_MODULE is already 'my_ext'; RLinf loads one extension module: call "
        "kosmos_env.rlinf_launch.register() from its register() and run the entry script directly"
    ]
