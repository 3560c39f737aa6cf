"""``kosmos-env analyze --cost-sweep RUN...``: campaigns of one design run at several settings of
any world (image size, sampling steps, model width, ...), and the cheapest that still ranks
correctly.

Each RUN is a campaign directory. Its cost per rollout is the mean over its episodes of the
recorded stage timings (world, policy, gate, judge, io), with the judge's share. Every run is
compared with the truth: the ``--reference`` CSV where given (per-(task, policy) values),
else the most expensive run (the best setting money bought). Agreement comes with a bootstrap
interval over the (task, seed) units the runs share and a permutation p-value
(:mod:`kosmos_env.stats.uncertainty`); the answer is the cheapest run whose Kendall interval's
lower end is at least ``bar``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kosmos_env.stats.uncertainty import agreement_uncertainty

DEFAULT_BAR = 0.6


def _cost(bundle) -> tuple[float, float | None]:
    """Warm seconds per rollout and the judge's share of them (model loads, paid once per worker,
    are left out: settings are compared by what each further rollout costs)."""
    from kosmos_env.report.summary import cost_breakdown

    c = cost_breakdown(bundle)
    return (c["seconds_per_rollout"] or {}).get("total", 0.0), c["judge_share"]


def cost_sweep_runs(
    dirs: Sequence[str | Path],
    *,
    reference: str | Path | None = None,
    name_map: dict[str, str] | None = None,
    bar: float = DEFAULT_BAR,
    alpha: float = 0.05,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    from kosmos_env.report.analysis import read_reference_csv, seed_matrix
    from kosmos_env.report.bundle import load_bundle

    if len(dirs) < 2:
        raise ValueError(f"--cost-sweep compares settings: give at least 2 campaign directories, got {len(dirs)}")
    bundles = [load_bundle(d) for d in dirs]
    names = [Path(d).name or str(d) for d in dirs]
    if len(set(names)) != len(names):
        names = [str(d) for d in dirs]
    policies = list(bundles[0].policies)
    for n, b in zip(names, bundles, strict=True):
        if sorted(b.policies) != sorted(policies):
            raise ValueError(
                f"run {n} has policies {sorted(b.policies)}, the first run {sorted(policies)}: "
                f"a cost sweep compares one design at several settings"
            )
    mats = {n: seed_matrix(b.rows, policies) for n, b in zip(names, bundles, strict=True)}
    shared = sorted(set.intersection(*(set(m.keys) for m in mats.values())), key=lambda u: (str(u[0]), u[1]))
    if len(shared) < 2:
        raise ValueError("the runs share fewer than 2 (task, seed) units; run them on the same tasks and seeds")
    aligned = {n: m.values[:, [m.keys.index(u) for u in shared]] for n, m in mats.items()}
    costs = {n: _cost(b) for n, b in zip(names, bundles, strict=True)}
    if reference is not None:
        ref_rows = read_reference_csv(reference)
        if name_map:
            from kosmos_env.report.name_map import apply_name_map

            ref_rows = apply_name_map(ref_rows, name_map, policies, bundles[0].tasks)
        # per-policy reference: the mean of its per-task values over the tasks the runs share
        tasks = sorted({u[0] for u in shared})
        vals = {}
        for p in policies:
            v = [r["reference"] for r in ref_rows if r["policy"] == p and r["task"] in tasks]
            if not v:
                raise ValueError(f"the reference CSV has no value for policy {p!r} on the runs' tasks {tasks}")
            vals[p] = float(np.mean(v))
        truth = np.array([[vals[p]] * len(shared) for p in policies])
        truth_name = f"reference CSV {reference}"
        compared = aligned
    else:
        truth_name = max(names, key=lambda n: costs[n][0])
        truth = aligned[truth_name]
        compared = {n: m for n, m in aligned.items() if n != truth_name}
    res = agreement_uncertainty(
        compared, truth, metrics=("kendall", "spearman", "mmrv"), alpha=alpha, n_boot=n_boot, seed=seed
    )
    settings = []
    for n in names:
        cost, share = costs[n]
        k = res["evaluators"][n]["kendall"] if n in res["evaluators"] else None
        holds = n == truth_name or bool(k and k["interval"] and k["interval"][0] >= bar)
        settings.append(
            {
                "run": n,
                "cost_seconds": cost,
                "judge_share": share,
                "env_id": bundles[names.index(n)].campaign.get("env_id"),
                "spec_hash": bundles[names.index(n)].campaign.get("spec_hash"),
                "agreement": res["evaluators"].get(n),
                "truth": n == truth_name,
                "bar_holds": holds,
            }
        )
    settings.sort(key=lambda s: s["cost_seconds"])
    answer = next((s["run"] for s in settings if s["bar_holds"]), None)
    return {
        "truth": truth_name,
        "bar": f"lower end of the Kendall {100 * (1 - alpha):g} % interval >= {bar}",
        "units": len(shared),
        "settings": settings,
        "answer": answer,
        "convention": res["convention"],
    }


def format_cost_sweep(r: dict[str, Any]) -> str:
    from kosmos_env.stats.uncertainty import format_metric

    lines = [
        f"cost sweep over {len(r['settings'])} runs, {r['units']} shared (task, seed) units; truth: {r['truth']}",
        f"bar: {r['bar']}",
        "",
    ]
    lines.append(f"{'run':<28} {'s/rollout':>10} {'judge share':>12}  {'Kendall':<32} bar")
    for s in r["settings"]:
        k = "(the truth)" if s["truth"] else format_metric((s["agreement"] or {}).get("kendall", {}))
        share = "—" if s["judge_share"] is None else f"{s['judge_share']:.3f}"
        lines.append(
            f"{s['run']:<28} {s['cost_seconds']:>10.3f} {share:>12}  {k:<32} {'holds' if s['bar_holds'] else 'fails'}"
        )
    lines += ["", f"answer: the cheapest run that holds the bar is {r['answer']}", r["convention"]]
    return "\n".join(lines)
