"""`kosmos-env rollout` prints the success rate and writes one playable MP4 per episode."""

from __future__ import annotations

import json

from kosmos_env.cli import main
from kosmos_env.utils.video import read_video


def test_rollout_writes_videos_and_summary(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "rollout",
            "--env",
            "Kosmos-Tabletop-v1",
            "--task",
            "spoon_on_towel",
            "--policy",
            "scripted:skill=1.0",
            "--episodes",
            "2",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "success rate" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["episodes"]) == 2
    assert summary["success_rate"] == sum(e["success"] for e in summary["episodes"]) / 2
    frames = read_video(out / "episode_0000.mp4")
    assert frames.shape == (41, 128, 128, 3)  # initial frame + 40 steps


def test_rollout_bad_policy_is_a_clear_error(tmp_path, capsys):
    code = main(["rollout", "--policy", "nonexistent", "--episodes", "1", "--out", str(tmp_path)])
    assert code == 2
    assert "unknown policy" in capsys.readouterr().err
