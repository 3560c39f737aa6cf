"""The console's comparison tables, computed from one campaign's ledger (read-only).

- :func:`policy_task_table`: success per (policy, task) and per policy over all tasks, with
  Wilson 95% intervals.
- :func:`pair_view`: two policies of one campaign on the same (task, seed, repeat) cells, the
  headline verdict from :func:`kosmos_env.stats.verdict.paired_verdict` (one rule gives the
  interval and the decision).
- :func:`disagreements`: the episodes two judges (the campaign's own or any stored one) judged
  differently, with their 2x2 agreement counts.
- :func:`table_response`: any of these tables as CSV or parquet (pyarrow, imported lazily).

Every table is a list of columns and a list of row dicts, so the HTML page and its downloads
are the same numbers.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any, Sequence

from kosmos_env.console import campaigns as cz


def _wilson(k: int, n: int) -> tuple[float, float]:
    from kosmos_env.stats.intervals import wilson

    ci = wilson(k, n)
    return ci.lower, ci.upper


def policy_task_table(ref: cz.CampaignRef, judge: str | None = None) -> dict[str, Any]:
    """Success rate per policy and task (and over all tasks) with Wilson 95% intervals."""
    s = cz.read_summary(ref)
    data = cz.cells(ref, judge)
    tasks = list(s.tasks)
    rows, matrix = [], []
    for p in s.policies:
        cells = data.get(p, {})
        line = {"policy": p, "cells": []}
        for t in [*tasks, None]:
            vals = [c for (task, _, _), c in cells.items() if t is None or task == t]
            k = sum(1 for c in vals if c["success"] == 1)
            n = sum(1 for c in vals if c["success"] is not None)
            lo, hi = _wilson(k, n) if n else (None, None)
            row = {
                "policy": p,
                "task": t if t is not None else "all tasks",
                "successes": k,
                "decided": n,
                "undecided": len(vals) - n,
                "rate": k / n if n else None,
                "wilson_lower": lo,
                "wilson_upper": hi,
            }
            rows.append(row)
            line["cells"].append(row)
        matrix.append(line)
    columns = ["policy", "task", "successes", "decided", "undecided", "rate", "wilson_lower", "wilson_upper"]
    return {"columns": columns, "rows": rows, "tasks": [*tasks, "all tasks"], "matrix": matrix, "summary": s}


def _paired_arrays(ca: dict[tuple, dict], cb: dict[tuple, dict], measure: str) -> tuple[list, list, list]:
    keys = sorted(set(ca) & set(cb))
    field = "success" if measure == "success" else "score"
    nan = float("nan")
    xa = [
        nan if ca[k][field] is None or (measure == "score" and ca[k]["success"] is None) else float(ca[k][field])
        for k in keys
    ]
    xb = [
        nan if cb[k][field] is None or (measure == "score" and cb[k]["success"] is None) else float(cb[k][field])
        for k in keys
    ]
    return keys, xa, xb


def verdict_of(ca: dict[tuple, dict], cb: dict[tuple, dict], names: tuple[str, str], measure: str = "success"):
    """The paired verdict of A vs B on the cells both decided (pairs with an undecided side drop)."""
    from kosmos_env.stats.verdict import paired_verdict

    _, xa, xb = _paired_arrays(ca, cb, measure)
    return paired_verdict(xa, xb, names=names, measure=measure)


def pair_view(ref: cz.CampaignRef, a: str, b: str, measure: str = "success") -> dict[str, Any]:
    """Policies ``a`` and ``b`` of one campaign side by side on every shared (task, seed, repeat)."""
    s = cz.read_summary(ref)
    for p in (a, b):
        if p not in s.policies:
            raise ValueError(f"campaign {ref.name} has no policy {p!r}; its policies: {', '.join(s.policies)}")
    data = cz.cells(ref)
    ca, cb = data.get(a, {}), data.get(b, {})
    keys = sorted(set(ca) | set(cb))
    rows = []
    for k in keys:
        x, y = ca.get(k), cb.get(k)
        rows.append(
            {
                "task": k[0],
                "seed": k[1],
                "repeat": k[2],
                "outcome_a": x["outcome"] if x else "not run",
                "score_a": x["score"] if x else None,
                "ord_a": x["ord"] if x else None,
                "outcome_b": y["outcome"] if y else "not run",
                "score_b": y["score"] if y else None,
                "ord_b": y["ord"] if y else None,
                "differ": bool(x and y and x["outcome"] != y["outcome"]),
            }
        )
    verdict = verdict_of(ca, cb, (a, b), measure)
    columns = ["task", "seed", "repeat", "outcome_a", "score_a", "ord_a", "outcome_b", "score_b", "ord_b", "differ"]
    return {"columns": columns, "rows": rows, "verdict": verdict, "summary": s, "a": a, "b": b}


def judge_choices(ref: cz.CampaignRef) -> list[dict[str, str]]:
    """The campaign's own judge and every stored judge, as (id, label) for the pickers."""
    s = cz.read_summary(ref)
    out = [{"id": "campaign", "label": f"campaign's own ({cz.judge_name(s.judge)})"}]
    out += [
        {"id": j["judge_id"], "label": f"{j['label']} [{j['judge_id']}] ({j['episodes']} judged)"}
        for j in cz.stored_judges(ref)
    ]
    return out


