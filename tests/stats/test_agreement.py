"""Rank agreement: SIMPLER's published WidowX numbers, MMRV conventions, scipy cross-checks,
random floors and undefined cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats as ss

import kosmos_env.stats.agreement as ag
from kosmos_env.stats.report import agreement_table, read_agreement_csv
from tests.support.paths import ROOT as REPO

LOCAL_CSV = REPO / "tests" / "data" / "simpler_widowx.csv"

# SIMPLER paper (Li et al. 2024) Table V, WidowX/Bridge, visual matching; Pearson "carrot" is
# 0.571 from the rounded inputs in the CSV (0.575 published from unrounded rates).
PUBLISHED = {
    "widowx_spoon_on_towel": (0.000, 0.827),
    "widowx_carrot_on_plate": (0.111, 0.571),
    "widowx_stack_cube": (0.000, 1.000),
    "widowx_put_eggplant_in_basket": (0.000, 0.990),
}


def test_simpler_widowx_published_mmrv_and_pearson():
    path = LOCAL_CSV
    assert path.is_file()
    rows = read_agreement_csv(path)
    assert len(rows) == 12
    by_task: dict = {}
    for r in rows:
        by_task.setdefault(r["task"], []).append(r)
    assert set(by_task) == set(PUBLISHED)
    for task, (mmrv_pub, pearson_pub) in PUBLISHED.items():
        rs = by_task[task]
        assert len(rs) == 3
        sim = [r["evaluator"] for r in rs]
        real = [r["reference"] for r in rs]
        m = ag.mmrv(sim, real)  # default convention = SIMPLER's code
        p = ag.pearson(sim, real)
        assert m.value == pytest.approx(mmrv_pub, abs=0.005), task
        assert p.value == pytest.approx(pearson_pub, abs=0.005), task
    # the same numbers through the table used by `kosmos-env compare`
    table = agreement_table(rows)
    for task, (mmrv_pub, pearson_pub) in PUBLISHED.items():
        row = table.row(task)
        assert row.metrics["mmrv"].value == pytest.approx(mmrv_pub, abs=0.005)
        assert row.metrics["pearson"].value == pytest.approx(pearson_pub, abs=0.005)


def test_csv_reads_sim_real_aliases_and_explicit_columns(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("# comment\ntask,policy,ref2,ev2,real\nt,a,0.1,0.3,9\nt,b,0.2,0.1,9\n")
    rows = read_agreement_csv(p, reference_col="ref2", evaluator_col="ev2")
    assert [r["reference"] for r in rows] == [0.1, 0.2]
    assert [r["evaluator"] for r in rows] == [0.3, 0.1]
    with pytest.raises(ValueError, match="evaluator"):
        read_agreement_csv(p)  # has 'real' but no evaluator/sim column
    with pytest.raises(FileNotFoundError):
        read_agreement_csv(tmp_path / "missing.csv")


@pytest.mark.parametrize("ties, expected", [("greater", 0.5 / 3), ("less", 0.7 / 3), ("strict", 0.0)])
def test_mmrv_tie_conventions(ties, expected):
    a = ag.mmrv([0, 0, 0], [0.1, 0.2, 0.5], ties=ties, floor=False)
    assert a.value == pytest.approx(expected, abs=1e-12)
    assert round(a.value, 4) == {"greater": 0.1667, "less": 0.2333, "strict": 0.0}[ties]
    assert f"ties={ties}" in a.convention


def _mmrv_simpler_loop(sim, real):
    """Straight transcription of the definition in the CSV header (SIMPLER's convention)."""
    viol = []
    for i in range(len(real)):
        v = 0.0
        for j in range(len(real)):
            if (real[i] > real[j]) != (sim[i] > sim[j]):
                v = max(v, abs(real[i] - real[j]))
        viol.append(v)
    return float(np.mean(viol))


def test_mmrv_default_matches_loop_definition_on_random_inputs():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(2, 9))
        sim = rng.integers(0, 5, n) / 4  # coarse values so ties happen
        real = rng.integers(0, 5, n) / 4
        assert ag.mmrv(sim, real, floor=False).value == pytest.approx(_mmrv_simpler_loop(sim, real), abs=1e-12)


