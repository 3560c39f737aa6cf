"""One verdict from one rule, first on every page: analyze (text, JSON, CLI), the analysis HTML
(console and report.html) and report.md, on small synthetic campaigns of two policies."""

from __future__ import annotations

import json
import re

import pytest

from kosmos_env import cli
from kosmos_env.report import analyze_bundle, load_bundle, seed_matrix
from kosmos_env.report.analysis_html import render_analysis_html
from kosmos_env.report.text import analysis_text
from kosmos_env.stats.verdict import paired_verdict
from tests.conftest import requires_extra
from tests.support.report_bundle import make_bundle

SKILLS = [
    ("scripted:skill=0.6", "scripted", {"skill": 0.6}, 0.6),
    ("scripted:skill=0.3", "scripted", {"skill": 0.3}, 0.3),
]
# a judge whose verdict is 0/1 but whose score is graded (like the robot-log judge): the policy
# that always succeeds scores 0.55, the one that never does 0.45
ALL_NONE = [("scripted:skill=1.0", "scripted", {"skill": 1.0}, 1.0), ("random", "random", {}, 0.0)]


# a difference shown with a zero-width bootstrap interval: "+1.000  [1.000, 1.000]"
COLLAPSED_TEXT = re.compile(r"[+-]\d\.\d{3}\s+\[(\d\.\d{3}), \1\]")
COLLAPSED_HTML = re.compile(r"[+-]\d\.\d{3}</td><td>\[(\d\.\d{3}), \1\]")


def _graded(outcome: str) -> float:
    return 0.55 if outcome == "success" else 0.45


@pytest.fixture(scope="module")
def skills(tmp_path_factory):
    return make_bundle(
        tmp_path_factory.mktemp("skills") / "c",
        seeds=12,
        rng_seed=11,
        policies=SKILLS,
        tasks=["stack_cube"],
        undecided=False,
    )


@pytest.fixture(scope="module")
def all_none(tmp_path_factory):
    return make_bundle(
        tmp_path_factory.mktemp("allnone") / "c",
        seeds=12,
        rng_seed=5,
        policies=ALL_NONE,
        tasks=["stack_cube"],
        undecided=False,
        score_of=_graded,
    )


def _interval(headline: str) -> tuple[float, float, float]:
    m = re.search(r": ([+-]\d\.\d\d) \[([+-]\d\.\d\d), ([+-]\d\.\d\d)\]", headline)
    assert m, headline
    return tuple(float(x) for x in m.groups())


