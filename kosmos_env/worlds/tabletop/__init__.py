"""The embedded MuJoCo tabletop world (CPU, headless), the ground truth of Kosmos-Env."""

from kosmos_env.worlds.tabletop.geometry import tabletop_calibration

__all__ = ["tabletop_calibration"]
