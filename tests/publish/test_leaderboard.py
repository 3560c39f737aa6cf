"""The leaderboard accepts only what verifies, and recomputes every number itself."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kosmos_env.publish.leaderboard import build_leaderboard, newcombe_diff, write_leaderboard
from kosmos_env.publish.validate import SubmissionRejected, verify_submission
from kosmos_env.spec import EnvSpec, load_spec
from tests.support.publish_bundles import campaign, copy_bundle, edit_results, first_video, flip_byte, rehash


@pytest.fixture
def camp_a(tmp_path_factory):
    return campaign(tmp_path_factory, "a")


@pytest.fixture
def camp_b(tmp_path_factory):
    return campaign(tmp_path_factory, "b")


@pytest.fixture
def sub_a(camp_a, tmp_path):
    return copy_bundle(camp_a, tmp_path / "sub")


def rejected(path, **kwargs) -> SubmissionRejected:
    with pytest.raises(SubmissionRejected) as info:
        verify_submission(path, **kwargs)
    return info.value


def test_valid_submission_is_accepted_and_aggregates_match_a_recount(camp_a):
    sub = verify_submission(camp_a)
    assert sub.official and sub.spec_hash == load_spec("Kosmos-Tabletop-v1").hash
    results = json.loads((camp_a / "results.json").read_text())
    # an independent recount from the rows, by hand
    for label in sub.labels:
        mine = [r for r in results["per_episode"] if r["policy"] == label]
        s = sum(r["outcome"] == "success" for r in mine)
        f = sum(r["outcome"] == "failure" for r in mine)
        agg = sub.aggregated["per_policy"][label]
        assert (agg["n"], agg["successes"], agg["failures"]) == (len(mine), s, f)
        assert agg["success_rate"] == pytest.approx(s / (s + f))
        # and the campaign writer's numbers agree with the leaderboard's recomputation
        theirs = results["aggregated"]["per_policy"][label]
        for key, value in agg.items():
            assert theirs[key] == (pytest.approx(value) if value is not None else None), key
    assert sub.aggregated["ranking"] == results["aggregated"]["ranking"] == ["scripted:skill=1.0", "random"]
    assert len(sub.rows) == 6


def test_flipped_byte_in_a_video_is_rejected(sub_a):
    video = first_video(sub_a)
    flip_byte(sub_a / video)
    err = rejected(sub_a)
    assert err.check == "sha256" and video in err.reason and "changed after the manifest" in err.reason


def test_flipped_byte_in_results_json_is_rejected(sub_a):
    flip_byte(sub_a / "results.json", offset=10)
    err = rejected(sub_a)
    assert err.check == "sha256" and "results.json" in err.reason


def test_forged_aggregate_is_rejected_even_with_a_consistent_manifest(sub_a):
    def forge(r):
        r["aggregated"]["per_policy"]["random"]["successes"] = 3
        r["aggregated"]["per_policy"]["random"]["success_rate"] = 1.0

    edit_results(sub_a, forge)
    err = rejected(sub_a)
    assert err.check == "aggregates"
    assert "forged" in err.reason and "per_policy['random'].successes = 3" in err.reason and "give 0" in err.reason


def test_forged_ranking_is_rejected(sub_a):
    edit_results(sub_a, lambda r: r["aggregated"].__setitem__("ranking", ["random", "scripted:skill=1.0"]))
    err = rejected(sub_a)
    assert err.check == "aggregates" and "ranking" in err.reason


def test_mismatched_spec_hash_is_rejected(sub_a):
    edit_results(sub_a, lambda r: r["campaign"].__setitem__("spec_hash", "0" * 64))
    err = rejected(sub_a)
    assert err.check == "spec" and "spec hash mismatch" in err.reason and "000000000000" in err.reason


def test_edited_spec_with_old_hash_is_rejected(sub_a):
    edit_results(sub_a, lambda r: r["campaign"]["spec"].__setitem__("horizon", 10))
    err = rejected(sub_a)
    assert err.check == "spec" and "spec hash mismatch" in err.reason


def _override(sub_root: Path) -> str:
    """Turn the bundle into a consistent campaign with a spec override (image size)."""

    def change(r):
        spec = dict(r["campaign"]["spec"], image_size=[64, 64])
        r["campaign"]["spec"] = spec
        r["campaign"]["spec_overrides"] = {"image_size": [64, 64]}
        r["campaign"]["spec_hash"] = EnvSpec.from_dict(spec).hash

    return edit_results(sub_root, change)["campaign"]["spec_hash"]


def test_spec_overrides_are_refused_by_default_and_ranked_apart_when_allowed(sub_a, camp_b, tmp_path, tiny_campaign):
    new_hash = _override(sub_a)
    err = rejected(sub_a)
    assert err.check == "spec" and "--allow-overrides" in err.reason and "overrode" in err.reason
    sub = verify_submission(sub_a, allow_overrides=True)
    assert not sub.official and sub.spec_hash == new_hash
    # issue 31: the relabelled spec is consistent with every hash, but its episodes' provenance names the
    # spec they ran (and replaying them at the claimed 64x64 would not give the stored videos). A campaign
    # really run with the override (64x64) is ranked, on its own board.
    real = tiny_campaign
    data = build_leaderboard([sub_a, camp_b, real], allow_overrides=True, replay_sample="all")
    assert [(r["submission"], r["check"]) for r in data["rejected"]] == [(str(sub_a), "provenance")]
    assert [b["official"] for b in data["boards"]] == [True, False]  # official board first, never mixed
    assert data["boards"][1]["spec_hash"] == verify_submission(real, allow_overrides=True).spec_hash
    assert {e["campaign_id"] for e in data["boards"][0]["entries"]} == {verify_submission(camp_b).campaign_id}
    assert {e["campaign_id"] for e in data["boards"][1]["entries"]} == {
        verify_submission(real, allow_overrides=True).campaign_id
    }


def test_dotdot_path_in_manifest_is_rejected(sub_a, tmp_path):
    manifest = json.loads((sub_a / "manifest.json").read_text())
    manifest["files"]["../outside.json"] = "0" * 64
    (sub_a / "manifest.json").write_text(json.dumps(manifest))
    err = rejected(sub_a)
    assert err.check == "manifest" and "../outside.json" in err.reason and "escapes" in err.reason


def test_absolute_and_dotdot_artifact_paths_in_rows_are_rejected(sub_a):
    edit_results(sub_a, lambda r: r["per_episode"][0]["artifacts"].__setitem__("video", "../../etc/passwd"))
    err = rejected(sub_a)
    assert err.check == "paths" and "../../etc/passwd" in err.reason
    edit_results(sub_a, lambda r: r["per_episode"][0]["artifacts"].__setitem__("video", "/etc/passwd"))
    err = rejected(sub_a)
    assert err.check == "paths" and "absolute" in err.reason


def test_symlink_is_rejected(sub_a):
    os.symlink("/etc/hostname", sub_a / "notes.txt")
    err = rejected(sub_a)
    assert err.check == "tree" and "notes.txt is a symlink" in err.reason


@pytest.mark.parametrize("name", ["policy.pkl", "weights.pt", "artifacts/model.bin", "extra.pickle"])
def test_pickle_and_torch_files_are_rejected(sub_a, name):
    target = sub_a / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"\x80\x04K\x01.")  # a real pickle of the int 1: never loaded
    manifest = json.loads((sub_a / "manifest.json").read_text())
    manifest["files"][name] = "0" * 64
    (sub_a / "manifest.json").write_text(json.dumps(manifest))
    rehash(sub_a, name)  # even a correctly hash-bound pickle is refused
    err = rejected(sub_a)
    assert err.check == "tree" and name in err.reason and "execute code" in err.reason


def test_unlisted_file_and_unknown_extension_are_rejected(sub_a):
    (sub_a / "extra.json").write_text("{}")
    err = rejected(sub_a)
    assert err.check == "manifest" and "extra.json is not listed" in err.reason
    (sub_a / "extra.json").unlink()
    (sub_a / "run.xyz").write_text("x")
    err = rejected(sub_a)
    assert err.check == "tree" and "'.xyz'" in err.reason


def test_design_violations_are_rejected(sub_a, tmp_path):
    base = copy_bundle(sub_a, tmp_path / "base")
    edit_results(sub_a, lambda r: r["per_episode"].pop())
    err = rejected(sub_a)
    assert err.check == "design" and "1 of 6 planned episodes are missing" in err.reason

    dup = copy_bundle(base, tmp_path / "dup")
    edit_results(dup, lambda r: r["per_episode"].append(dict(r["per_episode"][0], episode_id="x")))
    err = rejected(dup)
    assert err.check == "design" and "appears twice" in err.reason

    bad = copy_bundle(base, tmp_path / "bad")
    edit_results(bad, lambda r: r["per_episode"][0].__setitem__("success", False))
    err = rejected(bad)
    assert err.check == "design" and "contradicts outcome 'success'" in err.reason

    weird = copy_bundle(base, tmp_path / "weird")
    edit_results(weird, lambda r: r["per_episode"][1].__setitem__("outcome", "partial"))
    err = rejected(weird)
    assert err.check == "design" and "'partial'" in err.reason


def test_parquet_must_agree_with_results(sub_a):
    """An outcome changed in results.json (re-hashed) still disagrees with episodes.parquet."""

    def change(r):
        row = next(e for e in r["per_episode"] if e["policy"] == "random")
        row["outcome"], row["success"] = "discarded", None

    edit_results(sub_a, change)
    err = rejected(sub_a)
    assert err.check == "parquet" and "outcome" in err.reason


def test_newcombe_interval_matches_the_published_example():
    # Newcombe (1998), Stat Med 17:873, example (a): 56/70 vs 48/80 -> diff 0.2000, 95% CI 0.0524 to 0.3339
    from kosmos_env.stats import wilson

    a, b = wilson(56, 70), wilson(48, 80)
    lo, hi = newcombe_diff(a.estimate, (a.lower, a.upper), b.estimate, (b.lower, b.upper))
    assert lo == pytest.approx(0.0524, abs=1e-4) and hi == pytest.approx(0.3339, abs=1e-4)


def test_leaderboard_build_ranks_marks_ties_and_lists_rejections(camp_a, camp_b, tmp_path):
    from kosmos_env.cli import main

    broken = copy_bundle(camp_a, tmp_path / "broken")
    flip_byte(broken / first_video(broken))
    dup = copy_bundle(camp_a, tmp_path / "dup")
    out = tmp_path / "lb"
    rc = main(["leaderboard", "build", str(camp_a), str(camp_b), str(broken), str(dup), "--out", str(out)])
    assert rc == 1  # some submissions were rejected
    data = json.loads((out / "leaderboard.json").read_text())
    assert (out / "index.html").is_file()
    assert [r["check"] for r in data["rejected"]] == ["sha256", "duplicate"]
    assert len(data["boards"]) == 1 and data["boards"][0]["official"]
    entries = data["boards"][0]["entries"]
    assert len(entries) == 3 and [e["rank"] for e in entries] == [1, 2, 3]
    assert entries[0]["policy"] == "scripted:skill=1.0" and entries[0]["success_rate"] == 1.0
    rates = [e["success_rate"] for e in entries]
    assert rates == sorted(rates, reverse=True)
    # 3/3 vs 3/4 cannot be told apart
    assert [e["policy"] for e in entries] == ["scripted:skill=1.0", "scripted:skill=0.7", "random"]
    assert entries[0]["separable_from_next"] is False and entries[0]["diff_95_to_next"][0] < 0
    assert entries[-1]["separable_from_next"] is None
    # random ran in both campaigns, on seeds 0-2 in each (issue 43: it was listed twice): one entry, each
    # episode counted once, and every entry listed as self-reported (build runs no policy)
    random = entries[-1]
    assert random["n"] == 4 and random["episode_seeds"] == [0, 1, 2, 3] and random["counted_once"] == 3
    assert {e["standing"] for e in entries} == {"self_reported"} and data["boards"][0]["standing"] == "self_reported"
    # every number on the board is the recomputed one
    sub_b = verify_submission(camp_b)
    e_b = next(e for e in entries if e["policy"] == "scripted:skill=0.7")
    assert e_b["wilson_95"] == sub_b.aggregated["per_policy"]["scripted:skill=0.7"]["wilson_95"]


def test_write_leaderboard_with_no_accepted_submission(tmp_path):
    data = build_leaderboard([tmp_path / "missing"])
    js, page = write_leaderboard(data, tmp_path / "out")
    assert data["boards"] == [] and data["rejected"][0]["check"] == "tree"
    assert "No submission was accepted" in page.read_text()


def test_malformed_results_are_rejected_not_crashing(sub_a):
    (sub_a / "results.json").write_text("[" * 100_000)
    rehash(sub_a, "results.json")
    err = rejected(sub_a)
    assert err.check == "schema" and "not valid UTF-8 JSON" in err.reason
    (sub_a / "results.json").write_text(
        json.dumps(
            {
                "schema": "kosmos-env/results",
                "schema_version": 1,
                "campaign": {"id": "c-1", "env_id": "Kosmos-Tabletop-v1", "spec_hash": "a" * 64, "spec": {"id": []}},
            }
        )
    )
    rehash(sub_a, "results.json")
    err = rejected(sub_a)
    assert err.check == "spec" and "not a valid spec" in err.reason
