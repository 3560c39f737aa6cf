"""Action conventions and the conversions between them.

Every Kosmos env takes ``[dx, dy, dz, droll, dpitch, dyaw, gripper]``: base-frame translation
in metres, roll/pitch/yaw differences in radians, gripper in [0, 1] with 1 = open. Models and
simulators disagree on nearly every part of that:

- rotation: Euler roll/pitch/yaw (Bridge, OpenVLA, Octo) vs axis-angle (SimplerEnv's WidowX
  wrapper converts Euler deltas with transforms3d's ``euler2axangle``, static x-y-z axes);
- gripper: [0, 1] with 1 = open (Open X-Embodiment ``+1 = open, 0 = close``), [-1, 1] with
  +1 = open / -1 = close (SimplerEnv WidowX), or "closedness" with 1 = closed (RT-1 style);
- scale: some models emit normalised or scaled deltas (Cosmos-Predict's ×20).

Euler angles here are always *static* (extrinsic) x-y-z: ``R = Rz(yaw) @ Ry(pitch) @ Rx(roll)``,
the ``sxyz`` convention of transforms3d, which Bridge data and SimplerEnv use.

:class:`ActionConvention` bundles one model's choices and converts its rows to the env contract
(``to_env``) and back (``from_env``); each adapter declares its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

GRIPPER_CONVENTIONS = ("unit_open", "signed_open", "unit_closed")
ROTATIONS = ("euler", "axis_angle")


# -- gripper -------------------------------------------------------------------------------------
def gripper_to_env(g: Any, convention: str, threshold: float | None = None) -> np.ndarray:
    """Convert a gripper command to the env's [0, 1], 1 = open.

    ``unit_open``: [0, 1], 1 = open (identity). ``signed_open``: [-1, 1], +1 = open, -1 = close.
    ``unit_closed``: [0, 1], 1 = closed. Out-of-range values are clipped to the convention's
    range first (model outputs overshoot); ``threshold`` then binarises (>= threshold is open).
    """
    g = np.asarray(g, dtype=np.float64)
    if convention == "unit_open":
        out = np.clip(g, 0.0, 1.0)
    elif convention == "signed_open":
        out = (np.clip(g, -1.0, 1.0) + 1.0) / 2.0
    elif convention == "unit_closed":
        out = 1.0 - np.clip(g, 0.0, 1.0)
    else:
        raise ValueError(f"unknown gripper convention {convention!r}; one of {GRIPPER_CONVENTIONS}")
    if threshold is not None:
        out = (out >= threshold).astype(np.float64)
    return out


def gripper_from_env(g: Any, convention: str) -> np.ndarray:
    """The inverse of :func:`gripper_to_env` (without binarising)."""
    g = np.asarray(g, dtype=np.float64)
    if convention == "unit_open":
        return g
    if convention == "signed_open":
        return 2.0 * g - 1.0
    if convention == "unit_closed":
        return 1.0 - g
    raise ValueError(f"unknown gripper convention {convention!r}; one of {GRIPPER_CONVENTIONS}")


# -- rotation ------------------------------------------------------------------------------------
# one implementation for the whole package (conventions stated in kosmos_env.utils.rotations)
from kosmos_env.utils.rotations import (  # noqa: E402
    axis_angle_to_matrix,
    euler_to_matrix,
    matrix_to_axis_angle,
    matrix_to_euler,
)


def euler_to_axis_angle(euler: Any) -> np.ndarray:
    """What SimplerEnv's WidowX wrapper does to a policy's roll/pitch/yaw delta."""
    return matrix_to_axis_angle(euler_to_matrix(euler))


def axis_angle_to_euler(rotvec: Any) -> np.ndarray:
    return matrix_to_euler(axis_angle_to_matrix(rotvec))


# -- scaling -------------------------------------------------------------------------------------
def unnormalize_bounds(normalized: Any, low: Any, high: Any, mask: Any = None) -> np.ndarray:
    """Map [-1, 1] back to [low, high] where ``mask`` is true: ``0.5 (n + 1)(high - low) + low``.

    This is OpenVLA's un-normalisation with ``low = q01`` and ``high = q99`` of the training
    data's action statistics; dimensions the mask leaves out (the gripper) pass through.
    """
    n = np.asarray(normalized, dtype=np.float64)
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    mask = np.ones(n.shape[-1], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if not (low.shape == high.shape == mask.shape == (n.shape[-1],)):
        raise ValueError(
            f"bounds and mask must have shape ({n.shape[-1]},), got {low.shape}, {high.shape}, {mask.shape}"
        )
    return np.where(mask, 0.5 * (n + 1.0) * (high - low) + low, n)


def normalize_bounds(action: Any, low: Any, high: Any, mask: Any = None) -> np.ndarray:
    """The inverse of :func:`unnormalize_bounds` (clipped to [-1, 1] like the training pipeline)."""
    a = np.asarray(action, dtype=np.float64)
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    mask = np.ones(a.shape[-1], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    span = np.where(high - low == 0, 1.0, high - low)
    return np.where(mask, np.clip(2.0 * (a - low) / span - 1.0, -1.0, 1.0), a)


# -- a model's whole convention -------------------------------------------------------------------
@dataclass(frozen=True)
class ActionConvention:
    """How one model's 7-D output differs from the env contract.

    ``rotation``: ``"euler"`` (static xyz roll/pitch/yaw) or ``"axis_angle"``; ``gripper``: one of
    :data:`GRIPPER_CONVENTIONS`; ``translation_scale`` / ``rotation_scale``: the model's units
    per env unit (the model emits ``scale × env value``; e.g. 20 for Cosmos-Predict-style
    deltas); ``gripper_threshold``: binarise the converted gripper (>= threshold is open).
    """

    rotation: str = "euler"
    gripper: str = "unit_open"
    translation_scale: float = 1.0
    rotation_scale: float = 1.0
    gripper_threshold: float | None = None

    def __post_init__(self) -> None:
        if self.rotation not in ROTATIONS:
            raise ValueError(f"rotation must be one of {ROTATIONS}, got {self.rotation!r}")
        if self.gripper not in GRIPPER_CONVENTIONS:
            raise ValueError(f"gripper must be one of {GRIPPER_CONVENTIONS}, got {self.gripper!r}")
        if self.translation_scale <= 0 or self.rotation_scale <= 0:
            raise ValueError("translation_scale and rotation_scale must be > 0")

    def describe(self) -> str:
        grip = {
            "unit_open": "gripper [0,1] 1=open",
            "signed_open": "gripper [-1,1] +1=open/-1=close",
            "unit_closed": "gripper [0,1] 1=closed",
        }[self.gripper]
        rot = "roll/pitch/yaw (static xyz)" if self.rotation == "euler" else "axis-angle"
        scale = (
            ""
            if (self.translation_scale, self.rotation_scale) == (1.0, 1.0)
            else f", scaled ×{self.translation_scale:g} (translation) ×{self.rotation_scale:g} (rotation)"
        )
        return f"base-frame deltas [dx,dy,dz] + {rot} + {grip}{scale}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_env(self, action: Any) -> np.ndarray:
        """Model rows (7,) or (k, 7) -> env contract, float32, same shape."""
        a = np.asarray(action, dtype=np.float64)
        rows = a.reshape(-1, 7)
        out = np.empty_like(rows)
        out[:, :3] = rows[:, :3] / self.translation_scale
        rot = rows[:, 3:6] / self.rotation_scale
        out[:, 3:6] = rot if self.rotation == "euler" else np.stack([axis_angle_to_euler(r) for r in rot])
        out[:, 6] = gripper_to_env(rows[:, 6], self.gripper, self.gripper_threshold)
        return out.reshape(a.shape).astype(np.float32)

    def from_env(self, action: Any) -> np.ndarray:
        """Env contract rows -> this model's convention (for servers speaking another convention)."""
        a = np.asarray(action, dtype=np.float64)
        rows = a.reshape(-1, 7)
        out = np.empty_like(rows)
        out[:, :3] = rows[:, :3] * self.translation_scale
        rot = rows[:, 3:6] if self.rotation == "euler" else np.stack([euler_to_axis_angle(r) for r in rows[:, 3:6]])
        out[:, 3:6] = rot * self.rotation_scale
        out[:, 6] = gripper_from_env(rows[:, 6], self.gripper)
        return out.reshape(a.shape).astype(np.float32)


ENV_CONVENTION = ActionConvention()
#: SimplerEnv's WidowX wrapper: axis-angle rotation, gripper +1 open / -1 close
SIMPLER_WIDOWX = ActionConvention(rotation="axis_angle", gripper="signed_open")
