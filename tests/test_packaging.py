"""Every Python package in the source tree is installed (a non-editable install would miss it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# source folders that install under another name (pyproject's package-dir)
MAPPED = {"policies": "kosmos_env.policies", "judges": "kosmos_env.judges", "envs_registry": "kosmos_env.envs_registry"}


def _declared() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(config["tool"]["setuptools"]["packages"])


def _found() -> set[str]:
    found = set()
    for init in (ROOT / "kosmos_env").rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        found.add(".".join(rel.parts))
    for folder, name in MAPPED.items():
        assert (ROOT / folder / "__init__.py").is_file(), f"{folder}/ must be a package"
        found.add(name)
    return found


def test_every_package_is_declared():
    missing = _found() - _declared()
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"


def test_no_declared_package_is_missing():
    stale = _declared() - _found()
    assert not stale, f"declared in pyproject.toml but not in the tree: {sorted(stale)}"


def test_data_files_are_declared():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = config["tool"]["setuptools"]["package-data"]
    assert "*.json" in data["kosmos_env.envs_registry"]
    assert any(p.startswith("weights/") for p in data["kosmos_env.worlds.tabletop_learned"])
    assert list((ROOT / "kosmos_env" / "worlds" / "tabletop_learned" / "weights").glob("*.safetensors"))
