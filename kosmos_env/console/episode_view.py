"""What the episode page shows, computed from one ledger row and the campaign's artifact store.

Artifacts are located by content hash only (:func:`store_path`): the hash is checked to be
64 lowercase hex digits, the path is built from it under ``artifacts/sha256/``, and the
resolved file must stay inside the store, so nothing from a request or a ledger row becomes a
file-system path. Arrays are read with ``allow_pickle=False``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kosmos_env.campaign.artifacts import STORE_DIR
from kosmos_env.hashing import sha256_file
from kosmos_env.report.svg import line_chart

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
#: extensions the store writes, and the media type each is served with
MEDIA_TYPES = {
    "mp4": "video/mp4",
    "webm": "video/webm",
    "npy": "application/octet-stream",
    "npz": "application/octet-stream",
}
ACTION_NAMES = ("dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper")
MAX_LOG_PLOTS = 10
MAX_SERIES = 8


def store_path(root: Path, sha256: str, ext: str) -> Path | None:
    """The store file for (sha256, ext) inside ``root``'s store, or None if the name is not a
    valid content hash, the extension is unknown, or the file is absent or outside the store."""
    if not isinstance(sha256, str) or not SHA256_RE.match(sha256) or ext not in MEDIA_TYPES:
        return None
    store = (root / STORE_DIR / "sha256").resolve()
    path = (store / sha256[:2] / f"{sha256}.{ext}").resolve()
    if store not in path.parents or not path.is_file():
        return None
    return path


def split_relpath(rel: str | None) -> tuple[str, str] | None:
    """(sha256, ext) of a store relpath ``artifacts/sha256/ab/<hash>.<ext>``, or None."""
    if not rel:
        return None
    name = Path(rel).name
    sha, _, ext = name.partition(".")
    if not SHA256_RE.match(sha) or ext not in MEDIA_TYPES:
        return None
    return sha, ext


def artifact_status(root: Path, ep: dict) -> list[dict[str, Any]]:
    """Each artifact of the episode with its hash re-checked now: verified, mismatch or missing."""
    out = []
    for kind, info in ep.get("artifact_rows", {}).items():
        parts = split_relpath(info["relpath"])
        path = store_path(root, *parts) if parts else None
        if path is None:
            status, text = "missing", "missing from the store"
        else:
            actual = sha256_file(path)
            status = "verified" if actual == parts[0] else "mismatch"
            text = (
                "verified (bytes hash to the name)"
                if status == "verified"
                else f"MISMATCH: bytes hash to {actual[:16]}…"
            )
        if not info.get("in_ledger"):
            text += "; not in the ledger's artifact table"
        out.append(
            {"kind": kind, "sha256": info["sha256"], "size": info.get("size"), "status": status, "status_text": text}
        )
    return out


def actions_svg(root: Path, ep: dict) -> tuple[str | None, str]:
    """SVG of the 7 action dimensions against control step, or (None, why not)."""
    import numpy as np

    parts = split_relpath(ep.get("actions"))
    path = store_path(root, *parts) if parts else None
    if path is None:
        return None, "No actions artifact in the store."
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        return None, f"The actions artifact could not be read: {exc}"
    arr = np.asarray(arr, dtype=float)
    if arr.ndim < 1 or arr.size == 0 or arr.shape[-1] != 7:
        return None, f"The actions artifact has shape {arr.shape}, not (steps, 7)."
    arr = arr.reshape(-1, 7)
    xs = list(range(len(arr)))
    return with_cursor(
        line_chart(
            xs,
            {n: arr[:, i].tolist() for i, n in enumerate(ACTION_NAMES)},
            xlabel="control step",
            ylabel="action",
            title="actions",
        ),
        xs,
    ), ""


def log_svgs(root: Path, ep: dict) -> tuple[list[tuple[str, str]], str]:
    """One SVG per numeric robot-log entry (columns of a 2-D entry as lines), or ([], why not)."""
    import numpy as np

    parts = split_relpath(ep.get("log"))
    path = store_path(root, *parts) if parts else None
    if path is None:
        return [], "No robot log artifact in the store."
    out = []
    try:
        with np.load(path, allow_pickle=False) as z:
            names = sorted(z.files)
            for name in names:
                if len(out) >= MAX_LOG_PLOTS:
                    break
                arr = np.asarray(z[name])
                if arr.dtype.kind not in "biuf" or arr.ndim == 0 or arr.shape[0] < 1:
                    continue
                arr = arr.astype(float).reshape(arr.shape[0], -1)
                if arr.shape[1] > MAX_SERIES:
                    continue
                cols = [name] if arr.shape[1] == 1 else [f"{name}[{j}]" for j in range(arr.shape[1])]
                xs = list(range(arr.shape[0]))
                out.append(
                    (
                        name,
                        with_cursor(
                            line_chart(
                                xs,
                                {c: arr[:, j].tolist() for j, c in enumerate(cols)},
                                xlabel="control step",
                                ylabel=name,
                                height=170,
                                width=560,
                                title=name,
                                step=arr.dtype.kind == "b",
                            ),
                            xs,
                        ),
                    )
                )
    except (OSError, ValueError) as exc:
        return [], f"The robot log could not be read: {exc}"
    return out, ("" if out else "The robot log holds no numeric series to plot.")


def gate_table(ep: dict) -> tuple[list[str], list[dict], str]:
    """(header, rows, note) of the gate verdict per world call."""
    g = ep.get("gate")
    if not g:
        return [], [], "No gate verdict recorded (the spec's gate is off, or the episode did not run)."
    calls = g.get("calls")
    if not calls:  # a campaign recorded before per-call verdicts were kept: the last call only
        calls = [
            {
                "step": (ep.get("steps") or 1) - 1,
                "passed": g.get("passed"),
                "score": g.get("score"),
                "check": g.get("check", ""),
                "reason": g.get("reason", ""),
            }
        ]
        note = "Only the last world call's verdict was recorded for this episode."
    else:
        note = ""
    rows = []
    for c in calls:
        score = c.get("score")
        rows.append(
            {
                "bad": not c.get("passed"),
                "cells": [
                    str(c.get("step")),
                    "pass" if c.get("passed") else "FAIL",
                    "" if score is None else f"{float(score):.3f}",
                    str(c.get("check") or ""),
                    str(c.get("reason") or ""),
                ],
            }
        )
    return ["world call (step)", "verdict", "consistency score", "check", "reason"], rows, note


def judgment_view(ep: dict) -> dict | None:
    """Fields, votes and rationale of the judgment (None without one)."""
    j = ep.get("judgment")
    if not j:
        return None
    fields = [
        ("outcome", ep.get("outcome")),
        ("score", j.get("score")),
        ("judge", j.get("judge") or ep.get("judge")),
        ("model", j.get("model_id") or "-"),
        ("prompt sha256", j.get("prompt_sha256") or "-"),
        ("seconds", f"{float(j['seconds']):.3g}" if isinstance(j.get("seconds"), (int, float)) else "-"),
    ]
    votes = []
    for v in j.get("votes") or []:
        if not isinstance(v, dict):
            votes.append({"vote": "?", "text": str(v)})
            continue
        if v.get("valid") is False:
            votes.append({"vote": "invalid", "text": f"{v.get('error', '')} {v.get('raw', '')}".strip()})
            continue
        vote = {True: "success", False: "failure", None: "abstained"}.get(v.get("success"), str(v.get("success")))
        if v.get("video_ok") is False:
            vote = "video broken"
        if "progress" in v:
            vote += f" (progress {v['progress']})"
        if "judge" in v:  # a fusion judge's member verdict
            text = f"judge {v['judge']}: score {v.get('score')}, weight {v.get('weight')}"
        else:  # one sample of a quorum judge
            text = str(v.get("reason", ""))
        votes.append({"vote": vote, "text": text})
    return {
        "fields": fields,
        "votes": votes,
        "rationale": plain_rationale(j),
        "raw_rationale": j.get("rationale") or "",
    }


NOT_RECORDED = "not recorded"
#: settings whose values a page never shows (a command line may carry an API token)
_SECRET = re.compile(
    r"""((?<![a-z0-9])(?:api[_-]?)?(?:token|key|secret|password|passwd|auth)[\w-]*)"""
    r"""(\\?["']?\s*[=:]\s*\\?["']?)([^,\s"'\\}]+)""",
    re.IGNORECASE,
)
#: a flag naming a secret followed by its value as the next argv element: "--hf-token", "hf_..."
_SECRET_FLAG = re.compile(
    r"""("--?[\w-]*(?:token|key|secret|password|passwd|auth)[\w-]*",\s*")([^"]*)""", re.IGNORECASE
)


def redact(text: str) -> str:
    """``text`` with the value of every token/key/secret/password setting replaced by "(redacted)"."""
    text = _SECRET_FLAG.sub(lambda m: f"{m.group(1)}(redacted)", text)
    return _SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}(redacted)", text)


def _flat(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for k in sorted(value):
            _flat(f"{prefix}.{k}" if prefix else str(k), value[k], out)
    else:
        out.append((prefix, "null" if value is None else str(value)))


def _find_hashes(value: Any, path: str = "") -> list[tuple[str, str]]:
    """Every (dotted key, value) under ``value`` whose key names a hash of weights or files."""
    found: list[tuple[str, str]] = []
    if isinstance(value, dict):
        for k, v in sorted(value.items()):
            key = f"{path}.{k}" if path else str(k)
            if isinstance(v, (dict, list)):
                found.extend(_find_hashes(v, key))
            elif v is not None and ("sha256" in str(k).lower() or "hash" in str(k).lower()):
                found.append((key, str(v)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(_find_hashes(v, f"{path}[{i}]"))
    return found


def provenance(
    ep: dict, config: dict, package_version: str | None = None, runs: list[dict] | None = None
) -> list[tuple[str, str]]:
    """Everything the ledger stores about where this episode's number came from; a field the
    campaign did not record reads "not recorded" (never guessed)."""
    meta = ep.get("campaign_meta") or {}
    pol = ep.get("policy_row") or {}
    judge = config.get("judge") or {}
    j = ep.get("judgment") or {}
    prov = ep.get("provenance") if isinstance(ep.get("provenance"), dict) else {}
    world = prov.get("world") if isinstance(prov.get("world"), dict) else {}
    pjudge = prov.get("judge") if isinstance(prov.get("judge"), dict) else {}
    world_hashes = [(k, v) for k, v in _find_hashes(world) if not k.startswith("class")]
    judge_hashes = _find_hashes(pjudge)
    rows = [
        (
            "kosmos-env version",
            package_version
            or f"{NOT_RECORDED} (the ledger keeps no package version; results.json does once the campaign finishes)",
        ),
        ("env", str(config.get("env_id", "")) or NOT_RECORDED),
        ("spec hash", str(meta.get("spec_hash") or config.get("spec_hash", "")) or NOT_RECORDED),
        (
            "campaign",
            f"{meta.get('campaign_id')} (config hash {meta.get('config_hash')}, created {meta.get('created')})",
        ),
        ("policy", str(ep.get("policy"))),
        ("policy content hash", str(pol.get("content_hash") or NOT_RECORDED)),
        ("policy hub model", str(pol.get("hub_model_id") or "none (not a hub model)")),
        (
            "world",
            ", ".join(
                f"{k}={v}" for k, v in sorted(world.items()) if not isinstance(v, (dict, list)) and "sha256" not in k
            )
            or NOT_RECORDED,
        ),
        (
            "world weights hash",
            "; ".join(f"{k} {v}" for k, v in world_hashes) or f"{NOT_RECORDED} (this world records no weights file)",
        ),
        ("judge (campaign)", ", ".join(f"{k}={v}" for k, v in sorted(judge.items())) or NOT_RECORDED),
        (
            "judge (this episode)",
            f"{j.get('judge') or ep.get('judge') or NOT_RECORDED}; model "
            f"{j.get('model_id') or NOT_RECORDED}; prompt sha256 {j.get('prompt_sha256') or 'none'}",
        ),
        ("judge class", str(pjudge.get("class") or NOT_RECORDED)),
        (
            "judge weights hash",
            "; ".join(f"{k} {v}" for k, v in judge_hashes) or f"{NOT_RECORDED} (this judge records no weights file)",
        ),
        ("identity sha256 (spec, world, judge)", str(prov.get("identity_sha256") or NOT_RECORDED)),
        ("episode id", str(ep.get("episode_id"))),
        ("env seed", str(ep.get("env_seed"))),
    ]
    for r in (runs or [])[-3:]:
        rows.append(
            (
                f"eval run {r.get('run_id')}",
                f"{r.get('executor')}, {r.get('workers')} worker(s), by "
                f"{r.get('owner')}; argv {redact(str(r.get('argv')))}",
            )
        )
    return rows


# ----------------------------------------------------------------------------- scrubber


_RECT = re.compile(r'<rect x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)" height="([0-9.]+)"')


def with_cursor(svg: str, xs: list[float]) -> str:
    """``svg`` (a :func:`line_chart`) with a hidden vertical cursor line the page's script moves
    with the video: the plot area is the chart's first rectangle, data x runs from min(xs) to
    max(xs) across it, and these are written as data attributes on the root element."""
    m = _RECT.search(svg)
    if not m or not xs:
        return svg
    left, top, width, height = (float(g) for g in m.groups())
    x0, x1 = float(min(xs)), float(max(xs))
    if x1 - x0 < 1e-12:
        x1 = x0 + 1.0
    attrs = f' data-scrub="1" data-left="{left:g}" data-plot-width="{width:g}" data-x0="{x0:g}" data-x1="{x1:g}"'
    svg = svg.replace("<svg ", "<svg" + attrs + " ", 1)
    cursor = (
        f'<line class="cursor" x1="{left:g}" x2="{left:g}" y1="{top:g}" y2="{top + height:g}" '
        'stroke="#d1495b" stroke-width="1.5" visibility="hidden"/>'
    )
    i = svg.rfind("</svg>")
    return svg[:i] + cursor + svg[i:]


def instruction(config: dict, task: str) -> dict[str, str]:
    """The instruction the policy was given for ``task``: from the task suite the campaign's spec
    names (the suite enters the spec hash, so the spec hash pins the text), or why it is unknown."""
    suite = ((config.get("spec") or {}).get("tasks") or {}).get("suite")
    if not isinstance(suite, str):
        return {"text": "", "note": "not recorded: the campaign's spec names no task suite"}
    from kosmos_env.tasks import load_suite

    try:
        spec = load_suite(suite).tasks.get(task)
    except Exception as exc:  # a plug-in or removed suite: say so, never fail the page
        return {"text": "", "note": f"unknown: task suite {suite!r} cannot be loaded here ({exc})"}
    if spec is None:
        return {"text": "", "note": f"unknown: suite {suite!r} has no task {task!r} in this installation"}
    return {"text": spec.instruction, "note": f"task {task!r} of suite {suite!r}"}


def render_fps(config: dict) -> float | None:
    """Control steps per second of the campaign's video (the spec's render_fps), or None."""
    fps = (config.get("spec") or {}).get("render_fps")
    return float(fps) if isinstance(fps, (int, float)) and fps > 0 else None


# ----------------------------------------------------------------------------- distances


def distance_svg(root: Path, ep: dict) -> tuple[str | None, str]:
    """Distance to the goal against control step, from what the world stored, or (None, why not).

    The object's distance is plotted when the robot log holds the object's position per step
    (``object_pos``); the tabletop's log holds the end effector's (``ee_pos``), so there the
    line is the gripper's distance to the goal, and the object's is known at the end only (the
    simulator's evaluation, ``ground_truth``). The goal is where the evaluation found it at the end.
    """
    import numpy as np

    truth = ep.get("ground_truth") if isinstance(ep.get("ground_truth"), dict) else {}
    target = truth.get("target_pos")
    obj_end = truth.get("object_pos")
    parts = split_relpath(ep.get("log"))
    path = store_path(root, *parts) if parts else None
    if path is None:
        return None, "No robot log in the store: no distances to plot."
    if not (isinstance(target, list) and len(target) == 3):
        return None, (
            "The world recorded no goal position (no ground-truth state): distances to the goal need a "
            "world with a simulator state."
        )
    goal = np.asarray(target, dtype=float)
    try:
        with np.load(path, allow_pickle=False) as z:
            logged = {k: np.asarray(z[k], dtype=float) for k in ("object_pos", "ee_pos") if k in z.files}
    except (OSError, ValueError) as exc:
        return None, f"The robot log could not be read: {exc}"
    series: dict[str, list[float]] = {}
    n = 0
    for key, name in (("object_pos", "object"), ("ee_pos", "gripper")):
        arr = logged.get(key)
        if arr is None or arr.ndim != 2 or arr.shape[1] < 3 or len(arr) == 0:
            continue
        n = max(n, len(arr))
        series[f"{name} to goal, 3-D (m)"] = np.linalg.norm(arr[:, :3] - goal, axis=1).round(4).tolist()
        series[f"{name} to goal, horizontal (m)"] = np.linalg.norm(arr[:, :2] - goal[:2], axis=1).round(4).tolist()
    if not series:
        return None, "The robot log holds no position series (object_pos or ee_pos) to measure distances from."
    xs = list(range(n))
    notes = []
    if "object_pos" not in logged:
        notes.append(
            "This world's log records the gripper's position at each step, not the object's: the lines "
            "are the gripper's distance to the goal."
        )
    if isinstance(obj_end, list) and len(obj_end) == 3:
        o = np.asarray(obj_end, dtype=float)
        notes.append(
            f"At the end the object was {np.linalg.norm(o - goal):.3f} m from the goal "
            f"({np.linalg.norm(o[:2] - goal[:2]):.3f} m horizontally), by the simulator's evaluation"
            + (f": {truth.get('reason')}." if truth.get("reason") else ".")
        )
    svg = line_chart(
        xs,
        {k: [v for v in vals] + [None] * (n - len(vals)) for k, vals in series.items()},
        xlabel="control step",
        ylabel="distance (m)",
        height=200,
        width=560,
        title="distance to goal",
        hline=0.0,
    )
    return with_cursor(svg, xs), " ".join(notes)


# ----------------------------------------------------------------------------- verdicts in words


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _robot_log_sentence(extras: dict, success: Any) -> str:
    """The robot-log judge's stored events (held, lifted, carried, released, empty grasps, idle,
    Z) as a sentence."""
    did = {
        "held": "held an object in its gripper",
        "lifted": "lifted it",
        "carried": "carried it sideways",
        "released": "let go of it",
    }
    missing = {
        "held": "never held an object",
        "lifted": "never lifted a held object",
        "carried": "never carried a held object sideways",
        "released": "never let go of a held object",
    }
    done = [k for k in did if extras.get(k)]
    not_done = [k for k in did if not extras.get(k)]
    if success is True:
        head = "Success: within one grasp the robot held an object, lifted it, carried it and let go of it."
    elif not done:
        head = f"Failure: the robot {missing['held']}."
    elif not not_done:
        head = (
            "Failure: the robot held, lifted, carried and let go of an object, but not all within one and the "
            "same grasp."
        )
    else:
        head = f"Failure: the robot {_and([did[k] for k in done])}, but {_and([missing[k] for k in not_done])}."
    extra = []
    n = extras.get("n_grasps")
    if isinstance(n, int):
        extra.append(f"It closed the gripper {n} time{'s' if n != 1 else ''}")
    empty = extras.get("empty_grasps")
    if isinstance(empty, int) and empty:
        extra.append(f"{empty} of those closed on nothing")
    idle = extras.get("idle_fraction")
    if isinstance(idle, (int, float)):
        extra.append(
            f"it stood still for {100 * float(idle):.0f}% of the steps"
            + (" (counted as idle)" if extras.get("idle") else "")
        )
    tail = ("; ".join(extra) + ".") if extra else ""
    z = extras.get("z")
    score = f" Log score Z = {float(z):.2f} on a scale from -2 to 4." if isinstance(z, (int, float)) else ""
    return " ".join(x for x in (head, tail[:1].upper() + tail[1:] if tail else "", score.strip()) if x)


def _said(success: Any) -> str:
    return {True: "success", False: "failure"}.get(success, "abstain")


def plain_rationale(judgment: dict | None, judge_type: str = "") -> str:
    """A judgment's reasoning in plain words, rendered from its stored fields where the judge
    stores structured ones (the robot-log judge's events), else its own rationale text."""
    if not isinstance(judgment, dict):
        return ""
    extras = judgment.get("extras") if isinstance(judgment.get("extras"), dict) else {}
    name = judgment.get("judge") or judge_type
    if name == "robot_log" and {"held", "lifted", "carried", "released"} <= set(extras):
        return _robot_log_sentence(extras, judgment.get("success"))
    text = str(judgment.get("rationale") or "")
    votes = [v for v in judgment.get("votes") or [] if isinstance(v, dict) and "judge" in v and "weight" in v]
    if name == "fusion" and votes:
        said = "; ".join(
            f"{v['judge']} said {_said(v.get('success'))} (score {float(v.get('score', 0.0)):.2f}, "
            f"weight {float(v['weight']):.2f})"
            for v in votes
        )
        return f"{text[:1].upper() + text[1:]}: {said}." if text else said + "."
    if name == "state" and text:
        return f"The simulator's evaluation at the end: {text}."
    return text


def verdict_rows(ep: dict, stored: list[dict]) -> list[dict[str, Any]]:
    """One row per judge with a verdict on this episode: the campaign's own first, then each
    stored judge (``kosmos-env judge``), with the rationale in plain words."""
    rows = []
    j = ep.get("judgment")
    if isinstance(j, dict):
        rows.append(
            {
                "judge": f"{j.get('judge') or ep.get('judge') or '?'} (the campaign's own)",
                "judge_id": "campaign",
                "outcome": ep.get("outcome") or "-",
                "score": j.get("score"),
                "model": j.get("model_id") or "-",
                "why": plain_rationale(j),
            }
        )
    elif ep.get("outcome"):
        rows.append(
            {
                "judge": "campaign",
                "judge_id": "campaign",
                "outcome": ep.get("outcome"),
                "score": ep.get("score"),
                "model": "-",
                "why": "not judged (" + str(ep.get("outcome")) + ")",
            }
        )
    for r in stored:
        jd = r.get("judgment") or {}
        spec = r.get("judge_spec") or {}
        rows.append(
            {
                "judge": f"{r.get('judge_label')} [{r.get('judge_id')}]",
                "judge_id": r.get("judge_id"),
                "outcome": r.get("outcome"),
                "score": r.get("score"),
                "model": jd.get("model_id") or "-",
                "why": plain_rationale(jd, str(spec.get("type", ""))),
            }
        )
    for row in rows:
        row["score_text"] = f"{float(row['score']):.3f}" if isinstance(row["score"], (int, float)) else "-"
    return rows
