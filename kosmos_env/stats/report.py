"""Agreement tables from a (task, policy, reference, evaluator) CSV, and plain-text printing.

The CSV may carry '#' comment lines (provenance) before the header. Column names are
``task, policy, reference, evaluator``; ``real``/``sim`` are accepted as aliases (SIMPLER's
naming: reference = real robot, evaluator = simulator), or name them explicitly.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from kosmos_env.stats.agreement import METRICS, Agreement, all_agreements

REFERENCE_ALIASES = ("reference", "real")
EVALUATOR_ALIASES = ("evaluator", "sim")


@dataclass
class AgreementRow:
    """One row of an agreement table: a task (or "mean over tasks" / "pooled") and its metrics."""

    label: str
    n: int
    metrics: dict[str, Agreement]
    note: str | None = None

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "n": self.n,
            "note": self.note,
            "metrics": {k: a.to_dict() for k, a in self.metrics.items()},
        }


@dataclass
class AgreementTable:
    rows: list[AgreementRow]
    convention: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"rows": [r.to_dict() for r in self.rows], "convention": dict(self.convention)}

    def row(self, label: str) -> AgreementRow:
        for r in self.rows:
            if r.label == label:
                return r
        raise KeyError(label)


def _pick(header: list[str], given: str | None, aliases: Sequence[str], what: str) -> str:
    if given is not None:
        if given not in header:
            raise ValueError(f"{what} column {given!r} not in CSV header {header}")
        return given
    for a in aliases:
        if a in header:
            return a
    raise ValueError(f"CSV has no {what} column (looked for {list(aliases)}; header is {header}); name it explicitly")


def read_agreement_csv(
    path: str | Path, *, reference_col: str | None = None, evaluator_col: str | None = None
) -> list[dict]:
    """Rows {task, policy, reference, evaluator} from a CSV (comment lines starting '#' skipped)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"agreement CSV not found: {p}")
    lines = [ln for ln in p.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ValueError(f"{p} has no header or data rows")
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    header = [h.strip() for h in (reader.fieldnames or [])]
    reader.fieldnames = header
    for req in ("task", "policy"):
        if req not in header:
            raise ValueError(f"CSV {p} lacks a {req!r} column (header is {header})")
    rc = _pick(header, reference_col, REFERENCE_ALIASES, "reference")
    ec = _pick(header, evaluator_col, EVALUATOR_ALIASES, "evaluator")
    out = []
    for i, row in enumerate(reader, start=2):
        try:
            out.append(
                {
                    "task": row["task"].strip(),
                    "policy": row["policy"].strip(),
                    "reference": float(row[rc]),
                    "evaluator": float(row[ec]),
                }
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{p}: data row {i - 1} has a non-numeric {rc!r}/{ec!r} value: {row}") from exc
    seen = set()
    for r in out:
        if (r["task"], r["policy"]) in seen:
            raise ValueError(f"{p}: (task, policy) = ({r['task']}, {r['policy']}) appears twice")
        seen.add((r["task"], r["policy"]))
    return out


def agreement_table(
    rows: Sequence[dict],
    *,
    mmrv_weight: str = "reference",
    mmrv_ties: str = "greater",
    pooled: bool = True,
    seed: int = 0,
) -> AgreementTable:
    """Per-task agreement (all four metrics with random floors), then the mean over tasks
    (mean of the defined per-task values and floors) and, if ``pooled``, all rows as one vector."""
    tasks: dict[str, list[dict]] = {}
    for r in rows:
        tasks.setdefault(r["task"], []).append(r)
    if not tasks:
        raise ValueError("no rows to compare")
    out = []
    for task, rs in tasks.items():
        e = [r["evaluator"] for r in rs]
        ref = [r["reference"] for r in rs]
        out.append(
            AgreementRow(task, len(rs), all_agreements(e, ref, mmrv_weight=mmrv_weight, mmrv_ties=mmrv_ties, seed=seed))
        )
    if len(tasks) > 1:
        mean_metrics = {}
        notes = []
        for m in METRICS:
            vals = [r.metrics[m].value for r in out if r.metrics[m].value is not None]
            floors = [r.metrics[m].random_floor for r in out if r.metrics[m].random_floor is not None]
            reason = None
            if len(vals) < len(out):
                notes.append(f"{m}: {len(out) - len(vals)} task(s) undefined, left out")
            if not vals:
                reason = "undefined for every task"
            mean_metrics[m] = Agreement(
                m,
                float(np.mean(vals)) if vals else None,
                float(np.mean(floors)) if floors else None,
                len(vals),
                reason,
                "mean of per-task floors",
                out[0].metrics[m].convention,
            )
        summary = AgreementRow("mean over tasks", sum(r.n for r in out), mean_metrics, "; ".join(notes) or None)
        rows_out = out + [summary]
        if pooled:
            e = [r["evaluator"] for r in rows]
            ref = [r["reference"] for r in rows]
            rows_out.append(
                AgreementRow(
                    "pooled", len(rows), all_agreements(e, ref, mmrv_weight=mmrv_weight, mmrv_ties=mmrv_ties, seed=seed)
                )
            )
        out = rows_out
    return AgreementTable(out, {"mmrv_weight": mmrv_weight, "mmrv_ties": mmrv_ties})


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.{digits}f}" if x < 0 else f"{x:.{digits}f}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned first column, right-aligned others, two spaces between columns."""
    cols = list(zip(*([list(headers)] + [list(r) for r in rows]), strict=True))
    widths = [max(len(str(c)) for c in col) for col in cols]
    lines = []
    for i, r in enumerate([list(headers)] + [list(x) for x in rows]):
        cells = [str(c).ljust(widths[0]) if j == 0 else str(c).rjust(widths[j]) for j, c in enumerate(r)]
        lines.append("  ".join(cells).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report_text(table: AgreementTable, digits: int = 3) -> str:
    """The agreement table as text: each cell is "value (random floor)"."""
    headers = ["task", "n"] + [f"{m} (floor)" for m in METRICS]
    body = []
    for r in table.rows:
        cells = [r.label, str(r.n)]
        for m in METRICS:
            a = r.metrics[m]
            cells.append(f"{_fmt(a.value, digits)} ({_fmt(a.random_floor, digits)})")
        body.append(cells)
    text = format_table(headers, body)
    foot = [
        "floor = expected value under a random ranking (mean over permutations of the evaluator values).",
        f"mmrv: lower is better; convention weight={table.convention.get('mmrv_weight')}, "
        f"ties={table.convention.get('mmrv_ties')} (default = SIMPLER's released code).",
    ]
    for r in table.rows:
        for m in METRICS:
            if r.metrics[m].value is None and r.metrics[m].reason and r.label not in ("mean over tasks",):
                foot.append(f"{r.label}: {m} n/a: {r.metrics[m].reason}")
        if r.note:
            foot.append(f"{r.label}: {r.note}")
    return text + "\n\n" + "\n".join(foot)
