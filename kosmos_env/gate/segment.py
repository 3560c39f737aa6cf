"""The per-segment state of one gate check: a typed record filled in by the measurements.

A world call is cut into segments (the actions that end on one frame); each segment's
:class:`Segment` starts with the commanded move and is filled in by the measurements of
:mod:`kosmos_env.gate.measurements` (camera motion, then the calibrated or the
calibration-free measure). Fields a measurement did not reach stay :data:`UNSET` and are left
out of :meth:`Segment.to_dict`, the form verdicts report and store; its keys come in the order
the measurements set them, so a stored verdict reads the same as before the record existed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


class _Unset:
    """A field no measurement set (``None`` is a measured value: e.g. no direction cosine).

    One instance only, also through copy, deepcopy and pickle (fields are compared by identity)."""

    _instance: "_Unset | None" = None

    def __new__(cls) -> "_Unset":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __reduce__(self):
        return (_Unset, ())

    def __copy__(self) -> "_Unset":
        return self

    def __deepcopy__(self, memo) -> "_Unset":
        return self

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()

#: the order of Segment.to_dict's keys: calibrated (``in_view`` known before the camera motion is
#: measured) and calibration-free (``in_view`` is None, set by the calibration-free measure)
_CALIBRATED_KEYS = (
    "commanded_m",
    "in_view",
    "expected_px",
    "demanded",
    "global_shift_px",
    "pan_explained",
    "pan_broken_static",
    "observed_px",
    "changed_px",
    "cos",
    "direction_score",
    "centroid_score",
    "score",
    "direction_checked",
    "mismatch",
    "frame",
    "actions",
)
_UNCALIBRATED_KEYS = (
    "commanded_m",
    "global_shift_px",
    "pan_explained",
    "pan_broken_static",
    "in_view",
    "demanded",
    "changed_fraction",
    "score",
    "frame",
    "actions",
)


@dataclass
class Segment:
    """One segment of a world call, as measured."""

    commanded_m: float  # length of the commanded (workspace-clipped) TCP move, rounded to 0.01 mm
    calibrated: bool = False  # measured with the world's calibration (not reported)
    #: (check, reason) of the segment's failure, or None; reported as the check's name
    failure: tuple[str, str] | None = None
    # calibrated geometry
    in_view: Any = UNSET  # bool (calibrated) or None (calibration-free)
    expected_px: Any = UNSET  # [dx, dy]: the commanded move projected into the analysis image
    demanded: Any = UNSET  # bool: the command demands visible motion
    # camera motion
    global_shift_px: Any = UNSET  # [sx, sy]
    pan_explained: Any = UNSET  # float: share of the change outside the gripper the shift explains
    pan_broken_static: Any = UNSET  # float: share of the unchanged edges the shift breaks
    # calibrated measure
    observed_px: Any = UNSET  # [dx, dy]: displacement of what changed near the gripper
    changed_px: Any = UNSET  # int
    cos: Any = UNSET  # float or None
    direction_score: Any = UNSET  # float or None
    centroid_score: Any = UNSET  # float
    direction_checked: Any = UNSET  # bool
    mismatch: Any = UNSET  # True where the direction was checked and found wrong
    # calibration-free measure
    changed_fraction: Any = UNSET  # float
    score: Any = UNSET  # float in [0, 1]
    # where it sits in the call
    frame: Any = UNSET  # int: the frame (index in the call) the segment ends on
    actions: Any = UNSET  # [first, end): the call's actions it covers

    def fail(self, check: str, reason: str, score: float | None = 0.0) -> None:
        """Mark the segment failed (score 0 unless given None: kept)."""
        if score is not None:
            self.score = score
        self.failure = (check, reason)

    def to_dict(self) -> dict[str, Any]:
        """The reported form: measured fields in measurement order, then ``failure`` (the check's name)."""
        out = {}
        for name in _CALIBRATED_KEYS if self.calibrated else _UNCALIBRATED_KEYS:
            value = getattr(self, name)
            if value is not UNSET:
                out[name] = value
        out["failure"] = self.failure[0] if self.failure else None
        return out


@dataclass(frozen=True)
class Geometry:
    """Where the gripper is and should go in the analysis image (calibrated worlds)."""

    in_view: bool
    expected: np.ndarray  # the commanded TCP displacement projected into the image (px)
    expected_px: float  # its length
    box: tuple[int, int, int] | None  # the gripper's window (x0, y0, side), None when not projectable
