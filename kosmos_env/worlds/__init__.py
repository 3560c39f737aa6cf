"""World backends behind :class:`kosmos_env.env.KosmosEnv`.

Backends are imported by name only when an env asks for them, so importing this package
stays cheap (no MuJoCo, no torch, no diffusers).
"""
from __future__ import annotations

import importlib
from typing import Any

from kosmos_env.spec import WORLD_VERSIONS  # the table lives below the worlds: it enters the spec hash
from kosmos_env.worlds.base import (
    CameraCalibration,
    MissingWeightsError,
    WorldModel,
    WorldReset,
    WorldStep,
)

# world "type" in an env spec -> "module:factory"; the factory takes the spec and returns a WorldModel
WORLD_BACKENDS = {
    "tabletop": "kosmos_env.worlds.tabletop.world:TabletopWorld",
    "cosmos3": "kosmos_env.worlds.cosmos3:Cosmos3World",
    "tabletop_learned": "kosmos_env.worlds.tabletop_learned.world:LearnedTabletopWorld",
}




def make_world(spec: Any, **kwargs: Any) -> WorldModel:
    """Build the world named by ``spec.world["type"]``."""
    kind = spec.world["type"]
    try:
        target = WORLD_BACKENDS[kind]
    except KeyError:
        raise ValueError(
            f"unknown world type {kind!r} in spec {spec.id}; known: {sorted(WORLD_BACKENDS)}"
        ) from None
    module_name, attr = target.split(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(spec, **kwargs)


__all__ = [
    "CameraCalibration",
    "MissingWeightsError",
    "WorldModel",
    "WorldReset",
    "WorldStep",
    "WORLD_BACKENDS",
    "WORLD_VERSIONS",
    "make_world",
]
