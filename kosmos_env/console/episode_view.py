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

from kosmos_env.campaign.artifacts import STORE_DIR, sha256_file
from kosmos_env.report.svg import line_chart

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
#: extensions the store writes, and the media type each is served with
MEDIA_TYPES = {"mp4": "video/mp4", "webm": "video/webm", "npy": "application/octet-stream",
               "npz": "application/octet-stream"}
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
            text = "verified (bytes hash to the name)" if status == "verified" else f"MISMATCH: bytes hash to {actual[:16]}…"
        if not info.get("in_ledger"):
            text += "; not in the ledger's artifact table"
        out.append({"kind": kind, "sha256": info["sha256"], "size": info.get("size"), "status": status,
                    "status_text": text})
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
    return line_chart(xs, {n: arr[:, i].tolist() for i, n in enumerate(ACTION_NAMES)}, xlabel="control step",
                      ylabel="action", title="actions"), ""


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
                out.append((name, line_chart(list(range(arr.shape[0])), {c: arr[:, j].tolist() for j, c in enumerate(cols)},
                                             xlabel="frame", ylabel=name, height=170, width=560, title=name, step=arr.dtype.kind == "b")))
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
        calls = [{"step": (ep.get("steps") or 1) - 1, "passed": g.get("passed"), "score": g.get("score"),
                  "check": g.get("check", ""), "reason": g.get("reason", "")}]
        note = "Only the last world call's verdict was recorded for this episode."
    else:
        note = ""
    rows = []
    for c in calls:
        score = c.get("score")
        rows.append({"bad": not c.get("passed"),
                     "cells": [str(c.get("step")), "pass" if c.get("passed") else "FAIL",
                               "" if score is None else f"{float(score):.3f}", str(c.get("check") or ""),
                               str(c.get("reason") or "")]})
    return ["world call (step)", "verdict", "consistency score", "check", "reason"], rows, note


def judgment_view(ep: dict) -> dict | None:
    """Fields, votes and rationale of the judgment (None without one)."""
    j = ep.get("judgment")
    if not j:
        return None
    fields = [("outcome", ep.get("outcome")), ("score", j.get("score")), ("judge", j.get("judge") or ep.get("judge")),
              ("model", j.get("model_id") or "-"), ("prompt sha256", j.get("prompt_sha256") or "-"),
              ("seconds", f"{float(j['seconds']):.3g}" if isinstance(j.get("seconds"), (int, float)) else "-")]
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
    return {"fields": fields, "votes": votes, "rationale": j.get("rationale") or ""}


def provenance(ep: dict, config: dict) -> list[tuple[str, str]]:
    meta = ep.get("campaign_meta") or {}
    pol = ep.get("policy_row") or {}
    judge = config.get("judge") or {}
    j = ep.get("judgment") or {}
    return [
        ("env", str(config.get("env_id", ""))),
        ("spec hash", str(meta.get("spec_hash") or config.get("spec_hash", ""))),
        ("campaign", f"{meta.get('campaign_id')} (config hash {meta.get('config_hash')})"),
        ("policy", str(ep.get("policy"))),
        ("policy content hash", str(pol.get("content_hash") or "not recorded yet")),
        ("policy hub model", str(pol.get("hub_model_id") or "-")),
        ("judge (campaign)", ", ".join(f"{k}={v}" for k, v in sorted(judge.items())) or "-"),
        ("judge (this episode)", f"{j.get('judge') or ep.get('judge') or '-'}; model {j.get('model_id') or '-'}"),
        ("episode id", str(ep.get("episode_id"))),
    ]
