"""The paired teacher/student judge audit on held-out rollouts.

Both judges see the same held-out clips in the same process (alternating per chunk, so load
and machine state affect both alike). Every per-rollout judgment is saved to
``judgments.parquet``; every number in ``report.json`` / ``report.md`` is computed from that
file alone (:func:`compute_report`), so anyone can recompute it.

The report keeps two kinds of result apart, because distillation easily improves the first
while leaving the second unchanged or worse:

- **engineering** (format and cost): schema-valid answer rate, bare-JSON rate, generated
  tokens, seconds per rollout. Gains here make the judge cheaper and easier to parse; they
  say nothing about whether its verdicts are right.
- **judging quality**: agreement with the teacher (raw agreement with a Wilson interval,
  Cohen's kappa with a bootstrap interval, verdicts changed) and with ground truth where the
  campaign has it (the tabletop simulator). A directional claim ("the student agrees with
  ground truth more than the teacher") is made only when the paired bootstrap interval of the
  difference excludes 0 *and* the exact McNemar test on the discordant pairs rejects at
  ``alpha``; otherwise the report says "no supported difference". Engineering differences
  follow the same rule (bootstrap interval and an exact sign test over rollouts).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from kosmos_env.utils.fileio import atomic_write

AUDIT_SCHEMA = "kosmos-env/judge-audit"
ROLES = ("teacher", "student")
JUDGMENT_COLUMNS = {
    "rollout_hash": "string",
    "episode_id": "string",
    "policy": "string",
    "task": "string",
    "role": "string",
    "spec_hash": "string",
    "model_id": "string",
    "success": "bool",
    "verdict": "string",
    "score": "float64",
    "n_valid": "int64",
    "k": "int64",
    "valid_votes": "int64",
    "bare_votes": "int64",
    "votes": "string",
    "raw_answers": "string",
    "generated_tokens": "string",
    "seconds": "float64",
    "generate_seconds": "float64",
    "ground_truth": "bool",
}


def judgment_record(ref, role: str, judgment, spec_hash: str) -> dict[str, Any]:
    """One row of ``judgments.parquet``."""
    from kosmos_env.distill.labels import verdict_of
    from kosmos_env.distill.metrics import is_bare_json

    extras = dict(judgment.extras)
    votes = [dict(v) for v in judgment.votes]
    raw = list(extras.get("raw_answers", []))
    if len(raw) != len(votes):
        raise ValueError(f"the {role} judge did not record its raw answers (a VLM judge is needed for the audit)")
    return {
        "rollout_hash": ref.rollout_hash,
        "episode_id": ref.episode_id,
        "policy": ref.policy,
        "task": ref.task,
        "role": role,
        "spec_hash": spec_hash,
        "model_id": judgment.model_id,
        "success": judgment.success,
        "verdict": verdict_of(judgment.success),
        "score": float(judgment.score),
        "n_valid": int(extras.get("n_valid", 0)),
        "k": len(votes),
        "valid_votes": sum(bool(v.get("valid")) for v in votes),
        "bare_votes": sum(is_bare_json(t) for t in raw),
        "votes": json.dumps(votes, default=str),
        "raw_answers": json.dumps(raw),
        "generated_tokens": json.dumps([int(t) for t in extras.get("generated_tokens", [])]),
        "seconds": float(judgment.seconds),
        "generate_seconds": float(extras.get("generate_seconds", judgment.seconds)),
        "ground_truth": ref.ground_truth,
    }


def run_audit(
    teacher: Any,
    teacher_hash: str,
    student: Any,
    student_hash: str,
    campaign_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    heldout: Iterable[str] | None,
    split_source: str = "",
    alpha: float = 0.05,
    n_boot: int = 2000,
    seed: int = 0,
    progress: bool = True,
    distill_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Judge the held-out rollouts of a campaign with both judges; write judgments.parquet, report.json, report.md.

    ``heldout`` is the set of rollout hashes the student never trained on (its split file);
    ``None`` audits every rollout, and the report says so. ``distill_config`` (the student's
    ``distill_config.json``) lets the report say whether the student was distilled from this
    very teacher (same spec hash) and from which labels.
    """
    from tqdm.auto import tqdm

    from kosmos_env.distill.rollouts import load_campaign, load_rollout
    from kosmos_env.judges import judge_many

    campaign = load_campaign(campaign_dir)
    held = None if heldout is None else set(heldout)
    refs, seen, excluded = [], set(), 0
    for ref in campaign.rollouts:
        if held is not None and ref.rollout_hash not in held:
            excluded += 1
            continue
        if ref.rollout_hash not in seen:  # byte-identical clips are judged once
            seen.add(ref.rollout_hash)
            refs.append(ref)
    if not refs:
        raise ValueError(
            f"none of the {len(campaign.rollouts)} rollouts of {campaign.root} is held out by {split_source or 'the split'}; "
            f"the audit runs on held-out rollouts only"
        )
    size = max(int(getattr(teacher, "batch_size", 1) or 1), int(getattr(student, "batch_size", 1) or 1))
    records: list[dict[str, Any]] = []
    with tqdm(total=len(refs), desc="judge-audit", unit="rollout", disable=not progress) as bar:
        for start in range(0, len(refs), size):
            chunk = refs[start : start + size]
            rollouts = [load_rollout(campaign, r) for r in chunk]
            for role, judge, shash in (("teacher", teacher, teacher_hash), ("student", student, student_hash)):
                for ref, j in zip(chunk, judge_many(judge, rollouts), strict=True):
                    records.append(judgment_record(ref, role, j, shash))
            bar.update(len(chunk))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_judgments(out / "judgments.parquet", records)
    report = compute_report(read_judgments(out / "judgments.parquet"), alpha=alpha, n_boot=n_boot, seed=seed)
    report["inputs"] = {
        "campaign": str(campaign.root.resolve()),
        "campaign_id": campaign.campaign_id,
        "env_spec_hash": campaign.env_spec_hash,
        "split": split_source or None,
        "heldout_only": held is not None,
        "rollouts_in_campaign": len(campaign.rollouts),
        "excluded_not_heldout": excluded,
        "teacher": {"spec_hash": teacher_hash, "spec": getattr(teacher, "spec", {})},
        "student": {"spec_hash": student_hash, "spec": getattr(student, "spec", {})},
    }
    if distill_config is not None:
        labels = distill_config.get("teacher_labels", {})
        report["inputs"]["distilled_from"] = {
            "labels_sha256": labels.get("sha256"),
            "teacher_spec_hash": labels.get("spec_hash"),
            "same_teacher": labels.get("spec_hash") == teacher_hash,
        }
    _write(out / "report.json", json.dumps(report, indent=1, default=str))
    _write(out / "report.md", render_markdown(report))
    return report


