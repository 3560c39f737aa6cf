"""The gate's measurements: pure functions of two analysis frames, the command and the thresholds.

Each works on grayscale float32 analysis images (:func:`gray`) and writes what it measured
into the segment's record (:class:`~kosmos_env.gate.segment.Segment`); none keeps state
between calls (the episode's counters live in :class:`~kosmos_env.gate.ConsistencyGate`).
What each measures and why is in :mod:`kosmos_env.gate`'s docstring. Deterministic:
fixed-size integer and float OpenCV operations, no randomness. OpenCV is imported on use.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kosmos_env.gate.segment import Geometry, Segment
from kosmos_env.gate.thresholds import GateThresholds


def gray(frame: np.ndarray, analysis_size: int) -> np.ndarray:
    """The analysis image of an RGB frame: grayscale, float32, its longer side ``analysis_size``."""
    import cv2

    h, w = frame.shape[:2]
    s = analysis_size / max(h, w)
    g = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
    if s != 1.0:  # thresholds are in analysis pixels: small frames are upsampled, not left small
        size = (max(1, int(round(w * s))), max(1, int(round(h * s))))
        g = cv2.resize(g, size, interpolation=cv2.INTER_AREA if s < 1.0 else cv2.INTER_LINEAR)
    return g.astype(np.float32)


def clipped_move(workspace_rows: Sequence[tuple[float, float]], start: np.ndarray, acts: np.ndarray) -> np.ndarray:
    """The commanded TCP move from ``start`` with the workspace clipping the world applies
    after every action. np.clip's arithmetic on Python floats (float32 action to float64,
    add, numpy's clip rule for array bounds): the same bits as the numpy loop, less overhead.
    ``workspace_rows``: the workspace's (lo, hi) per axis as Python floats."""
    target = start.tolist()
    for move in acts[:, :3].tolist():
        target = [_clip_to_bounds(t + d, lo, hi) for t, d, (lo, hi) in zip(target, move, workspace_rows, strict=True)]
    return np.array(target) - start


# -- measurements -------------------------------------------------------------------


