"""Cost per stage with model loads kept apart, the judge's share of the bill, and which judge a
success number comes from (``--judge``) in analyze, report, the console and publish."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from kosmos_env import cli
from kosmos_env.campaign import judgments
from kosmos_env.campaign.cost import PriceTable, cost_summary
from kosmos_env.campaign.design import make_config
from kosmos_env.campaign.ledger import Ledger
from tests.conftest import requires_extra
from tests.support.campaign import tabletop_eval_argv

PRICES = {
    "currency": "EUR",
    "accelerator_per_hour": {"cpu": 0.36, "gpu": 3.6},
    "world": "gpu",
    "judge": "gpu",
    "policy": "cpu",
}
# a stored judge that disagrees with the campaign's state judge: every judged episode a failure
OTHER = {"type": "robot_log", "note": "test-all-failures"}


class FakeClock:
    """``time`` for the worker module: real perf_counter plus seconds that fake model builds add."""

    def __init__(self):
        self.offset = 0.0

    def perf_counter(self) -> float:
        return time.perf_counter() + self.offset

    def __getattr__(self, name):
        return getattr(time, name)


def test_model_loads_are_filed_once_per_worker_and_kept_out_of_the_warm_seconds(tmp_path, monkeypatch):
    import kosmos_env.judges as judges_mod
    import kosmos_env.policies as policies_mod
    from kosmos_env.campaign import worker
    from kosmos_env.campaign.runner import open_campaign
    from kosmos_env.worlds.tabletop.world import TabletopWorld

    clock = FakeClock()
    monkeypatch.setattr(worker, "time", clock)

    def slow(fn, seconds):  # a build whose first call takes `seconds` on the worker's clock
        calls = []

        def build(*args, **kwargs):
            if not calls:
                clock.offset += seconds
            calls.append(1)
            return fn(*args, **kwargs)

        return build

    monkeypatch.setattr(judges_mod, "make_judge", slow(judges_mod.make_judge, 100.0))
    monkeypatch.setattr(policies_mod, "make_policy", slow(policies_mod.make_policy, 1000.0))
    monkeypatch.setattr(TabletopWorld, "load", slow(TabletopWorld.load, 10.0))
    cfg = make_config(
        "Kosmos-Tabletop-v1",
        ["scripted:skill=1.0"],
        tasks=["carrot_on_plate"],
        seeds=2,
        image_size=(64, 64),
        video=False,
    )
    open_campaign(cfg, tmp_path)
    with Ledger(tmp_path / "ledger.sqlite", create=False) as ledger:
        runner = worker.EpisodeRunner(cfg, tmp_path, ledger, "h:1:t")
        first, _ = runner.run(cfg.episodes()[0])
        second, _ = runner.run(cfg.episodes()[1])
        runner.close()
    t1, t2 = first["timings"], second["timings"]
    assert 100.0 <= t1["load_judge"] < 1000.0 and 10.0 <= t1["load_world"] < 100.0 and t1["load_policy"] >= 1000.0
    assert not any(k.startswith("load_") for k in t2)  # filed once, with the first episode this worker finished
    for t in (t1, t2):  # the builds' fake seconds never reach an episode's warm seconds
        assert t["total"] < 10.0 and t["policy"] < 10.0 and t["world"] < 10.0

    table = PriceTable.from_dict(PRICES)
    cost = cost_summary([{"timings": t1}, {"timings": t2}], (), table)
    assert cost["load_seconds"]["policy"] == pytest.approx(t1["load_policy"], rel=1e-6)
    assert cost["seconds_per_stage_per_rollout"]["total"] < 10.0
    assert cost["episodes_with_loads"] == 1
    money = cost["money"]
    assert money["load_per_stage"]["judge"] == pytest.approx(t1["load_judge"] * 3.6 / 3600, rel=1e-4)
    assert money["load_per_stage"]["policy"] == pytest.approx(t1["load_policy"] * 0.36 / 3600, rel=1e-4)
    # the judge's 100 s build is most of the judge's money with loads, little of its warm share
    assert money["judge"]["share_with_loads"] > money["judge"]["share"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A 4-episode tabletop campaign with a price table, and a second judge's verdicts stored beside its own."""
    out = tmp_path_factory.mktemp("costjudge") / "run"
    prices = ["--price-table", json.dumps(PRICES)]
    argv = tabletop_eval_argv(out, ["scripted:skill=1.0", "random"], *prices, seeds=2, video=True)
    assert cli.main(argv) == 0
    with Ledger(out / "ledger.sqlite", create=False) as ledger:
        judged = [r for r in ledger.episodes("done") if r["outcome"] in ("success", "failure", "abstained")]
        judgments.ensure_table(ledger)
        judgments.record(
            ledger,
            judgments.judge_identity(OTHER),
            OTHER,
            "test",
            [(r["episode_id"], {"success": False, "score": 0.0, "seconds": 2.0}) for r in judged],
        )
        judgments.record_load(ledger, judgments.judge_identity(OTHER), 30.0)
    return out


