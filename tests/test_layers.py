"""The package's layers (``.importlinter``, drawn in docs/architecture.md) hold: ``lint-imports`` passes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _installed_layout(tmp_path: Path) -> Path:
    """The package as it installs (policies/ and judges/ inside kosmos_env/), sources only.

    ``policies/`` and ``judges/`` sit at the repository's top level and install as
    ``kosmos_env.policies`` / ``kosmos_env.judges`` (setuptools package-dir), which the import
    graph builder cannot see in an editable install; a copy of the installed layout can."""
    pkg = tmp_path / "kosmos_env"
    only_py = shutil.ignore_patterns("*.pyc", "__pycache__", "*.png", "*.mp4", "*.safetensors", "*.json", "*.parquet")
    shutil.copytree(ROOT / "kosmos_env", pkg, ignore=only_py)
    shutil.copytree(ROOT / "policies", pkg / "policies", ignore=only_py)
    shutil.copytree(ROOT / "judges", pkg / "judges", ignore=only_py)
    shutil.copytree(ROOT / "envs_registry", pkg / "envs_registry", ignore=only_py)
    return tmp_path


def test_import_contracts_hold(tmp_path):
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if lint is None:
        pytest.fail("lint-imports is not installed: pip install -e '.[test]' (import-linter is a test dependency)")
    src = _installed_layout(tmp_path / "src")
    proc = subprocess.run(
        [lint, "--config", str(ROOT / ".importlinter"), "--no-cache"],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout and "BROKEN" not in proc.stdout


def test_contracts_would_catch_a_policy_importing_a_world(tmp_path):
    """The checker is live: a policy module that imports a world breaks a contract."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if lint is None:
        pytest.fail("lint-imports is not installed: pip install -e '.[test]'")
    src = _installed_layout(tmp_path / "src")
    (src / "kosmos_env" / "policies" / "leaky.py").write_text("from kosmos_env.worlds.tabletop import geometry\n")
    proc = subprocess.run(
        [lint, "--config", str(ROOT / ".importlinter"), "--no-cache"],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode != 0
    assert "kosmos_env.policies.leaky -> kosmos_env.worlds.tabletop.geometry" in proc.stdout


def _contract_rows() -> list[list[str]]:
    import configparser

    cfg = configparser.ConfigParser(inline_comment_prefixes=(";",))
    cfg.read(ROOT / ".importlinter")
    layers = cfg["importlinter:contract:layers"]
    assert layers.get("exhaustive", "").strip().lower() == "true", "the layers contract must be exhaustive"
    return [[m.strip() for m in row.split("|")] for row in layers["layers"].strip().splitlines()]


def _drawn_rows() -> list[list[str]]:
    """The rows of the drawing in docs/architecture.md's "Layers" section: each row's first column
    (before two spaces), folders written ``name/`` or ``name/*``."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = doc.split("## Layers", 1)[1].split("```", 2)[1]
    rows = []
    for line in block.splitlines():
        if not line.strip() or line.strip() == "│":
            continue
        names = line.split("  ", 1)[0]
        rows.append([n.strip().rstrip("*").rstrip("/") for n in names.split("|")])
    return rows


def test_architecture_drawing_is_the_layers_contract():
    """docs/architecture.md draws exactly the rows of the (exhaustive) layers contract, in order."""
    assert _drawn_rows() == _contract_rows()


def test_exhaustive_contract_catches_an_unplaced_module(tmp_path):
    """A new top-level module that is in no row breaks the layers contract (it is exhaustive)."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if lint is None:
        pytest.fail("lint-imports is not installed: pip install -e '.[test]'")
    src = _installed_layout(tmp_path / "src")
    (src / "kosmos_env" / "unplaced.py").write_text("X = 1\n")
    proc = subprocess.run(
        [lint, "--config", str(ROOT / ".importlinter"), "--no-cache"],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode != 0
    assert "kosmos_env.unplaced" in proc.stdout
