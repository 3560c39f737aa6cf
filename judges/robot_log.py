"""The robot-log judge: score an episode from the robot's own log, with no camera and no labels.

It reads three signals, one row per control step: the end-effector position ``ee_pos``
(N, 3) in metres, the commanded gripper ``gripper_cmd`` (N,) and the measured gripper opening
``gripper_measured`` (N,), both normalised to [0, 1] with 1 = open, 0 = closed. On the tabletop
these come from ``Rollout.log``; for real robot datasets :func:`log_from_lerobot` reads a
LeRobot-format parquet episode with a user-given column mapping and gripper normalisation.

Definitions (fixed a priori, before looking at any outcome; every threshold is a judge spec
field). Closure = 1 − opening.

- *grasp*: a maximal run of steps whose command is closed (``gripper_cmd < close_below``).
- *holding* at step t of a grasp: the measured closure stops short of the commanded closure
  by more than ``hold_margin`` (``(1 − cmd) − (1 − measured) > hold_margin``) and the fingers
  are not fully closed (``measured > empty_gap``): something is between the fingers.
- *settled* at step t: the measured opening moved by at most ``settle_tol`` since step t − 1.
- **hold**: a grasp with at least ``min_hold_steps`` steps that are holding and settled.
- **empty grasp**: a grasp without a hold whose settled opening went below ``empty_gap`` (the
  fingers closed on nothing). Counted per grasp.
- **lift**: during a held grasp, at a step that is still holding, the end effector is at least
  ``lift_height`` above where it was at the first held step.
- **carry**: likewise, at least ``carry_distance`` away horizontally from that point.
- **release**: a held grasp ends with the command opening (a later step has
  ``gripper_cmd >= close_below``) while its last closed step was still holding (the object
  was let go, not dropped by slipping out; a grasp still closed at the end is not released).
- **idle** fraction: the share of step transitions with negligible end-effector motion
  (``||Δee_pos|| < idle_motion`` metres) and no gripper change (``|Δcmd|`` and
  ``|Δmeasured|`` both below ``idle_gripper``). An episode whose idle fraction exceeds
  ``idle_fraction`` is idle.

Score::

    Z = held + lifted + carried + released − 0.25·min(empty_grasps, 4) − 1[idle > 0.9]

(each event 0/1 over the episode), so Z ∈ [−2, 4]; ``score = (Z + 2) / 6`` in [0, 1].

Verdict: success iff one and the same grasp was held, lifted, carried and released (the
shape of every pick-and-place task). The judge never abstains on a well-formed log; a log
that is missing, too short or malformed raises ``ValueError``.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from kosmos_env.judges.base import Judgment, Rollout

LOG_KEYS = ("ee_pos", "gripper_cmd", "gripper_measured")


@dataclass(frozen=True)
class LogThresholds:
    """Every threshold of the robot-log judge (gripper values in normalised [0, 1] units)."""

    close_below: float = 0.5
    hold_margin: float = 0.05
    empty_gap: float = 0.03
    settle_tol: float = 0.01
    min_hold_steps: int = 2
    lift_height: float = 0.03
    carry_distance: float = 0.05
    idle_motion: float = 0.002
    idle_gripper: float = 0.01
    idle_fraction: float = 0.9
    empty_penalty: float = 0.25
    max_empty_counted: int = 4

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
                raise ValueError(f"robot-log threshold {name!r} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True)
class LogEvents:
    """What the log shows; ``z`` is the formula above."""

    held: bool
    lifted: bool
    carried: bool
    released: bool
    empty_grasps: int
    idle_fraction: float
    idle: bool
    success: bool
    z: float
    n_grasps: int

    @property
    def score(self) -> float:
        return float(np.clip((self.z + 2.0) / 6.0, 0.0, 1.0))

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), score=self.score)


def check_log(log: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate and return ``(ee_pos (N, 3), gripper_cmd (N,), gripper_measured (N,))`` as float64."""
    missing = [k for k in LOG_KEYS if k not in log]
    if missing:
        raise ValueError(f"the robot-log judge needs log keys {list(LOG_KEYS)}; missing {missing}")
    ee = np.asarray(log["ee_pos"], dtype=np.float64)
    cmd = np.asarray(log["gripper_cmd"], dtype=np.float64).reshape(-1)
    meas = np.asarray(log["gripper_measured"], dtype=np.float64).reshape(-1)
    if ee.ndim != 2 or ee.shape[1] != 3:
        raise ValueError(f"log 'ee_pos' must have shape (N, 3), got {ee.shape}")
    n = len(ee)
    if len(cmd) != n or len(meas) != n:
        raise ValueError(f"log lengths differ: ee_pos {n}, gripper_cmd {len(cmd)}, gripper_measured {len(meas)}")
    if n < 2:
        raise ValueError(f"the log has {n} step(s); the robot-log judge needs at least 2")
    for name, arr in (("ee_pos", ee), ("gripper_cmd", cmd), ("gripper_measured", meas)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"log {name!r} contains NaN or inf")
    for name, arr in (("gripper_cmd", cmd), ("gripper_measured", meas)):
        if arr.min() < -1e-6 or arr.max() > 1 + 1e-6:
            raise ValueError(
                f"log {name!r} must be normalised to [0, 1] (1 = open), got range [{arr.min():.3g}, {arr.max():.3g}]"
            )
    return ee, cmd, meas


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True as half-open (start, stop) index pairs."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


