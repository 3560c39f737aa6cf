"""Deterministic action-consistency gate: throw out generations whose motion ignores the command.

World models produce plausible video that does not follow the commanded action: the camera
moves instead of the arm, nothing moves at all, or the image degrades over a long rollout. A
nearly frozen scene beats every automatic video-quality score, so before any judge sees a
rollout this gate compares the motion *visible in the new frames* with the *commanded* motion,
after every world call, with a few cheap OpenCV measurements on small grayscale frames:

* **camera motion**: the global translation between consecutive frames (phase correlation,
  refined by two Lucas-Kanade steps) and how much of the frame difference *outside the
  gripper's window* it explains (the whole frame without calibration). A camera pan shifts
  the static scene; an arm moving over a still scene does not, and moving the frame by an
  arm's shift breaks the scene's unchanged edges. A pan fails a step that demands motion, and
  any step where the shift is clear and the gripper is in view (or unknown).
* **frozen frames**: when the command moves the tool centre point (TCP) by more than
  ``min_translation_m`` (and, on a calibrated world, by more than ``min_motion_px`` pixels in
  the image with the gripper in view), pixels must change (near the projected gripper when the
  calibration is known, anywhere in the frame otherwise). No change fails the step. Steps with
  a smaller command (a dwell while the gripper closes) demand nothing.
* **direction** (calibrated worlds only): the commanded TCP displacement is projected into the
  image with the world's calibration; the observed displacement of the changed pixels around
  the gripper (centroid of what left vs what arrived) must point the same way. One step's
  direction can be wrong for honest reasons (rotations, a pushed object), so the decision is
  per episode: ``max_direction_mismatches`` mismatches that are also at least
  ``max_mismatch_fraction`` of the checked steps fail the episode.
* **magnitude** (calibration-free worlds): across the episode, the amount of visible change
  per step must rise with the commanded translation (Spearman rank correlation over at least
  ``min_correlation_steps`` steps must stay above ``min_magnitude_correlation``).
* **image collapse**: the image's gradient energy must stay above ``collapse_ratio`` times the
  episode's first frame (long-rollout quality collapse blurs or washes out the image).

Workspace clipping: a world clips the TCP to its workspace, so a command into a wall moves
nothing. Where the gate knows the workspace (``workspace`` in its spec section) and the
robot's measured position before the step (the world log's ``ee_pos`` of the *previous*
call), it clips the commanded move exactly as the world does, and only the clipped part must
be visible. The current call's log is never used to excuse a step (it would describe what the
world did, not what was commanded); only on an episode's first call, when no earlier position
exists, is the start estimated as the logged end position minus the command.

Everything is deterministic (fixed-size integer/float OpenCV ops, no randomness) and costs a
fraction of a millisecond per frame at the default 64-pixel analysis size.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

#: the gate section's keys besides these thresholds
_META_KEYS = ("enabled", "notes")


@dataclass(frozen=True)
class GateThresholds:
    """Every number the gate decides with; lives in the env spec's ``gate`` section.

    Pixel quantities are in pixels of the *analysis* image, whose longer side is
    ``analysis_size`` (the frames are converted to grayscale and downscaled first).
    """

    analysis_size: int = 64
    #: per-pixel gray-level change (0-255) that counts as "changed"
    change_threshold: float = 8.0
    #: a commanded TCP translation (m) below this demands no visible motion
    min_translation_m: float = 0.01
    #: calibrated: projected TCP displacement (px) below this demands no visible motion
    min_motion_px: float = 2.0
    #: calibrated: the projected TCP and the hand above it must be this far inside the image
    view_margin_px: float = 6.0
    #: calibrated: side of the square window around the projected gripper path (px)
    crop_px: int = 32
    #: calibrated: fewer changed pixels than this near the gripper under a demanded move = frozen
    frozen_min_changed_px: int = 10
    #: calibration-free: changed fraction of the frame below this under a demanded move = frozen
    frozen_min_changed_fraction: float = 0.002
    #: global shift (px) from which camera motion is considered
    pan_min_px: float = 0.5
    #: calibrated: a global shift that explains at least this fraction of the frame difference
    #: outside the gripper's window is a camera pan
    pan_explained: float = 0.2
    #: an edge pixel (gray levels per pixel) of the scene
    pan_edge_gradient: float = 12.0
    #: not a pan if more than this fraction of the scene's unchanged edges break when the
    #: whole frame is moved by the shift (the shift then belongs to a large moving arm)
    pan_max_broken_static: float = 0.5
    #: calibration-free: the same over the whole frame (an arm filling the frame can explain
    #: part of it too, so the bar is higher)
    pan_explained_uncalibrated: float = 0.6
    #: Gaussian blur (sigma, analysis px) applied to both frames before measuring how much of the
    #: change the shift explains; 0 = none. Moving a frame by a sub-pixel shift resamples it
    #: bilinearly, which smooths it, while a real pan arrives sharp: on sharp edges that
    #: difference alone leaves a residual that counts against the pan. Blurring both frames
    #: equalises the smoothing, so what remains is misalignment.
    pan_blur_px: float = 0.0
    #: calibrated: observed vs commanded direction cosine below this is a mismatch
    direction_min_cos: float = 0.3
    #: calibrated: ... and the commanded displacement explains the window no better than this
    #: score (0.5 = no better than the best displacement >= 90 degrees away)
    direction_max_score: float = 0.47
    #: calibrated: direction is not checked when the commanded rotation swings the hand
    #: (rotation x hand_height_m) by more than this fraction of the commanded translation
    max_rotation_swing: float = 0.25
    #: calibrated: mismatches that fail an episode (together with the fraction below)
    max_direction_mismatches: int = 3
    max_mismatch_fraction: float = 0.2
    #: calibration-free: rank correlation of commanded vs visible motion over the episode
    min_magnitude_correlation: float = -1.0
    min_correlation_steps: int = 12
    #: gradient energy of a frame relative to the episode's first frame below this = collapse
    collapse_ratio: float = 0.3
    #: TCP workspace [[xmin, xmax], [ymin, ymax], [zmin, zmax]] the world clips to, if known
    workspace: tuple[tuple[float, float], ...] | None = None
    #: calibrated: height (m) above the TCP of the hand point that must be in view too
    hand_height_m: float = 0.08

    def __post_init__(self) -> None:
        positive = ("analysis_size", "change_threshold", "pan_edge_gradient", "min_motion_px", "crop_px", "pan_min_px",
                    "min_correlation_steps", "max_direction_mismatches")
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
                raise ValueError(f"gate threshold {name!r} must be a positive number, got {value!r}")
        for name in ("min_translation_m", "view_margin_px", "frozen_min_changed_px", "frozen_min_changed_fraction",
                     "hand_height_m", "max_rotation_swing", "pan_blur_px"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0):
                raise ValueError(f"gate threshold {name!r} must be a number >= 0, got {value!r}")
        for name in ("pan_explained", "pan_explained_uncalibrated", "pan_max_broken_static", "max_mismatch_fraction", "collapse_ratio", "direction_max_score"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1):
                raise ValueError(f"gate threshold {name!r} must be in [0, 1], got {value!r}")
        for name in ("direction_min_cos", "min_magnitude_correlation"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and -1 <= value <= 1):
                raise ValueError(f"gate threshold {name!r} must be in [-1, 1], got {value!r}")
        if self.analysis_size < 16:
            raise ValueError(f"gate threshold 'analysis_size' must be >= 16, got {self.analysis_size}")
        if self.crop_px > self.analysis_size:
            raise ValueError(f"gate threshold 'crop_px' ({self.crop_px}) exceeds 'analysis_size' ({self.analysis_size})")
        if self.workspace is not None:
            ws = np.asarray(self.workspace, dtype=float)
            if ws.shape != (3, 2) or not np.all(np.isfinite(ws)) or np.any(ws[:, 0] >= ws[:, 1]):
                raise ValueError(f"gate 'workspace' must be [[xmin, xmax], [ymin, ymax], [zmin, zmax]], got {self.workspace!r}")
            object.__setattr__(self, "workspace", tuple(tuple(float(v) for v in row) for row in ws))

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> "GateThresholds":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known - set(_META_KEYS))
        if unknown:
            raise ValueError(f"unknown gate setting(s) {unknown}; known: {sorted(known | set(_META_KEYS))}")
        kwargs = {k: v for k, v in raw.items() if k in known}
        for name in ("analysis_size", "crop_px", "frozen_min_changed_px", "max_direction_mismatches",
                     "min_correlation_steps"):
            if name in kwargs and not (isinstance(kwargs[name], int) and not isinstance(kwargs[name], bool)):
                raise ValueError(f"gate threshold {name!r} must be an integer, got {kwargs[name]!r}")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if self.workspace is not None:
            out["workspace"] = [list(row) for row in self.workspace]
        return out


@dataclass
class GateVerdict:
    """The gate's decision on one world call.

    ``score`` in [0, 1] is the call's worst motion-consistency score (1 = the visible motion
    matches the command; computed for every frame, also where nothing is demanded).
    ``frames`` lists the offending frames' indices within the call, ``episode_frames`` the same
    as indices into the episode's frames (0 = the reset frame).
    """

    passed: bool
    score: float
    reason: str
    check: str = ""
    frames: list[int] = field(default_factory=list)
    episode_frames: list[int] = field(default_factory=list)
    thresholds: dict[str, Any] = field(default_factory=dict)
    segments: list[dict[str, Any]] = field(default_factory=list)
    episode: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": bool(self.passed),
            "score": float(self.score),
            "reason": self.reason,
            "check": self.check,
            "frames": list(self.frames),
            "episode_frames": list(self.episode_frames),
            "thresholds": dict(self.thresholds),
            "segments": [dict(s) for s in self.segments],
            "episode": dict(self.episode),
        }


class ConsistencyGate:
    """Compares visible motion with commanded motion after every world call (see module doc).

    Stateful per episode (measured position, mismatch counts, motion history): call
    :meth:`reset` at every episode start. Use :meth:`check` after every world call.
    """

    def __init__(self, thresholds: GateThresholds | None = None):
        import cv2  # noqa: F401  (fail early with a clear ImportError if OpenCV is missing)

        self.thresholds = thresholds or GateThresholds()
        self._thresholds_dict = self.thresholds.to_dict()
        # per-call constants, built once: the workspace rows as Python floats (the clipping of
        # the commanded move runs on Python floats) and the hand's lift above the TCP
        ws = self.thresholds.workspace
        self._workspace_rows = None if ws is None else [(float(lo), float(hi)) for lo, hi in ws]
        self._lift = np.array([0.0, 0.0, self.thresholds.hand_height_m])
        self._hann_cache: dict[tuple[int, int], np.ndarray] = {}
        # (frame shape, analysis shape) -> analysis pixels per frame pixel (x, y): a per-size constant
        self._scale_cache: dict[tuple[tuple[int, ...], tuple[int, ...]], np.ndarray] = {}
        self.reset()

    @classmethod
    def from_spec(cls, gate_spec: Mapping[str, Any]) -> "ConsistencyGate":
        """Build from an env spec's ``gate`` section (``enabled`` and ``notes`` are ignored here)."""
        if not isinstance(gate_spec, Mapping):
            raise ValueError(f"the gate spec must be a mapping, got {type(gate_spec).__name__}")
        return cls(GateThresholds.from_mapping(gate_spec))

    # -- episode state ------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the previous episode."""
        self._pos: np.ndarray | None = None  # measured TCP position after the last call
        self._frames_seen = 0  # frames received since reset (the reset frame is frame 0)
        self._checked = 0  # demanded steps with a direction measurement
        self._mismatches = 0
        self._magnitudes: list[tuple[float, float]] = []  # (commanded m, changed fraction)
        self._base_detail: float | None = None
        self._failed: str | None = None
        self._last_raw: np.ndarray | None = None  # last frame seen, and its analysis image
        self._last_gray: np.ndarray | None = None

    @property
    def episode_summary(self) -> dict[str, Any]:
        """Counters of the current episode (also in every verdict's ``episode``)."""
        return {
            "frames_seen": self._frames_seen,
            "direction_checked": self._checked,
            "direction_mismatches": self._mismatches,
            "magnitude_steps": len(self._magnitudes),
            "magnitude_correlation": self._magnitude_correlation(),
        }

    # -- the check ----------------------------------------------------------------------
    def check(
        self,
        prev_frame: np.ndarray,
        frames: np.ndarray,
        actions: np.ndarray,
        calibration: Any = None,
        log: Mapping[str, Any] | None = None,
    ) -> GateVerdict:
        """Judge one world call: ``prev_frame`` (H, W, 3) uint8 is the last frame before it,
        ``frames`` (n, H, W, 3) uint8 what it generated, ``actions`` (k, 7) the validated env
        actions it was given, ``calibration`` the world's camera (or None), ``log`` the world's
        log for this call (``ee_pos`` (k, 3) where the world has one; may be empty).
        """
        th = self.thresholds
        prev_frame, frames, actions = self._validate(prev_frame, frames, actions)
        log = dict(log or {})
        n, k = len(frames), len(actions)
        logged = _logged_positions(log, k)

        last = self._last_raw
        if last is not None and last.shape == prev_frame.shape \
                and (_same_memory(last, prev_frame) or np.array_equal(last, prev_frame)):
            first = self._last_gray  # the previous call's last frame: already converted
        else:
            first = self._gray(prev_frame)
        grays = [first] + [self._gray(f) for f in frames]
        self._last_raw, self._last_gray = frames[-1], grays[-1]
        if self._base_detail is None:
            self._base_detail = _detail(grays[0])
        scale = self._scale(prev_frame.shape, grays[0].shape)

        # which frame each action ends on (n == k: one frame per action)
        ends = [min(n - 1, max(0, int(round((i + 1) * n / k)) - 1)) for i in range(k)]
        segments: list[dict[str, Any]] = []
        failures: list[tuple[str, str, int]] = []  # (check, reason, frame index in call)
        start_frame, first_action = -1, 0
        pos = self._pos
        call_start: np.ndarray | None = None
        for i in range(k):
            if i + 1 < k and ends[i + 1] == ends[i]:
                continue  # several actions end on the same frame: one segment
            end_frame = ends[i]
            acts = actions[first_action: i + 1]
            commanded = acts[:, :3].astype(np.float64).sum(axis=0)
            start = pos
            if start is None and logged is not None:
                start = logged[i].astype(np.float64) - commanded  # first call only: see module doc
            if start is not None and th.workspace is not None:
                commanded = self._clipped_move(start, acts)
            if not segments:
                call_start = start
            a_img, b_img = grays[start_frame + 1], grays[end_frame + 1]
            rotation = float(np.abs(acts[:, 3:6]).sum(axis=0).max())
            seg = self._segment(a_img, b_img, commanded, rotation, start, calibration, scale)
            seg["frame"] = end_frame
            seg["actions"] = [first_action, i + 1]
            segments.append(seg)
            if seg["failure"]:
                failures.append((seg["failure"][0], seg["failure"][1], end_frame))
            if logged is not None:
                pos = logged[i].astype(np.float64)
            elif start is not None:
                pos = start + commanded
            start_frame, first_action = end_frame, i + 1
        self._pos = pos

        # a slowly drifting camera moves the scene by less than an analysis pixel between two
        # frames but by several over a call of several frames: check the whole call as well
        if len(segments) > 1 and not any(f[0] == "camera_motion" for f in failures):
            moved = (pos - call_start) if (pos is not None and call_start is not None) else \
                actions[:, :3].astype(np.float64).sum(axis=0)
            reason = self._call_pan(grays[0], grays[-1], moved, call_start, calibration, scale,
                                    any(sg["demanded"] for sg in segments), n)
            if reason:
                failures.append(("camera_motion", reason, n - 1))

        # image collapse (every frame)
        for j, g in enumerate(grays[1:]):
            ratio = _detail(g) / max(self._base_detail, 1e-6)
            if ratio < th.collapse_ratio:
                failures.append(("collapse", f"image detail collapsed to {ratio:.2f} of the first frame's "
                                 f"(threshold {th.collapse_ratio})", j))
                break

        # episode-level decisions
        if not failures and self._checked and self._mismatches >= th.max_direction_mismatches \
                and self._mismatches / self._checked >= th.max_mismatch_fraction:
            failures.append(("direction", f"the gripper moved against the commanded direction in {self._mismatches} "
                             f"of {self._checked} checked steps (cosine < {th.direction_min_cos}; at most "
                             f"{th.max_direction_mismatches - 1} tolerated)", segments[-1]["frame"]))
        corr = self._magnitude_correlation()
        if not failures and corr is not None and corr < th.min_magnitude_correlation:
            failures.append(("magnitude", f"visible motion does not follow the commanded motion over the episode "
                             f"(rank correlation {corr:.2f} over {len(self._magnitudes)} steps < "
                             f"{th.min_magnitude_correlation})", segments[-1]["frame"]))

        first_index = self._frames_seen + 1
        self._frames_seen += n
        score = min([s["score"] for s in segments] or [1.0])
        if failures and self._failed is None:
            self._failed = failures[0][1]
        if failures:
            check, reason, _ = failures[0]
            bad = sorted({f[2] for f in failures})
            return GateVerdict(False, 0.0 if check in ("frozen", "camera_motion", "collapse") else score, reason,
                               check=check, frames=bad, episode_frames=[first_index + j for j in bad],
                               thresholds=dict(self._thresholds_dict), segments=_public(segments), episode=self.episode_summary)
        demanded = sum(s["demanded"] for s in segments)
        reason = (f"motion consistent with the command ({demanded} of {len(segments)} segment(s) demanded visible "
                  f"motion; worst score {score:.2f})")
        return GateVerdict(True, score, reason, check="ok", thresholds=dict(self._thresholds_dict), segments=_public(segments),
                           episode=self.episode_summary)

    def _clipped_move(self, start: np.ndarray, acts: np.ndarray) -> np.ndarray:
        """The commanded TCP move from ``start`` with the workspace clipping the world applies
        after every action. np.clip's arithmetic on Python floats (float32 action to float64,
        add, numpy's clip rule for array bounds): the same bits as the numpy loop, less overhead."""
        target = start.tolist()
        for move in acts[:, :3].tolist():
            target = [_clip_to_bounds(t + d, lo, hi) for t, d, (lo, hi) in zip(target, move, self._workspace_rows)]
        return np.array(target) - start

    # -- measurements -------------------------------------------------------------------
    def _segment(self, a, b, commanded, rotation, start, calibration, scale) -> dict[str, Any]:
        """Measure one action segment (frame a -> frame b) and update the episode counters."""
        th = self.thresholds
        cmd_m = float(np.linalg.norm(commanded))
        seg: dict[str, Any] = {"commanded_m": round(cmd_m, 5), "failure": None}
        demanded_m = cmd_m >= th.min_translation_m
        geo = None
        if calibration is not None and start is not None:
            geo = self._geometry(commanded, start, calibration, scale, a.shape)
            seg.update(in_view=geo["in_view"], expected_px=[round(float(v), 3) for v in geo["expected"]],
                       demanded=bool(demanded_m and geo["in_view"] and geo["expected_px"] >= th.min_motion_px))

        # |b - a| and its change mask, computed once per segment: the pan pre-check, the pan
        # measure, the gripper window and the centroid all read them (the same values each of
        # them computed on its own before)
        box = None if geo is None else geo["box"]
        absdiff = np.abs(b - a)
        changed = None if box is None else absdiff > th.change_threshold
        # the gripper window's changed-pixel count, read by the pan pre-check and the measurement
        window_changed = None if box is None else \
            int(np.count_nonzero(changed[box[1]: box[1] + box[2], box[0]: box[0] + box[2]]))
        a_in = a
        a, pan, shift = self._camera_motion(seg, a, b, box, absdiff, changed, window_changed=window_changed)
        if a is not a_in:  # after a pan, a is the camera-compensated frame: its own difference
            absdiff = changed = window_changed = None

        if geo is not None:
            self._measure_calibrated(seg, a, b, geo, commanded, rotation, changed, window_changed=window_changed)
        else:
            self._segment_uncalibrated(seg, a, b, cmd_m, demanded_m, absdiff)

        if pan:
            seg["score"] = 0.0
            # a step that demands no motion fails on a clear pan only where the gripper is in
            # view: an arm out of view can be one close to the camera, filling the frame
            if seg["demanded"] or (shift >= 2 * th.pan_min_px and seg.get("in_view") is not False):
                sx, sy = seg["global_shift_px"]
                seg["failure"] = ("camera_motion", f"the whole image moved by ({sx:.1f}, {sy:.1f}) px "
                                  f"(a camera pan explaining {seg['pan_explained']:.0%} of the change)")
        return seg

    def _camera_motion(self, seg, a, b, box, absdiff=None, changed=None, *, window_changed=None):
        """Global shift between a and b, and whether it is a camera pan.

        The shift comes from phase correlation (Hann-windowed). It is a pan when
        moving the whole of ``a`` by it explains at least ``pan_explained`` of the difference
        outside the gripper's window ``box`` (the whole frame when the gripper's place is
        unknown): a pan moves the static scene, an arm does not. Returns (a compensated for a
        pan or a unchanged, pan?, shift in px). ``absdiff`` (``|b - a|``) and ``changed`` (its
        change mask) are passed by callers that have them already, and ``window_changed`` (the
        mask's count inside ``box``) with ``changed``.
        """
        import cv2

        th = self.thresholds
        h, w = a.shape
        if box is not None:
            # nothing changed outside the gripper's window: nothing there can have panned
            x0, y0, c = box
            if changed is None:
                absdiff = np.abs(b - a) if absdiff is None else absdiff
                changed = absdiff > th.change_threshold
                window_changed = None  # (a count passed without its mask is not this mask's)
            if window_changed is None:
                window_changed = int(np.count_nonzero(changed[y0: y0 + c, x0: x0 + c]))
            outside = int(np.count_nonzero(changed)) - window_changed
            if outside < th.frozen_min_changed_px:
                seg["global_shift_px"] = [0.0, 0.0]
                return a, False, 0.0
        win = self._hann(a.shape)
        # the window is applied here, on copies: OpenCV 5's phaseCorrelate windows its inputs in place
        (sx, sy), _ = cv2.phaseCorrelate(a * win, b * win)
        shift = float(math.hypot(sx, sy))
        seg["global_shift_px"] = [round(float(sx), 3), round(float(sy), 3)]
        if shift < th.pan_min_px:
            return a, False, shift
        m = int(math.ceil(shift)) + 1
        if 2 * m >= min(h, w):
            return a, False, shift
        keep = np.zeros((h, w), dtype=bool)
        keep[m:-m, m:-m] = True
        if box is not None:
            x0, y0, c = box
            keep[y0: y0 + c, x0: x0 + c] = False
        if absdiff is None:
            absdiff = np.abs(b - a)
        raw = float(np.mean(absdiff[keep])) if keep.any() else 0.0
        if raw < 0.02 * th.change_threshold:  # the scene outside the gripper did not change at all
            seg["pan_explained"] = 0.0
            return a, False, shift
        sx, sy, moved = _refine_shift(a, b, sx, sy, keep)
        seg["global_shift_px"] = [round(float(sx), 3), round(float(sy), 3)]
        shift = float(math.hypot(sx, sy))
        if th.pan_blur_px > 0:  # equal smoothing on both sides (see GateThresholds.pan_blur_px)
            ab = cv2.GaussianBlur(a, (0, 0), th.pan_blur_px)
            bb = cv2.GaussianBlur(b, (0, 0), th.pan_blur_px)
            moved_b = cv2.warpAffine(ab, np.float32([[1, 0, sx], [0, 1, sy]]), (w, h), flags=cv2.INTER_LINEAR,
                                     borderMode=cv2.BORDER_REPLICATE)
            raw_b = float(np.mean(np.abs(bb - ab)[keep]))
            explained = 1.0 - float(np.mean(np.abs(bb - moved_b)[keep])) / raw_b if raw_b > 0 else 0.0
        else:
            comp = float(np.mean(np.abs(b - moved)[keep]))
            explained = 1.0 - comp / raw
        seg["pan_explained"] = round(explained, 3)
        # a large arm close to the camera can dominate the shift too; but then the scene's
        # edges that did not change (the table's edge, objects) break when everything is moved
        # by the arm's shift, while after a real pan they stay matched
        edges = keep & (_gradient(a) > th.pan_edge_gradient)
        still = edges & (absdiff <= th.change_threshold)
        n_still = int(np.count_nonzero(still))
        broken = int(np.count_nonzero(still & (np.abs(b - moved) > th.change_threshold)))
        broken_fraction = broken / n_still if n_still >= th.frozen_min_changed_px else 0.0
        seg["pan_broken_static"] = round(broken_fraction, 3)
        if explained >= (th.pan_explained if box is not None else th.pan_explained_uncalibrated) \
                and broken_fraction <= th.pan_max_broken_static:
            return moved, True, shift  # measure the arm against the camera-compensated frame
        return a, False, shift

    def _call_pan(self, a, b, moved, start, calibration, scale, demanded: bool, n: int) -> str | None:
        """Camera motion between a call's input frame and its last frame (None: no pan)."""
        th = self.thresholds
        seg: dict[str, Any] = {}
        box, in_view = None, None
        if calibration is not None and start is not None:
            geo = self._geometry(moved, start, calibration, scale, a.shape)
            box, in_view = geo["box"], geo["in_view"]
        _, pan, shift = self._camera_motion(seg, a, b, box)
        if pan and (demanded or (shift >= 2 * th.pan_min_px and in_view is not False)):
            sx, sy = seg["global_shift_px"]
            return (f"the whole image moved by ({sx:.1f}, {sy:.1f}) px over the call's {n} frames "
                    f"(a camera pan explaining {seg['pan_explained']:.0%} of the change)")
        return None

    def _geometry(self, commanded, start, calibration, scale, shape) -> dict[str, Any]:
        """Where the gripper is and should go in the analysis image (calibrated worlds)."""
        th = self.thresholds
        lift = self._lift
        end = start + commanded
        # the TCP and the hand above it, before and after the commanded move
        # (np.array of the four (3,) rows: the (4, 3) array np.stack builds, with less overhead)
        uv = np.asarray(calibration.project(np.array([start, end, start + lift, end + lift])), dtype=np.float64) * scale
        h, w = shape
        # the view test on Python floats: the same comparisons as numpy's min/max, less overhead
        us, vs = uv[:, 0].tolist(), uv[:, 1].tolist()
        finite = all(map(math.isfinite, us)) and all(map(math.isfinite, vs))
        margin = th.view_margin_px
        in_view = finite and (min(us) >= margin and max(us) <= w - margin
                              and min(vs) >= margin and max(vs) <= h - margin)
        if not finite:
            return {"in_view": False, "expected": np.zeros(2), "expected_px": 0.0, "box": None}
        expected = uv[1] - uv[0]
        c = th.crop_px
        cx, cy = (uv[0, 0] + uv[1, 0]) / 2, (uv[0, 1] + uv[1, 1]) / 2
        x0 = min(max(int(round(cx)) - c // 2, 0), max(w - c, 0))
        y0 = min(max(int(round(cy)) - c // 2, 0), max(h - c, 0))
        return {"in_view": in_view, "expected": expected, "expected_px": math.hypot(expected[0], expected[1]),
                "box": (x0, y0, c)}

    def _measure_calibrated(self, seg, a, b, geo, commanded, rotation, changed_mask=None, *,
                            window_changed=None) -> None:
        th = self.thresholds
        expected, exp_px, box = geo["expected"], geo["expected_px"], geo["box"]
        if box is None:
            seg.update(observed_px=[0.0, 0.0], changed_px=0, cos=None, score=1.0)
            return
        x0, y0, c = box
        ac, bc = a[y0: y0 + c, x0: x0 + c], b[y0: y0 + c, x0: x0 + c]
        # the window's change mask: a crop of the segment's (b, a) mask where the caller has it
        mask = (np.abs(bc - ac) > th.change_threshold) if changed_mask is None else changed_mask[y0: y0 + c, x0: x0 + c]
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
        if seg["demanded"]:  # (only where it can decide something: it is the costliest measurement)
            e_cmd, e_alt = _direction_errors(a, bc, x0, y0, expected)
            direction_score = 0.5 + 0.5 * (e_alt - e_cmd) / (e_alt + e_cmd) if e_alt + e_cmd > 1e-9 else 1.0
        score = centroid_score if direction_score is None else (direction_score + centroid_score) / 2
        seg.update(observed_px=[round(float(v), 3) for v in observed], changed_px=changed,
                   cos=None if cos is None else round(cos, 3),
                   direction_score=None if direction_score is None else round(direction_score, 4),
                   centroid_score=round(centroid_score, 4), score=round(score, 4))
        if not seg["demanded"]:
            return
        if changed < th.frozen_min_changed_px:
            seg["score"] = 0.0
            seg["failure"] = ("frozen", f"no visible motion near the gripper ({changed} changed px < "
                              f"{th.frozen_min_changed_px}) although the command moves it by {seg['commanded_m']:.3f} m "
                              f"({exp_px:.1f} px)")
            return
        # a commanded rotation swings the hand about the TCP; when that swing is not small next
        # to the commanded translation, the direction of the visible motion says nothing
        swing = rotation * th.hand_height_m
        if swing > th.max_rotation_swing * float(np.linalg.norm(commanded)):
            seg["direction_checked"] = False
            return
        seg["direction_checked"] = True
        self._checked += 1
        if (cos is None or cos < th.direction_min_cos) and direction_score < th.direction_max_score:
            self._mismatches += 1
            seg["mismatch"] = True

    def _segment_uncalibrated(self, seg, a, b, cmd_m, demanded_m, absdiff=None) -> None:
        th = self.thresholds
        diff = np.abs(b - a) if absdiff is None else absdiff
        m = max(1, int(round(0.05 * min(a.shape))))  # ignore a thin border (pan fill, crop jitter)
        changed = float(np.mean(diff[m:-m, m:-m] > th.change_threshold))
        seg.update(in_view=None, demanded=bool(demanded_m), changed_fraction=round(changed, 5))
        self._magnitudes.append((cmd_m, changed))
        # per-step score: commanded and visible motion agree in kind (both small or both large)
        cmd_level = min(1.0, cmd_m / max(2 * th.min_translation_m, 1e-9))
        vis_level = min(1.0, changed / max(10 * th.frozen_min_changed_fraction, 1e-9))
        seg["score"] = round(1.0 - abs(cmd_level - vis_level), 4)
        if demanded_m and changed < th.frozen_min_changed_fraction:
            seg["score"] = 0.0
            seg["failure"] = ("frozen", f"no visible motion ({changed:.2%} of the image changed < "
                              f"{th.frozen_min_changed_fraction:.2%}) although the command moves the gripper by "
                              f"{seg['commanded_m']:.3f} m")

    def _magnitude_correlation(self) -> float | None:
        th = self.thresholds
        if len(self._magnitudes) < th.min_correlation_steps:
            return None
        cmd = np.array([m[0] for m in self._magnitudes])
        vis = np.array([m[1] for m in self._magnitudes])
        if np.ptp(cmd) < 1e-9 or np.ptp(vis) < 1e-12:
            return None
        return round(_spearman(cmd, vis), 4)

    # -- helpers ------------------------------------------------------------------------
    def _gray(self, frame: np.ndarray) -> np.ndarray:
        import cv2

        h, w = frame.shape[:2]
        s = self.thresholds.analysis_size / max(h, w)
        g = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
        if s != 1.0:  # thresholds are in analysis pixels: small frames are upsampled, not left small
            size = (max(1, int(round(w * s))), max(1, int(round(h * s))))
            g = cv2.resize(g, size, interpolation=cv2.INTER_AREA if s < 1.0 else cv2.INTER_LINEAR)
        return g.astype(np.float32)

    def _scale(self, frame_shape: tuple[int, ...], gray_shape: tuple[int, ...]) -> np.ndarray:
        """Analysis pixels per frame pixel, (x, y); built once per frame size (read-only)."""
        key = (frame_shape, gray_shape)
        scale = self._scale_cache.get(key)
        if scale is None:
            scale = np.array([gray_shape[1] / frame_shape[1], gray_shape[0] / frame_shape[0]])
            scale.flags.writeable = False
            self._scale_cache[key] = scale
        return scale

    def _hann(self, shape: tuple[int, int]) -> np.ndarray:
        import cv2

        if shape not in self._hann_cache:
            self._hann_cache[shape] = cv2.createHanningWindow((shape[1], shape[0]), cv2.CV_32F)
        return self._hann_cache[shape]

    @staticmethod
    def _validate(prev_frame, frames, actions):
        prev_frame = np.asarray(prev_frame)
        frames = np.asarray(frames)
        actions = np.asarray(actions, dtype=np.float32)
        if prev_frame.ndim != 3 or prev_frame.shape[2] != 3 or prev_frame.dtype != np.uint8:
            raise ValueError(f"gate: prev_frame must be (H, W, 3) uint8, got {prev_frame.shape} {prev_frame.dtype}")
        if frames.ndim != 4 or frames.shape[1:] != prev_frame.shape or frames.dtype != np.uint8 or len(frames) == 0:
            raise ValueError(f"gate: frames must be (n>=1, {prev_frame.shape[0]}, {prev_frame.shape[1]}, 3) uint8, "
                             f"got {frames.shape} {frames.dtype}")
        if actions.ndim == 1:
            actions = actions[None]
        if actions.ndim != 2 or actions.shape[1] != 7 or len(actions) == 0:
            raise ValueError(f"gate: actions must be (k>=1, 7), got {actions.shape}")
        if not np.isfinite(actions).all():
            raise ValueError("gate: actions contain NaN or inf")
        return prev_frame, frames, actions


def _same_memory(x: np.ndarray, y: np.ndarray) -> bool:
    """True when two arrays view the same bytes in the same layout: then their pixels are equal
    (the env hands the gate back the previous call's last frame, a view of the same buffer)."""
    return (x.dtype == y.dtype and x.strides == y.strides and x.shape == y.shape
            and x.__array_interface__["data"][0] == y.__array_interface__["data"][0])


def _clip_to_bounds(x: float, lo: float, hi: float) -> float:
    """``np.clip(x, lo_array, hi_array)`` for one finite element: max(x, lo) then min(., hi), a tie
    keeping the bound (numpy's loop for array bounds; the sign of a zero comes out the same)."""
    x = x if x > lo else lo
    return x if x < hi else hi


def _logged_positions(log: Mapping[str, Any], k: int) -> np.ndarray | None:
    ee = log.get("ee_pos")
    if ee is None:
        return None
    ee = np.asarray(ee, dtype=np.float64)
    if ee.shape != (k, 3) or not np.isfinite(ee).all():
        return None
    return ee


def _changed_centroid_shift(a: np.ndarray, b: np.ndarray, threshold: float,
                            mask: np.ndarray | None = None, *, count: int | None = None) -> tuple[np.ndarray, int]:
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
    return np.array([mb["m10"] / mb["m00"] - ma["m10"] / ma["m00"], mb["m01"] / mb["m00"] - ma["m01"] / ma["m00"]]), changed


def _refine_shift(a: np.ndarray, b: np.ndarray, sx: float, sy: float, keep: np.ndarray, iterations: int = 2):
    """Refine a global shift of a onto b by Gauss-Newton steps on the ``keep`` pixels.

    Phase correlation's sub-pixel estimate is off by a few tenths of a pixel, enough to leave
    large residuals on sharp edges; two Lucas-Kanade steps remove that. Returns (sx, sy, a moved).
    """
    import cv2

    h, w = a.shape
    for i in range(iterations + 1):
        moved = cv2.warpAffine(a, np.float32([[1, 0, sx], [0, 1, sy]]), (w, h), flags=cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REPLICATE)
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
        errors.append(cv2.norm(bc, padded[ys: ys + c_h, xs: xs + c_w], cv2.NORM_L1) / bc.size)
    return errors[0], min(errors[1:])


def _gradient(gray: np.ndarray) -> np.ndarray:
    """Gradient magnitude (L1 of central differences, gray levels per pixel)."""
    import cv2

    gx = cv2.Sobel(gray, cv2.CV_32F, 1, 0, ksize=3, scale=0.125)
    gy = cv2.Sobel(gray, cv2.CV_32F, 0, 1, ksize=3, scale=0.125)
    return np.abs(gx) + np.abs(gy)


def _detail(gray: np.ndarray) -> float:
    """Mean absolute gradient: falls when an image blurs, washes out or goes flat."""
    import cv2

    gx = cv2.absdiff(gray[:, 1:], gray[:, :-1])
    gy = cv2.absdiff(gray[1:, :], gray[:-1, :])
    return float(cv2.mean(gx)[0] + cv2.mean(gy)[0])


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float(rx @ rx) * float(ry @ ry))
    return float(rx @ ry) / den if den > 0 else 0.0


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank)."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i: j + 1]] = (i + j) / 2.0
        i = j + 1
    return ranks


def _public(segments: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for s in segments:
        d = {k: v for k, v in s.items() if k != "failure"}
        d["failure"] = s["failure"][0] if s["failure"] else None
        out.append(d)
    return out
