"""Statistics for the evaluator itself: success-rate intervals (with discards made visible),
rank agreement with a reference (with random floors), split-half repeatability, minimum
detectable differences, horizon and cost sweeps, and an anytime-valid paired A/B test, and the one-rule paired verdict (:func:`paired_verdict`)
that every page shows first.

Everything takes plain numpy arrays / lists; :func:`success_matrix` turns campaign episode rows
into the (policy × seed) matrix the rest expects. Only numpy and scipy are used.
"""

from __future__ import annotations

from kosmos_env.stats.agreement import (
    METRICS,
    Agreement,
    measure_agreement,
    all_agreements,
    kendall,
    meets,
    mmrv,
    passes,
    pearson,
    random_floor,
    spearman,
)
from kosmos_env.stats.cost import CostSweep, Setting, cost_sweep
from kosmos_env.stats.detectable import (
    detectable_summary,
    mdd_paired,
    mdd_resampled,
    mdd_two_proportion,
    separable_pairs,
)
from kosmos_env.stats.horizon import HorizonResult, horizon_agreement
from kosmos_env.stats.intervals import (
    Interval,
    RateSummary,
    bootstrap_ranking,
    clopper_pearson,
    paired_bootstrap_diff,
    rate_interval,
    summarize_rate,
    wilson,
)
from kosmos_env.stats.matrix import PairedMatrix, success_matrix
from kosmos_env.stats.repeatability import SplitHalf, spearman_brown, split_half
from kosmos_env.stats.report import AgreementTable, agreement_table, format_table, read_agreement_csv, report_text
from kosmos_env.stats.sequential import ABResult, ABState, SequentialABTest, eb_confidence_sequence, sequential_ab
from kosmos_env.stats.verdict import Verdict, paired_verdict, tango_interval

__all__ = [
    "METRICS",
    "Agreement",
    "measure_agreement",
    "all_agreements",
    "kendall",
    "meets",
    "mmrv",
    "passes",
    "pearson",
    "random_floor",
    "spearman",
    "CostSweep",
    "Setting",
    "cost_sweep",
    "detectable_summary",
    "mdd_paired",
    "mdd_resampled",
    "mdd_two_proportion",
    "separable_pairs",
    "HorizonResult",
    "horizon_agreement",
    "Interval",
    "RateSummary",
    "bootstrap_ranking",
    "clopper_pearson",
    "paired_bootstrap_diff",
    "rate_interval",
    "summarize_rate",
    "wilson",
    "PairedMatrix",
    "success_matrix",
    "SplitHalf",
    "spearman_brown",
    "split_half",
    "AgreementTable",
    "agreement_table",
    "format_table",
    "read_agreement_csv",
    "report_text",
    "ABResult",
    "ABState",
    "SequentialABTest",
    "eb_confidence_sequence",
    "sequential_ab",
    "Verdict",
    "paired_verdict",
    "tango_interval",
]
