"""The test tree mirrors the package and its modules stand alone: every folder under ``tests/`` (but
``support/`` and ``data/``) is named after a subpackage of ``kosmos_env``, and no test module imports
another test module (shared helpers live in ``tests/support/``, shared fixtures in ``conftest.py``)."""

from __future__ import annotations

import ast

from tests.support.paths import ROOT

TESTS = ROOT / "tests"
NOT_MIRRORS = {"support", "data", "__pycache__"}


def package_subpackages() -> set[str]:
    """The subpackages of the installed ``kosmos_env`` (policies/ and judges/ install into it)."""
    names = {p.parent.name for p in (ROOT / "kosmos_env").glob("*/__init__.py")}
    return names | {"policies", "judges"}


def imported_test_modules(source: str) -> list[str]:
    """Every ``tests.<...>.test_*`` module the source imports (at any depth of the file)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found += [n for n in names if n.startswith("tests.") and n.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_every_test_folder_is_named_after_a_subpackage():
    # dot-folders are tools' caches (ruff run on tests/ leaves .ruff_cache), never test folders
    folders = {
        p.name for p in TESTS.iterdir() if p.is_dir() and p.name not in NOT_MIRRORS and not p.name.startswith(".")
    }
    assert folders, "no test folders found"
    assert folders <= package_subpackages(), (
        f"test folders with no kosmos_env subpackage: {folders - package_subpackages()}"
    )
    for name in folders | {"support"}:
        assert (TESTS / name / "__init__.py").is_file(), f"tests/{name}/ has no __init__.py (module names would clash)"


def test_no_test_module_imports_another():
    offenders = {}
    for path in sorted(TESTS.rglob("*.py")):
        imported = imported_test_modules(path.read_text())
        if imported:
            offenders[str(path.relative_to(ROOT))] = imported
    assert not offenders, f"test modules importing test modules (move the helper to tests/support/): {offenders}"


def test_the_import_check_is_live():
    """The checker sees a test-to-test import at module level and inside a function, and nothing else."""
    source = (
        "from tests.support.paths import ROOT\n"
        "from tests.gate import test_gate\n"
        "def f():\n"
        "    from tests.console.test_app import planned\n"
        "    import tests.test_cli\n"
    )
    assert imported_test_modules(source) == ["tests.gate.test_gate", "tests.console.test_app", "tests.test_cli"]
