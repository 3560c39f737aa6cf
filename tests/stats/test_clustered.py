"""The cluster bootstrap resamples whole clusters, is seeded, says when a statistic is undefined, and
its weighted Spearman and AUROC are exactly those of each resample written out in full (scipy on
the repeated observations)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import rankdata, spearmanr

from kosmos_env.stats.clustered import (
    auroc,
    cluster_bootstrap,
    resample_counts,
    spearman,
    weighted_auroc,
    weighted_mean,
    weighted_ranks,
    weighted_spearman,
)


def test_resamples_draw_whole_clusters_with_replacement():
    counts = resample_counts(5, 200, seed=3)
    assert counts.shape == (200, 5) and np.all(counts.sum(axis=1) == 5)
    assert (counts > 1).any() and (counts == 0).any()  # with replacement: repeats and misses
    assert np.array_equal(counts, resample_counts(5, 200, seed=3))
    assert not np.array_equal(counts, resample_counts(5, 200, seed=4))


def test_a_mean_of_per_cluster_values_takes_only_values_a_cluster_resample_can_give():
    """Two clusters of +1 and -1: every resample's mean is -1, 0 or +1 (a resample of single steps
    would give any mean in between), so the interval is exactly [-1, 1] around 0."""
    seen = []

    def mean(counts):
        v = weighted_mean(np.array([1.0, -1.0]), counts)
        seen.append(v)
        return v

    est = cluster_bootstrap(mean, 2, n_boot=400, seed=0)
    assert est.estimate == 0.0 and est.lower == -1.0 and est.upper == 1.0
    assert set(np.round(np.concatenate(seen), 12)) <= {-1.0, 0.0, 1.0}


def test_the_pooled_statistic_equals_the_resample_written_out():
    """Spearman of the weighted steps, per resample, equals scipy's Spearman of the concatenated
    steps of the drawn episodes (the same draws, rebuilt from the seed)."""
    rng = np.random.default_rng(0)
    eps = [(rng.integers(0, 4, 7).astype(float), rng.normal(size=7)) for _ in range(6)]  # ties in x
    episode = np.repeat(np.arange(6), 7)
    x = np.concatenate([e[0] for e in eps])
    y = np.concatenate([e[1] for e in eps])
    boots = []

    def statistic(counts):
        v = weighted_spearman(x, y, counts[:, episode])
        boots.append(v)
        return v

    cluster_bootstrap(statistic, 6, n_boot=30, seed=5)
    draws = np.random.default_rng(5).integers(0, 6, size=(30, 6))
    by_hand = [
        spearmanr(np.concatenate([eps[i][0] for i in d]), np.concatenate([eps[i][1] for i in d])).statistic
        for d in draws
    ]
    assert np.allclose(np.concatenate(boots[1:]), by_hand)


def test_weighted_ranks_are_the_ranks_of_the_repeated_sample():
    x = np.array([0.3, 0.1, 0.3, 0.9, 0.1, 0.5])
    w = np.array([[2, 1, 0, 3, 1, 1], [1, 1, 1, 1, 1, 1]], dtype=float)
    ranks = weighted_ranks(x, w)
    for row, r in zip(w, ranks, strict=True):
        full = rankdata(np.repeat(x, row.astype(int)))
        assert np.allclose(np.repeat(r, row.astype(int)), full)


def test_weighted_auroc_and_spearman_match_the_repeated_sample():
    rng = np.random.default_rng(2)
    scores = np.round(rng.uniform(size=20), 1)  # ties
    labels = rng.uniform(size=20) < 0.4
    y = rng.normal(size=20)
    w = rng.integers(0, 3, size=(4, 20)).astype(float)
    for row, a, r in zip(w, weighted_auroc(scores, labels, w), weighted_spearman(scores, y, w), strict=True):
        k = row.astype(int)
        assert a == pytest.approx(auroc(np.repeat(scores, k), np.repeat(labels, k)))
        assert r == pytest.approx(spearmanr(np.repeat(scores, k), np.repeat(y, k)).statistic)


def test_seeded_and_reproducible():
    values = np.random.default_rng(0).normal(size=12)
    a = cluster_bootstrap(lambda c: weighted_mean(values, c), 12, n_boot=300, seed=7)
    b = cluster_bootstrap(lambda c: weighted_mean(values, c), 12, n_boot=300, seed=7)
    c = cluster_bootstrap(lambda c: weighted_mean(values, c), 12, n_boot=300, seed=8)
    assert a == b and (a.lower, a.upper) != (c.lower, c.upper)
    assert a.lower < a.estimate < a.upper


def test_undefined_statistics_are_named_not_zero():
    est = cluster_bootstrap(lambda c: np.full(len(c), np.nan), 3, n_boot=20)
    assert est.estimate is None and est.lower is None and est.reason == "undefined on these data"
    # defined on all clusters, undefined on the resamples that miss cluster 0
    est = cluster_bootstrap(lambda c: np.where(c[:, 0] > 0, 1.0, np.nan), 3, n_boot=200, seed=1)
    assert est.estimate == 1.0 and 0 < est.n_undefined < 200 and est.lower == est.upper == 1.0
    assert np.isnan(weighted_mean(np.array([np.nan, 1.0]), np.array([[2.0, 0.0]])))[0]


@pytest.mark.parametrize("bad", [dict(n_clusters=0), dict(n_boot=0), dict(alpha=1.0)])
def test_bad_settings_are_one_clear_error(bad):
    kwargs = dict(n_clusters=3, n_boot=10, alpha=0.05) | bad
    n = kwargs.pop("n_clusters")
    with pytest.raises(ValueError):
        cluster_bootstrap(lambda c: np.zeros(len(c)), n, **kwargs)


def test_spearman_matches_scipy_with_ties_and_skips_missing_pairs():
    x = np.array([0.1, 0.4, 0.4, 0.9, 0.2, np.nan, 0.3])
    y = np.array([1.0, 2.0, 3.0, 3.0, 0.5, 9.0, np.nan])
    keep = np.isfinite(x) & np.isfinite(y)
    assert spearman(x, y) == pytest.approx(spearmanr(x[keep], y[keep]).statistic)
    assert spearman(np.arange(5), np.arange(5)[::-1]) == pytest.approx(-1.0)
    assert np.isnan(spearman(np.ones(4), np.arange(4)))  # a constant has no rank correlation
    assert np.isnan(spearman([1.0], [2.0]))


def test_auroc_by_hand():
    scores = np.array([0.9, 0.8, 0.4, 0.4, 0.1, np.nan])
    labels = np.array([True, False, True, False, False, True])
    # positives 0.9, 0.4 vs negatives 0.8, 0.4, 0.1: wins 0.9>all (3), 0.4>0.1 (1), tie 0.4 (0.5) -> 4.5 / 6
    assert auroc(scores, labels) == pytest.approx(4.5 / 6)
    assert np.isnan(auroc([0.1, 0.2], [True, True]))