def test_mmrv_evaluator_weight_and_perfect_ranking():
    e, r = [0.1, 0.5, 0.3], [0.0, 0.2, 0.9]
    # only pair (1, 2) disagrees: evaluator gap 0.2, reference gap 0.7
    assert ag.mmrv(e, r, weight="evaluator", floor=False).value == pytest.approx((0 + 0.2 + 0.2) / 3)
    assert ag.mmrv(e, r, weight="reference", floor=False).value == pytest.approx((0 + 0.7 + 0.7) / 3)
    assert ag.mmrv([1, 2, 3], [0.1, 0.5, 0.9], floor=False).value == 0.0
    with pytest.raises(ValueError, match="ties"):
        ag.mmrv(e, r, ties="bogus")
    with pytest.raises(ValueError, match="weight"):
        ag.mmrv(e, r, weight="bogus")


@pytest.mark.filterwarnings("ignore:An input array is constant")
def test_kendall_and_spearman_match_scipy_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(3, 15))
        e = rng.integers(0, 4, n).astype(float)
        r = rng.integers(0, 4, n).astype(float)
        k = ag.kendall(e, r, floor=False)
        s = ag.spearman(e, r, floor=False)
        ks = ss.kendalltau(e, r).statistic  # scipy default variant is tau-b
        sp = ss.spearmanr(e, r).statistic
        if np.isnan(ks):
            assert k.value is None and k.reason
        else:
            assert k.value == pytest.approx(ks, abs=1e-12)
        if np.isnan(sp):
            assert s.value is None and s.reason
        else:
            assert s.value == pytest.approx(sp, abs=1e-12)
        p = ag.pearson(e, r, floor=False)
        pr = ss.pearsonr(e, r).statistic if (np.ptp(e) > 0 and np.ptp(r) > 0) else np.nan
        assert (p.value is None) == bool(np.isnan(pr))
        if p.value is not None:
            assert p.value == pytest.approx(pr, abs=1e-12)


def test_pearson_of_constant_vector_is_undefined_not_zero():
    a = ag.pearson([0.3, 0.3, 0.3], [0.1, 0.2, 0.5])
    assert a.value is None and not a.defined
    assert "evaluator" in a.reason and "constant" in a.reason
    assert a.random_floor is None  # undefined under every permutation too
    b = ag.kendall([1, 2, 3], [5, 5, 5])
    assert b.value is None and "reference" in b.reason
    c = ag.spearman([1.0], [2.0])
    assert c.value is None and "at least 2" in c.reason


def test_random_floor_exact_equals_brute_force_mean():
    e = np.array([0.0, 0.0, 0.042, 0.3])
    r = np.array([0.0, 0.125, 0.1, 0.5])
    brute = np.mean([_mmrv_simpler_loop(e[list(p)], r) for p in itertools.permutations(range(4))])
    a = ag.mmrv(e, r)
    assert a.floor_method == "exact"
    assert a.random_floor == pytest.approx(brute, abs=1e-12)
    # correlations have floor 0 by symmetry of the permutation distribution
    for m in ("pearson", "spearman", "kendall"):
        assert ag.measure_agreement(e, r, m).random_floor == pytest.approx(0.0, abs=1e-12)


def test_random_floor_monte_carlo_is_seeded_and_close_to_exact():
    rng = np.random.default_rng(1)
    e, r = rng.random(9), rng.random(9)
    exact, how = ag.random_floor(e, r, "mmrv", exact_max_n=9)
    assert how == "exact"
    mc1, how1 = ag.random_floor(e, r, "mmrv", exact_max_n=8, n_samples=20000, seed=5)
    mc2, _ = ag.random_floor(e, r, "mmrv", exact_max_n=8, n_samples=20000, seed=5)
    assert how1.startswith("monte-carlo(20000")
    assert mc1 == mc2
    assert mc1 == pytest.approx(exact, abs=0.01)


def test_agreement_rejects_bad_input():
    with pytest.raises(ValueError, match="pair up"):
        ag.pearson([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="finite"):
        ag.kendall([1, np.nan], [1, 2])
    with pytest.raises(ValueError, match="unknown agreement metric"):
        ag.measure_agreement([1, 2], [1, 2], "cosine")


def test_passes_and_meets_respect_metric_direction():
    assert ag.passes("kendall", 0.95, 0.1) and not ag.passes("kendall", 0.85, 0.1)
    assert ag.passes("mmrv", 0.05, 0.1) and not ag.passes("mmrv", 0.2, 0.1)
    assert not ag.passes("pearson", None, 0.5)
    assert ag.meets("kendall", 0.8, 0.8) and not ag.meets("mmrv", 0.3, 0.2)
