"""Canonical JSON and sha256: the content hashes of specs, task suites and results.

Same data, same text, same hash, on any machine. Imports nothing of the package.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(data: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace, floats as Python repr. Same data, same text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()