def disagreements(ref: cz.CampaignRef, j1: str, j2: str) -> dict[str, Any]:
    """Episodes judged by both ``j1`` and ``j2`` (ids from :func:`judge_choices`) whose verdicts
    differ, and the agreement counts over every episode both judged."""
    known = {c["id"] for c in judge_choices(ref)}
    for j in (j1, j2):
        if j not in known:
            raise ValueError(
                f"campaign {ref.name} has no stored verdicts of judge {j!r}; judges: {', '.join(sorted(known))}"
            )
    c1, c2 = cz.cells(ref, j1), cz.cells(ref, j2)
    rows, counts, n_both = [], {}, 0
    for p in sorted(set(c1) & set(c2)):
        for k in sorted(set(c1[p]) & set(c2[p])):
            x, y = c1[p][k], c2[p][k]
            if x["outcome"] not in ("success", "failure", "abstained") or y["outcome"] not in (
                "success",
                "failure",
                "abstained",
            ):
                continue  # discarded / errored episodes carry no verdict to compare
            n_both += 1
            counts[(x["outcome"], y["outcome"])] = counts.get((x["outcome"], y["outcome"]), 0) + 1
            if x["outcome"] != y["outcome"]:
                rows.append(
                    {
                        "ord": x["ord"],
                        "policy": p,
                        "task": k[0],
                        "seed": k[1],
                        "repeat": k[2],
                        "verdict_1": x["outcome"],
                        "score_1": x["score"],
                        "verdict_2": y["outcome"],
                        "score_2": y["score"],
                    }
                )
    rows.sort(key=lambda r: r["ord"])
    agree = n_both - len(rows)
    lo, hi = _wilson(agree, n_both) if n_both else (None, None)
    columns = ["ord", "policy", "task", "seed", "repeat", "verdict_1", "score_1", "verdict_2", "score_2"]
    outcomes = ("success", "failure", "abstained")
    matrix = [[counts.get((o1, o2), 0) for o2 in outcomes] for o1 in outcomes]
    return {
        "columns": columns,
        "rows": rows,
        "n_both": n_both,
        "agree": agree,
        "agreement": agree / n_both if n_both else None,
        "agreement_ci": (lo, hi),
        "matrix": matrix,
        "outcomes": outcomes,
    }


def _cell(v: Any) -> Any:
    if isinstance(v, float) and v != v:
        return None
    return v


#: a text cell starting with one of these is read as a formula (or DDE command) by spreadsheet apps
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def csv_safe(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet will not run: text that starts with ``= + - @``, a tab or
    a carriage return gets a leading single quote (OWASP's CSV-injection advice), so a policy label
    like ``=HYPERLINK(...)`` or ``@SUM(...)`` shows as the text it is. Numbers are left alone, and so is
    text that is a plain number (``-0.23``): a spreadsheet reads it as that number, never a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def table_response(name: str, columns: Sequence[str], rows: Sequence[dict], fmt: str):
    """``rows`` as a download: CSV (always) or parquet (501 with one line when pyarrow is missing)."""
    from fastapi.responses import PlainTextResponse, Response

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80] or "table"
    if fmt == "csv":
        buf = io.StringIO()
        # CRLF rows (RFC 4180): the writer then quotes any cell holding a CR, which with "\n" rows it
        # would write bare, and a reader would split the row there
        w = csv.writer(buf, lineterminator="\r\n")
        # neutralised in CSV only: parquet keeps every value as stored (typed columns, no formulas)
        w.writerow([csv_safe(c) for c in columns])
        for r in rows:
            w.writerow(["" if _cell(r.get(c)) is None else csv_safe(_cell(r.get(c))) for c in columns])
        return Response(
            buf.getvalue(),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{safe}.csv"'},
        )
    if fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            return PlainTextResponse(
                "parquet download needs pyarrow: pip install pyarrow (CSV works without it)\n", status_code=501
            )
        table = pa.table({c: [_cell(r.get(c)) for r in rows] for c in columns})
        buf = io.BytesIO()
        pq.write_table(table, buf)
        return Response(
            buf.getvalue(),
            media_type="application/vnd.apache.parquet",
            headers={"Content-Disposition": f'attachment; filename="{safe}.parquet"'},
        )
    return PlainTextResponse(f"unknown format {fmt!r}; choose csv or parquet\n", status_code=400)
