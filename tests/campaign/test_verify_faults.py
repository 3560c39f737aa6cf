"""Fault matrix, verification: edited ledgers, forged bundles and hostile submissions are caught,
and the commands that draw numbers from a folder refuse one that fails (issue 18, items 9-11)."""

from __future__ import annotations

import json
import shutil
import sqlite3

import numpy as np
import pytest

from kosmos_env import cli
from kosmos_env.campaign import verify_campaign
from kosmos_env.publish import validate
from kosmos_env.publish.leaderboard import build_leaderboard
from tests.conftest import requires_extra
from tests.support.faults import TWO_POLICIES, eval_argv
from tests.support.publish_bundles import edit_results, rehash

ARGV_POLICIES = TWO_POLICIES
pytestmark = pytest.mark.usefixtures("allow_test_policy_import")


@pytest.fixture(scope="module")
def campaign(tiny_campaign):
    """A finished tiny campaign with successes (scripted) and failures (random)."""
    return tiny_campaign


def _copy(campaign, tmp_path, name="c"):
    return shutil.copytree(campaign, tmp_path / name)


def _edit_ledger(out, sql, *params):
    con = sqlite3.connect(out / "ledger.sqlite")
    try:
        con.execute(sql, params)
        con.commit()
    finally:
        con.close()


def _a_failure(out) -> str:
    con = sqlite3.connect(out / "ledger.sqlite")
    try:
        return con.execute("SELECT episode_id FROM episodes WHERE outcome = 'failure' ORDER BY ord").fetchone()[0]
    finally:
        con.close()


# -- item 9 ---------------------------------------------------------------------------------
def test_an_edited_ledger_is_caught_even_after_eval_rebuilt_the_bundle(tmp_path, campaign, capsys):
    out = _copy(campaign, tmp_path)
    assert verify_campaign(out).ok
    eid = _a_failure(out)
    # the forger turns a failure into a success, consistently in every column of the row ...
    _edit_ledger(out, "UPDATE episodes SET outcome = 'success', success = 1, score = 1.0 WHERE episode_id = ?", eid)
    assert cli.main(eval_argv(out, policies=ARGV_POLICIES, seeds=2)) == 0  # ... and reruns eval: a fresh bundle
    report = verify_campaign(out)
    assert not report.ok
    assert any(eid in p and "contradicts its stored judgment" in p for p in report.problems), report.problems
    # ... and if the judgment is forged too, the simulator's ground truth stored beside it still disagrees
    con = sqlite3.connect(out / "ledger.sqlite")
    judgment = json.loads(con.execute("SELECT judgment FROM episodes WHERE episode_id = ?", (eid,)).fetchone()[0])
    con.close()
    judgment.update(success=True, score=1.0)
    _edit_ledger(out, "UPDATE episodes SET judgment = ? WHERE episode_id = ?", json.dumps(judgment), eid)
    assert cli.main(eval_argv(out, policies=ARGV_POLICIES, seeds=2)) == 0
    problems = verify_campaign(out).problems
    assert any(eid in p and "ground truth" in p for p in problems), problems
    # every command that draws numbers from the folder refuses it unless told otherwise
    capsys.readouterr()
    for argv in (
        ["analyze", str(out), "--n-boot", "100", "--n-splits", "10", "--no-write"],
        ["report", str(out), "--no-thumbnails"],
        ["publish", str(out), "--repo", "org/x", "--dry-run", str(tmp_path / "dry")],
    ):
        assert cli.main(argv) == 2, argv
        errors = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
        assert len(errors) == 1 and "verification" in errors[0], errors  # publish: its bundle check or verify's
    assert cli.main(["analyze", str(out), "--n-boot", "100", "--n-splits", "10", "--no-write", "--no-verify"]) == 0


def test_a_changed_score_alone_is_caught(tmp_path, campaign):
    out = _copy(campaign, tmp_path)
    eid = _a_failure(out)
    _edit_ledger(out, "UPDATE episodes SET score = 0.75 WHERE episode_id = ?", eid)
    problems = verify_campaign(out).problems
    assert any(eid in p and "score" in p and "judgment" in p for p in problems), problems  # against its judgment
    assert any("results.json disagrees with the ledger" in p and "score" in p for p in problems), problems


