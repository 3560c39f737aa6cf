"""Everything the statistics package can say about one campaign (issue 7), as one JSON-ready dict.

First, the page's headline (``verdict``): one verdict on the top two policies, and (``verdicts``)
the same for every pair, from the pre-chosen rule of :func:`kosmos_env.stats.verdict.paired_verdict`
on success per (task, seed) (Tango's score interval; its interval is the one that decides). Every
other test below (bootstrap, paired t, the anytime-valid A/B on judge scores) is secondary.

Sections: per-policy rates (Wilson, Clopper–Pearson, worst case with discards/abstentions),
paired bootstrap of pairwise differences and of the ranking, split-half repeatability of the
ranking, minimum detectable difference and the fraction of separable pairs, horizon
sensitivity from per-step ground truth in the robot logs, an anytime-valid paired A/B test of
the top two policies, and (with a reference CSV) rank agreement with the reference. Every
analysis names the judge its success numbers come from (``judge``: label and identity) and
carries the time and money per stage with the judge's share of the bill (``cost``).

Units of resampling: the bootstrap, split-half and MDD treat one (task, seed) as one unit (a
policy's repeats of the same initial state are averaged first), because episodes that share a
seed share their difficulty; the A/B test consumes episodes paired on (task, seed, repeat).
A section that cannot be computed (one policy, one seed, no logs) is reported as skipped with
the reason, never silently dropped.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kosmos_env.report.bundle import Bundle
from kosmos_env.report.summary import PolicyRate, per_policy, per_policy_task, ranking
from kosmos_env.stats.detectable import detectable_summary
from kosmos_env.stats.horizon import horizon_agreement
from kosmos_env.stats.intervals import bootstrap_ranking, paired_bootstrap_diff
from kosmos_env.stats.matrix import PairedMatrix, success_matrix
from kosmos_env.stats.repeatability import split_half
from kosmos_env.stats.report import agreement_table
from kosmos_env.stats.sequential import sequential_ab
from kosmos_env.stats.verdict import paired_verdict

HORIZON_STEP = 5
PROGRESS_MIN_LOGS = 200  # show a progress bar when reading at least this many robot logs


# ----------------------------------------------------------------------------- matrices


def seed_matrix(rows: Sequence[dict], policies: Sequence[str], value: str = "success") -> PairedMatrix:
    """(policies × (task, seed)) matrix of ``value``, repeats of one (task, seed) averaged.

    Rows follow ``policies`` (policies absent from ``rows`` get an all-NaN row); NaN marks a
    unit where the policy has no decided episode. With one repeat this is exactly
    :func:`kosmos_env.stats.success_matrix` with the repeat dropped from the keys.
    """
    m = success_matrix(rows, value=value)
    units = sorted({(k[0], k[1]) for k in m.keys}, key=lambda u: (str(u[0]), u[1]))
    col = {u: j for j, u in enumerate(units)}
    out = np.full((len(policies), len(units)), np.nan)
    for i, p in enumerate(policies):
        if p not in m.policies:
            continue
        src = m.values[m.policies.index(p)]
        sums = np.zeros(len(units))
        cnts = np.zeros(len(units))
        for k, v in zip(m.keys, src, strict=True):
            if not np.isnan(v):
                sums[col[(k[0], k[1])]] += v
                cnts[col[(k[0], k[1])]] += 1
        with np.errstate(invalid="ignore", divide="ignore"):
            out[i] = np.where(cnts > 0, sums / cnts, np.nan)
    return PairedMatrix(list(policies), units, out)


def paired_diffs(rows: Sequence[dict], a: str, b: str, value: str = "score") -> tuple[np.ndarray, list[tuple]]:
    """Per-episode differences value_a - value_b on the (task, seed, repeat) keys where both
    policies have a decided episode, in round order (repeat, seed, task): the order a campaign
    that runs seeds in rounds would see them."""
    m = success_matrix([r for r in rows if r["policy"] in (a, b)], value=value)
    if a not in m.policies or b not in m.policies:
        raise ValueError(f"policies {a!r} and {b!r} both need episodes")
    va, vb = m.row(a), m.row(b)
    keys = [k for k, x, y in zip(m.keys, va, vb, strict=True) if not (np.isnan(x) or np.isnan(y))]
    diff = {k: x - y for k, x, y in zip(m.keys, va, vb, strict=True) if not (np.isnan(x) or np.isnan(y))}
    keys.sort(key=lambda k: (k[2], k[1], str(k[0])))
    return np.array([diff[k] for k in keys], dtype=float), keys


# ----------------------------------------------------------------------------- horizon


def load_gt_success(path: Path) -> np.ndarray:
    """The per-step ``gt_success`` array of a robot log (.npz, read without pickle)."""
    with np.load(path, allow_pickle=False) as z:
        if "gt_success" not in z.files:
            raise KeyError("gt_success")
        return np.asarray(z["gt_success"]).astype(bool).ravel()


def horizon_scores(
    bundle: Bundle, policies: Sequence[str], step: int = HORIZON_STEP
) -> tuple[list[int], np.ndarray, dict, list[str]]:
    """Ground-truth success of every policy when each rollout is judged at horizons
    h = step, 2 step, ..., and at the longest rollout's length.

    A rollout judged at h is scored gt_success[h - 1]; one that ended before h keeps its
    last value. Returns (horizons, scores (H × P), episodes per policy, notes).
    """
    from tqdm import tqdm

    notes: list[str] = []
    gts: dict[str, list[np.ndarray]] = {p: [] for p in policies}
    todo = [r for r in bundle.rows if r["policy"] in gts and (r.get("artifacts") or {}).get("log")]
    bar = tqdm(todo, desc="reading robot logs", unit="log", file=sys.stderr, disable=len(todo) < PROGRESS_MIN_LOGS)
    missing = bad = no_gt = 0
    for r in bar:
        path = bundle.artifact(r, "log")
        if not path.is_file():
            missing += 1
            continue
        try:
            gt = load_gt_success(path)
        except KeyError:
            no_gt += 1
            continue
        except Exception as exc:  # noqa: BLE001 - unreadable / not an npz (BadZipFile, EOFError, zlib.error, ...)
            bad += 1
            if bad == 1:
                notes.append(f"robot log {path} could not be read: {exc}")
            continue
        if gt.size:
            gts[r["policy"]].append(gt)
    for n, what in (
        (missing, "log artifacts are missing from the artifact store"),
        (bad, "log artifacts could not be read"),
        (no_gt, "logs have no gt_success"),
    ):
        if n:
            notes.append(f"{n} {what}; those episodes are left out of the horizon analysis")
    counts = {p: len(v) for p, v in gts.items()}
    lengths = [g.size for v in gts.values() for g in v]
    if not lengths:
        return [], np.zeros((0, len(policies))), counts, notes
    longest = max(lengths)
    hs = list(range(step, longest + 1, step))
    if not hs or hs[-1] != longest:
        hs.append(longest)
    scores = np.full((len(hs), len(policies)), np.nan)
    for j, p in enumerate(policies):
        if not gts[p]:
            continue
        for i, h in enumerate(hs):
            scores[i, j] = float(np.mean([g[min(h, g.size) - 1] for g in gts[p]]))
    return hs, scores, counts, notes


# ----------------------------------------------------------------------------- reference CSV


def read_reference_csv(path: str | Path) -> list[dict]:
    """Rows {task, policy, reference} from a CSV with columns task, policy, reference (an
    evaluator column may be present and is ignored: the campaign is the evaluator here).
    Lines starting with '#' are comments."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"reference CSV not found: {p}")
    lines = [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ValueError(f"{p} has no header or data rows")
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    header = [h.strip() for h in (reader.fieldnames or [])]
    reader.fieldnames = header
    col = next((c for c in ("reference", "real") if c in header), None)
    for req, have in (("task", "task" in header), ("policy", "policy" in header), ("reference", col is not None)):
        if not have:
            raise ValueError(f"reference CSV {p} lacks a {req!r} column (header is {header})")
    out, seen = [], set()
    for i, row in enumerate(reader, start=1):
        try:
            val = float(row[col])
        except (TypeError, ValueError):
            raise ValueError(f"{p}: data row {i} has a non-numeric reference value {row.get(col)!r}") from None
        if not math.isfinite(val):
            raise ValueError(f"{p}: data row {i} has a non-finite reference value {val}")
        key = ((row["task"] or "").strip(), (row["policy"] or "").strip())
        if key in seen:
            raise ValueError(f"{p}: (task, policy) = {key} appears twice")
        seen.add(key)
        out.append({"task": key[0], "policy": key[1], "reference": val})
    return out


def reference_agreement(
    ref_rows: list[dict], cells: dict[str, dict[str, PolicyRate]], *, source: str = "reference CSV", seed: int = 0
) -> tuple[Any, list[str]]:
    """Agreement of the campaign's per-(task, policy) success rates with the reference values.

    Reference rows for policies or tasks the campaign did not run are left out (noted); if
    nothing matches, that is a ValueError naming both sets of labels.
    """
    notes: list[str] = []
    pols = set(cells)
    tasks = {t for c in cells.values() for t in c}
    rows, unknown_p, unknown_t, undecided = [], set(), set(), []
    for r in ref_rows:
        if r["policy"] not in pols:
            unknown_p.add(r["policy"])
        elif r["task"] not in tasks:
            unknown_t.add(r["task"])
        elif r["task"] not in cells[r["policy"]] or cells[r["policy"]][r["task"]].rate is None:
            undecided.append((r["task"], r["policy"]))
        else:
            rows.append(r | {"evaluator": cells[r["policy"]][r["task"]].rate})
    if not rows:
        raise ValueError(
            f"{source} matches no (task, policy) of the campaign: its policies are "
            f"{sorted({r['policy'] for r in ref_rows})}, tasks {sorted({r['task'] for r in ref_rows})}; "
            f"the campaign's policies are {sorted(pols)}, tasks {sorted(tasks)}"
        )
    if unknown_p:
        notes.append(f"reference policies not in the campaign, left out: {sorted(unknown_p)}")
    if unknown_t:
        notes.append(f"reference tasks not in the campaign, left out: {sorted(unknown_t)}")
    if undecided:
        notes.append(f"(task, policy) with no decided episode in the campaign, left out: {undecided}")
    missing = sorted(
        {(t, p) for p in cells for t in cells[p] if t in {r["task"] for r in rows}}
        - {(r["task"], r["policy"]) for r in rows}
    )
    if missing:
        notes.append(f"campaign (task, policy) cells without a reference value: {missing}")
    no_ref = sorted(tasks - {r["task"] for r in rows})
    if no_ref:
        notes.append(f"campaign tasks without any reference value (not in the agreement table): {no_ref}")
    return agreement_table(rows, seed=seed), notes


# ----------------------------------------------------------------------------- the verdict


def pair_verdict(mat: PairedMatrix, a: str, b: str, alpha: float = 0.05) -> dict:
    """The page's verdict on ``a`` vs ``b``: success per (task, seed), repeats averaged (the
    analysis's resampling unit), by :func:`kosmos_env.stats.verdict.paired_verdict`."""
    return paired_verdict(mat.row(a), mat.row(b), names=(a, b), measure="success", alpha=alpha).to_dict()


def headline_verdict(bundle: Bundle, alpha: float = 0.05) -> dict:
    """The verdict on the top two policies of ``bundle`` by success (or ``{"skipped": why}``),
    cheap enough for a report built without the full analysis."""
    rates = per_policy(bundle, alpha)
    ranked = [p for p in ranking(rates) if rates[p].rate is not None]
    if len(ranked) < 2:
        return _skip("needs at least 2 policies with decided episodes")
    return pair_verdict(seed_matrix(bundle.rows, ranked), ranked[0], ranked[1], alpha)


def collapsed(lower, upper) -> bool:
    """A bootstrap interval of zero width: every resample gave the same difference (e.g. every
    pair discordant the same way), which is no certainty, only too few distinct pairs."""
    return lower is not None and upper is not None and abs(float(upper) - float(lower)) < 1e-12


# ----------------------------------------------------------------------------- the analysis


def _skip(reason: str) -> dict:
    return {"skipped": reason}


def _quantiles(x: np.ndarray) -> dict:
    x = x[~np.isnan(x)]
    if not x.size:
        return {}
    q = np.quantile(x, [0.05, 0.25, 0.5, 0.75, 0.95])
    return dict(zip(("q05", "q25", "median", "q75", "q95"), map(float, q), strict=True))


def analyze_bundle(
    bundle: Bundle,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    reference: str | Path | None = None,
    n_boot: int = 2000,
    n_splits: int = 1000,
    seed: int = 0,
    horizon_step: int = HORIZON_STEP,
    horizon_metric: str = "kendall",
    horizon_threshold: float = 0.8,
    name_map: dict[str, str] | None = None,
    judge: str | None = None,
) -> dict:
    """Run every applicable analysis on ``bundle``; returns a JSON-ready dict (see module doc).

    ``judge`` chooses whose verdicts the success numbers are (:mod:`kosmos_env.report.judge_view`;
    None: the campaign's own judge); the dict names it under ``judge`` and carries the time and
    money breakdown with the judge's share under ``cost``.
    """
    from kosmos_env.report.judge_view import select_judge
    from kosmos_env.report.summary import cost_breakdown

    if not 0 < alpha < 1:
        raise ValueError(f"--alpha must be in (0, 1), got {alpha}")
    if not 0 < power < 1:
        raise ValueError(f"--power must be in (0, 1), got {power}")
    if horizon_step < 1:
        raise ValueError(f"horizon step must be >= 1, got {horizon_step}")
    ref_rows = read_reference_csv(reference) if reference is not None else None  # fail fast on a bad CSV
    bundle, judge_info = select_judge(bundle, judge)
    if name_map is not None:
        if ref_rows is None:
            raise ValueError("--map renames the names of a --reference CSV; give --reference too")
        from kosmos_env.report.name_map import apply_name_map

        ref_rows = apply_name_map(ref_rows, name_map, bundle.policies, bundle.tasks)
    rows = bundle.rows
    camp = bundle.campaign
    rates = per_policy(bundle, alpha)
    cells = per_policy_task(bundle, alpha)
    order = ranking(rates)
    notes = list(bundle.notes)
    out: dict[str, Any] = {
        "schema": "kosmos-env/analysis",
        "schema_version": 1,
        "campaign": {
            "id": camp.get("id"),
            "env_id": camp.get("env_id"),
            "spec_hash": camp.get("spec_hash"),
            "n_episodes": len(rows),
            "policies": list(bundle.policies),
            "tasks": list(bundle.tasks),
            "seeds": sorted({r["seed"] for r in rows}),
            "repeats": max(r["repeat"] for r in rows) + 1,
        },
        "settings": {
            "alpha": alpha,
            "power": power,
            "n_boot": n_boot,
            "n_splits": n_splits,
            "seed": seed,
            "horizon_step": horizon_step,
            "horizon_metric": horizon_metric,
            "horizon_threshold": horizon_threshold,
            "unit": "(task, seed), repeats averaged",
        },
        "per_policy": {p: rates[p].to_dict() | {"rank": order.index(p) + 1} for p in order},
        "per_policy_task": {p: {t: c.to_dict() for t, c in cells[p].items()} for p in order},
        "ranking": order,
        "judge": judge_info,
        "cost": {k: v for k, v in cost_breakdown(bundle).items() if k != "seconds_per_rollout_by_policy"},
    }
    ranked = [p for p in order if rates[p].rate is not None]
    if len(ranked) < len(order):
        notes.append(
            f"policies without any decided episode are left out of the paired analyses: "
            f"{[p for p in order if p not in ranked]}"
        )
    mat = seed_matrix(rows, ranked) if ranked else None
    n_units = mat.values.shape[1] if mat is not None else 0

    # the headline: one verdict from one rule (top two), and the same rule on every pair
    if len(ranked) >= 2:
        out["verdict"] = pair_verdict(mat, ranked[0], ranked[1], alpha)
        out["verdicts"] = [pair_verdict(mat, a, b, alpha) for a, b in itertools.combinations(ranked, 2)]
    else:
        out["verdict"] = _skip("needs at least 2 policies with decided episodes")
        out["verdicts"] = []

    # paired bootstrap (secondary): pairwise differences and the ranking
    if len(ranked) >= 2:
        pw = []
        for a, b in itertools.combinations(ranked, 2):
            try:
                d = paired_bootstrap_diff(mat.row(a), mat.row(b), n_boot=n_boot, alpha=alpha, seed=seed)
                pw.append(
                    {"a": a, "b": b, "measure": "success"} | d.to_dict() | {"collapsed": collapsed(d.lower, d.upper)}
                )
            except ValueError as exc:
                pw.append({"a": a, "b": b, "skipped": str(exc)})
        out["pairwise"] = pw
    else:
        out["pairwise"] = _skip("needs at least 2 policies with decided episodes")
    if ranked:
        br = bootstrap_ranking(mat.values, ranked, n_boot=n_boot, alpha=alpha, seed=seed)
        out["bootstrap_ranking"] = br.to_dict()
    else:
        out["bootstrap_ranking"] = _skip("no policy has a decided episode")

    # split-half repeatability
    # with two policies the rank correlation of two halves can only be +1 or -1: no information
    if len(ranked) >= 3 and n_units >= 2:
        sh = {}
        for metric in ("spearman", "kendall"):
            s = split_half(mat.values, metric=metric, n_splits=n_splits, seed=seed)
            sh[metric] = s.to_dict() | {
                "distribution": _quantiles(s.values),
                "corrected_distribution": _quantiles(np.asarray(s.corrected, dtype=float)),
            }
        out["split_half"] = sh
    else:
        out["split_half"] = _skip(
            f"needs at least 3 policies (with 2, the halves' rank correlation is always +1 or "
            f"-1) and 2 (task, seed) units; have {len(ranked)} and {n_units}"
        )

    # minimum detectable difference
    if len(ranked) >= 2:
        try:
            out["detectable"] = detectable_summary(mat.values, ranked, alpha=alpha, power=power, seed=seed).to_dict()
        except ValueError as exc:
            out["detectable"] = _skip(str(exc))
    else:
        out["detectable"] = _skip("needs at least 2 policies with decided episodes")

    # horizon sensitivity from per-step ground truth
    hs, hscores, hcounts, hnotes = horizon_scores(bundle, ranked, horizon_step)
    notes += hnotes
    have = [j for j, p in enumerate(ranked) if hcounts.get(p)]
    if not hs:
        out["horizon"] = _skip("no robot log with per-step gt_success in the bundle")
    elif len(have) < 2:
        out["horizon"] = _skip("needs per-step ground truth for at least 2 policies")
    elif len(hs) < 2:
        out["horizon"] = _skip(f"rollouts are too short for horizons in steps of {horizon_step}")
    else:
        pols = [ranked[j] for j in have]
        res = horizon_agreement(hscores[:, have], hs, metric=horizon_metric, threshold=horizon_threshold, seed=seed)
        out["horizon"] = res.to_dict() | {
            "policies": pols,
            "episodes": {p: hcounts[p] for p in pols},
            "scores": {p: hscores[:, j].tolist() for p, j in zip(pols, have, strict=True)},
        }

    # anytime-valid paired A/B test of the top two (secondary, on judge scores). Its decision is
    # read off its own empirical-Bernstein confidence sequence (rule "eb"), so the interval it
    # prints is the one that decided; the betting rule decides earlier but has no interval of its own.
    if len(ranked) >= 2:
        a, b = ranked[0], ranked[1]
        diffs, keys = paired_diffs(rows, a, b, value="score")
        if diffs.size:
            res = sequential_ab(diffs, alpha=alpha, rule="eb")
            out["ab"] = {
                "a": a,
                "b": b,
                "value": "score",
                "measure": "score",
                "rule": "eb",
                "order": "(repeat, seed, task)",
                "n_pairs": int(diffs.size),
                "mean_diff_all": float(diffs.mean()),
            } | res.to_dict()
        else:
            out["ab"] = _skip(f"{a!r} and {b!r} share no decided (task, seed, repeat)")
    else:
        out["ab"] = _skip("needs at least 2 policies with decided episodes")

    if ref_rows is not None:
        table, rnotes = reference_agreement(ref_rows, cells, source=str(reference), seed=seed)
        out["agreement"] = table.to_dict() | {"reference": str(reference), "evaluator": "campaign success rate"}
        notes += rnotes
        from kosmos_env.report.reference_baselines import reference_uncertainty

        matched = [r for r in ref_rows if r["policy"] in cells and r["task"] in cells[r["policy"]]]
        out["agreement_uncertainty"] = reference_uncertainty(bundle, matched, alpha=alpha, n_boot=n_boot, seed=seed)
    out["notes"] = notes
    return json_ready(out)


def json_ready(x: Any) -> Any:
    """``x`` with numpy scalars/arrays turned into Python values and NaN/inf into None, so the
    analysis is strict JSON (no NaN tokens)."""
    if isinstance(x, dict):
        return {str(k): json_ready(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_ready(v) for v in x]
    if isinstance(x, np.ndarray):
        return json_ready(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