def camera_motion(
    th: GateThresholds,
    hann: Callable[[tuple[int, int]], np.ndarray],
    seg: Segment,
    a,
    b,
    box,
    absdiff=None,
    changed=None,
    *,
    window_changed=None,
):
    """Global shift between a and b, and whether it is a camera pan.

    The shift comes from phase correlation (Hann-windowed). It is a pan when
    moving the whole of ``a`` by it explains at least ``pan_explained`` of the difference
    outside the gripper's window ``box`` (the whole frame when the gripper's place is
    unknown): a pan moves the static scene, an arm does not. Returns (a compensated for a
    pan or a unchanged, pan?, shift in px). ``absdiff`` (``|b - a|``) and ``changed`` (its
    change mask) are passed by callers that have them already, and ``window_changed`` (the
    mask's count inside ``box``) with ``changed``. ``hann(shape)``: the (cached) Hann window of
    that shape. Sets ``seg``'s ``global_shift_px`` and, when measured, ``pan_explained`` and
    ``pan_broken_static``.
    """
    import cv2

    h, w = a.shape
    if box is not None:
        # nothing changed outside the gripper's window: nothing there can have panned
        x0, y0, c = box
        if changed is None:
            absdiff = np.abs(b - a) if absdiff is None else absdiff
            changed = absdiff > th.change_threshold
            window_changed = None  # (a count passed without its mask is not this mask's)
        if window_changed is None:
            window_changed = int(np.count_nonzero(changed[y0 : y0 + c, x0 : x0 + c]))
        outside = int(np.count_nonzero(changed)) - window_changed
        if outside < th.frozen_min_changed_px:
            seg.global_shift_px = [0.0, 0.0]
            return a, False, 0.0
    win = hann(a.shape)
    # the window is applied here, on copies: OpenCV 5's phaseCorrelate windows its inputs in place
    (sx, sy), _ = cv2.phaseCorrelate(a * win, b * win)
    shift = float(math.hypot(sx, sy))
    seg.global_shift_px = [round(float(sx), 3), round(float(sy), 3)]
    if shift < th.pan_min_px:
        return a, False, shift
    m = int(math.ceil(shift)) + 1
    if 2 * m >= min(h, w):
        return a, False, shift
    keep = np.zeros((h, w), dtype=bool)
    keep[m:-m, m:-m] = True
    if box is not None:
        x0, y0, c = box
        keep[y0 : y0 + c, x0 : x0 + c] = False
    if absdiff is None:
        absdiff = np.abs(b - a)
    raw = float(np.mean(absdiff[keep])) if keep.any() else 0.0
    if raw < 0.02 * th.change_threshold:  # the scene outside the gripper did not change at all
        seg.pan_explained = 0.0
        return a, False, shift
    sx, sy, moved = _refine_shift(a, b, sx, sy, keep)
    seg.global_shift_px = [round(float(sx), 3), round(float(sy), 3)]
    shift = float(math.hypot(sx, sy))
    if th.pan_blur_px > 0:  # equal smoothing on both sides (see GateThresholds.pan_blur_px)
        ab = cv2.GaussianBlur(a, (0, 0), th.pan_blur_px)
        bb = cv2.GaussianBlur(b, (0, 0), th.pan_blur_px)
        moved_b = cv2.warpAffine(
            ab, np.float32([[1, 0, sx], [0, 1, sy]]), (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        )
        raw_b = float(np.mean(np.abs(bb - ab)[keep]))
        explained = 1.0 - float(np.mean(np.abs(bb - moved_b)[keep])) / raw_b if raw_b > 0 else 0.0
    else:
        comp = float(np.mean(np.abs(b - moved)[keep]))
        explained = 1.0 - comp / raw
    seg.pan_explained = round(explained, 3)
    # a large arm close to the camera can dominate the shift too; but then the scene's
    # edges that did not change (the table's edge, objects) break when everything is moved
    # by the arm's shift, while after a real pan they stay matched
    edges = keep & (_gradient(a) > th.pan_edge_gradient)
    still = edges & (absdiff <= th.change_threshold)
    n_still = int(np.count_nonzero(still))
    broken = int(np.count_nonzero(still & (np.abs(b - moved) > th.change_threshold)))
    broken_fraction = broken / n_still if n_still >= th.frozen_min_changed_px else 0.0
    seg.pan_broken_static = round(broken_fraction, 3)
    if (
        explained >= (th.pan_explained if box is not None else th.pan_explained_uncalibrated)
        and broken_fraction <= th.pan_max_broken_static
    ):
        return moved, True, shift  # measure the arm against the camera-compensated frame
    return a, False, shift


def geometry(th: GateThresholds, lift: np.ndarray, commanded, start, calibration, scale, shape) -> Geometry:
    """Where the gripper is and should go in the analysis image (calibrated worlds); ``lift``: the
    hand point above the TCP, ``(0, 0, hand_height_m)``."""
    end = start + commanded
    # the TCP and the hand above it, before and after the commanded move
    # (np.array of the four (3,) rows: the (4, 3) array np.stack builds, with less overhead)
    uv = np.asarray(calibration.project(np.array([start, end, start + lift, end + lift])), dtype=np.float64) * scale
    h, w = shape
    # the view test on Python floats: the same comparisons as numpy's min/max, less overhead
    us, vs = uv[:, 0].tolist(), uv[:, 1].tolist()
    finite = all(map(math.isfinite, us)) and all(map(math.isfinite, vs))
    margin = th.view_margin_px
    in_view = finite and (min(us) >= margin and max(us) <= w - margin and min(vs) >= margin and max(vs) <= h - margin)
    if not finite:
        return Geometry(False, np.zeros(2), 0.0, None)
    expected = uv[1] - uv[0]
    c = th.crop_px
    cx, cy = (uv[0, 0] + uv[1, 0]) / 2, (uv[0, 1] + uv[1, 1]) / 2
    x0 = min(max(int(round(cx)) - c // 2, 0), max(w - c, 0))
    y0 = min(max(int(round(cy)) - c // 2, 0), max(h - c, 0))
    return Geometry(in_view, expected, math.hypot(expected[0], expected[1]), (x0, y0, c))


def measure_calibrated(
    th: GateThresholds,
    seg: Segment,
    a,
    b,
    geo: Geometry,
    commanded,
    rotation,
    changed_mask=None,
    *,
    window_changed=None,
) -> None:
    """Measure a segment near the projected gripper: what changed there, which way it moved,
    how well the commanded displacement explains it; a frozen window under a demanded move
    fails the segment. Sets ``direction_checked`` and ``mismatch`` for the episode's direction
    count. ``changed_mask`` (the segment's change mask) and ``window_changed`` (its count in the
    window) are passed by callers that have them already."""
    expected, exp_px, box = geo.expected, geo.expected_px, geo.box
    if box is None:
        seg.observed_px, seg.changed_px, seg.cos, seg.score = [0.0, 0.0], 0, None, 1.0
        return
    x0, y0, c = box
    ac, bc = a[y0 : y0 + c, x0 : x0 + c], b[y0 : y0 + c, x0 : x0 + c]
    # the window's change mask: a crop of the segment's (b, a) mask where the caller has it
    mask = (np.abs(bc - ac) > th.change_threshold) if changed_mask is None else changed_mask[y0 : y0 + c, x0 : x0 + c]
    # (``window_changed``: this mask's count, passed with ``changed_mask`` by _segment)
    changed = int(np.count_nonzero(mask)) if window_changed is None or changed_mask is None else window_changed
    observed, _ = _changed_centroid_shift(ac, bc, th.change_threshold, mask, count=changed)
    obs_px = float(np.hypot(*observed))
    cos = float(observed @ expected / (obs_px * exp_px)) if obs_px > 1e-6 and exp_px > 1e-6 else None
    # score: how much better the commanded displacement explains the window than the best
    # displacement pointing at least 90 degrees away from it (0.5 = no better, 1 = perfect)
    # how close the observed displacement of what changed is to the commanded one
    centroid_score = 1.0 - math.hypot(*(observed - expected)) / (obs_px + exp_px + 1.0)
    direction_score = None
    if seg.demanded:  # (only where it can decide something: it is the costliest measurement)
        e_cmd, e_alt = _direction_errors(a, bc, x0, y0, expected)
        direction_score = 0.5 + 0.5 * (e_alt - e_cmd) / (e_alt + e_cmd) if e_alt + e_cmd > 1e-9 else 1.0
    score = centroid_score if direction_score is None else (direction_score + centroid_score) / 2
    seg.observed_px = [round(float(v), 3) for v in observed]
    seg.changed_px = changed
    seg.cos = None if cos is None else round(cos, 3)
    seg.direction_score = None if direction_score is None else round(direction_score, 4)
    seg.centroid_score = round(centroid_score, 4)
    seg.score = round(score, 4)
    if not seg.demanded:
        return
    if changed < th.frozen_min_changed_px:
        seg.fail(
            "frozen",
            f"no visible motion near the gripper ({changed} changed px < "
            f"{th.frozen_min_changed_px}) although the command moves it by {seg.commanded_m:.3f} m "
            f"({exp_px:.1f} px)",
        )
        return
    # a commanded rotation swings the hand about the TCP; when that swing is not small next
    # to the commanded translation, the direction of the visible motion says nothing
    swing = rotation * th.hand_height_m
    if swing > th.max_rotation_swing * float(np.linalg.norm(commanded)):
        seg.direction_checked = False
        return
    seg.direction_checked = True
    if (cos is None or cos < th.direction_min_cos) and direction_score < th.direction_max_score:
        seg.mismatch = True


def measure_uncalibrated(th: GateThresholds, seg: Segment, a, b, cmd_m, demanded_m, absdiff=None) -> float:
    """Measure a segment without calibration: the changed fraction of the frame (a thin border
    ignored) against the commanded move; nothing changed under a demanded move fails it.
    Returns the changed fraction, unrounded (the episode's magnitude correlation reads it)."""
    diff = np.abs(b - a) if absdiff is None else absdiff
    m = max(1, int(round(0.05 * min(a.shape))))  # ignore a thin border (pan fill, crop jitter)
    changed = float(np.mean(diff[m:-m, m:-m] > th.change_threshold))
    seg.in_view, seg.demanded, seg.changed_fraction = None, bool(demanded_m), round(changed, 5)
    # per-step score: commanded and visible motion agree in kind (both small or both large)
    cmd_level = min(1.0, cmd_m / max(2 * th.min_translation_m, 1e-9))
    vis_level = min(1.0, changed / max(10 * th.frozen_min_changed_fraction, 1e-9))
    seg.score = round(1.0 - abs(cmd_level - vis_level), 4)
    if demanded_m and changed < th.frozen_min_changed_fraction:
        seg.fail(
            "frozen",
            f"no visible motion ({changed:.2%} of the image changed < "
            f"{th.frozen_min_changed_fraction:.2%}) although the command moves the gripper by "
            f"{seg.commanded_m:.3f} m",
        )
    return changed


def same_memory(x: np.ndarray, y: np.ndarray) -> bool:
    """True when two arrays view the same bytes in the same layout: then their pixels are equal
    (the env hands the gate back the previous call's last frame, a view of the same buffer)."""
    return (
        x.dtype == y.dtype
        and x.strides == y.strides
        and x.shape == y.shape
        and x.__array_interface__["data"][0] == y.__array_interface__["data"][0]
    )


def _clip_to_bounds(x: float, lo: float, hi: float) -> float:
    """``np.clip(x, lo_array, hi_array)`` for one finite element: max(x, lo) then min(., hi), a tie
    keeping the bound (numpy's loop for array bounds; the sign of a zero comes out the same)."""
    x = x if x > lo else lo
    return x if x < hi else hi


def logged_positions(log: Mapping[str, Any], k: int) -> np.ndarray | None:
    ee = log.get("ee_pos")
    if ee is None:
        return None
    ee = np.asarray(ee, dtype=np.float64)
    if ee.shape != (k, 3) or not np.isfinite(ee).all():
        return None
    return ee


def _changed_centroid_shift(
    a: np.ndarray, b: np.ndarray, threshold: float, mask: np.ndarray | None = None, *, count: int | None = None
) -> tuple[np.ndarray, int]:
    """Displacement of what changed between a and b: centroid of b's vs a's changed pixels.

    Each changed pixel weighs by how far its value lies from the window's background (the
    median of ``a``): a moving object's pixels weigh in the frame where the object is, so the
    centroid moves with it; the background it uncovers weighs little.
    """
    import cv2

    if mask is None:  # (callers that have the change mask of (a, b) at this threshold pass it,
        mask = np.abs(b - a) > threshold  # and its count where they have it)
        count = None
    changed = int(np.count_nonzero(mask)) if count is None else count
    if not changed:
        return np.zeros(2), 0
    flat = a.flatten()  # a copy (a is a crop), partitioned in place: the median without np.median's overhead
    flat.partition(flat.size // 2)
    background = float(flat[flat.size // 2])
    # (np.where of float32 frames is float32 already: no copy needed for OpenCV)
    ma = cv2.moments(np.where(mask, np.abs(a - background), 0.0).astype(np.float32, copy=False))
    mb = cv2.moments(np.where(mask, np.abs(b - background), 0.0).astype(np.float32, copy=False))
    if ma["m00"] < 1e-6 or mb["m00"] < 1e-6:
        return np.zeros(2), changed
    return np.array(
        [mb["m10"] / mb["m00"] - ma["m10"] / ma["m00"], mb["m01"] / mb["m00"] - ma["m01"] / ma["m00"]]
    ), changed


def _refine_shift(a: np.ndarray, b: np.ndarray, sx: float, sy: float, keep: np.ndarray, iterations: int = 2):
    """Refine a global shift of a onto b by Gauss-Newton steps on the ``keep`` pixels.

    Phase correlation's sub-pixel estimate is off by a few tenths of a pixel, enough to leave
    large residuals on sharp edges; two Lucas-Kanade steps remove that. Returns (sx, sy, a moved).
    """
    import cv2

    h, w = a.shape
    for i in range(iterations + 1):
        moved = cv2.warpAffine(
            a, np.float32([[1, 0, sx], [0, 1, sy]]), (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        )
        if i == iterations:
            break
        gx = cv2.Sobel(moved, cv2.CV_32F, 1, 0, ksize=3, scale=0.125)[keep]
        gy = cv2.Sobel(moved, cv2.CV_32F, 0, 1, ksize=3, scale=0.125)[keep]
        r = (b - moved)[keep]
        jtj = np.array([[gx @ gx, gx @ gy], [gx @ gy, gy @ gy]], dtype=np.float64)
        if np.linalg.det(jtj) < 1e-6:
            break
        dx, dy = -np.linalg.solve(jtj, np.array([gx @ r, gy @ r], dtype=np.float64))
        if not (abs(dx) < 2 and abs(dy) < 2):  # diverging: keep the phase-correlation estimate
            break
        sx, sy = sx + float(dx), sy + float(dy)
    return sx, sy, moved


#: candidate directions: the commanded displacement rotated by k * 45 degrees, k = 0..7
_ROTATIONS = [np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]]) for t in np.arange(8) * math.pi / 4]
#: the commanded one (k = 0) and those at least 90 degrees away from it (k = 2..6), stacked
_CANDIDATES = np.stack([_ROTATIONS[k] for k in (0, 2, 3, 4, 5, 6)])


def _direction_errors(a: np.ndarray, bc: np.ndarray, x0: int, y0: int, expected: np.ndarray) -> tuple[float, float]:
    """How well the commanded displacement explains frame b's window, against the alternatives.

    For a candidate displacement w, frame a's window taken at (x0, y0) - w should match b's
    window ``bc`` if the gripper moved by w. Static background costs the same for every
    candidate of the same length, so the moving gripper decides. Returns (mean abs error of the
    commanded displacement, best error among the candidates >= 90 degrees away from it).
    """
    import cv2

    c_h, c_w = bc.shape
    r = int(math.ceil(math.hypot(expected[0], expected[1]))) + 1
    padded = cv2.copyMakeBorder(a, r, r, r, r, cv2.BORDER_REPLICATE)
    shifts = np.rint(_CANDIDATES @ expected).astype(int)
    errors = []
    for dx, dy in shifts.tolist():
        xs, ys = x0 - dx + r, y0 - dy + r
        errors.append(cv2.norm(bc, padded[ys : ys + c_h, xs : xs + c_w], cv2.NORM_L1) / bc.size)
    return errors[0], min(errors[1:])


def _gradient(gray: np.ndarray) -> np.ndarray:
    """Gradient magnitude (L1 of central differences, gray levels per pixel)."""
    import cv2

    gx = cv2.Sobel(gray, cv2.CV_32F, 1, 0, ksize=3, scale=0.125)
    gy = cv2.Sobel(gray, cv2.CV_32F, 0, 1, ksize=3, scale=0.125)
    return np.abs(gx) + np.abs(gy)


def detail(gray: np.ndarray) -> float:
    """Mean absolute gradient: falls when an image blurs, washes out or goes flat."""
    import cv2

    gx = cv2.absdiff(gray[:, 1:], gray[:, :-1])
    gy = cv2.absdiff(gray[1:, :], gray[:-1, :])
    return float(cv2.mean(gx)[0] + cv2.mean(gy)[0])


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    rx, ry = average_ranks(x), average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float(rx @ rx) * float(ry @ ry))
    return float(rx @ ry) / den if den > 0 else 0.0


def average_ranks(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank: ``scipy.stats.rankdata(x)`` for finite ``x``.

    The package's one rank function (the gate's correlation, the controls' AUROC). Not scipy's:
    ``scipy.stats`` takes most of a second to import, and the gate runs in every env process that
    never needs scipy otherwise. A NaN is ranked last, alone (scipy would return all NaN)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    sx = x[order]
    starts = np.flatnonzero(np.r_[True, sx[1:] != sx[:-1]])  # first index of each run of equal values
    ends = np.r_[starts[1:], len(x)] - 1
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat((starts + ends) / 2.0 + 1.0, ends - starts + 1)
    return ranks
