"""ruff lint and ruff format --check over the whole repository (configuration in pyproject.toml).

The version is pinned in the ``test`` extra, because the formatter's output changes between
versions; pre-commit runs the same two checks before each commit (.pre-commit-config.yaml).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if exe is None:
        pytest.skip("ruff is not installed (the test extra: pip install -e '.[test]')")
    return [exe]


def test_ruff_check_is_clean():
    out = subprocess.run(_ruff() + ["check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_ruff_format_is_clean():
    out = subprocess.run(_ruff() + ["format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
