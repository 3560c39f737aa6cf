"""Closed-loop world-training data (kosmos_env.training.world_data): a piece per policy, recorded in the
learned world's episode format for any policy spec (ckpt: included), resumable, merged with each
episode's policy label; and the policy-pool manifest whose world and held-out pools never overlap."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from kosmos_env.training import world_data as wd
from kosmos_env.worlds.tabletop_learned import dataset as ds
from tests.support.paths import ROOT

CKPT = ROOT / "policies" / "checkpoints" / "bc_clone_2000.safetensors"
MANIFEST = ROOT / "bench" / "results" / "world_v2" / "policy_pools.json"
#: short episodes: the format and the bookkeeping do not depend on the horizon
TINY = wd.RecordSettings(seeds_per_task=1, horizon=4)


def test_a_ckpt_policy_is_recorded_in_the_episode_format_train_world_reads(tmp_path):
    import gymnasium

    from kosmos_env.policies import make_policy, policy_hash_from_files

    spec = f"ckpt:path={CKPT}"
    piece = wd.piece_for(spec, tmp_path, TINY)
    meta = wd.record_piece(piece, TINY)
    eps = ds.Episodes.load(piece.path)
    assert len(eps) == 4 and eps.policy_names == [spec] and eps.policy.tolist() == [0, 0, 0, 0]
    assert eps.seed.tolist() == [0, 1000, 2000, 3000] and eps.task.tolist() == [0, 1, 2, 3]
    assert eps.frames.shape == (4, 5, 64, 64, 3) and eps.frames.dtype == np.uint8
    assert eps.actions.shape == (4, 4, 7) and eps.gripper.shape == (4, 5) and eps.success.shape == (4, 4)
    assert eps.object_pos.shape == (4, 5, 3) and eps.masks.shape == (4, 5, 64, 64) and eps.contact.shape == (4, 5)
    assert meta == ds.read_meta(piece.path) and meta["policy_hash"] == policy_hash_from_files(
        "ckpt", {"path": str(CKPT)}
    )
    # the recorded actions are the checkpoint's own in a plain rollout of the same (task, seed)
    from kosmos_env.rollouts import run_episode

    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), horizon=4, gate={"enabled": False})
    policy = make_policy("ckpt", path=str(CKPT))
    try:
        run_episode(env, policy, seed=2000, task=env.unwrapped.task_names[2])
        np.testing.assert_array_equal(env.unwrapped.rollout().actions, eps.actions[2])
    finally:
        env.close()
    assert np.abs(np.diff(eps.actions[2], axis=0)).max() > 0  # a closed-loop policy, not a constant


def test_finished_pieces_are_kept_and_only_missing_or_broken_ones_recorded(tmp_path, monkeypatch):
    recorded = []
    real = wd.record_piece

    def counting(piece, settings, progress=False):
        recorded.append(piece.spec)
        return real(piece, settings, progress)

    monkeypatch.setattr(wd, "record_piece", counting)
    lines: list[str] = []
    first = wd.collect(["scripted:skill=1.0", "random"], tmp_path, TINY, progress=False, log=lines.append)
    assert recorded == ["scripted:skill=1.0", "random"] and all(wd.piece_done(p) for p in first)
    stamps = {p.path: p.path.stat().st_mtime_ns for p in first}
    # a third policy joins; a piece cut short by a killed writer is recorded again
    first[1].path.write_bytes(b"not a finished npz")
    recorded.clear()
    specs = ["scripted:skill=1.0", "random", "scripted:skill=0.0"]
    second = wd.collect(specs, tmp_path, TINY, progress=False, log=lines.append)
    assert recorded == ["random", "scripted:skill=0.0"]
    assert second[0].path.stat().st_mtime_ns == stamps[first[0].path]
    assert lines[-3].startswith("1 of 3 pieces already recorded")
    # other settings are other pieces: nothing of the tiny run is reused for longer episodes
    assert wd.piece_for("random", tmp_path, wd.RecordSettings(seeds_per_task=1, horizon=5)).path != first[1].path


def test_seeds_outside_the_training_range_and_duplicates_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"training seeds .* seed offset 100000 gives 4 outside it, first 100000"):
        wd.collect(["random"], tmp_path, wd.RecordSettings(seeds_per_task=1, seed_offset=100000))
    with pytest.raises(ValueError, match="listed twice"):
        wd.collect(["random", "random"], tmp_path, TINY)
    with pytest.raises(ValueError, match="no checkpoint file"):
        wd.collect([f"ckpt:path={tmp_path / 'none.safetensors'}"], tmp_path, TINY)


def _episodes(labels: list[str], per_label: list[int], seed0: int = 0) -> ds.Episodes:
    """Synthetic episodes: episode i's first pixel is ``seed0 + i`` so merged rows can be traced."""
    n = len(per_label)
    frames = np.zeros((n, 3, 2, 2, 3), np.uint8)
    frames[:, 0, 0, 0, 0] = np.arange(seed0, seed0 + n)
    z = np.zeros
    return ds.Episodes(
        frames,
        z((n, 2, 7), np.float32),
        z((n, 3), np.float32),
        z((n, 2), bool),
        np.array([i % 2 for i in range(n)]),
        np.array(per_label),
        np.arange(seed0, seed0 + n),
        ["spoon_on_towel", "carrot_on_plate"],
        labels,
        z((n, 3, 3), np.float32),
        z((n, 3, 3), np.float32),
        z((n, 3), bool),
        z((n, 3, 2, 2), np.uint8),
    )


