"""`kosmos-env report DIR`: Markdown + self-contained HTML from a results bundle."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from kosmos_env import cli
from kosmos_env.report import load_bundle
from kosmos_env.report.thumbnails import pick_episodes
from tests.conftest import requires_extra
from tests.support.report_bundle import POLICIES, make_bundle

PRICE = {"currency": "EUR", "accelerator_per_hour": {"cpu": 0.1, "h100": 3.0}, "world": "h100", "judge": "h100"}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return make_bundle(tmp_path_factory.mktemp("campaign") / "c", seeds=6, price_table=PRICE)


@pytest.fixture
def bundle_dir(source, tmp_path):
    return Path(shutil.copytree(source, tmp_path / "c"))


def _results(d: Path) -> dict:
    return json.loads((d / "results.json").read_text())


def _expected_ranking(rows) -> list[tuple[str, int, int]]:
    """(policy, successes, decided) best first, computed straight from the rows."""
    out = []
    for label, *_ in POLICIES:
        s = sum(r["outcome"] == "success" for r in rows if r["policy"] == label)
        f = sum(r["outcome"] == "failure" for r in rows if r["policy"] == label)
        out.append((label, s, s + f))
    return sorted(out, key=lambda t: -t[1] / t[2])


def test_report_and_analyze_are_registered():
    assert "report" in cli.COMMANDS and "analyze" in cli.COMMANDS
    parser = cli.build_parser()
    assert parser.parse_args(["report", "x"]).func is not None


@requires_extra("results")
def test_report_writes_self_contained_html_and_markdown(bundle_dir, capsys):
    assert cli.main(["report", str(bundle_dir)]) == 0
    assert "report.html" in capsys.readouterr().out
    html = (bundle_dir / "report.html").read_text()
    md = (bundle_dir / "report.md").read_text()
    # self-contained: nothing to fetch, no scripts
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<script" not in html.lower() and "<link" not in html.lower() and "@import" not in html
    srcs = re.findall(r'<img[^>]*\ssrc="([^"]+)"', html)
    assert srcs and all(s.startswith("data:image/") for s in srcs)
    # one <img> per plot, one animated thumbnail per (policy, success/failure) sampled
    assert len(re.findall(r'<img class="plot"', html)) == 4
    gifs = [s for s in srcs if s.startswith("data:image/gif;base64,")]
    assert len(gifs) == len(pick_episodes(load_bundle(bundle_dir))) >= len(POLICIES)
    # the ranking table lists the policies best first, with rates recomputed from the rows
    expected = _expected_ranking(_results(bundle_dir)["per_episode"])
    ranking_section = html[html.index("<h2>Ranking</h2>") : html.index("<h2>Success per policy")]
    cells = re.findall(r'<td class="l">([^<]+)</td>', ranking_section)
    assert cells == [label for label, _, _ in expected]
    for label, s, n in expected:
        assert f"{s / n:.3f}" in ranking_section and f"{s} / {n}" in ranking_section
    for title in ("Ranking", "Success per policy", "Discards and abstentions", "Time and cost", "Sampled rollouts"):
        assert f"<h2>{title}" in html and f"## {title}" in md
    # the markdown links its figures, and they exist
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(links) == 4 + len(gifs)
    assert all((bundle_dir / link).is_file() for link in links)


@requires_extra("results")
def test_thumbnails_are_small_animated_gifs(bundle_dir):
    from PIL import Image

    assert cli.main(["report", str(bundle_dir)]) == 0
    gifs = sorted((bundle_dir / "report_assets").glob("rollout-*.gif"))
    assert gifs
    for g in gifs:
        im = Image.open(g)
        assert im.format == "GIF" and im.n_frames > 1 and max(im.size) <= 160
        assert g.stat().st_size < 50_000


def test_episode_pick_is_deterministic_first_success_and_failure(source):
    b = load_bundle(source)
    picked = pick_episodes(b)
    assert picked == pick_episodes(load_bundle(source))
    for label, *_ in POLICIES:
        mine = [r for r in picked if r["policy"] == label]
        for outcome in ("success", "failure"):
            candidates = sorted(
                (r for r in b.rows if r["policy"] == label and r["outcome"] == outcome),
                key=lambda r: (b.tasks.index(r["task"]), r["seed"], r["repeat"]),
            )
            chosen = [r for r in mine if r["outcome"] == outcome]
            assert chosen == candidates[:1]


@requires_extra("results")
def test_report_ignores_a_wrong_aggregated_block_and_says_so(bundle_dir):
    data = _results(bundle_dir)
    worst = _expected_ranking(data["per_episode"])[-1][0]
    data["aggregated"]["ranking"] = list(reversed(data["aggregated"]["ranking"]))
    data["aggregated"]["per_policy"][worst]["successes"] = 999
    (bundle_dir / "results.json").write_text(json.dumps(data))
    assert cli.main(["report", str(bundle_dir)]) == 0
    html = (bundle_dir / "report.html").read_text()
    sec = html[html.index("<h2>Ranking</h2>") : html.index("<h2>Success per policy")]
    assert re.findall(r'<td class="l">([^<]+)</td>', sec)[-1] == worst
    assert "successes = 999, but the episode rows give" in html


@requires_extra("results")
def test_money_and_time_breakdown_recomputed(bundle_dir):
    from kosmos_env.report.summary import cost_breakdown

    rows = _results(bundle_dir)["per_episode"]
    cost = cost_breakdown(load_bundle(bundle_dir))
    world = sum(r["timings"]["world"] for r in rows) / len(rows)
    judge = sum(r["timings"]["judge"] for r in rows) / len(rows)
    total = sum(r["timings"]["total"] for r in rows) / len(rows)
    assert cost["seconds_per_rollout"]["world"] == pytest.approx(world)
    assert cost["judge_share"] == pytest.approx(judge / total)
    m = cost["money"]
    assert m["currency"] == "EUR"
    # world, judge and overhead (the world's device) on the h100; policy, gate, io on the cpu
    cpu = sum(r["timings"][s] for r in rows for s in ("policy", "gate", "io")) / len(rows)
    overhead = total - cpu - world - judge
    assert m["per_rollout"] == pytest.approx((world + judge + overhead) / 3600 * 3.0 + cpu / 3600 * 0.1)
    assert cli.main(["report", str(bundle_dir)]) == 0
    html = (bundle_dir / "report.html").read_text()
    assert "EUR per 1000 rollouts" in html and "judge&#x27;s share of the money" in html


@requires_extra("results")
def test_labels_are_html_escaped(bundle_dir):
    data = _results(bundle_dir)
    old = POLICIES[2][0]
    new = 'rand<b onmouseover="x">&om'
    for r in data["per_episode"]:
        if r["policy"] == old:
            r["policy"] = new
    for p in data["campaign"]["policies"]:
        if p["label"] == old:
            p["label"] = new
    (bundle_dir / "results.json").write_text(json.dumps(data))
    assert cli.main(["report", str(bundle_dir), "--no-thumbnails"]) == 0
    html = (bundle_dir / "report.html").read_text()
    assert "<b onmouseover" not in html and "rand&lt;b onmouseover=&quot;x&quot;&gt;&amp;om" in html


# ----------------------------------------------------------------------------- bad input


def _error(argv, capsys) -> str:
    assert cli.main(argv) == 2
    return capsys.readouterr().err


def test_missing_directory_and_results(tmp_path, capsys):
    err = _error(["report", str(tmp_path / "nope")], capsys)
    assert "campaign directory not found" in err and "nope" in err
    (tmp_path / "empty").mkdir()
    err = _error(["report", str(tmp_path / "empty")], capsys)
    assert "results.json not found" in err


def test_garbled_results_names_file_and_problem(bundle_dir, capsys):
    path = bundle_dir / "results.json"
    path.write_text(path.read_text()[:500])
    err = _error(["report", str(bundle_dir)], capsys)
    assert str(path) in err and "not valid JSON" in err and "line" in err
    path.write_text(json.dumps({"schema": "something-else", "schema_version": 1, "per_episode": []}))
    assert "'schema' is 'something-else'" in _error(["report", str(bundle_dir)], capsys)


@pytest.mark.parametrize(
    "bad, words",
    [
        ("../outside.mp4", "escapes the campaign directory"),
        ("artifacts/../../outside.mp4", "escapes the campaign directory"),
        ("/etc/passwd", "is absolute"),
        ("C:\\\\video.mp4", "is absolute"),
    ],
)
def test_artifact_paths_must_stay_inside(bundle_dir, capsys, bad, words):
    data = _results(bundle_dir)
    data["per_episode"][3]["artifacts"]["video"] = bad
    (bundle_dir / "results.json").write_text(json.dumps(data))
    err = _error(["report", str(bundle_dir)], capsys)
    assert words in err and "per_episode[3]" in err and "'video'" in err


def test_symlink_out_of_the_directory_is_rejected(bundle_dir, tmp_path, capsys):
    (tmp_path / "secret.mp4").write_bytes(b"x")
    os.symlink(tmp_path / "secret.mp4", bundle_dir / "artifacts" / "link.mp4")
    data = _results(bundle_dir)
    data["per_episode"][0]["artifacts"]["video"] = "artifacts/link.mp4"
    (bundle_dir / "results.json").write_text(json.dumps(data))
    assert "outside the campaign directory" in _error(["report", str(bundle_dir)], capsys)


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("outcome", "win", "unknown outcome 'win'"),
        ("success", None, "needs success=True"),
        ("seed", "3", "'seed' must be an integer"),
        ("score", 1.5, "'score' must be null or a number in [0, 1]"),
    ],
)
def test_bad_rows_give_clear_errors(bundle_dir, capsys, field, value, words):
    data = _results(bundle_dir)
    row = next(r for r in data["per_episode"] if r["outcome"] == "success")
    row[field] = value
    (bundle_dir / "results.json").write_text(json.dumps(data))
    err = _error(["report", str(bundle_dir)], capsys)
    assert words in err and "results.json: per_episode[" in err


def test_duplicate_episode_is_an_error(bundle_dir, capsys):
    data = _results(bundle_dir)
    data["per_episode"].append(dict(data["per_episode"][0]))
    (bundle_dir / "results.json").write_text(json.dumps(data))
    assert "repeats the episode" in _error(["report", str(bundle_dir)], capsys)


@requires_extra("results")
def test_missing_video_is_noted_not_fatal(bundle_dir):
    b = load_bundle(bundle_dir)
    first = pick_episodes(b)[0]
    (bundle_dir / first["artifacts"]["video"]).write_bytes(b"not an mp4")
    assert cli.main(["report", str(bundle_dir)]) == 0
    html = (bundle_dir / "report.html").read_text()
    assert "could not read " + first["artifacts"]["video"] in html


@requires_extra("results")
def test_error_episodes_and_no_videos(bundle_dir, capsys):
    """An infrastructure error (no timings, no artifacts, no steps) and a campaign run with
    --no-video are reported, not crashed on."""
    data = _results(bundle_dir)
    err_row = data["per_episode"][0]
    err_row.update(
        outcome="error",
        success=None,
        score=None,
        judgment=None,
        timings=None,
        steps=None,
        artifacts={"video": None, "actions": None, "log": None},
        error="worker died",
    )
    for r in data["per_episode"]:
        r["artifacts"]["video"] = None
    (bundle_dir / "results.json").write_text(json.dumps(data))
    assert cli.main(["report", str(bundle_dir)]) == 0
    html = (bundle_dir / "report.html").read_text()
    assert "No episode with a video artifact to show." in html and "data:image/gif" not in html
    assert "1 episode(s) have no timings" in html
    sec = html[html.index("<h2>Discards and abstentions</h2>") : html.index("<h2>Time and cost</h2>")]
    assert f'<td class="l">{err_row["policy"]}</td>' in sec
    capsys.readouterr()
    assert cli.main(["analyze", str(bundle_dir), "--n-boot", "200", "--n-splits", "50", "--json", "--no-write"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert a["per_policy"][err_row["policy"]]["counts"]["error"] == 1
    assert not (bundle_dir / "analysis.json").exists()


@requires_extra("results")
def test_incomplete_campaign_is_flagged(bundle_dir):
    data = _results(bundle_dir)
    data["campaign"].update(complete=False, planned=len(data["per_episode"]) + 5)
    (bundle_dir / "results.json").write_text(json.dumps(data))
    assert cli.main(["report", str(bundle_dir), "--no-thumbnails"]) == 0
    html = (bundle_dir / "report.html").read_text()
    assert (
        f"the campaign is incomplete: {len(data['per_episode'])} finished episodes of "
        f"{len(data['per_episode']) + 5} planned" in html
    )
