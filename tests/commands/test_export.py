"""``kosmos-env export``: a campaign exported from the command line, and every mistake answered by
one line naming the fix, exit code 2, nothing written."""

from __future__ import annotations

import json

import pytest

from kosmos_env import cli
from kosmos_env.campaign.design import make_config
from kosmos_env.campaign.runner import run_campaign


def _campaign(out, video: bool):
    config = make_config(
        "Kosmos-Tabletop-v1",
        ["scripted"],
        tasks=["carrot_on_plate"],
        seeds=1,
        image_size=(64, 64),
        video=video,
        spec_overrides={"horizon": 3},
    )
    run_campaign(config, out, progress=False)
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return _campaign(tmp_path_factory.mktemp("campaign") / "run", video=True)


def _fails(argv, capsys, *phrases):
    code = cli.main(["export", *map(str, argv)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("kosmos-env export: error: "), err
    for phrase in phrases:
        assert phrase in err, err
    return err


def test_export_from_the_command_line(run_dir, tmp_path, capsys):
    out = tmp_path / "datasets" / "c1"  # parent folders are made
    assert cli.main(["export", "--format", "lerobot", str(run_dir), str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["episodes"] == 1 and report["frames"] == 2 and report["out"] == str(out)
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_frames"] == 2
    assert "observation.images.image" in info["features"]


def test_mistakes_get_one_line(run_dir, tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("taken")
    _fails([run_dir, full], capsys, "is not an empty folder", "new folder")
    _fails([tmp_path, tmp_path / "a"], capsys, "is not a campaign folder", "eval --out")
    _fails([run_dir], capsys, "give the campaign folder and a new dataset folder")
    _fails(["--demos", "d.npz", run_dir, tmp_path / "b"], capsys, "with --demos give only the dataset folder")
    _fails(["--demos", tmp_path / "none.npz", tmp_path / "c"], capsys, "no such file")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    _fails(["--demos", junk, tmp_path / "d"], capsys, "not a demonstrations .npz")
    _fails(["--demos", junk, "--policy", "scripted", tmp_path / "e"], capsys, "--policy picks a campaign's policies")
    _fails([run_dir, tmp_path / "f", "--policy", "nope"], capsys, "no policy 'nope'", "scripted")
    _fails([run_dir, tmp_path / "g", "--camera", "a.b"], capsys, "camera name")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "junk.npz"]  # nothing else was written


def test_a_campaign_without_video_says_how_to_get_one(tmp_path, capsys):
    run = _campaign(tmp_path / "novideo", video=False)
    _fails([run, tmp_path / "out"], capsys, "stored no video", "without --no-video")
    assert not (tmp_path / "out").exists()