def write_judgments(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"string": pa.string(), "int64": pa.int64(), "bool": pa.bool_(), "float64": pa.float64()}
    schema = pa.schema([(k, types[t]) for k, t in JUDGMENT_COLUMNS.items()])
    tmp = path.with_name(f".tmp-{path.name}")
    pq.write_table(pa.Table.from_pylist([{c: r[c] for c in JUDGMENT_COLUMNS} for r in records], schema=schema), tmp)
    os.replace(tmp, path)


def read_judgments(path: str | os.PathLike) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


# -- the numbers ----------------------------------------------------------------------------
def _wilson(k: int, n: int, alpha: float) -> dict[str, Any]:
    from kosmos_env.stats.intervals import wilson

    iv = wilson(int(k), int(n), alpha)
    return {"k": int(k), "n": int(n), "rate": iv.estimate, "lower": iv.lower, "upper": iv.upper, "method": "wilson"}


def _paired(student: Sequence[float], teacher: Sequence[float], alpha: float, n_boot: int, seed: int) -> dict[str, Any]:
    """mean(student - teacher) over rollouts with a paired percentile bootstrap interval."""
    from kosmos_env.stats.intervals import paired_bootstrap_diff

    d = paired_bootstrap_diff(student, teacher, n_boot=n_boot, alpha=alpha, seed=seed)
    return {
        "difference": float(d.estimate),
        "lower": float(d.lower),
        "upper": float(d.upper),
        "n_pairs": int(d.n_pairs),
        "method": "paired bootstrap over rollouts",
    }


def _engineering(rows: Sequence[Mapping[str, Any]], alpha: float) -> dict[str, Any]:
    votes = sum(r["k"] for r in rows)
    tokens = [t for r in rows for t in json.loads(r["generated_tokens"])]
    return {
        "schema_valid": _wilson(sum(r["valid_votes"] for r in rows), votes, alpha),
        "bare_json": _wilson(sum(r["bare_votes"] for r in rows), votes, alpha),
        "mean_generated_tokens": float(np.mean(tokens)) if tokens else None,
        "mean_seconds_per_rollout": float(np.mean([r["seconds"] for r in rows])),
        "mean_generate_seconds_per_rollout": float(np.mean([r["generate_seconds"] for r in rows])),
        "votes": votes,
    }


