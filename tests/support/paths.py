"""Where the repository and the test data are, for tests at any depth of the tree."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/support/paths.py -> .
DATA = ROOT / "tests" / "data"
