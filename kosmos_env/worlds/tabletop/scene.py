"""MJCF for the tabletop: table, a mocap-driven parallel-jaw gripper, one object and one target.

The gripper hand is a dynamic body welded to a mocap target (the commanded end-effector pose);
its two fingers slide on position-controlled joints, so they stop short of the command when
they close on an object: that gap is the measured gripper signal the robot-log judge reads.

Collision bits: the table and fixed targets use bit 1, fingers bit 2, movable objects both,
so fingers touch objects but never the table (a kinematic hand would otherwise fight it).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kosmos_env.utils.camera import camera_frame
from kosmos_env.tasks.shapes import object_half_height

#: finger joint travel: each finger's inner face sits ``q`` from the centre line, q in [0, FINGER_TRAVEL]
FINGER_TRAVEL = 0.04
#: tool centre point below the hand origin (between the fingertips)
TCP_OFFSET = 0.05
TABLE_RGBA = (0.36, 0.34, 0.32, 1.0)
ROBOT_RGBA = (0.18, 0.18, 0.2, 1.0)


def _fmt(values) -> str:
    return " ".join(f"{float(v):.6g}" for v in np.ravel(values))


def _geom(
    shape: str, size, rgba, contype: int, conaffinity: int, pos=(0, 0, 0), name: str = "", extra: str = ""
) -> str:
    name_attr = f' name="{name}"' if name else ""
    if shape == "capsule":  # size = [radius, half-length], lying along the body's x axis
        radius, half = size
        geom = f'type="capsule" fromto="{-half} 0 0 {half} 0 0" size="{radius}"'
    elif shape == "cylinder":  # size = [radius, half-height]
        geom = f'type="cylinder" size="{_fmt(size)}"'
    else:  # box, half extents
        geom = f'type="{shape}" size="{_fmt(size)}"'
    return (
        f'<geom{name_attr} {geom} pos="{_fmt(pos)}" rgba="{_fmt(rgba)}" contype="{contype}" '
        f'conaffinity="{conaffinity}" friction="1.2 0.01 0.001" condim="4" {extra}/>'
    )


def _target_body(spec: Mapping[str, Any]) -> str:
    rgba = spec["rgba"]
    if spec["shape"] == "basket":
        hx, hy, hz = spec["size"]
        wall = 0.004
        parts = [_geom("box", [hx, hy, 0.003], rgba, 1, 1, pos=(0, 0, 0.003), name="target_geom")]
        for sx, sy, size in (
            (1, 0, [wall, hy, hz]),
            (-1, 0, [wall, hy, hz]),
            (0, 1, [hx, wall, hz]),
            (0, -1, [hx, wall, hz]),
        ):
            pos = (sx * (hx - wall), sy * (hy - wall), hz)
            parts.append(_geom("box", size, rgba, 1, 1, pos=pos))
        geoms = "\n        ".join(parts)
        return f'<body name="target" pos="0.35 0 0">\n        {geoms}\n      </body>'
    half = object_half_height(spec)
    if spec.get("fixed", True):
        geom = _geom(spec["shape"], spec["size"], rgba, 1, 1, name="target_geom")
        return f'<body name="target" pos="0.35 0 {half}">{geom}</body>'
    geom = _geom(spec["shape"], spec["size"], rgba, 3, 3, name="target_geom", extra=f'mass="{spec.get("mass", 0.2)}"')
    return f'<body name="target" pos="0.35 0 {half}"><freejoint name="target_free"/>{geom}</body>'


def build_mjcf(task_params: Mapping[str, Any], world: Mapping[str, Any], image_size: tuple[int, int]) -> str:
    """The scene for one task. Object and target poses are set at reset, not here."""
    obj, target = task_params["object"], task_params["target"]
    cam = world["camera"]
    pos, axes = camera_frame(cam)
    right, up = axes[:, 0], -axes[:, 1]
    height, width = image_size
    obj_geom = _geom(
        obj["shape"], obj["size"], obj["rgba"], 3, 3, name="object_geom", extra=f'mass="{obj.get("mass", 0.03)}"'
    )
    finger = f'type="box" size="0.012 0.003 0.025" rgba="{_fmt(ROBOT_RGBA)}" contype="2" conaffinity="2" friction="1.5 0.01 0.001" condim="4" mass="0.02"'
    home = np.asarray(world["home_tcp"], float) + [0, 0, TCP_OFFSET]
    return f"""
<mujoco model="kosmos_tabletop">
  <compiler angle="radian"/>
  <option timestep="{world["physics_dt"]}" integrator="implicitfast" cone="elliptic" impratio="5"/>
  <visual>
    <quality shadowsize="0" offsamples="0"/>
    <global offwidth="{max(width, 64)}" offheight="{max(height, 64)}"/>
    <headlight ambient="0.45 0.45 0.45" diffuse="0.5 0.5 0.5" specular="0 0 0"/>
  </visual>
  <worldbody>
    <light directional="true" pos="0.3 0.3 1.2" dir="-0.2 -0.2 -1" diffuse="0.45 0.45 0.45" castshadow="false"/>
    <geom name="table" type="box" pos="0.35 0 -0.02" size="0.45 0.5 0.02" rgba="{_fmt(TABLE_RGBA)}" contype="1" conaffinity="1"/>
    <camera name="main" pos="{_fmt(pos)}" xyaxes="{_fmt(right)} {_fmt(up)}" fovy="{cam["fovy"]}"/>
    <body name="hand_target" mocap="true" pos="{_fmt(home)}"/>
    <body name="hand" pos="{_fmt(home)}" gravcomp="1">
      <freejoint name="hand_free"/>
      <geom type="box" size="0.012 0.05 0.012" rgba="{_fmt(ROBOT_RGBA)}" contype="0" conaffinity="0" mass="0.4"/>
      <geom type="cylinder" pos="0 0 0.06" size="0.012 0.05" rgba="{_fmt(ROBOT_RGBA)}" contype="0" conaffinity="0" mass="0.1"/>
      <site name="tcp" pos="0 0 {-TCP_OFFSET}" size="0.002"/>
      <body name="finger_left" pos="0 0 -0.035" gravcomp="1">
        <joint name="finger_left" type="slide" axis="0 1 0" limited="true" range="0 {FINGER_TRAVEL}" damping="15" armature="0.01"/>
        <geom pos="0 0.003 0" {finger}/>
      </body>
      <body name="finger_right" pos="0 0 -0.035" gravcomp="1">
        <joint name="finger_right" type="slide" axis="0 -1 0" limited="true" range="0 {FINGER_TRAVEL}" damping="15" armature="0.01"/>
        <geom pos="0 -0.003 0" {finger}/>
      </body>
    </body>
    <body name="object" pos="0.3 0.1 {object_half_height(obj)}">
      <freejoint name="object_free"/>
      {obj_geom}
    </body>
    {_target_body(target)}
  </worldbody>
  <contact>
    <exclude body1="finger_left" body2="finger_right"/>
  </contact>
  <equality>
    <!-- the hand follows the mocap target through a stiff weld, so it has real velocities and
         friction can carry a grasped object (a kinematic mocap hand would let it slip) -->
    <weld body1="hand_target" body2="hand" solref="0.01 1"/>
  </equality>
  <actuator>
    <position name="finger_left" joint="finger_left" kp="200" ctrlrange="0 {FINGER_TRAVEL}" forcerange="-6 6"/>
    <position name="finger_right" joint="finger_right" kp="200" ctrlrange="0 {FINGER_TRAVEL}" forcerange="-6 6"/>
  </actuator>
</mujoco>
"""
