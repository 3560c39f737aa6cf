"""Agreement between two judges on the same stored rollouts of one campaign.

Pairs the verdicts (success / failure / abstained; an abstention is a verdict of its own) of
two judges over the episodes both judged, and reports the confusion table, raw agreement,
the agreement expected by chance from the two judges' marginals (the baseline raw agreement
must be read against), Cohen's kappa and a percentile bootstrap interval of kappa
(resampling episodes). The campaign's own judge is named ``campaign``; others by judge id,
id prefix or label (:func:`kosmos_env.campaign.judgments.resolve`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kosmos_env.campaign import judgments as judgment_table
from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger
from kosmos_env.campaign.rejudge import JUDGED_OUTCOMES as VERDICTS
from kosmos_env.stats.kappa import bootstrap_kappa, cohen_kappa


def compare_judges(
    out_dir: str | os.PathLike, judge_a: str, judge_b: str, *, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> dict[str, Any]:
    path = Path(out_dir) / LEDGER_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{out_dir} is not a campaign folder (no {LEDGER_NAME})")
    with Ledger(path, create=False) as ledger:
        names = {}
        for name in (judge_a, judge_b):
            if name == judgment_table.CAMPAIGN_JUDGE:
                names[name] = f"campaign ({ledger.config().judge.get('type')})"
            else:
                jid = judgment_table.resolve(ledger, name)
                names[name] = next(
                    f"{j['label']} [{jid}]" for j in judgment_table.judges(ledger) if j["judge_id"] == jid
                )
        va, vb = judgment_table.verdicts(ledger, judge_a), judgment_table.verdicts(ledger, judge_b)
    shared = sorted(set(va) & set(vb))
    if not shared:
        raise ValueError(f"judges {judge_a!r} and {judge_b!r} share no judged episode")
    a = [va[e]["outcome"] for e in shared]
    b = [vb[e]["outcome"] for e in shared]
    n = len(shared)
    confusion = {
        x: {y: sum(1 for p, q in zip(a, b, strict=True) if p == x and q == y) for y in VERDICTS} for x in VERDICTS
    }
    p_o = sum(p == q for p, q in zip(a, b, strict=True)) / n
    p_e = sum((a.count(c) / n) * (b.count(c) / n) for c in VERDICTS)
    return {
        "judge_a": names[judge_a],
        "judge_b": names[judge_b],
        "episodes": n,
        "only_a": len(set(va) - set(vb)),
        "only_b": len(set(vb) - set(va)),
        "confusion": confusion,
        "raw_agreement": p_o,
        "chance_agreement": p_e,
        "kappa": cohen_kappa(a, b),
        "kappa_interval": bootstrap_kappa(a, b, n_boot=n_boot, alpha=alpha, seed=seed) | {"level": 1 - alpha},
    }


def format_comparison(res: dict[str, Any]) -> str:
    """The comparison as a text table."""
    a, b = res["judge_a"], res["judge_b"]
    width = max(len(v) for v in VERDICTS) + 2
    head = "A \\ B".ljust(width + 3)
    lines = [
        f"judge agreement on {res['episodes']} rollouts judged by both "
        f"(only A: {res['only_a']}, only B: {res['only_b']})",
        f"  A = {a}",
        f"  B = {b}",
        "",
        head + "".join(f"{v:>{width}}" for v in VERDICTS),
    ]
    for x in VERDICTS:
        lines.append(f"{'A: ' + x:<{width + 3}}" + "".join(f"{res['confusion'][x][y]:>{width}}" for y in VERDICTS))
    k, ci = res["kappa"], res["kappa_interval"]
    interval = (
        "undefined"
        if ci["lower"] is None
        else f"[{ci['lower']:.3f}, {ci['upper']:.3f}] ({100 * ci['level']:g}% bootstrap, "
        f"{ci['defined_resamples']}/{ci['n_boot']} resamples defined)"
    )
    lines += [
        "",
        f"raw agreement {res['raw_agreement']:.3f}; chance agreement from the marginals {res['chance_agreement']:.3f}",
        "Cohen's kappa "
        + ("undefined (both judges constant on one verdict)" if k is None else f"{k:.3f}")
        + f", interval {interval}",
    ]
    return "\n".join(lines)