def _per_rollout(rows: Sequence[Mapping[str, Any]], field: str) -> list[float]:
    out = []
    for r in rows:
        if field == "schema_valid":
            out.append(r["valid_votes"] / r["k"] if r["k"] else float("nan"))
        elif field == "bare_json":
            out.append(r["bare_votes"] / r["k"] if r["k"] else float("nan"))
        elif field == "generated_tokens":
            t = json.loads(r["generated_tokens"])
            out.append(float(np.mean(t)) if t else float("nan"))
        else:
            out.append(float(r[field]))
    return out


def compute_report(
    rows: Sequence[Mapping[str, Any]], *, alpha: float = 0.05, n_boot: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Every number of the audit, from the per-rollout judgments alone."""
    from kosmos_env.distill.metrics import bootstrap_kappa, cohen_kappa, difference_claim, mcnemar_exact

    by_role: dict[str, dict[str, Mapping[str, Any]]] = {role: {} for role in ROLES}
    for r in rows:
        by_role[r["role"]][r["rollout_hash"]] = r
    keys = sorted(set(by_role["teacher"]) & set(by_role["student"]))
    if not keys:
        raise ValueError("no rollout was judged by both the teacher and the student")
    T = [by_role["teacher"][k] for k in keys]
    S = [by_role["student"][k] for k in keys]
    n = len(keys)
    eng = {"teacher": _engineering(T, alpha), "student": _engineering(S, alpha), "paired_difference": {}}
    words_eng = []
    labels = {
        "schema_valid": ("schema-valid answer rate", "higher", "lower"),
        "bare_json": ("bare-JSON answer rate", "higher", "lower"),
        "generated_tokens": ("generated tokens per answer", "more", "fewer"),
        "generate_seconds": ("decode seconds per rollout", "slower", "faster"),
    }
    for field, (what, up, down) in labels.items():
        s_vals, t_vals = _per_rollout(S, field), _per_rollout(T, field)
        d = _paired(s_vals, t_vals, alpha, n_boot, seed)
        diffs = [a - b for a, b in zip(s_vals, t_vals, strict=True) if not (math.isnan(a) or math.isnan(b))]
        p = mcnemar_exact(sum(x > 0 for x in diffs), sum(x < 0 for x in diffs))  # exact sign test
        claim, supported = difference_claim(
            d["lower"], d["upper"], p, alpha, f"student {up} than teacher", f"student {down} than teacher"
        )
        eng["paired_difference"][field] = {**d, "sign_test_p": p, "claim": claim, "supported": supported}
        words_eng.append(f"{what}: {claim}")
    t_sec, s_sec = (
        eng["teacher"]["mean_generate_seconds_per_rollout"],
        eng["student"]["mean_generate_seconds_per_rollout"],
    )
    eng["speedup_decode"] = (t_sec / s_sec) if s_sec > 0 else None

    tv, sv = [r["verdict"] for r in T], [r["verdict"] for r in S]
    matches = sum(a == b for a, b in zip(tv, sv, strict=True))
    kappa = cohen_kappa(sv, tv)
    changes: dict[str, int] = {}
    for a, b in zip(tv, sv, strict=True):
        if a != b:
            changes[f"{a}->{b}"] = changes.get(f"{a}->{b}", 0) + 1
    teacher_agreement = {
        "raw_agreement": _wilson(matches, n, alpha),
        "kappa": kappa,
        "kappa_interval": {
            **bootstrap_kappa(sv, tv, n_boot=n_boot, alpha=alpha, seed=seed),
            "method": "percentile bootstrap over rollouts",
        },
        "verdicts_changed": n - matches,
        "changes": changes,
    }
    gt_keys = [i for i, r in enumerate(T) if r["ground_truth"] is not None]
    ground_truth: dict[str, Any] = {"n": len(gt_keys)}
    words_q = [
        f"the student changed {n - matches} of {n} verdicts"
        f" (raw agreement {matches}/{n}, kappa {'undefined' if kappa is None else f'{kappa:.3f}'})"
    ]
    if gt_keys:
        gt = [T[i]["ground_truth"] for i in gt_keys]
        want = ["success" if g else "failure" for g in gt]
        t_ok = [float(tv[i] == w) for i, w in zip(gt_keys, want, strict=True)]
        s_ok = [float(sv[i] == w) for i, w in zip(gt_keys, want, strict=True)]
        only_s = sum(1 for a, b in zip(s_ok, t_ok, strict=True) if a and not b)
        only_t = sum(1 for a, b in zip(s_ok, t_ok, strict=True) if b and not a)
        d = _paired(s_ok, t_ok, alpha, n_boot, seed)
        p = mcnemar_exact(only_s, only_t)
        claim, supported = difference_claim(
            d["lower"],
            d["upper"],
            p,
            alpha,
            "student agrees with ground truth more than teacher",
            "student agrees with ground truth less than teacher",
        )
        ground_truth.update(
            {
                "teacher": {
                    **_wilson(int(sum(t_ok)), len(gt_keys), alpha),
                    "abstained": sum(tv[i] == "abstained" for i in gt_keys),
                },
                "student": {
                    **_wilson(int(sum(s_ok)), len(gt_keys), alpha),
                    "abstained": sum(sv[i] == "abstained" for i in gt_keys),
                },
                "kappa_teacher": cohen_kappa([tv[i] for i in gt_keys], want),
                "kappa_student": cohen_kappa([sv[i] for i in gt_keys], want),
                "paired_difference": {
                    **d,
                    "only_student_right": only_s,
                    "only_teacher_right": only_t,
                    "mcnemar_exact_p": p,
                    "claim": claim,
                    "supported": supported,
                },
            }
        )
        words_q.append(f"agreement with ground truth: {claim}")
    else:
        words_q.append("agreement with ground truth: not measured (no rollout has ground truth)")
    return {
        "schema": AUDIT_SCHEMA,
        "schema_version": 1,
        "rollouts": n,
        "alpha": alpha,
        "n_boot": n_boot,
        "seed": seed,
        "engineering": eng,
        "quality": {"teacher_agreement": teacher_agreement, "ground_truth": ground_truth},
        "statements": {"engineering": words_eng, "quality": words_q},
        "definitions": {
            "verdict": "success, failure or abstained (an abstention is a verdict of its own)",
            "schema_valid": "share of all k answers per rollout that parse strictly as the judge's JSON schema",
            "bare_json": "share of answers that are exactly one JSON object, whitespace aside (no think/answer tags, fences or prose)",
            "generated_tokens": "tokens generated per answer, up to and including the end-of-turn token",
            "seconds": "judge wall seconds per rollout (inputs + generate); generate_seconds: the generate call only. "
            "Both are a batch's time divided by its size, so rollouts of one batch share a value and the "
            "interval of a speed difference is narrower than one over independent timings; both judges ran "
            "alternately in the same process on the same clips",
            "ground_truth": "the campaign's simulator verdict; an abstention counts as disagreement",
            "claims": "a directional claim needs the paired bootstrap interval of the difference to exclude 0 and "
            "an exact paired test to reject at alpha (engineering: sign test over rollouts; ground truth: "
            "McNemar on the discordant rollouts), so a handful of rollouts never supports a claim",
        },
    }


def _fmt_rate(d: Mapping[str, Any]) -> str:
    if d.get("rate") is None:
        return f"{d['k']}/{d['n']}"
    return f"{d['k']}/{d['n']} = {d['rate']:.3f} [{d['lower']:.3f}, {d['upper']:.3f}]"


def _fmt(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def render_markdown(report: Mapping[str, Any]) -> str:
    """The human report: engineering and judging quality in separate sections, claims in words."""
    eng, q = report["engineering"], report["quality"]
    t, s = eng["teacher"], eng["student"]
    pd = eng["paired_difference"]
    ci = int(round(100 * (1 - report["alpha"])))
    inputs = report.get("inputs", {})
    lines = [
        "# Judge distillation audit",
        "",
        f"{report['rollouts']} rollouts, judged by both the teacher and the student"
        + (
            " (held-out rollouts only: the student never trained on them)."
            if inputs.get("heldout_only")
            else " (ALL rollouts of the campaign: this is not a held-out audit)."
        ),
        f"Intervals are {ci}% (Wilson for rates, percentile bootstrap over rollouts for kappa and paired differences). "
        "A difference is called only when its interval excludes 0 and an exact paired test (sign test; McNemar for "
        "ground truth) rejects at the same level.",
    ]
    origin = inputs.get("distilled_from")
    if origin is not None:
        lines.append(
            f"The student was distilled from teacher labels {str(origin['labels_sha256'])[:12]} of teacher spec "
            f"{str(origin['teacher_spec_hash'])[:12]}; "
            + (
                "that is the teacher audited here."
                if origin["same_teacher"]
                else "WARNING: that is NOT the teacher audited here (different spec or weights)."
            )
        )
    lines += [
        "",
        "## Engineering (format and cost): not evidence of better judging",
        "",
        "| metric | teacher | student | student - teacher [CI] | supported |",
        "|---|---|---|---|---|",
        f"| schema-valid answers | {_fmt_rate(t['schema_valid'])} | {_fmt_rate(s['schema_valid'])} | "
        f"{_fmt(pd['schema_valid']['difference'])} [{_fmt(pd['schema_valid']['lower'])}, {_fmt(pd['schema_valid']['upper'])}] | {pd['schema_valid']['claim']} |",
        f"| bare-JSON answers | {_fmt_rate(t['bare_json'])} | {_fmt_rate(s['bare_json'])} | "
        f"{_fmt(pd['bare_json']['difference'])} [{_fmt(pd['bare_json']['lower'])}, {_fmt(pd['bare_json']['upper'])}] | {pd['bare_json']['claim']} |",
        f"| mean generated tokens | {_fmt(t['mean_generated_tokens'], 1)} | {_fmt(s['mean_generated_tokens'], 1)} | "
        f"{_fmt(pd['generated_tokens']['difference'], 1)} [{_fmt(pd['generated_tokens']['lower'], 1)}, {_fmt(pd['generated_tokens']['upper'], 1)}] | {pd['generated_tokens']['claim']} |",
        f"| mean decode seconds / rollout | {_fmt(t['mean_generate_seconds_per_rollout'], 4)} | {_fmt(s['mean_generate_seconds_per_rollout'], 4)} | "
        f"{_fmt(pd['generate_seconds']['difference'], 4)} [{_fmt(pd['generate_seconds']['lower'], 4)}, {_fmt(pd['generate_seconds']['upper'], 4)}] | {pd['generate_seconds']['claim']} |",
        "",
        f"Decode speed-up (teacher / student seconds): {_fmt(eng.get('speedup_decode'), 2)}x. "
        "These numbers say how cheap and how parseable the student is. A student can answer in "
        "perfect bare JSON, faster, and still disagree with the teacher on every verdict.",
        "",
        "## Judging quality: agreement",
        "",
    ]
    ta = q["teacher_agreement"]
    kiv = ta["kappa_interval"]
    lines += [
        f"- Raw agreement with the teacher's verdicts: {_fmt_rate(ta['raw_agreement'])}.",
        f"- Cohen's kappa with the teacher: {_fmt(ta['kappa'])} [{_fmt(kiv['lower'])}, {_fmt(kiv['upper'])}]"
        f" ({kiv['defined_resamples']}/{kiv['n_boot']} resamples defined).",
        f"- Verdicts the student changed: {ta['verdicts_changed']} of {report['rollouts']}"
        + (f" ({', '.join(f'{k}: {v}' for k, v in sorted(ta['changes'].items()))})." if ta["changes"] else "."),
    ]
    gt = q["ground_truth"]
    if gt.get("n"):
        gd = gt["paired_difference"]
        lines += [
            f"- Agreement with ground truth ({gt['n']} rollouts with a simulator verdict; abstention = disagreement): "
            f"teacher {_fmt_rate(gt['teacher'])}, student {_fmt_rate(gt['student'])}.",
            f"- Paired difference student - teacher: {_fmt(gd['difference'])} [{_fmt(gd['lower'])}, {_fmt(gd['upper'])}]; "
            f"only the student right on {gd['only_student_right']}, only the teacher on {gd['only_teacher_right']} "
            f"(exact McNemar p = {_fmt(gd['mcnemar_exact_p'])}): **{gd['claim']}**.",
        ]
    else:
        lines.append("- Agreement with ground truth: not measured (no rollout in this campaign has ground truth).")
    supported_eng = [w for w, d in zip(report["statements"]["engineering"], pd.values(), strict=True) if d["supported"]]
    quality_supported = bool(gt.get("n")) and gt["paired_difference"]["supported"]
    lines += [
        "",
        "## What this audit supports",
        "",
        "- Engineering differences supported by their intervals: "
        + ("; ".join(supported_eng) if supported_eng else "none")
        + ".",
        "- Judging-quality claims: " + ("; ".join(report["statements"]["quality"])) + ".",
    ]
    if not quality_supported:
        lines.append(
            "- No claim that the student is a better (or worse) judge than the teacher is supported by these data."
        )
    lines.append("")
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    atomic_write(path, text)