@pytest.fixture
def run(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def _own(run: Path) -> tuple[str, str]:
    spec = json.loads((run / "results.json").read_text())["campaign"]["judge"]
    return judgments.judge_label(spec), judgments.judge_identity(spec)


def test_analyze_names_the_judge_states_its_share_and_reads_another_judge(run, capsys):
    label, own_id = _own(run)
    other_id = judgments.judge_identity(OTHER)
    fast = ["--n-boot", "200", "--n-splits", "20"]
    assert cli.main(["analyze", str(run), *fast]) == 0
    text = capsys.readouterr().out
    assert f"success judged by {label} [{own_id}] (the campaign's own judge" in text
    assert "judge's share of the bill:" in text and "model loads (once per worker" in text
    own = json.loads((run / "analysis.json").read_text())
    assert own["judge"]["id"] == own_id and own["judge"]["source"] == "campaign"
    assert own["per_policy"]["scripted:skill=1.0"]["counts"]["success"] == 2  # the state judge saw its successes
    money = own["cost"]["money"]
    assert money["judge_share"] == pytest.approx(money["per_rollout_by_stage"]["judge"] / money["per_rollout"])
    assert sum(own["cost"]["load_seconds"].values()) > 0

    assert cli.main(["analyze", str(run), *fast, "--judge", other_id[:6], "--json"]) == 0
    capsys.readouterr()
    other = json.loads((run / "judges" / other_id / "analysis.json").read_text())
    assert json.loads((run / "analysis.json").read_text()) == own  # the campaign's own analysis is untouched
    assert other["judge"]["id"] == other_id and other["judge"]["source"] == "judgments"
    assert all(p["counts"]["success"] == 0 for p in other["per_policy"].values())  # that judge failed every one
    # the other judge's 2 s per verdict and its recorded 30 s build replace the campaign judge's seconds
    assert other["cost"]["seconds_per_rollout"]["judge"] == pytest.approx(2.0)
    assert other["cost"]["load_seconds"]["judge"] == pytest.approx(30.0)
    assert other["cost"]["judge_share"] > own["cost"]["judge_share"]

    assert cli.main(["analyze", str(run), *fast, "--judge", "no-such-judge"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no-such-judge" in err
    assert f"campaign = {label} [{own_id}]" in err and other_id in err


@requires_extra("results")  # report draws its plots with matplotlib
def test_report_names_the_judge_and_writes_another_judges_report_beside_it(run, capsys):
    from kosmos_env.campaign.verify import verify_campaign

    label, own_id = _own(run)
    other_id = judgments.judge_identity(OTHER)
    assert cli.main(["report", str(run), "--no-thumbnails", "--no-analysis"]) == 0
    assert cli.main(["report", str(run), "--no-thumbnails", "--no-analysis", "--judge", other_id]) == 0
    own = (run / "report.md").read_text()
    other = (run / "judges" / other_id / "report.md").read_text()
    assert f"success judged by {label} [{own_id}]" in own
    assert f"success judged by robot_log [{other_id}] (re-judged" in other
    assert "judge's share of the money with model loads" in own and "| model load |" in own
    assert "| 1 | scripted:skill=1.0 | 1.000 |" in own and "| scripted:skill=1.0 | 0.000 |" in other
    assert cli.main(["report", str(run), "--no-thumbnails", "--no-analysis", "--judge", "nope"]) == 2
    assert "stored judges:" in capsys.readouterr().err
    assert verify_campaign(run).ok  # reports by other judges never disturb the campaign folder's checks


@requires_extra("hub")  # the cards' eval-results metadata comes from huggingface_hub
def test_publish_cards_name_the_judge_and_lead_with_a_chosen_one(run, tmp_path, capsys):
    label, own_id = _own(run)
    other_id = judgments.judge_identity(OTHER)
    assert cli.main(["publish", str(run), "--repo", "org/results", "--dry-run", str(tmp_path / "own")]) == 0
    card = (tmp_path / "own" / "dataset" / "README.md").read_text()
    assert f"Judge: {label} [{own_id}] (the campaign's own)" in card
    assert "judge's share of the bill:" in card and not list((tmp_path / "own").rglob("judgments"))

    assert (
        cli.main(
            ["publish", str(run), "--repo", "org/results", "--dry-run", str(tmp_path / "other"), "--judge", "robot_log"]
        )
        == 0
    )
    files = list((tmp_path / "other").rglob(f"judgments/{other_id}.json"))
    assert len(files) == 1
    verdicts = json.loads(files[0].read_text())
    assert verdicts["judge"]["id"] == other_id and {v["outcome"] for v in verdicts["verdicts"]} == {"failure"}
    card = next((tmp_path / "other").rglob("c-*/README.md")).read_text()
    assert card.index(f"### Ranking by judge robot_log [{other_id}]") < card.index("### Ranking by the campaign's own")
    manifest = json.loads(next((tmp_path / "other").rglob("c-*/manifest.json")).read_text())
    assert f"judgments/{other_id}.json" in manifest["files"]

    assert (
        cli.main(["publish", str(run), "--repo", "org/results", "--dry-run", str(tmp_path / "x"), "--judge", "nope"])
        == 2
    )
    assert "stored judges:" in capsys.readouterr().err


def test_leaderboard_rows_carry_the_judge_and_its_share(run):
    from kosmos_env.publish.leaderboard import build_leaderboard
    from kosmos_env.report.bundle import load_bundle
    from kosmos_env.report.summary import cost_breakdown

    label, own_id = _own(run)
    board = build_leaderboard([run], allow_overrides=True)["boards"][0]
    report = cost_breakdown(load_bundle(run))  # the report's own computation, from the same rows
    assert len(board["entries"]) == 2
    for e in board["entries"]:
        assert e["judge_name"] == f"{label} [{own_id}]"
        assert e["judge_share_money"] == pytest.approx(report["money"]["judge_share"], rel=1e-6)
        assert e["judge_share_money_with_loads"] == pytest.approx(report["money"]["judge_share_with_loads"], rel=1e-6)
        assert e["judge_share_time"] == pytest.approx(report["judge_share"], rel=1e-6)


@requires_extra("console")
def test_console_analysis_page_names_the_judge_and_switches_judges(run):
    from fastapi.testclient import TestClient

    from kosmos_env.console.app import create_app
    from kosmos_env.console.campaigns import folder_key

    label, own_id = _own(run)
    other_id = judgments.judge_identity(OTHER)
    app = create_app([str(run.parent)], "t" * 24, analysis_options={"n_boot": 200, "n_splits": 20})
    client = TestClient(app, base_url="http://127.0.0.1")
    key = folder_key(run)
    own = client.get(f"/c/{key}/analysis").text
    assert f"success judged by {label} [{own_id}]" in own and "share of the bill" in own
    assert f"?judge={other_id}" in own  # the stored judge is offered
    other = client.get(f"/c/{key}/analysis?judge={other_id}").text
    assert f"success judged by robot_log [{other_id}]" in other
    bad = client.get(f"/c/{key}/analysis?judge=nope").text
    assert "names no judge of this campaign" in bad
    assert f"Judged by {label} [{own_id}]" in client.get(f"/c/{key}").text


def test_a_label_two_judges_share_is_refused_and_the_campaigns_own_id_is_the_campaign_judge(run):
    from kosmos_env.report.bundle import load_bundle
    from kosmos_env.report.judge_view import select_judge

    bundle = load_bundle(run)
    label, own_id = _own(run)
    same_label = {"type": label, "note": "other settings"}
    with Ledger(run / "ledger.sqlite", create=False) as ledger:
        first = ledger.episodes("done")[0]["episode_id"]
        judgments.record(
            ledger, judgments.judge_identity(same_label), same_label, "test", [(first, {"success": True, "score": 1.0})]
        )
    with pytest.raises(ValueError, match="names several judges"):
        select_judge(bundle, label)
    view, info = select_judge(bundle, own_id[:8])
    assert info["source"] == "campaign" and view is bundle
    view, info = select_judge(bundle, judgments.judge_identity(same_label))
    assert (
        info["not_yet_judged"]
        == len([r for r in bundle.rows if r["outcome"] in ("success", "failure", "abstained")]) - 1
    )
    assert any("has not judged" in n for n in view.notes)


def test_cost_sweep_compares_warm_seconds_per_rollout(run, tmp_path):
    from kosmos_env.report.bundle import load_bundle
    from kosmos_env.report.cost_sweep import cost_sweep_runs
    from kosmos_env.report.summary import cost_breakdown

    other = shutil.copytree(run, tmp_path / "copy")
    sweep = cost_sweep_runs([run, other], n_boot=200)
    warm = cost_breakdown(load_bundle(run))
    for s in sweep["settings"]:  # each stage once (not the stages plus their total), model loads apart
        assert s["cost_seconds"] == pytest.approx(warm["seconds_per_rollout"]["total"])
        assert s["judge_share"] == pytest.approx(warm["judge_share"])
