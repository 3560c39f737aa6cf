"""Agreement and format statistics for the judge audit (small, explicit formulas).

Verdicts are the three judge outcomes ``success``, ``failure``, ``abstained``: an abstention
is a verdict of its own, so a student that abstains where the teacher decided has changed the
verdict. Cohen's kappa uses the marginals of both raters over the categories either one used.
"""

from __future__ import annotations

import json


VERDICTS = ("success", "failure", "abstained")

# kappa lives with the statistics; re-exported for the audit
from kosmos_env.stats.kappa import bootstrap_kappa, cohen_kappa  # noqa: E402,F401


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs (1.0 when there are none)."""
    from scipy.stats import binom

    n = int(b) + int(c)
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom.cdf(min(b, c), n, 0.5)))


def is_bare_json(text: str) -> bool:
    """The whole answer, leading/trailing whitespace aside, is exactly one JSON object.

    No reasoning block, ``<answer>`` tag, code fence or prose around it. Schema validity is a
    separate question (a bare object may still lack a field).
    """
    if not isinstance(text, str):
        return False
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return False
    try:
        return isinstance(json.loads(body), dict)
    except (json.JSONDecodeError, RecursionError):
        return False


def difference_claim(
    lower: float | None, upper: float | None, p_value: float | None, alpha: float, more: str, less: str
) -> tuple[str, bool]:
    """The words a paired difference supports: ``more``/``less`` only if the interval excludes 0
    (and, when given, the exact test rejects at ``alpha``); otherwise "no supported difference"."""
    if lower is None or upper is None:
        return "no supported difference (not enough paired data)", False
    test_ok = p_value is None or p_value < alpha
    if lower > 0 and test_ok:
        return more, True
    if upper < 0 and test_ok:
        return less, True
    return "no supported difference", False