def test_skill_headline_once_first_from_the_same_rule(skills, tmp_path, capsys):
    bundle = load_bundle(skills)
    a = analyze_bundle(bundle, n_boot=200, n_splits=50)
    v = a["verdict"]
    top, second = a["ranking"]
    assert (v["a"], v["b"], v["measure"]) == (top, second, "success")
    # the same rule called directly on the (task, seed) success matrix gives the same verdict
    mat = seed_matrix(bundle.rows, [top, second])
    direct = paired_verdict(mat.row(top), mat.row(second), names=(top, second))
    assert v["interval"] == pytest.approx(list(direct.interval)) and v["outcome"] == direct.outcome
    assert v["headline"] == direct.headline()
    # the decision is the printed interval excluding 0
    est, lo, hi = _interval(v["headline"])
    assert est == pytest.approx(v["difference"], abs=0.005)
    assert (lo, hi) == pytest.approx(tuple(v["interval"]), abs=0.005)
    assert (v["outcome"] == "a_better") == (v["interval"][0] > 0)
    assert v["headline"].startswith(
        f"{top} better than {second} on success"
        if v["outcome"] == "a_better"
        else f"No detectable difference yet between {top} and {second} on success"
    )

    text = analysis_text(a)
    assert text.splitlines()[0] == f"VERDICT: {v['headline']}"
    assert text.count(v["headline"]) == 1
    # the other tests are below it, labelled secondary, each saying what it is computed on
    for title in (
        "secondary: paired bootstrap by (task, seed) of pairwise differences in success",
        "secondary: minimum detectable difference and paired t-tests on success",
        "secondary: anytime-valid paired A/B test of the top two on judge scores",
    ):
        assert text.index(title) > text.index(v["headline"])

    html = render_analysis_html(a)
    esc = v["headline"].replace("&", "&amp;")
    assert html.count(esc) == 1
    assert html.index('<p class="verdict') < min(html.index("<h2>"), html.index("<h3>"))

    assert cli.main(["analyze", str(skills), "--n-boot", "200", "--n-splits", "50", "--no-write"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"VERDICT: {v['headline']}" and out.count(v["headline"]) == 1


def _assert_a_better(line: str) -> None:
    assert line.startswith(
        "scripted:skill=1.0 better than random on success: +1.00 [+0.52, +1.00] over 12 paired seeds"
    )


@requires_extra("results")  # its last page is the report
def test_all_vs_none_says_a_better_on_every_page(all_none, capsys):
    bundle = load_bundle(all_none)
    a = analyze_bundle(bundle, n_boot=200, n_splits=50)
    pp = a["per_policy"]
    assert (pp["scripted:skill=1.0"]["counts"]["success"], pp["scripted:skill=1.0"]["decided"]) == (12, 12)
    assert (pp["random"]["counts"]["success"], pp["random"]["decided"]) == (0, 12)
    v = a["verdict"]
    assert v["outcome"] == "a_better" and v["interval"][1] == 1.0 and v["interval"][0] < 0.6
    _assert_a_better(v["headline"])
    # the secondary A/B runs on the graded judge scores (+0.10 per pair) and cannot decide yet;
    # it says so, and on what, below the headline
    assert a["ab"]["measure"] == "score" and a["ab"]["decision"] == "undecided"
    # the bootstrap of a 12-of-12 discordant difference collapses: no "[1.000, 1.000]" anywhere
    pw = a["pairwise"][0]
    assert pw["collapsed"] and pw["lower"] == pw["upper"] == 1.0

    text = analysis_text(a)
    _assert_a_better(text.splitlines()[0].removeprefix("VERDICT: "))
    # (split-half quantiles of two policies may coincide: that is a spread of splits, not a difference)
    assert not COLLAPSED_TEXT.search(text) and "interval not estimable from 12 pairs" in text
    assert "on judge scores: undecided" in text

    html = render_analysis_html(a)
    first = re.search(r'<p class="verdict a_better" id="verdict"><b>([^<]*)</b>', html)
    assert first and html.index(first.group(0)) < html.index("<h2>")
    _assert_a_better(first.group(1))
    assert not COLLAPSED_HTML.search(html) and "interval not estimable from 12 pairs" in html

    assert cli.main(["analyze", str(all_none), "--n-boot", "200", "--n-splits", "50", "--no-write"]) == 0
    out = capsys.readouterr().out
    _assert_a_better(out.splitlines()[0].removeprefix("VERDICT: "))
    assert not COLLAPSED_TEXT.search(out)

    assert cli.main(["report", str(all_none), "--no-thumbnails"]) == 0
    capsys.readouterr()
    md = (all_none / "report.md").read_text()
    verdict_md = next(ln for ln in md.splitlines() if ln.startswith("**Verdict:**"))
    _assert_a_better(verdict_md.removeprefix("**Verdict:** "))
    assert md.count(v["headline"]) == 1 and md.index(verdict_md) < md.index("## Ranking")
    assert not COLLAPSED_TEXT.search(md)
    page = (all_none / "report.html").read_text()
    assert page.count(v["headline"]) == 1
    assert page.index('<p class="verdict a_better"') < page.index("<h2>Ranking</h2>")
    assert not COLLAPSED_HTML.search(page)
    data = json.loads(json.dumps(a))  # JSON-ready
    assert data["verdicts"][0]["outcome"] == "a_better"
