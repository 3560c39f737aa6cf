"""World backends behind :class:`kosmos_env.env.KosmosEnv`.

Backends are imported by name only when an env asks for them, so importing this package
stays cheap (no MuJoCo, no torch, no diffusers).
"""

from __future__ import annotations

from typing import Any

from kosmos_env.spec import WORLD_VERSIONS  # the table lives below the worlds: it enters the spec hash
from kosmos_env.worlds.base import (
    CameraCalibration,
    MissingWeightsError,
    WorldModel,
    WorldReset,
    WorldStep,
)

# world "type" in an env spec -> "module:Class"; the class takes the spec and is a WorldModel.
# Installed packages add more under the ``kosmos_env.worlds`` entry-point group.
WORLD_BACKENDS = {
    "tabletop": "kosmos_env.worlds.tabletop.world:TabletopWorld",
    "cosmos3": "kosmos_env.worlds.cosmos3:Cosmos3World",
    "tabletop_learned": "kosmos_env.worlds.tabletop_learned.world:LearnedTabletopWorld",
}


#: ``world`` keys every spec may hold, whatever its world: the backend's name and the control that wraps it
COMMON_WORLD_SETTINGS = frozenset({"type", "control"})


def make_world(spec: Any, **kwargs: Any) -> WorldModel:
    """Build the world named by ``spec.world["type"]`` (under ``spec.world["control"]`` when set).

    A ``world`` key the world does not declare (:func:`check_world_settings`) is refused first, as
    an unknown gate setting is: a misspelt setting would otherwise be ignored and still move the
    spec hash."""
    if spec.world.get("control") is not None:  # a control wraps the world the rest of the spec names
        from kosmos_env.spec import EnvSpec
        from kosmos_env.worlds.shuffled import wrap_control

        data = spec.to_dict()
        control = data["world"].pop("control")
        return wrap_control(control, make_world(EnvSpec.from_dict(data), **kwargs))
    cls = resolve_world(spec.world["type"], getattr(spec, "id", "?"))
    check_world_settings(cls, spec)
    return cls(spec, **kwargs)


def check_world_settings(cls: type, spec: Any) -> None:
    """Refuse (SpecError, one line) a ``spec.world`` key that world class ``cls`` does not declare in its
    ``world_settings`` (the keys it reads); a world that declares none (a plug-in written before the
    attribute existed) is not checked."""
    declared = getattr(cls, "world_settings", None)
    if declared is None:
        return
    known = frozenset(declared) | COMMON_WORLD_SETTINGS
    unknown = sorted(set(spec.world) - known)
    if unknown:
        from kosmos_env.errors import SpecError

        raise SpecError(
            f"spec {getattr(spec, 'id', '?')}: unknown world setting(s) {unknown} for world type "
            f"{spec.world['type']!r}; known: {sorted(known)}"
        )


def resolve_world(kind: str, spec_id: str = "?") -> type:
    """The world class of ``kind`` (built-in or a ``kosmos_env.worlds`` plug-in), checked before it is called."""
    from kosmos_env.plugins import implements, resolve_class

    try:
        # world types are names only: a spec never imports a module:attr of its own choosing
        return resolve_class("world", kind, WORLD_BACKENDS, implements(WorldModel), names_only=True)
    except ValueError as exc:
        raise type(exc)(f"{exc} (world.type of spec {spec_id})") from None


__all__ = [
    "CameraCalibration",
    "MissingWeightsError",
    "WorldModel",
    "WorldReset",
    "WorldStep",
    "WORLD_BACKENDS",
    "WORLD_VERSIONS",
    "check_world_settings",
    "make_world",
    "resolve_world",
]