def analyse_log(log: Mapping[str, Any], th: LogThresholds = LogThresholds()) -> LogEvents:
    """Find the events of :mod:`this module's docstring <kosmos_env.judges.robot_log>` in one log."""
    ee, cmd, meas = check_log(log)
    n = len(ee)
    closed = cmd < th.close_below
    holding = ((1.0 - cmd) - (1.0 - meas) > th.hold_margin) & (meas > th.empty_gap)
    settled = np.concatenate([[False], np.abs(np.diff(meas)) <= th.settle_tol])

    held = lifted = carried = released = success = False
    empty = 0
    grasps = _runs(closed)
    for start, stop in grasps:
        firm = np.flatnonzero(holding[start:stop] & settled[start:stop]) + start
        if len(firm) >= th.min_hold_steps:
            held = True
            t0 = int(firm[0])
            later = np.arange(t0, stop)
            later = later[holding[later]]
            rise = ee[later, 2] - ee[t0, 2]
            shift = np.linalg.norm(ee[later, :2] - ee[t0, :2], axis=1)
            g_lift = bool(len(later) and rise.max() >= th.lift_height)
            g_carry = bool(len(later) and shift.max() >= th.carry_distance)
            g_release = bool(stop < n and holding[stop - 1])
            lifted |= g_lift
            carried |= g_carry
            released |= g_release
            success |= g_lift and g_carry and g_release
        else:
            fully_closed = (meas[start:stop] < th.empty_gap) & settled[start:stop]
            if fully_closed.any():
                empty += 1

    motion = np.linalg.norm(np.diff(ee, axis=0), axis=1)
    still = (
        (motion < th.idle_motion) & (np.abs(np.diff(cmd)) < th.idle_gripper) & (np.abs(np.diff(meas)) < th.idle_gripper)
    )
    idle_fraction = float(still.mean())
    idle = idle_fraction > th.idle_fraction
    z = (
        float(held)
        + float(lifted)
        + float(carried)
        + float(released)
        - th.empty_penalty * min(empty, int(th.max_empty_counted))
        - float(idle)
    )
    return LogEvents(
        held=held,
        lifted=lifted,
        carried=carried,
        released=released,
        empty_grasps=empty,
        idle_fraction=idle_fraction,
        idle=idle,
        success=success,
        z=z,
        n_grasps=len(grasps),
    )


class RobotLogJudge:
    """Judge a rollout from ``rollout.log`` alone (see the module docstring for every rule).

    Keyword arguments are the :class:`LogThresholds` fields, so a judge spec
    ``{"type": "robot_log", "hold_margin": 0.05, ...}`` pins them.
    """

    name = "robot_log"
    model_id = "robot-log-v1"

    def __init__(self, **thresholds: Any):
        unknown = set(thresholds) - set(LogThresholds.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"unknown robot-log judge setting(s) {sorted(unknown)}; known: {sorted(LogThresholds.__dataclass_fields__)}"
            )
        self.thresholds = LogThresholds(**thresholds)

    @property
    def spec(self) -> dict[str, Any]:
        return {"type": self.name, **asdict(self.thresholds)}

    def judge(self, rollout: Rollout) -> Judgment:
        start = time.perf_counter()
        steps = len(np.asarray(rollout.log.get("ee_pos", ())))
        if 0 < steps < 2:
            # an episode can end after one step (terminate_on_success): one pose shows no event,
            # so the judge abstains rather than call it a failure (a malformed log still raises)
            return Judgment(
                success=None,
                score=0.0,
                judge=self.name,
                model_id=self.model_id,
                rationale=f"abstained: the log has {steps} step; the robot-log judge needs at least 2",
                seconds=time.perf_counter() - start,
            )
        ev = analyse_log(rollout.log, self.thresholds)
        parts = [k for k in ("held", "lifted", "carried", "released") if getattr(ev, k)]
        rationale = (
            f"{'success' if ev.success else 'failure'}: events {parts or ['none']}, "
            f"{ev.empty_grasps} empty grasp(s), idle {ev.idle_fraction:.2f}, Z = {ev.z:.2f}"
        )
        return Judgment(
            success=ev.success,
            score=ev.score,
            rationale=rationale,
            judge=self.name,
            model_id=self.model_id,
            seconds=time.perf_counter() - start,
            extras=ev.to_dict(),
        )


