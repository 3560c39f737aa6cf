"""The gate itself: :class:`ConsistencyGate` cuts each world call into segments, measures each
(:mod:`kosmos_env.gate.measurements`) into a :class:`~kosmos_env.gate.segment.Segment` and
keeps the episode's counters (measured position, direction mismatches, motion history)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kosmos_env.gate.measurements import (
    camera_motion,
    clipped_move,
    detail,
    geometry,
    gray,
    logged_positions,
    measure_calibrated,
    measure_uncalibrated,
    same_memory,
    spearman,
)
from kosmos_env.gate.segment import Segment
from kosmos_env.gate.thresholds import GateThresholds
from kosmos_env.gate.verdict import GateVerdict


class ConsistencyGate:
    """Compares visible motion with commanded motion after every world call (see :mod:`kosmos_env.gate`).

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
        logged = logged_positions(log, k)

        last = self._last_raw
        if (
            last is not None
            and last.shape == prev_frame.shape
            and (same_memory(last, prev_frame) or np.array_equal(last, prev_frame))
        ):
            first = self._last_gray  # the previous call's last frame: already converted
        else:
            first = self._gray(prev_frame)
        grays = [first] + [self._gray(f) for f in frames]
        self._last_raw, self._last_gray = frames[-1], grays[-1]
        if self._base_detail is None:
            self._base_detail = detail(grays[0])
        scale = self._scale(prev_frame.shape, grays[0].shape)

        # which frame each action ends on (n == k: one frame per action)
        ends = [min(n - 1, max(0, int(round((i + 1) * n / k)) - 1)) for i in range(k)]
        segments: list[Segment] = []
        failures: list[tuple[str, str, int]] = []  # (check, reason, frame index in call)
        start_frame, first_action = -1, 0
        pos = self._pos
        call_start: np.ndarray | None = None
        for i in range(k):
            if i + 1 < k and ends[i + 1] == ends[i]:
                continue  # several actions end on the same frame: one segment
            end_frame = ends[i]
            acts = actions[first_action : i + 1]
            commanded = acts[:, :3].astype(np.float64).sum(axis=0)
            start = pos
            if start is None and logged is not None:
                start = logged[i].astype(np.float64) - commanded  # first call only: see the package doc
            if start is not None and th.workspace is not None:
                commanded = clipped_move(self._workspace_rows, start, acts)
            if not segments:
                call_start = start
            a_img, b_img = grays[start_frame + 1], grays[end_frame + 1]
            rotation = float(np.abs(acts[:, 3:6]).sum(axis=0).max())
            seg = self._segment(a_img, b_img, commanded, rotation, start, calibration, scale)
            seg.frame = end_frame
            seg.actions = [first_action, i + 1]
            segments.append(seg)
            if seg.failure:
                failures.append((seg.failure[0], seg.failure[1], end_frame))
            if logged is not None:
                pos = logged[i].astype(np.float64)
            elif start is not None:
                pos = start + commanded
            start_frame, first_action = end_frame, i + 1
        self._pos = pos

        # a slowly drifting camera moves the scene by less than an analysis pixel between two
        # frames but by several over a call of several frames: check the whole call as well
        if len(segments) > 1 and not any(f[0] == "camera_motion" for f in failures):
            moved = (
                (pos - call_start)
                if (pos is not None and call_start is not None)
                else actions[:, :3].astype(np.float64).sum(axis=0)
            )
            reason = self._call_pan(
                grays[0], grays[-1], moved, call_start, calibration, scale, any(sg.demanded for sg in segments), n
            )
            if reason:
                failures.append(("camera_motion", reason, n - 1))

        # image collapse (every frame)
        for j, g in enumerate(grays[1:]):
            ratio = detail(g) / max(self._base_detail, 1e-6)
            if ratio < th.collapse_ratio:
                failures.append(
                    (
                        "collapse",
                        f"image detail collapsed to {ratio:.2f} of the first frame's (threshold {th.collapse_ratio})",
                        j,
                    )
                )
                break

        # episode-level decisions
        if (
            not failures
            and self._checked
            and self._mismatches >= th.max_direction_mismatches
            and self._mismatches / self._checked >= th.max_mismatch_fraction
        ):
            failures.append(
                (
                    "direction",
                    f"the gripper moved against the commanded direction in {self._mismatches} "
                    f"of {self._checked} checked steps (cosine < {th.direction_min_cos}; at most "
                    f"{th.max_direction_mismatches - 1} tolerated)",
                    segments[-1].frame,
                )
            )
        corr = self._magnitude_correlation()
        if not failures and corr is not None and corr < th.min_magnitude_correlation:
            failures.append(
                (
                    "magnitude",
                    f"visible motion does not follow the commanded motion over the episode "
                    f"(rank correlation {corr:.2f} over {len(self._magnitudes)} steps < "
                    f"{th.min_magnitude_correlation})",
                    segments[-1].frame,
                )
            )

        first_index = self._frames_seen + 1
        self._frames_seen += n
        score = min([s.score for s in segments] or [1.0])
        if failures and self._failed is None:
            self._failed = failures[0][1]
        if failures:
            check, reason, _ = failures[0]
            bad = sorted({f[2] for f in failures})
            return GateVerdict(
                False,
                0.0 if check in ("frozen", "camera_motion", "collapse") else score,
                reason,
                check=check,
                frames=bad,
                episode_frames=[first_index + j for j in bad],
                thresholds=dict(self._thresholds_dict),
                segments=[s.to_dict() for s in segments],
                episode=self.episode_summary,
            )
        demanded = sum(s.demanded for s in segments)
        reason = (
            f"motion consistent with the command ({demanded} of {len(segments)} segment(s) demanded visible "
            f"motion; worst score {score:.2f})"
        )
        return GateVerdict(
            True,
            score,
            reason,
            check="ok",
            thresholds=dict(self._thresholds_dict),
            segments=[s.to_dict() for s in segments],
            episode=self.episode_summary,
        )

    def _segment(self, a, b, commanded, rotation, start, calibration, scale) -> Segment:
        """Measure one action segment (frame a -> frame b) and update the episode counters."""
        th = self.thresholds
        cmd_m = float(np.linalg.norm(commanded))
        seg = Segment(round(cmd_m, 5))
        demanded_m = cmd_m >= th.min_translation_m
        geo = None
        if calibration is not None and start is not None:
            geo = geometry(th, self._lift, commanded, start, calibration, scale, a.shape)
            seg.calibrated = True
            seg.in_view = geo.in_view
            seg.expected_px = [round(float(v), 3) for v in geo.expected]
            seg.demanded = bool(demanded_m and geo.in_view and geo.expected_px >= th.min_motion_px)

        # |b - a| and its change mask, computed once per segment: the pan pre-check, the pan
        # measure, the gripper window and the centroid all read them (the same values each of
        # them computed on its own before)
        box = None if geo is None else geo.box
        absdiff = np.abs(b - a)
        changed = None if box is None else absdiff > th.change_threshold
        # the gripper window's changed-pixel count, read by the pan pre-check and the measurement
        window_changed = (
            None if box is None else int(np.count_nonzero(changed[box[1] : box[1] + box[2], box[0] : box[0] + box[2]]))
        )
        a_in = a
        a, pan, shift = camera_motion(th, self._hann, seg, a, b, box, absdiff, changed, window_changed=window_changed)
        if a is not a_in:  # after a pan, a is the camera-compensated frame: its own difference
            absdiff = changed = window_changed = None

        if geo is not None:
            measure_calibrated(th, seg, a, b, geo, commanded, rotation, changed, window_changed=window_changed)
            if seg.direction_checked is True:  # the episode's direction count
                self._checked += 1
                if seg.mismatch is True:
                    self._mismatches += 1
        else:
            self._magnitudes.append((cmd_m, measure_uncalibrated(th, seg, a, b, cmd_m, demanded_m, absdiff)))

        if pan:
            seg.score = 0.0
            # a step that demands no motion fails on a clear pan only where the gripper is in
            # view: an arm out of view can be one close to the camera, filling the frame
            if seg.demanded or (shift >= 2 * th.pan_min_px and seg.in_view is not False):
                sx, sy = seg.global_shift_px
                seg.failure = (
                    "camera_motion",
                    f"the whole image moved by ({sx:.1f}, {sy:.1f}) px "
                    f"(a camera pan explaining {seg.pan_explained:.0%} of the change)",
                )
        return seg

    def _call_pan(self, a, b, moved, start, calibration, scale, demanded: bool, n: int) -> str | None:
        """Camera motion between a call's input frame and its last frame (None: no pan)."""
        th = self.thresholds
        seg = Segment(0.0)  # a scratch record: only the camera motion is measured
        box, in_view = None, None
        if calibration is not None and start is not None:
            geo = geometry(th, self._lift, moved, start, calibration, scale, a.shape)
            box, in_view = geo.box, geo.in_view
        _, pan, shift = camera_motion(th, self._hann, seg, a, b, box)
        if pan and (demanded or (shift >= 2 * th.pan_min_px and in_view is not False)):
            sx, sy = seg.global_shift_px
            return (
                f"the whole image moved by ({sx:.1f}, {sy:.1f}) px over the call's {n} frames "
                f"(a camera pan explaining {seg.pan_explained:.0%} of the change)"
            )
        return None

    def _magnitude_correlation(self) -> float | None:
        th = self.thresholds
        if len(self._magnitudes) < th.min_correlation_steps:
            return None
        cmd = np.array([m[0] for m in self._magnitudes])
        vis = np.array([m[1] for m in self._magnitudes])
        if np.ptp(cmd) < 1e-9 or np.ptp(vis) < 1e-12:
            return None
        return round(spearman(cmd, vis), 4)

    # -- helpers ------------------------------------------------------------------------
    def _gray(self, frame: np.ndarray) -> np.ndarray:
        return gray(frame, self.thresholds.analysis_size)

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
            raise ValueError(
                f"gate: frames must be (n>=1, {prev_frame.shape[0]}, {prev_frame.shape[1]}, 3) uint8, "
                f"got {frames.shape} {frames.dtype}"
            )
        if actions.ndim == 1:
            actions = actions[None]
        if actions.ndim != 2 or actions.shape[1] != 7 or len(actions) == 0:
            raise ValueError(f"gate: actions must be (k>=1, 7), got {actions.shape}")
        if not np.isfinite(actions).all():
            raise ValueError("gate: actions contain NaN or inf")
        return prev_frame, frames, actions
