"""The gate's thresholds: every number it decides with (the env spec's ``gate`` section), validated."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

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
        positive = (
            "analysis_size",
            "change_threshold",
            "pan_edge_gradient",
            "min_motion_px",
            "crop_px",
            "pan_min_px",
            "min_correlation_steps",
            "max_direction_mismatches",
        )
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
                raise ValueError(f"gate threshold {name!r} must be a positive number, got {value!r}")
        for name in (
            "min_translation_m",
            "view_margin_px",
            "frozen_min_changed_px",
            "frozen_min_changed_fraction",
            "hand_height_m",
            "max_rotation_swing",
            "pan_blur_px",
        ):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0):
                raise ValueError(f"gate threshold {name!r} must be a number >= 0, got {value!r}")
        for name in (
            "pan_explained",
            "pan_explained_uncalibrated",
            "pan_max_broken_static",
            "max_mismatch_fraction",
            "collapse_ratio",
            "direction_max_score",
        ):
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
            raise ValueError(
                f"gate threshold 'crop_px' ({self.crop_px}) exceeds 'analysis_size' ({self.analysis_size})"
            )
        if self.workspace is not None:
            ws = np.asarray(self.workspace, dtype=float)
            if ws.shape != (3, 2) or not np.all(np.isfinite(ws)) or np.any(ws[:, 0] >= ws[:, 1]):
                raise ValueError(
                    f"gate 'workspace' must be [[xmin, xmax], [ymin, ymax], [zmin, zmax]], got {self.workspace!r}"
                )
            object.__setattr__(self, "workspace", tuple(tuple(float(v) for v in row) for row in ws))

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> "GateThresholds":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known - set(_META_KEYS))
        if unknown:
            raise ValueError(f"unknown gate setting(s) {unknown}; known: {sorted(known | set(_META_KEYS))}")
        kwargs = {k: v for k, v in raw.items() if k in known}
        for name in (
            "analysis_size",
            "crop_px",
            "frozen_min_changed_px",
            "max_direction_mismatches",
            "min_correlation_steps",
        ):
            if name in kwargs and not (isinstance(kwargs[name], int) and not isinstance(kwargs[name], bool)):
                raise ValueError(f"gate threshold {name!r} must be an integer, got {kwargs[name]!r}")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if self.workspace is not None:
            out["workspace"] = [list(row) for row in self.workspace]
        return out