# -- LeRobot-format datasets ---------------------------------------------------------------

_COLUMN = re.compile(r"^(?P<name>[^\[\]]+?)(?:\[(?P<a>-?\d+)(?::(?P<b>-?\d+))?\])?$")


def _select(table, spec: str) -> np.ndarray:
    """Read ``"column"``, ``"column[i]"`` or ``"column[i:j]"`` from a pyarrow table as float64."""
    m = _COLUMN.match(spec.strip())
    if not m:
        raise ValueError(f"bad column selector {spec!r}; use 'name', 'name[i]' or 'name[i:j]'")
    name = m.group("name")
    if name not in table.column_names:
        raise ValueError(f"column {name!r} is not in the episode; columns: {table.column_names}")
    values = table.column(name).to_pylist()
    arr = np.asarray(values, dtype=np.float64)
    if m.group("a") is None:
        return arr
    if arr.ndim != 2:
        raise ValueError(f"column {name!r} is scalar; it cannot be indexed as {spec!r}")
    a = int(m.group("a"))
    if m.group("b") is None:
        return arr[:, a]
    return arr[:, a : int(m.group("b"))]


def normalise_gripper(values: np.ndarray, closed: float, opened: float) -> np.ndarray:
    """Map raw gripper units to [0, 1] with 1 = open: ``(v − closed) / (opened − closed)``, clipped.

    ``closed`` may be larger than ``opened`` (e.g. a dataset where 1 = closed).
    """
    if closed == opened:
        raise ValueError("gripper normalisation needs closed != opened")
    return np.clip((np.asarray(values, dtype=np.float64) - closed) / (opened - closed), 0.0, 1.0)


def log_from_lerobot(
    path: str,
    columns: Mapping[str, str],
    gripper_cmd_range: tuple[float, float],
    gripper_measured_range: tuple[float, float],
    episode_index: int | None = None,
    position_scale: float = 1.0,
) -> dict[str, np.ndarray]:
    """Read one episode's robot log from a LeRobot-format parquet file.

    ``columns`` maps each of ``ee_pos``, ``gripper_cmd``, ``gripper_measured`` to a column
    selector, e.g. ``{"ee_pos": "observation.state[0:3]", "gripper_cmd": "action[6]",
    "gripper_measured": "observation.state[6]"}``. The gripper ranges are ``(closed, open)``
    in the dataset's units. ``position_scale`` converts positions to metres (0.001 for mm).
    When the file holds several episodes, ``episode_index`` picks one (rows sorted by
    ``frame_index`` when that column exists).
    """
    import pyarrow.parquet as pq

    missing = [k for k in LOG_KEYS if k not in columns]
    if missing:
        raise ValueError(f"column mapping must name {list(LOG_KEYS)}; missing {missing}")
    table = pq.read_table(path)
    if episode_index is not None:
        if "episode_index" not in table.column_names:
            raise ValueError(f"{path} has no 'episode_index' column to select episode {episode_index} from")
        idx = np.asarray(table.column("episode_index").to_pylist())
        rows = np.flatnonzero(idx == episode_index)
        if len(rows) == 0:
            raise ValueError(f"episode {episode_index} is not in {path}")
        table = table.take(rows)
    if "frame_index" in table.column_names:
        order = np.argsort(np.asarray(table.column("frame_index").to_pylist()), kind="stable")
        table = table.take(order)
    ee = _select(table, columns["ee_pos"]) * float(position_scale)
    if ee.ndim != 2 or ee.shape[1] != 3:
        raise ValueError(f"ee_pos selector {columns['ee_pos']!r} must give 3 values per row, got shape {ee.shape}")
    return {
        "ee_pos": ee,
        "gripper_cmd": normalise_gripper(_select(table, columns["gripper_cmd"]).reshape(-1), *gripper_cmd_range),
        "gripper_measured": normalise_gripper(
            _select(table, columns["gripper_measured"]).reshape(-1), *gripper_measured_range
        ),
    }
