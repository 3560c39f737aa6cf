"""Save and reload a study's raw episodes, so the analysis can be redone without rerunning them.

``episodes.json`` holds every row, the config and the frame-error numbers; ``examples.npz`` the
example frames (plain uint8 arrays, read with ``allow_pickle=False``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

_KEYS = ("config", "tasks", "rows", "sweep_rows", "gate_status", "frame_error", "wall_seconds", "started_utc")


def _plain(x):
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


def save_episodes(study: dict[str, Any], out_dir) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "episodes.json").write_text(json.dumps(_plain({k: study.get(k) for k in _KEYS})))
    ex = study.get("examples") or {}
    np.savez_compressed(out / "examples.npz", **{"|".join(map(str, k)): v for k, v in ex.items()})


def _int_keys(d):
    """JSON turned integer horizon keys into strings; turn them back."""
    if isinstance(d, dict):
        return {(int(k) if isinstance(k, str) and k.lstrip("-").isdigit() else k): _int_keys(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_int_keys(v) for v in d]
    return d


def load_episodes(dir_) -> dict[str, Any]:
    path = Path(dir_) / "episodes.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run the study once with --out {dir_}")
    study = _int_keys(json.loads(path.read_text()))
    examples = {}
    npz = Path(dir_) / "examples.npz"
    if npz.is_file():
        with np.load(npz, allow_pickle=False) as z:
            for k in z.files:
                label, policy, task, i = k.split("|")
                examples[(label, policy, task, int(i))] = z[k]
    study["examples"] = examples
    return study


def load_registration(dir_, study: dict[str, Any]) -> dict[str, Any] | None:
    """The registration a saved study ran under, or None (exploratory). A registration there must be
    sealed, made before the saved run started and bound to the saved config (one line otherwise)."""
    from kosmos_env.study.registration import RegistrationError, UNBOUND_CONFIG, load_registration_file

    path = Path(dir_) / "registration.json"
    if not path.is_file():
        return None
    record = load_registration_file(path)
    saved = {k: v for k, v in (study.get("config") or {}).items() if k not in UNBOUND_CONFIG}
    if json.dumps(record["config"], sort_keys=True) != json.dumps(saved, sort_keys=True):
        raise RegistrationError(f"{path} registers another design than the episodes saved in {dir_}")
    started = study.get("started_utc")
    if not started or record["registered_utc"] >= started:
        raise RegistrationError(f"{path} was not made before the saved run started ({started or 'start unknown'})")
    return record