def test_merge_keeps_every_episode_with_its_own_policy_label():
    a = _episodes(["scripted:skill=1.0", "ckpt:path=x.safetensors"], [1, 0, 1])
    b = _episodes(["ckpt:path=x.safetensors", "random"], [1, 0], seed0=10)
    b.task_names = ["carrot_on_plate", "spoon_on_towel"]  # another task order: remapped by name
    merged = ds.concatenate([a, b])
    assert merged.policy_names == ["scripted:skill=1.0", "ckpt:path=x.safetensors", "random"]
    labels = [merged.policy_names[i] for i in merged.policy]
    assert labels == ["ckpt:path=x.safetensors", "scripted:skill=1.0", "ckpt:path=x.safetensors"] + [
        "random",
        "ckpt:path=x.safetensors",
    ]
    assert merged.frames[:, 0, 0, 0, 0].tolist() == [0, 1, 2, 10, 11]
    assert [merged.task_names[t] for t in merged.task[3:]] == ["carrot_on_plate", "spoon_on_towel"]
    shorter = _episodes(["random"], [0])
    shorter.frames = shorter.frames[:, :2]
    with pytest.raises(ValueError, match="horizons or image sizes"):
        ds.concatenate([a, shorter])


def test_merged_pieces_keep_labels_meta_and_a_shared_seed_split(tmp_path):
    specs = ["scripted:skill=1.0", "random"]
    settings = wd.RecordSettings(seeds_per_task=2, horizon=3)
    pieces = wd.collect(specs, tmp_path / "pieces", settings, progress=False, log=lambda _: None)
    merged, meta = wd.merge_pieces(list(reversed(pieces)))
    assert merged.policy_names == ["random", "scripted:skill=1.0"] and merged.policy.tolist() == [0] * 8 + [1] * 8
    for piece in pieces:  # each piece's episodes, unchanged, under its own label
        own = ds.Episodes.load(piece.path)
        rows = np.array([merged.policy_names[i] == piece.spec for i in merged.policy])
        np.testing.assert_array_equal(merged.frames[rows], own.frames)
    assert meta["policies"]["random"]["episodes"] == 8 and [m["policy"] for m in meta["pieces"]] == specs[::-1]
    merged.save(tmp_path / "merged.npz", meta)
    again = ds.Episodes.load(tmp_path / "merged.npz")
    assert again.policy_names == merged.policy_names and ds.read_meta(tmp_path / "merged.npz") == meta
    # one layout per (task, seed), shared by both policies: a held-out seed is held out for both
    train, held = ds.split_by_seed(again, 0.5)
    assert set(held.policy.tolist()) == {0, 1} and not set(held.seed.tolist()) & set(train.seed.tolist())


def test_the_manifest_pools_are_disjoint_and_its_committed_files_are_what_it_says():
    manifest = wd.load_manifest(MANIFEST)  # raises if any two pools overlap
    assert wd.pool_overlaps(manifest) == []
    world, held = manifest["pools"]["world"], manifest["pools"]["heldout"]
    assert {e["lineage"] for e in world}.isdisjoint({e["lineage"] for e in held})
    closed = [e for e in held if e["group"] == "closed_loop"]
    assert len(closed) >= 12 and sum(e["group"] == "closed_loop" for e in world) >= 12
    for entry in world + held:
        if "path" not in entry:  # scripted, random, deceptive: no file
            continue
        files = [a["path"] for a in entry["aliases"] if a["committed"]]
        if entry["committed"]:
            files.append(entry["path"])
        else:  # an ignored pilot file: held out, with the command that makes it again
            assert "regenerate" in entry and entry in held, entry["name"]
        for path in files:
            assert wd.weights_digest(ROOT / path) == entry["weights_digest"], (entry["name"], path)
    # everything the world trains on is in git: the data can be recorded again from a checkout
    assert all(e["committed"] for e in world if "path" in e)


