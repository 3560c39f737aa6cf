"""`kosmos-env analyze DIR`: the numbers equal direct calls into kosmos_env.stats on the same rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kosmos_env import cli
from kosmos_env.report import analyze_bundle, load_bundle, paired_diffs, seed_matrix
from kosmos_env.stats import (
    agreement_table,
    bootstrap_ranking,
    clopper_pearson,
    detectable_summary,
    horizon_agreement,
    paired_bootstrap_diff,
    sequential_ab,
    split_half,
    success_matrix,
    summarize_rate,
    wilson,
)
from tests.support.report_bundle import POLICIES, TASKS, make_bundle

SECTIONS = (
    "success per policy",
    "success per policy x task",
    "paired bootstrap",
    "ranking uncertainty",
    "split-half repeatability",
    "minimum detectable difference",
    "horizon sensitivity",
    "anytime-valid paired A/B",
)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return make_bundle(tmp_path_factory.mktemp("campaign") / "c", seeds=10, rng_seed=3)


@pytest.fixture
def bundle_dir(source, tmp_path):
    return Path(shutil.copytree(source, tmp_path / "c"))


@pytest.fixture(scope="module")
def analysis(source):
    return analyze_bundle(load_bundle(source), n_boot=500, n_splits=200)


def _rows(d: Path) -> list[dict]:
    return json.loads((d / "results.json").read_text())["per_episode"]


def _strict_json(text: str):
    def no_constant(c):
        raise AssertionError(f"non-standard JSON constant {c}")

    return json.loads(text, parse_constant=no_constant)


def test_analyze_prints_sections_and_writes_json(bundle_dir, capsys):
    assert cli.main(["analyze", str(bundle_dir), "--n-boot", "300", "--n-splits", "100"]) == 0
    out = capsys.readouterr().out
    for s in SECTIONS:
        assert s in out
    assert "agreement with reference" not in out
    data = _strict_json((bundle_dir / "analysis.json").read_text())
    assert data["schema"] == "kosmos-env/analysis" and set(data["per_policy"]) == {p for p, *_ in POLICIES}
    # tables are aligned: every line of the per-policy table has the header's length or less
    lines = out.splitlines()
    i = lines.index("success per policy (raw rate over decided episodes)")
    header, rule = lines[i + 2], lines[i + 3]
    assert set(rule.replace(" ", "")) == {"-"} and len(rule) == len(header.rstrip())


def test_per_policy_intervals_equal_direct_calls(source, analysis):
    rows = _rows(source)
    for label, *_ in POLICIES:
        outs = [r["outcome"] for r in rows if r["policy"] == label]
        k, f = outs.count("success"), outs.count("failure")
        got = analysis["per_policy"][label]
        w, cp, s = wilson(k, k + f), clopper_pearson(k, k + f), summarize_rate(outs)
        assert got["success_rate"] == pytest.approx(k / (k + f))
        assert got["wilson"] == pytest.approx([w.lower, w.upper])
        assert got["clopper_pearson"] == pytest.approx([cp.lower, cp.upper])
        assert got["worst_case"] == pytest.approx(list(s.worst_case))
        assert got["worst_case_ci"] == pytest.approx(list(s.worst_case_ci))
        assert got["discard_rate"] == pytest.approx(outs.count("discarded") / len(outs))
        assert got["abstain_rate"] == pytest.approx(outs.count("abstained") / len(outs))
        for t in TASKS:
            o2 = [r["outcome"] for r in rows if r["policy"] == label and r["task"] == t]
            w2 = wilson(o2.count("success"), o2.count("success") + o2.count("failure"))
            assert analysis["per_policy_task"][label][t]["wilson"] == pytest.approx([w2.lower, w2.upper])
    rates = {p: analysis["per_policy"][p]["success_rate"] for p in analysis["ranking"]}
    assert analysis["ranking"] == sorted(rates, key=lambda p: -rates[p])
    assert analysis["ranking"] == [p for p, *_ in POLICIES]  # skill 1.0 > skill 0.5 > random in this draw


def test_paired_statistics_equal_direct_calls(source, analysis):
    rows = _rows(source)
    order = analysis["ranking"]
    m = success_matrix(rows)  # one repeat: the (task, seed) unit matrix is this matrix
    mat = np.stack([m.row(p) for p in order])
    br = bootstrap_ranking(mat, order, n_boot=500)
    assert analysis["bootstrap_ranking"]["prob_best"] == pytest.approx(br.prob_best.tolist())
    np.testing.assert_allclose(analysis["bootstrap_ranking"]["rank_interval"], br.rank_interval)
    d = paired_bootstrap_diff(m.row(order[0]), m.row(order[2]), n_boot=500)
    got = next(x for x in analysis["pairwise"] if x["a"] == order[0] and x["b"] == order[2])
    assert (got["estimate"], got["lower"], got["upper"]) == pytest.approx((d.estimate, d.lower, d.upper))
    for metric in ("spearman", "kendall"):
        sh = split_half(mat, metric=metric, n_splits=200)
        assert analysis["split_half"][metric]["median"] == pytest.approx(sh.median)
        assert analysis["split_half"][metric]["corrected_median"] == pytest.approx(sh.corrected_median)
    det = detectable_summary(mat, order)
    assert analysis["detectable"]["paired_mdd_median"] == pytest.approx(det.paired_mdd_median)
    assert analysis["detectable"]["fraction_separable"] == pytest.approx(det.fraction_separable)
    assert {int(k): v for k, v in analysis["detectable"]["resampled"].items()} == pytest.approx(det.resampled)


def test_ab_test_pairs_top_two_on_task_seed_repeat(source, analysis):
    rows = _rows(source)
    a, b = analysis["ranking"][:2]
    score = {(r["policy"], r["task"], r["seed"], r["repeat"]): r["score"] for r in rows}
    keys = sorted({(t, s, rep) for (_, t, s, rep) in score}, key=lambda k: (k[2], k[1], k[0]))
    diffs = [score[(a, *k)] - score[(b, *k)] for k in keys if score[(a, *k)] is not None and score[(b, *k)] is not None]
    res = sequential_ab(diffs, rule="eb")  # the analysis decides by its own confidence sequence
    ab = analysis["ab"]
    assert ab["rule"] == "eb" and ab["measure"] == "score"
    assert (ab["a"], ab["b"], ab["n_pairs"]) == (a, b, len(diffs))
    assert ab["decision"] == res.decision and ab["n_used"] == res.n_used
    assert ab["final"]["lower"] == pytest.approx(res.final.lower)
    got, _ = paired_diffs(rows, a, b)
    assert got.tolist() == pytest.approx(diffs)


def test_horizon_uses_gt_success_of_the_logs(source, analysis):
    rows = _rows(source)
    h = analysis["horizon"]
    gts = {p: [] for p, *_ in POLICIES}
    for r in rows:
        with np.load(source / r["artifacts"]["log"], allow_pickle=False) as z:
            gts[r["policy"]].append(z["gt_success"])
    longest = max(g.size for v in gts.values() for g in v)
    hs = list(range(5, longest + 1, 5))
    assert h["horizons"] == hs
    scores = np.array([[np.mean([g[min(hz, g.size) - 1] for g in gts[p]]) for p in h["policies"]] for hz in hs])
    for j, p in enumerate(h["policies"]):
        assert h["scores"][p] == pytest.approx(scores[:, j].tolist())
    direct = horizon_agreement(scores, hs, metric="kendall", threshold=0.8)
    assert [x["value"] for x in h["agreements"]] == pytest.approx([x.value for x in direct.agreements])
    assert h["break_horizon"] == direct.break_horizon


def test_reference_adds_agreement_table(bundle_dir, source, analysis, capsys, tmp_path):
    ref = {
        ("carrot_on_plate", POLICIES[0][0]): 0.9,
        ("carrot_on_plate", POLICIES[1][0]): 0.3,
        ("carrot_on_plate", POLICIES[2][0]): 0.5,
        ("stack_cube", POLICIES[0][0]): 0.7,
        ("stack_cube", POLICIES[1][0]): 0.4,
        ("stack_cube", POLICIES[2][0]): 0.1,
        ("stack_cube", "octo-base"): 0.2,
    }  # not in the campaign: left out with a note
    csv = tmp_path / "ref.csv"
    csv.write_text(
        "# provenance: made up for the test\ntask,policy,reference,evaluator\n"
        + "".join(f"{t},{p},{v},0.123\n" for (t, p), v in ref.items())
    )
    assert cli.main(["analyze", str(bundle_dir), "--reference", str(csv), "--n-boot", "200", "--n-splits", "50"]) == 0
    out = capsys.readouterr().out
    assert "agreement with reference" in out and "mmrv" in out and "octo-base" in out
    got = _strict_json((bundle_dir / "analysis.json").read_text())["agreement"]
    # direct: the campaign's per-(task, policy) success rate as the evaluator
    rows = _rows(source)
    direct_rows = []
    for (t, p), v in ref.items():
        if p == "octo-base":
            continue
        o = [r["outcome"] for r in rows if r["policy"] == p and r["task"] == t]
        direct_rows.append(
            {
                "task": t,
                "policy": p,
                "reference": v,
                "evaluator": o.count("success") / (o.count("success") + o.count("failure")),
            }
        )
    table = agreement_table(direct_rows)
    assert (
        [r["label"] for r in got["rows"]]
        == [r.label for r in table.rows]
        == ["carrot_on_plate", "stack_cube", "mean over tasks", "pooled"]
    )
    for gr, tr in zip(got["rows"], table.rows, strict=True):
        for m in ("pearson", "spearman", "kendall", "mmrv"):
            assert gr["metrics"][m]["value"] == pytest.approx(tr.metrics[m].value)
            assert gr["metrics"][m]["random_floor"] == pytest.approx(tr.metrics[m].random_floor)
    assert got["convention"] == {"mmrv_weight": "reference", "mmrv_ties": "greater"}


def _error(argv, capsys) -> str:
    assert cli.main(argv) == 2
    return capsys.readouterr().err


def test_bad_reference_and_bad_input(bundle_dir, tmp_path, capsys):
    csv = tmp_path / "ref.csv"
    csv.write_text("task,policy,reference\ncarrot_on_plate,openvla,0.5\n")
    err = _error(["analyze", str(bundle_dir), "--reference", str(csv)], capsys)
    assert "matches no (task, policy) of the campaign" in err and "openvla" in err
    csv.write_text("task,policy,real_rate\ncarrot_on_plate,random,0.5\n")
    assert "lacks a 'reference' column" in _error(["analyze", str(bundle_dir), "--reference", str(csv)], capsys)
    csv.write_text("task,policy,reference\ncarrot_on_plate,random,half\n")
    assert "non-numeric reference value 'half'" in _error(["analyze", str(bundle_dir), "--reference", str(csv)], capsys)
    assert "reference CSV not found" in _error(
        ["analyze", str(bundle_dir), "--reference", str(tmp_path / "x.csv")], capsys
    )
    assert "--alpha must be in (0, 1)" in _error(["analyze", str(bundle_dir), "--alpha", "2"], capsys)
    assert "campaign directory not found" in _error(["analyze", str(tmp_path / "none")], capsys)
    (bundle_dir / "results.json").write_text("{ not json")
    err = _error(["analyze", str(bundle_dir)], capsys)
    assert "results.json is not valid JSON" in err
    assert not (bundle_dir / "analysis.json").exists()


def test_single_policy_sections_are_skipped_with_reasons(bundle_dir, capsys):
    data = json.loads((bundle_dir / "results.json").read_text())
    data["per_episode"] = [r for r in data["per_episode"] if r["policy"] == POLICIES[0][0]]
    (bundle_dir / "results.json").write_text(json.dumps(data))
    assert cli.main(["analyze", str(bundle_dir), "--n-boot", "200", "--n-splits", "50"]) == 0
    out = capsys.readouterr().out
    # pairwise, MDD and A/B need two policies, split-half three; so do the horizon comparison and the verdict
    assert out.count("skipped: needs at least 2 policies") == 3
    assert out.count("skipped: needs at least 3 policies") == 1
    assert out.splitlines()[0] == "VERDICT: No verdict: needs at least 2 policies with decided episodes"
    assert "skipped: needs per-step ground truth for at least 2 policies" in out
    a = _strict_json((bundle_dir / "analysis.json").read_text())
    assert a["bootstrap_ranking"]["prob_best"] == [1.0]


def test_missing_logs_are_noted_and_left_out(bundle_dir, capsys):
    rows = _rows(bundle_dir)
    gone = {r["artifacts"]["log"] for r in rows if r["policy"] == POLICIES[2][0]}
    for rel in gone:
        (bundle_dir / rel).unlink(missing_ok=True)
    a = analyze_bundle(load_bundle(bundle_dir), n_boot=200, n_splits=50)
    assert POLICIES[2][0] not in a["horizon"]["policies"]
    assert any("missing from the artifact store" in n for n in a["notes"])


# ----------------------------------------------------------------------------- small crafted rows


def test_seed_matrix_averages_repeats():
    rows = [
        {
            "policy": p,
            "task": "t",
            "seed": s,
            "repeat": r,
            "outcome": "success" if v else "failure",
            "success": bool(v),
            "score": float(v),
        }
        for p, vals in (("a", [1, 0, 1, 1]), ("b", [0, 0, 1, 0]))
        for (s, r), v in zip([(0, 0), (0, 1), (1, 0), (1, 1)], vals, strict=True)
    ]
    m = seed_matrix(rows, ["b", "a"])
    assert m.policies == ["b", "a"] and m.keys == [("t", 0), ("t", 1)]
    assert m.values.tolist() == [[0.0, 0.5], [0.5, 1.0]]
    d, keys = paired_diffs(rows, "a", "b")
    assert keys == [("t", 0, 0), ("t", 1, 0), ("t", 0, 1), ("t", 1, 1)]  # round order: repeat, seed, task
    assert d.tolist() == [1.0, 0.0, 0.0, 1.0]
