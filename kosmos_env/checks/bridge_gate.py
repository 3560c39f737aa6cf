"""The action-consistency gate the way a Bridge world runs it, replayed on recorded frames.

A Bridge world (Cosmos 3) has no robot log and no simulator: what the gate gets is the camera
model of :mod:`kosmos_env.worlds.bridge_camera` (the calibration at the frame size) and the tool
centre point *integrated from the commanded translations* from the start pose. This module
replays the gate over a frame sequence in exactly that mode, so the mode can be measured where
ground truth exists (``bench/bridge_gate.py``: the tabletop rendered through the Bridge camera)
and checked on the real Bridge episode against commands derived from it
(:func:`load_reference_commands`, shipped in ``kosmos_env/tasks/bridge_real/``).

The reference commands were made by tracking the gripper in the real video and back-projecting
its image position through the camera model (see ``bridge_real_can_to_left_commands.json``, which
records the method). Passing them is a consistency check of the gate's geometry on real pixels
(camera model, start pose, direction measurement), not independent evidence that the gate
recognises real robot motion: the commands were read off this very video.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Mapping, Sequence

import numpy as np

COMMANDS_FILE = "bridge_real_can_to_left_commands.json"


def integrated_positions(actions: np.ndarray, start: Sequence[float], workspace: Any = None) -> np.ndarray:
    """TCP after each action, integrated from ``start`` and clipped to ``workspace`` after every action
    (what a Bridge world logs; ``workspace=None``: unclipped)."""
    from kosmos_env.worlds.bridge_camera import integrate_tcp

    rows = np.asarray(actions, dtype=np.float64).reshape(-1, 7)
    return integrate_tcp(start, rows[:, :3], workspace)


def replay_gate(
    gate_spec: Mapping[str, Any],
    frames: np.ndarray,
    actions: np.ndarray,
    calibration: Any,
    start: Sequence[float] | None,
    chunk: int = 1,
    controls: bool = False,
    rng: np.random.Generator | None = None,
    pan_range: tuple[float, float] = (2.0, 8.0),
) -> dict[str, np.ndarray]:
    """Feed ``frames`` (T+1, H, W, 3) and ``actions`` (T, 7) to a fresh gate, ``chunk`` actions per call.

    The log of each call is the integrated commanded TCP (``start`` + running sum, clipped to the
    gate's ``workspace`` when it has one: a Bridge world's ``world.workspace`` equals it), as a
    Bridge world reports it; ``start=None`` or ``calibration=None`` runs the calibration-free mode.
    Returns per call ``passed``, ``score``, ``demanded`` (a segment demanded visible motion) and
    ``check``; with ``controls``, the verdicts on a frozen call (the previous frame repeated) and
    a panned call (the previous frame shifted by 2-8 px per 128 px of width, the arm still),
    each from a copy of the gate's state after the true history; ``pan_detail`` holds per call the
    applied shift (frame px) and what the pan measure saw (shift in analysis px, explained fraction).
    """
    import cv2

    from kosmos_env.gate import ConsistencyGate

    frames = np.asarray(frames)
    actions = np.asarray(actions, dtype=np.float32).reshape(-1, 7)
    if len(frames) != len(actions) + 1:
        raise ValueError(f"need one frame more than actions, got {len(frames)} frames and {len(actions)} actions")
    gate = ConsistencyGate.from_spec({k: v for k, v in gate_spec.items() if k != "enabled"})
    path = (
        integrated_positions(actions, start, gate_spec.get("workspace"))
        if (start is not None and calibration is not None)
        else None
    )
    out: dict[str, list] = {"passed": [], "score": [], "demanded": [], "check": []}
    if controls:
        out.update(frozen_passed=[], frozen_demanded=[], pan_passed=[], pan_demanded=[], pan_detail=[])
        rng = rng or np.random.default_rng(0)
    h, w = frames.shape[1:3]
    for t0 in range(0, len(actions), chunk):
        t1 = min(t0 + chunk, len(actions))
        act = actions[t0:t1]
        log = {"ee_pos": path[t0:t1]} if path is not None else {}
        if controls:
            still = np.repeat(frames[t0][None], t1 - t0, axis=0)
            v = copy.deepcopy(gate).check(frames[t0], still, act, calibration, log)
            out["frozen_passed"].append(v.passed)
            out["frozen_demanded"].append(any(s["demanded"] for s in v.segments))
            angle = rng.uniform(0.0, 2 * np.pi)
            mag = rng.uniform(*pan_range) * w / 128.0
            panned = []
            for j in range(1, t1 - t0 + 1):  # the camera keeps drifting over the call
                m = np.float32([[1, 0, j * mag * np.cos(angle)], [0, 1, j * mag * np.sin(angle)]])
                panned.append(
                    cv2.warpAffine(frames[t0], m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
                )
            v = copy.deepcopy(gate).check(frames[t0], np.stack(panned), act, calibration, log)
            out["pan_passed"].append(v.passed)
            out["pan_demanded"].append(any(s["demanded"] for s in v.segments))
            # what the pan measure saw (first segment), to tell why a pan got through
            seg = v.segments[0]
            out["pan_detail"].append(
                {
                    "applied_px": [round(float(mag * np.cos(angle)), 3), round(float(mag * np.sin(angle)), 3)],
                    **{k: seg.get(k) for k in ("global_shift_px", "pan_explained", "pan_broken_static")},
                    "check": v.check,
                }
            )
        v = gate.check(frames[t0], frames[t0 + 1 : t1 + 1], act, calibration, log)
        out["passed"].append(v.passed)
        out["score"].append(v.score)
        out["demanded"].append(any(s["demanded"] for s in v.segments))
        out["check"].append(v.check)
    return {k: np.asarray(v) for k, v in out.items()}


# -- the real episode's reference commands ---------------------------------------------------------
def load_reference_commands() -> dict[str, Any]:
    """The shipped commands consistent with the real can episode (checked against its recorded sha256).

    Returns the JSON's fields with ``actions`` as a (36, 7) float32 array.
    """
    from kosmos_env.checks.bridge_reference import EPISODE_FRAMES, ReferenceDataError, reference_path

    path = reference_path(COMMANDS_FILE)
    if not path.is_file():
        raise ReferenceDataError(f"{COMMANDS_FILE} is missing from the package; reinstall kosmos-env")
    data = json.loads(path.read_text(encoding="utf-8"))
    actions = np.asarray(data.get("actions"), dtype=np.float32)
    if actions.shape != (EPISODE_FRAMES - 1, 7) or not np.all(np.isfinite(actions)):
        raise ReferenceDataError(f"{COMMANDS_FILE}: 'actions' must be {EPISODE_FRAMES - 1} rows of 7 numbers")
    from kosmos_env.hashing import sha256_hex

    digest = sha256_hex(np.ascontiguousarray(actions.round(6)).tobytes())
    if digest != data.get("actions_sha256"):
        raise ReferenceDataError(
            f"{COMMANDS_FILE}: actions do not match their recorded actions_sha256; reinstall kosmos-env"
        )
    return dict(data, actions=actions)


def commands_from_pixel_track(
    track_px: np.ndarray, calibration: Any, height_m: float, gripper: np.ndarray
) -> np.ndarray:
    """Env actions (T-1, 7) whose translations carry a gripper along a pixel track (T, 2).

    Each tracked point is back-projected through ``calibration`` onto the horizontal plane at
    ``height_m``; consecutive differences are the translations (a video gives no depth, so the
    motion is taken as horizontal at that height: its projection, which is what the gate
    compares, follows the track exactly). Rotations are zero; the gripper column is given.
    """
    pts = calibration.backproject_to_plane(np.asarray(track_px, dtype=np.float64), float(height_m))
    out = np.zeros((len(pts) - 1, 7), dtype=np.float64)
    out[:, :3] = np.diff(pts, axis=0)
    out[:, 6] = np.asarray(gripper, dtype=np.float64)
    return out.astype(np.float32)