@pytest.mark.parametrize("how", ["moved", "alias", "lineage"])
def test_a_policy_in_both_pools_is_caught(how, tmp_path, capsys):
    manifest = json.loads(MANIFEST.read_text())
    held = next(e for e in manifest["pools"]["heldout"] if e["name"] == "r1_B_u12")
    if how == "moved":  # the same entry listed in both pools
        manifest["pools"]["world"].append(copy.deepcopy(held))
    elif how == "alias":  # another file of the same network (round 1's arm C file), under a new name
        alias = next(a for a in held["aliases"] if "arm_C" in a["path"])
        manifest["pools"]["world"].append(
            {"name": "sneaky", "spec": f"ckpt:path={alias['path']}", "path": alias["path"], "lineage": "new"}
        )
    else:  # a new network of a held-out lineage
        manifest["pools"]["world"].append({"name": "child", "spec": "ckpt:path=child.safetensors", "lineage": "round1"})
    assert wd.pool_overlaps(manifest)
    bad = tmp_path / "pools.json"
    bad.write_text(json.dumps(manifest))  # the CLI reads it from the repository root, as documented
    with pytest.raises(ValueError, match="pools overlap"):
        wd.load_manifest(bad)
    from kosmos_env.cli import main

    rc = main(["train-world", "--policies-from", str(bad), "--record-only", "--data", str(tmp_path / "d.npz")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "pools overlap" in err[0]


def test_train_world_records_resumable_pieces_from_the_command_line(tmp_path, capsys):
    from kosmos_env.cli import main

    args = ["train-world", "--pieces", str(tmp_path / "p"), "--data", str(tmp_path / "d.npz"), "--policies", "random"]
    args += ["--seeds-per-task", "1", "--record-only", "--quiet"]
    assert main(args) == 0
    assert main(args) == 0
    out = capsys.readouterr()
    assert "1 of 1 pieces already recorded" in out.err and "4  random" in out.out
    assert ds.read_meta(tmp_path / "d.npz")["policies"]["random"]["episodes"] == 4
    # evaluation seeds never become world-training data; --record-only needs somewhere to keep the data
    assert main(["train-world", "--pieces", str(tmp_path / "p"), "--seed-offset", "100000", "--record-only"]) == 2
    assert main(["train-world", "--record-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "training seeds" in err[0] and "--record-only keeps nothing" in err[1]


def test_a_world_file_holding_held_out_weights_is_refused_before_recording(tmp_path, monkeypatch):
    """Names and lineages can be listed wrong; the files are checked too: a held-out network copied
    under a new name into the world pool is caught by its weights."""
    import shutil

    manifest = json.loads(MANIFEST.read_text())
    held = next(e for e in manifest["pools"]["heldout"] if e["name"] == "r1_D_u48")
    shutil.copyfile(ROOT / held["path"], tmp_path / "new_policy.safetensors")
    entry = {"name": "new", "spec": "ckpt:path=new_policy.safetensors", "path": "new_policy.safetensors"}
    manifest["pools"]["world"] = [entry | {"lineage": "fresh", "weights_digest": "0" * 64}]
    manifest["pools"]["heldout"] = [held]
    (tmp_path / "pools.json").write_text(json.dumps(manifest))
    monkeypatch.chdir(tmp_path)
    assert wd.pool_overlaps(manifest) == []  # what the manifest says looks disjoint
    with pytest.raises(ValueError, match="holds the weights of held-out r1_D_u48"):
        wd.world_pool(tmp_path / "pools.json")


@pytest.mark.slow
def test_train_world_trains_on_merged_pieces_and_records_the_mix_in_the_weights(tmp_path):
    from kosmos_env.cli import main
    from kosmos_env.worlds.tabletop_learned.model import load_weights

    specs = ["scripted:skill=1.0", f"ckpt:path={CKPT}"]
    pieces = wd.collect(specs, tmp_path / "p", wd.RecordSettings(seeds_per_task=2, horizon=6), log=lambda _: None)
    merged, meta = wd.merge_pieces(pieces)
    merged.save(tmp_path / "d.npz", meta)
    tiny = ["--steps", "2", "--batch", "2", "--segmenter-steps", "2", "--dynamics-steps", "2", "--slip-steps", "2"]
    tiny += ["--error-horizon", "2", "--channels", "4", "4", "4", "4", "--holdout", "0.5", "--parts", "world"]
    rc = main(["train-world", "--data", str(tmp_path / "d.npz"), "--out-dir", str(tmp_path / "w"), "--quiet", *tiny])
    assert rc == 0
    _, info = load_weights(tmp_path / "w" / "world.safetensors")
    assert info["policies"] == specs and info["policy_episodes"] == {s: 8 for s in specs}
    assert info["policy_hashes"] == {s: meta["policies"][s]["policy_hash"] for s in specs}
    assert info["data_settings"]["horizon"] == 6 and info["train_episodes"] == 8
