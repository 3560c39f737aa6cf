"""The scale-out bench scripts run: the GPU speed script in its CPU --smoke mode, and the
time-breakdown table and plot from a real (tiny) campaign's results.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import requires_extra
from tests.support.paths import ROOT


@pytest.mark.slow
@requires_extra("models")  # the speed script builds the tiny Cosmos 3 pipeline
def test_gpu_speed_script_runs_in_smoke_mode(tmp_path):
    out = tmp_path / "speed"
    proc = subprocess.run(
        [
            sys.executable,
            "bench/gpu/cosmos3_speed.py",
            "--smoke",
            "--options",
            "baseline",
            "text_kv_cache",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "speed.json").read_text())
    assert [r["option"] for r in data["rows"]] == ["baseline", "text_kv_cache"]
    for row in data["rows"]:
        assert "error" not in row, row
        assert row["s_per_chunk"] > 0 and row["frames_shape"][0] == 5  # chunk 4 -> 5 frames
    md = (tmp_path / "speed.md").read_text()
    assert "SMOKE" in md and "| 256 | 2 | baseline |" in md


@pytest.mark.slow
def test_gpu_speed_script_refuses_to_run_without_a_gpu_unless_smoke():
    proc = subprocess.run(
        [sys.executable, "bench/gpu/cosmos3_speed.py", "--device", "cuda"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert proc.returncode != 0 and "no CUDA device" in proc.stderr


@pytest.mark.slow
@requires_extra("results")  # the breakdown plot is drawn with matplotlib
def test_time_breakdown_table_and_png_from_a_campaign(tmp_path):
    from kosmos_env.campaign import make_config, run_campaign

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import time_breakdown
    finally:
        sys.path.pop(0)
    cfg = make_config(
        "Kosmos-Tabletop-v1",
        ["scripted:skill=1.0", "random"],
        tasks=["carrot_on_plate"],
        seeds=2,
        image_size=(32, 32),
        video=False,
    )
    results = run_campaign(cfg, tmp_path / "c", progress=False)
    table = time_breakdown.breakdown(results)
    assert set(table) == {"scripted:skill=1.0", "random", "all"} and table["all"]["n"] == 4
    row = table["all"]
    assert row["world"] > 0 and abs(sum(row[s] for s in time_breakdown.STAGES) - row["total"]) < 1e-6
    assert time_breakdown.main([str(tmp_path / "c"), "--out", str(tmp_path / "tb")]) == 0
    png = (tmp_path / "tb.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    assert "world" in (tmp_path / "tb.txt").read_text()
