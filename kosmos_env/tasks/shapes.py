"""Heights of the tabletop suite's shapes, read from a task's ``object`` / ``target`` params.

The task suite describes each thing by ``shape`` and half-extents ``size`` (box: [hx, hy, hz];
capsule: [radius, half-length] lying flat; cylinder: [radius, half-height]; basket: [hx, hy, wall
height]). Both the world that builds the scene and a policy that plans from the public task data
need the same heights, so they live with the task data, not in either of them.
"""

from __future__ import annotations

from typing import Any, Mapping


def object_half_height(spec: Mapping[str, Any]) -> float:
    """Height of an object's centre above the surface it rests on."""
    if spec["shape"] == "capsule":
        return float(spec["size"][0])
    if spec["shape"] == "basket":
        return float(spec["size"][2])
    return float(spec["size"][-1])


def target_top(spec: Mapping[str, Any]) -> float:
    """Height of a target's support surface above the table (basket: its floor)."""
    if spec["shape"] == "basket":
        return 0.006
    return 2 * object_half_height(spec)
