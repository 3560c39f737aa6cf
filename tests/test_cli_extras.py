"""A core install (no extras): a command that needs an extra says which one in one line and exits 2;
every env registered there runs; dependency floors have one source (pyproject.toml).

The core install is simulated in a subprocess by a ``sitecustomize`` that puts ``None`` in
``sys.modules`` for every package only an extra installs (``import x`` then raises
ModuleNotFoundError exactly as when x is absent).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kosmos_env.errors import (
    _IMPORT_TO_DIST,
    dependency_floor,
    extra_for_module,
    install_hint,
    missing_module_message,
    require_version,
    requirement_table,
)

ROOT = Path(__file__).resolve().parents[1]
# installed on a core install anyway, as dependencies of core packages (imageio needs pillow, torch jinja2)
_TRANSITIVE_OF_CORE = {"pillow", "jinja2"}


def _extras_only_modules() -> list[str]:
    to_import = {dist: mod for mod, dist in _IMPORT_TO_DIST.items()}
    return sorted(
        to_import.get(dist, dist.replace("-", "_"))
        for dist, entry in requirement_table().items()
        if not entry["core"] and dist not in _TRANSITIVE_OF_CORE
    )


@pytest.fixture(scope="module")
def core_install(tmp_path_factory) -> dict[str, str]:
    """Environment variables of a subprocess that sees only the core install."""
    site = tmp_path_factory.mktemp("core_site")
    (site / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in _extras_only_modules())
    )
    env = dict(
        os.environ,
        MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"),
        PYTHONPATH=os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]),
        # tiny models built here, not found in a cache a previous run left: they need the extra
        KOSMOS_TINY_DIR=str(tmp_path_factory.mktemp("no_tiny")),
        OMP_NUM_THREADS="1",
    )
    env.pop("KOSMOS_COSMOS3_NANO_PATH", None)
    env.pop("KOSMOS_VLM_JUDGE_PATH", None)
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kosmos_env.cli", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_the_simulated_core_install_lacks_the_extras(core_install):
    proc = subprocess.run(
        [sys.executable, "-c", "import transformers"], env=core_install, capture_output=True, text=True
    )
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr
    assert {"transformers", "diffusers", "matplotlib", "ray"} <= set(_extras_only_modules())
    assert "safetensors" not in _extras_only_modules()  # a core dependency: the learned tabletop loads with it


@pytest.fixture(scope="module")
def small_campaign(tmp_path_factory) -> Path:
    from kosmos_env.cli import main

    out = tmp_path_factory.mktemp("c") / "run"
    assert (
        main(
            [
                "eval",
                "--policy",
                "random",
                "--tasks",
                "carrot_on_plate",
                "--seeds",
                "1",
                "--no-video",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


@pytest.mark.parametrize(
    "extra, args",
    [
        ("results", ["report", "{campaign}"]),
        ("models", ["judge-check", "--tiny"]),
        (
            "models",
            [
                "eval",
                "--env",
                "Kosmos-Bridge-v1",
                "--tiny",
                "--policy",
                "random:chunk=4",
                "--tasks",
                "move_can_to_left",
                "--seeds",
                "1",
                "--out",
                "{out}",
            ],
        ),
        # a flag's extra is named before any work: no campaign folder, no episode
        ("wandb", ["eval", "--wandb", "--policy", "random", "--seeds", "1", "--out", "{out}"]),
        ("ray", ["eval", "--executor", "ray", "--policy", "random", "--seeds", "1", "--out", "{out}"]),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(core_install, small_campaign, tmp_path, extra, args):
    args = [a.format(campaign=small_campaign, out=tmp_path / "bridge") for a in args]
    proc = _cli(core_install, *args)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(f"kosmos-env {args[0]}: error: ")
    assert f"pip install -e '.[{extra}]' (in a clone)" in lines[0] and f"pip install 'kosmos-env[{extra}]'" in lines[0]
    assert not (tmp_path / "bridge").exists()  # nothing written before the check


def test_every_env_registered_on_a_core_install_runs_there(core_install, tmp_path):
    """The learned tabletop (shipped weights, frame-classifier judge) runs a campaign on the core install."""
    proc = _cli(
        core_install,
        "eval",
        "--env",
        "Kosmos-TabletopLearned-v1",
        "--policy",
        "random",
        "--tasks",
        "carrot_on_plate",
        "--seeds",
        "1",
        "--no-video",
        "--no-progress",
        "--json",
        "--out",
        str(tmp_path / "l"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    row = json.loads(proc.stdout)["per_policy"]["random"]
    assert row["n"] == 1 and row["errors"] == 0 and row["successes"] + row["failures"] + row["discarded"] == 1


def test_module_to_extra_comes_from_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert extra_for_module("matplotlib.pyplot") == ("matplotlib", "results")
    assert extra_for_module("transformers") == ("transformers", "models")
    assert extra_for_module("sklearn") == ("scikit-learn", "baselines")
    assert extra_for_module("scipy") == ("scipy", None)  # core
    assert extra_for_module("kosmos_env.nothing") is None and extra_for_module("not_a_dependency") is None
    # every extra a hint can name is one pyproject.toml declares
    for dist, entry in requirement_table().items():
        assert set(entry["extras"]) <= set(project["optional-dependencies"]), dist
    exc = ModuleNotFoundError("No module named 'ray'", name="ray")
    assert missing_module_message(exc) == f"ray is not installed; it comes with the 'ray' extra: {install_hint('ray')}"
    assert missing_module_message(ModuleNotFoundError("x", name="kosmos_env.gone")) is None
    assert missing_module_message(ValueError("x")) is None


def test_an_unknown_missing_module_keeps_its_traceback(monkeypatch):
    """A module pyproject.toml does not name (a bug, not an install choice) is not dressed up as an extra."""
    from kosmos_env import cli

    def boom(_argv):
        raise ModuleNotFoundError("No module named 'kosmos_env.gone'", name="kosmos_env.gone")

    monkeypatch.setattr(cli, "_main", boom)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["eval"])


def test_dependency_floors_have_one_source(monkeypatch):
    from kosmos_env.worlds import cosmos3

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {r.split(">=")[0]: r.split(">=")[1] for r in project["optional-dependencies"]["models"]}
    assert cosmos3.required_versions() == {"diffusers": declared["diffusers"], "transformers": declared["transformers"]}
    assert dependency_floor("transformers") == declared["transformers"]
    # the VLM judge's and the world's check: below the floor is one line with both install forms
    with pytest.raises(RuntimeError) as err:
        require_version("transformers", "4.57.0", "the VLM judge")
    msg = str(err.value)
    assert f"transformers>={declared['transformers']} (installed: 4.57.0)" in msg and "\n" not in msg
    assert "pip install -U -e '.[models]' (in a clone)" in msg and "pip install -U 'kosmos-env[models]'" in msg
    require_version("transformers", declared["transformers"], "the VLM judge")  # at the floor: fine


def test_doctor_fix_names_the_clone_and_the_pypi_install(monkeypatch):
    from kosmos_env.checks import doctor
    from kosmos_env.worlds import cosmos3

    monkeypatch.setattr(cosmos3, "required_versions", lambda: {"diffusers": "999.0", "transformers": "999.0"})
    check = doctor.check_versions()
    assert check.status == "FAIL" and "diffusers>=999.0" in check.detail
    assert check.fix.startswith("pip install -U -e '.[models]' (in a clone) or pip install -U 'kosmos-env[models]'")


def test_python_floor_is_the_one_ci_runs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11" and sys.version_info >= (3, 11)
    assert any(r.startswith("safetensors") for r in project["dependencies"])


def test_an_installed_package_reads_the_floors_from_its_metadata(tmp_path):
    """Outside a clone (no pyproject.toml beside the package) the installed distribution's metadata
    is the source; it names the same floors."""
    from importlib import metadata

    from kosmos_env.errors import read_requirement_lines

    try:
        installed = metadata.requires("kosmos-env")
    except metadata.PackageNotFoundError:
        pytest.skip("kosmos-env is not installed (run from a source tree only)")
    lines = read_requirement_lines(tmp_path / "pyproject.toml")
    assert list(lines) == list(installed or [])
    assert any(line.startswith("transformers>=") and 'extra == "models"' in line for line in lines)
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "someone-else"\ndependencies = ["numpy>=9"]\n')
    assert list(read_requirement_lines(other)) == list(installed or [])  # another project's file is not ours


def test_doctor_on_a_core_install_fails_only_envs_that_need_the_extra(core_install):
    tabletop = _cli(core_install, "doctor", "--env", "Kosmos-Tabletop-v1", "--json")
    assert tabletop.returncode == 0, tabletop.stdout[-2000:] + tabletop.stderr[-2000:]
    import json

    checks = {c["name"]: c for c in json.loads(tabletop.stdout)["checks"]}
    assert checks["packages"]["status"] == "info" and "not needed" in checks["packages"]["detail"]
    bridge = _cli(core_install, "doctor", "--env", "Kosmos-Bridge-v1", "--json")
    checks = {c["name"]: c for c in json.loads(bridge.stdout)["checks"]}
    assert bridge.returncode == 1 and checks["packages"]["status"] == "FAIL"
    assert checks["packages"]["fix"].startswith("pip install -U -e '.[models]' (in a clone)")
