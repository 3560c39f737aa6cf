"""Held-out units of a training run (tuning seeds only) and the files a run owns in its folder."""

from __future__ import annotations

import pytest

from kosmos_env.study.seed_ranges import stage_of
from kosmos_env.training.heldout import HELDOUT_SEED_BASE, heldout_units, success_mode
from kosmos_env.training.run_folder import checkpoint_update, remove_run_outputs, run_outputs

TASKS = ["spoon_on_towel", "carrot_on_plate", "stack_green_on_yellow", "eggplant_in_basket"]


def test_heldout_units_are_tuning_seeds_one_block_per_task():
    units = heldout_units(TASKS, 3)
    assert units[:4] == [
        ("spoon_on_towel", 329000),
        ("spoon_on_towel", 329001),
        ("spoon_on_towel", 329002),
        ("carrot_on_plate", 329100),
    ]
    assert units[-1] == ("eggplant_in_basket", 329302) and len(units) == 12
    # a task keeps its seeds when the run trains on a subset of the tasks
    assert heldout_units(TASKS, 1, tasks=["eggplant_in_basket"]) == [("eggplant_in_basket", 329300)]
    # the widest design (10 tasks x 100 seeds) stays inside the tuning range, and no seed repeats
    widest = heldout_units([f"t{i}" for i in range(10)], 100)
    assert len({s for _, s in widest}) == 1000
    assert {stage_of(s) for _, s in widest} == {"tuning"} and min(s for _, s in widest) == HELDOUT_SEED_BASE


@pytest.mark.parametrize("k", [0, 101])
def test_heldout_units_out_of_range_are_refused(k):
    with pytest.raises(ValueError, match=r"units per task must be in \[1, 100\]"):
        heldout_units(TASKS, k)


def test_unknown_task_and_success_modes():
    with pytest.raises(ValueError, match="unknown task"):
        heldout_units(TASKS, 1, tasks=["juggle"])
    assert success_mode("tabletop") == success_mode("tabletop_learned") == "truth"
    assert success_mode("cosmos3") == "world"


def test_run_outputs_are_the_run_files_and_nothing_else(tmp_path):
    run = [
        "bc.safetensors",
        "ppo_update_0003.safetensors",
        "ppo_update_0012.safetensors.tmp",
        "curve.csv",
        "curve.json",
        "curve.png",
        "sb3_last.zip",
    ]
    mine = ["notes.txt", "curve_notes.md", "ppo_update_best.txt", "demos.npz", "other.safetensors"]
    for name in run + mine:
        (tmp_path / name).write_text("x")
    for log_dir in ("tensorboard", "wandb"):
        (tmp_path / log_dir / "inner").mkdir(parents=True)
        (tmp_path / log_dir / "inner" / "events").write_text("x")
    (tmp_path / "analysis").mkdir()
    found = {p.name for p in run_outputs(tmp_path)}
    assert found == set(run) | {"tensorboard", "wandb"}
    remove_run_outputs(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(mine + ["analysis"])
    assert run_outputs(tmp_path / "missing") == []
    assert checkpoint_update("x/ppo_update_0042.safetensors") == 42 and checkpoint_update("bc.safetensors") is None


def test_heldout_env_configuration_per_world():
    """Tabletop worlds are scored in the simulator's evaluation configuration (only the horizon of the
    run carries over); other worlds in the run's own configuration, by their judge's verdict."""
    from kosmos_env.training.heldout import HeldOut

    training = {"horizon": 12, "reward": {"mode": "progress"}, "image_size": (64, 64)}
    learned = HeldOut("Kosmos-TabletopLearned-v1", "tabletop_learned", TASKS, 2, env_kwargs=training)
    assert learned.mode == "truth" and learned.config.env_id == "Kosmos-Tabletop-v1"
    assert dict(learned.config.kwargs) == {"image_size": (64, 64), "horizon": 12}
    assert learned._verdict({"true_success": True}) is True and learned._verdict({"true_success": False}) is False

    bridge_tasks = ["move_can_to_left", "put_spoon_in_pot"]
    world = HeldOut("Kosmos-Bridge-v1", "cosmos3", bridge_tasks, 1, env_kwargs={"reward": {"mode": "progress"}})
    assert world.mode == "world" and world.config.env_id == "Kosmos-Bridge-v1"
    assert dict(world.config.kwargs) == {"reward": {"mode": "progress"}, "image_size": (64, 64)}
    assert world.units == [("move_can_to_left", 329000), ("put_spoon_in_pot", 329100)]
    assert world._verdict({"judge_success": True, "outcome": "success"}) is True
    assert world._verdict({"judge_success": False, "outcome": "failure"}) is False
    for undecided in ({"judge_success": None}, {"judge_success": "pending"}, {"outcome": "discarded"}):
        assert world._verdict(undecided) is None
