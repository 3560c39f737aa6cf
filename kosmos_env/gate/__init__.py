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

The package: :mod:`~kosmos_env.gate.thresholds` (every number it decides with, validated),
:mod:`~kosmos_env.gate.measurements` (the measurements above, pure functions),
:mod:`~kosmos_env.gate.segment` (the per-segment record they fill in),
:mod:`~kosmos_env.gate.verdict` (the decision on one call) and
:mod:`~kosmos_env.gate.consistency` (:class:`ConsistencyGate`: segments and episode counters).
"""

from __future__ import annotations

from kosmos_env.gate.consistency import ConsistencyGate
from kosmos_env.gate.segment import Geometry, Segment
from kosmos_env.gate.thresholds import GateThresholds
from kosmos_env.gate.verdict import GateVerdict

__all__ = ["ConsistencyGate", "GateThresholds", "GateVerdict", "Geometry", "Segment"]
