"""The embedded MuJoCo tabletop world (CPU, headless), the ground truth of Kosmos-Env."""

from kosmos_env.worlds.tabletop.geometry import tabletop_calibration

#: the spec ``world`` settings the tabletop reads (besides ``type``); any other key is refused when the
#: world is built (:func:`kosmos_env.worlds.check_world_settings`). Here, not in ``world.py``, so the
#: learned tabletop (which passes these through to its simulator) declares them without importing MuJoCo.
TABLETOP_SETTINGS = frozenset({"physics_dt", "control_dt", "home_tcp", "workspace", "max_tilt", "camera"})

__all__ = ["TABLETOP_SETTINGS", "tabletop_calibration"]
