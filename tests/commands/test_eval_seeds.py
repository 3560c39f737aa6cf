"""`kosmos-env eval`'s seeds: held-out evaluation seeds by default, `--seed-offset` on every command
that takes `--seeds`, one line (and a record in results.json) for a campaign on training or tuning
seeds, and a folder made when the default was seed 0 resumes on its own seeds."""

from __future__ import annotations

import json

import pytest

from kosmos_env.cli import build_parser, main
from kosmos_env.utils.seed_ranges import evaluation_start, overlap_line, seed_provenance, stage_of

# one random-policy episode per seed on one task at 64x64, no video: about a second per campaign
SMALL = ["--env", "Kosmos-Tabletop-v1", "--policy", "random", "--tasks", "carrot_on_plate", "--image-size", "64", "64"]
QUIET = ["--no-video", "--no-progress"]


def _eval(out, *flags) -> int:
    return main(["eval", *SMALL, *QUIET, "--out", str(out), *flags])


def _campaign(out) -> dict:
    return json.loads((out / "results.json").read_text())["campaign"]


def test_default_seeds_are_the_first_evaluation_seeds(tmp_path, capsys):
    assert _eval(tmp_path / "c", "--seeds", "2") == 0
    camp = _campaign(tmp_path / "c")
    assert evaluation_start() == 100000 and stage_of(100000) == "evaluation"
    assert camp["seeds"] == [100000, 100001]
    assert camp["seed_provenance"]["held_out"] is True
    assert camp["seed_provenance"]["counts"] == {"training": 0, "tuning": 0, "evaluation": 2, "undeclared": 0}
    assert "not held out" not in capsys.readouterr().err


def test_training_seeds_are_said_once_and_recorded(tmp_path, capsys):
    assert _eval(tmp_path / "c", "--seeds", "2", "--seed-offset", "0") == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "not held out" in line]
    assert len(notes) == 1, notes
    assert "seeds 0-1" in notes[0] and "training range" in notes[0] and "--seed-offset 100000" in notes[0]
    camp = _campaign(tmp_path / "c")
    assert camp["seeds"] == [0, 1]
    assert camp["seed_provenance"]["held_out"] is False and camp["seed_provenance"]["counts"]["training"] == 2


def test_a_folder_made_with_seeds_from_zero_resumes_on_them(tmp_path, capsys):
    """Before evaluation seeds were the default, `eval --seeds 2` planned seeds 0-1 (make_config's
    own default, offset 0, still builds that config). Rerunning the same command must finish that
    campaign, not plan seeds 100000-100001 and be refused as a different one."""
    from kosmos_env.campaign.design import make_config
    from kosmos_env.campaign.runner import open_campaign

    out = tmp_path / "old"
    old = make_config(
        "Kosmos-Tabletop-v1", ["random"], tasks=["carrot_on_plate"], seeds=2, image_size=(64, 64), video=False
    )
    assert old.seeds == (0, 1)
    open_campaign(old, out)  # planned, not run: as a campaign stopped before its first episode
    assert _eval(out, "--seeds", "2") == 0
    err = capsys.readouterr().err
    assert f"holds campaign {old.campaign_id}: resuming on its recorded seeds (--seed-offset 0)" in err
    camp = _campaign(out)
    assert camp["id"] == old.campaign_id and camp["seeds"] == [0, 1] and camp["complete"]
    # an explicit offset on the old folder is another campaign: refused, never mixed in
    assert _eval(out, "--seeds", "2", "--seed-offset", "100000") == 2
    assert "different config" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["-1", "2147483647"])
def test_a_bad_offset_is_one_line(tmp_path, capsys, bad):
    assert _eval(tmp_path / "c", "--seeds", "2", "--seed-offset", bad) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--seed-offset must be in [0, " in err[0]
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "argv, dest",
    [
        (["eval", "--policy", "random", "--out", "x"], "seed_offset"),
        (["rollout", "--out", "x"], "seed"),  # --seed-offset, with --seed kept as its older alias
        (["gate-check"], "seed"),
        (["trust", "--env", "Kosmos-Tabletop-v1"], "seed_offset"),
        (["study"], "seed_offset"),
        (["register", "--study"], "seed_offset"),
    ],
)
def test_every_command_with_seeds_takes_a_seed_offset(argv, dest):
    parser = build_parser()
    assert getattr(parser.parse_args(argv + ["--seeds", "3", "--seed-offset", "7"]), dest) == 7
    # its default is an evaluation seed (None: chosen at run time, the first evaluation seed)
    default = getattr(parser.parse_args(argv), dest)
    assert default is None or stage_of(default) == "evaluation", (argv[0], default)


def test_rollout_starts_at_the_first_evaluation_seed(tmp_path):
    out = tmp_path / "r"
    rc = main(
        ["rollout", "--policy", "random", "--tasks", "carrot_on_plate", "--seeds", "1", "--no-video", "--out", str(out)]
    )
    assert rc == 0
    assert [e["seed"] for e in json.loads((out / "summary.json").read_text())["episodes"]] == [100000]


def test_overlap_counts_each_stage():
    assert overlap_line([100000, 100001]) is None and overlap_line([330000]) is None
    line = overlap_line([99999, 100000, 200000])
    assert "\n" not in line and "1 in the training range" in line and "1 in the tuning range" in line
    prov = seed_provenance([99999, 100000, 200000, 10**9])
    assert prov["counts"] == {"training": 1, "tuning": 1, "evaluation": 1, "undeclared": 1}
    assert prov["held_out"] is False and prov["declared_in"] == "kosmos_env/study/seed_ranges.json"