def test_verify_recomputes_every_aggregate(tmp_path, campaign):
    out = _copy(campaign, tmp_path)

    def forge(results):
        s = results["aggregated"]["per_policy"]["random"]
        s["successes"], s["failures"], s["success_rate"] = 2, 0, 1.0

    edit_results(out, forge)
    problems = verify_campaign(out).problems
    assert any("aggregates differ from the recounted episodes" in p and "random" in p for p in problems), problems


# -- item 10 --------------------------------------------------------------------------------
def test_leaderboard_duplicates_are_found_by_content_not_campaign_id(tmp_path, campaign):
    a = _copy(campaign, tmp_path, "a")
    b = _copy(campaign, tmp_path, "b")
    edit_results(b, lambda r: r["campaign"].update(id="c-a-brand-new-name"))  # same evidence, new name
    data = build_leaderboard([a, b], allow_overrides=True)
    assert [r["check"] for r in data["rejected"]] == ["duplicate"], data["rejected"]
    assert "same design" in data["rejected"][0]["reason"]
    assert len(data["accepted"]) == 1


def test_leaderboard_rejects_outcomes_that_contradict_their_judgment(tmp_path, campaign):
    from kosmos_env.campaign.bundle import aggregate

    out = _copy(campaign, tmp_path)

    def forge(results):
        row = next(e for e in results["per_episode"] if e["outcome"] == "failure")
        row.update(outcome="success", success=True, score=1.0)  # the judgment inside still says failure
        c = results["campaign"]
        fresh = aggregate(results["per_episode"], [p["label"] for p in c["policies"]], c["tasks"])
        results["aggregated"].update(fresh)  # aggregates forged consistently, so only the judgment can tell

    results = edit_results(out, forge)
    import pyarrow.parquet as pq

    from kosmos_env.campaign.bundle import parquet_table

    pq.write_table(parquet_table(results["per_episode"]), out / "episodes.parquet")  # the parquet forged too
    rehash(out, "episodes.parquet")
    with pytest.raises(validate.SubmissionRejected) as info:
        validate.verify_submission(out, strict=False, allow_overrides=True)
    assert info.value.check == "judgments" and "judgment" in info.value.reason


def test_leaderboard_caps_artifact_sizes_and_refuses_object_arrays(tmp_path, campaign, monkeypatch):
    out = _copy(campaign, tmp_path)
    results = json.loads((out / "results.json").read_text())
    rel = results["per_episode"][0]["artifacts"]["actions"]
    monkeypatch.setattr(validate, "MAX_FILE_BYTES", 64)  # smaller than any actions array here
    with pytest.raises(validate.SubmissionRejected) as info:
        validate.verify_submission(out, strict=False, allow_overrides=True)
    assert info.value.check == "size"
    monkeypatch.undo()
    # an object array in place of the actions (loading it would mean unpickling)
    (out / rel).chmod(0o644)
    np.save(out / rel, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    rehash(out, rel)
    with pytest.raises(validate.SubmissionRejected) as info:
        validate.verify_submission(out, strict=False, allow_overrides=True)
    assert info.value.check == "arrays" and "object" in info.value.reason.lower()


# -- item 11 --------------------------------------------------------------------------------
@requires_extra("results", "hub")
def test_report_then_publish_works(tmp_path, campaign):
    out = _copy(campaign, tmp_path)
    assert cli.main(["report", str(out), "--no-thumbnails"]) == 0
    assert (out / "report.html").is_file()
    assert cli.main(["publish", str(out), "--repo", "org/results", "--dry-run", str(tmp_path / "dry")]) == 0
    published = [p.name for p in (tmp_path / "dry").rglob("*") if p.is_file()]
    assert "report.html" not in published and "results.json" in published
    data = build_leaderboard([out], allow_overrides=True)  # a leaderboard takes the folder as it is, report included
    assert not data["rejected"], data["rejected"]
