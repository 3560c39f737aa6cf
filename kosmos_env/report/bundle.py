"""Load and validate a campaign results bundle (DIR/results.json plus its artifact store).

Reports and analyses recompute everything from the ``per_episode`` rows, so this module
checks those rows carefully: required fields, known outcomes, success/score consistent with
the outcome, no duplicate episodes, and artifact paths that stay inside the campaign
directory (a relative path without ``..``; symlinks are resolved and must not leave DIR
either). Every problem raises a ValueError (FileNotFoundError for a missing file) that names
the file, the row and the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

RESULTS_SCHEMA = "kosmos-env/results"
SUPPORTED_SCHEMA_VERSIONS = (1,)
OUTCOMES = ("success", "failure", "discarded", "abstained", "error")
STAGES = ("policy", "world", "gate", "judge", "io")
_REQUIRED = ("policy", "task", "seed", "repeat", "outcome")


@dataclass
class Bundle:
    """A validated results bundle.

    ``rows`` are the per-episode dicts (as stored, plus defaults for optional fields);
    ``policies`` and ``tasks`` list every label seen, in campaign order where the campaign
    block names them, then any extra ones from the rows in sorted order.
    """

    root: Path
    results_path: Path
    data: dict
    rows: list[dict]
    policies: list[str]
    tasks: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def campaign(self) -> dict:
        return self.data.get("campaign") or {}

    def artifact(self, row: dict, kind: str) -> Path | None:
        """Absolute path of a row's ``kind`` artifact ("video", "actions", "log"), or None when
        the row has none. Paths were checked at load time; this only joins them."""
        rel = (row.get("artifacts") or {}).get(kind)
        return None if rel is None else self.root / rel


def _where(path: Path, i: int, row: Any) -> str:
    ep = row.get("episode_id") if isinstance(row, dict) else None
    return f"{path}: per_episode[{i}]" + (f" (episode_id {ep!r})" if ep else "")


def safe_relpath(root: Path, rel: Any, what: str) -> str:
    """Check that ``rel`` is a relative path that stays inside ``root``; return it unchanged.

    Rejects non-strings, empty strings, absolute paths (POSIX or Windows-style), any ``..``
    component and symlinks that resolve outside ``root``.
    """
    if not isinstance(rel, str) or not rel.strip():
        raise ValueError(f"{what}: artifact path must be a non-empty string, got {rel!r}")
    if "\x00" in rel:
        raise ValueError(f"{what}: artifact path {rel!r} contains a NUL byte")
    norm = rel.replace("\\", "/")
    p = PurePosixPath(norm)
    if p.is_absolute() or (len(norm) > 1 and norm[1] == ":"):
        raise ValueError(f"{what}: artifact path {rel!r} is absolute; it must be relative to the campaign directory")
    if ".." in p.parts:
        raise ValueError(f"{what}: artifact path {rel!r} escapes the campaign directory ('..' is not allowed)")
    root_r = root.resolve()
    full = (root / norm).resolve()
    if full != root_r and root_r not in full.parents:
        raise ValueError(f"{what}: artifact path {rel!r} resolves to {full}, outside the campaign directory {root_r}")
    return rel


def _check_row(root: Path, path: Path, i: int, row: Any) -> dict:
    where = _where(path, i, row)
    if not isinstance(row, dict):
        raise ValueError(f"{where}: an episode row must be a JSON object, got {type(row).__name__}")
    missing = [k for k in _REQUIRED if k not in row]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing}")
    if not isinstance(row["policy"], str) or not row["policy"]:
        raise ValueError(f"{where}: 'policy' must be a non-empty string, got {row['policy']!r}")
    if not isinstance(row["task"], str) or not row["task"]:
        raise ValueError(f"{where}: 'task' must be a non-empty string, got {row['task']!r}")
    for k in ("seed", "repeat"):
        if not isinstance(row[k], int) or isinstance(row[k], bool):
            raise ValueError(f"{where}: {k!r} must be an integer, got {row[k]!r}")
    out = row["outcome"]
    if out not in OUTCOMES:
        raise ValueError(f"{where}: unknown outcome {out!r}; expected one of {list(OUTCOMES)}")
    succ = row.get("success")
    expected = {"success": True, "failure": False}.get(out)
    if succ is not expected:
        raise ValueError(f"{where}: outcome {out!r} needs success={expected}, got {succ!r}")
    score = row.get("score")
    if score is not None:
        if (
            isinstance(score, bool)
            or not isinstance(score, (int, float))
            or not math.isfinite(score)
            or not 0.0 <= score <= 1.0
        ):
            raise ValueError(f"{where}: 'score' must be null or a number in [0, 1], got {score!r}")
    if out in ("success", "failure") and score is None:
        raise ValueError(f"{where}: a decided episode ({out}) needs a score, got null")
    timings = row.get("timings") or {}
    if not isinstance(timings, dict):
        raise ValueError(f"{where}: 'timings' must be an object of seconds per stage, got {type(timings).__name__}")
    for k, v in timings.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{where}: timings[{k!r}] must be a finite number of seconds >= 0, got {v!r}")
    arts = row.get("artifacts") or {}
    if not isinstance(arts, dict):
        raise ValueError(f"{where}: 'artifacts' must be an object, got {type(arts).__name__}")
    for kind, rel in arts.items():
        if rel is not None:
            safe_relpath(root, rel, f"{where}: artifacts[{kind!r}]")
    steps = row.get("steps", 0)
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 0):
        raise ValueError(f"{where}: 'steps' must be an integer >= 0, got {steps!r}")
    clean = dict(row)
    clean["timings"] = {k: float(v) for k, v in timings.items()}
    clean["artifacts"] = dict(arts)
    clean.setdefault("episode_id", f"{row['policy']}|{row['task']}|{row['seed']}|{row['repeat']}")
    return clean


def _ordered(declared: list[str], seen: set[str]) -> list[str]:
    out = [x for x in declared if x in seen]
    return out + sorted(seen - set(out))


def load_bundle(directory: str | Path) -> Bundle:
    """Read and validate ``directory/results.json``; see the module docstring for the checks."""
    root = Path(directory)
    if not root.exists():
        raise FileNotFoundError(f"campaign directory not found: {root}")
    if not root.is_dir():
        raise ValueError(
            f"{root} is not a directory; give the campaign output directory (the --out of kosmos-env eval)"
        )
    path = root / "results.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: {root} does not look like a campaign directory "
            f"(kosmos-env eval writes results.json there)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return bundle_from_data(root, path, data)


def bundle_from_data(root: Path, path: Path, data: Any) -> Bundle:
    """Validate results.json content ``data`` (already parsed) as :func:`load_bundle` does;
    ``path`` names it in error messages. The console uses this on results built live from a
    campaign's ledger."""
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    if data.get("schema") != RESULTS_SCHEMA:
        raise ValueError(f"{path}: 'schema' is {data.get('schema')!r}, expected {RESULTS_SCHEMA!r}")
    if data.get("schema_version") not in SUPPORTED_SCHEMA_VERSIONS:
        raise ValueError(
            f"{path}: schema_version {data.get('schema_version')!r} is not supported "
            f"(this kosmos-env reads {list(SUPPORTED_SCHEMA_VERSIONS)})"
        )
    campaign = data.get("campaign")
    if campaign is not None and not isinstance(campaign, dict):
        raise ValueError(f"{path}: 'campaign' must be an object")
    raw = data.get("per_episode")
    if not isinstance(raw, list):
        raise ValueError(f"{path}: 'per_episode' must be a list of episode rows, got {type(raw).__name__}")
    if not raw:
        raise ValueError(f"{path}: 'per_episode' is empty; there is nothing to report")
    rows = [_check_row(root, path, i, r) for i, r in enumerate(raw)]
    seen: dict[tuple, int] = {}
    for i, r in enumerate(rows):
        key = (r["policy"], r["task"], r["seed"], r["repeat"])
        if key in seen:
            raise ValueError(
                f"{path}: per_episode[{i}] repeats the episode (policy, task, seed, repeat)={key} "
                f"of per_episode[{seen[key]}]"
            )
        seen[key] = i
    campaign = campaign or {}
    declared_pols = [p.get("label") for p in campaign.get("policies") or [] if isinstance(p, dict)]
    declared_tasks = [t for t in campaign.get("tasks") or [] if isinstance(t, str)]
    policies = _ordered([p for p in declared_pols if isinstance(p, str)], {r["policy"] for r in rows})
    tasks = _ordered(declared_tasks, {r["task"] for r in rows})
    notes = []
    extra = sorted({r["policy"] for r in rows} - set(declared_pols))
    if declared_pols and extra:
        notes.append(f"episode rows name policies the campaign block does not list: {extra}")
    if campaign.get("complete") is False:
        planned = campaign.get("planned")
        queue = campaign.get("queue") if isinstance(campaign.get("queue"), dict) else {}
        # queue depth per stage when the bundle was written
        depth = [
            f"{k.replace('_', ' ')} {queue[k]}"
            for k in ("pending", "rolling_out", "rolled_out", "judging")
            if queue.get(k)
        ]
        notes.append(
            f"the campaign is incomplete: {len(rows)} finished episodes"
            + (f" of {planned} planned" if isinstance(planned, int) else "")
            + (f" ({', '.join(depth)})" if depth else "")
            + "; rerun kosmos-env eval with the same arguments to resume it"
        )
    return Bundle(root=root, results_path=path, data=data, rows=rows, policies=policies, tasks=tasks, notes=notes)
