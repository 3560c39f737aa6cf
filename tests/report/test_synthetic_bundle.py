"""The synthetic results bundle (tests/support/report_bundle.py) honours the results contract:
schema, manifest digests, content-addressed artifact names, per-step logs and action shapes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from tests.support.report_bundle import POLICIES, TASKS, make_bundle


def test_synthetic_bundle_follows_contract(tmp_path):
    root = make_bundle(tmp_path / "c", seeds=3, policies=POLICIES[:2], tasks=TASKS[:1])
    data = json.loads((root / "results.json").read_text())
    assert data["schema"] == "kosmos-env/results" and data["schema_version"] == 1
    man = json.loads((root / "manifest.json").read_text())["files"]
    assert "results.json" in man
    for rel, digest in man.items():
        assert hashlib.sha256((root / rel).read_bytes()).hexdigest() == digest
    for row in data["per_episode"]:
        for kind, rel in row["artifacts"].items():
            name = Path(rel).name
            assert (
                rel.startswith("artifacts/sha256/")
                and name.split(".")[0] == hashlib.sha256((root / rel).read_bytes()).hexdigest()
            )
        with np.load(root / row["artifacts"]["log"], allow_pickle=False) as z:
            assert z["gt_success"].shape == (row["steps"],)
        assert np.load(root / row["artifacts"]["actions"], allow_pickle=False).shape == (row["steps"], 7)
