"""The cost sweep: run a world at several settings and find the cheapest that still ranks correctly.

A world declares what can be swept as a class attribute ``sweep_settings`` on its backend (the
class named in :data:`kosmos_env.worlds.WORLD_BACKENDS`), mapping a setting name to where the
value goes::

    sweep_settings = {
        "image_size": {"spec": "image_size", "help": "square frame size in pixels"},
        "physics_dt": {"spec": "world.physics_dt", "help": "MuJoCo step in seconds"},
        "width": {"world_kwarg": "width", "help": "network width"},
    }

``spec`` paths override the env spec (``image_size`` takes one number for a square frame;
``a.b`` sets field ``b`` of the spec's section ``a``), ``world_kwarg`` names a keyword of the
world's constructor. Asking for a setting a world does not declare is one clear error naming
the ones it has. Each setting is run one at a time from the world's defaults (no grid), on the
study's policies, tasks and first ``sweep_seeds`` seeds, judged by the world's own spec judge,
and compared with the simulator's truth on the same episodes.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence


def world_class(env_id: str):
    from kosmos_env.spec import load_spec
    from kosmos_env.worlds import resolve_world

    # resolved and checked like any world the env would build (built-in or plug-in, names only)
    return resolve_world(load_spec(env_id).world["type"], env_id)


def declared_settings(env_id: str) -> dict[str, dict]:
    """The sweepable settings the world behind ``env_id`` declares (empty when none)."""
    declared = getattr(world_class(env_id), "sweep_settings", None) or {}
    if not isinstance(declared, Mapping):
        raise ValueError(f"{env_id}: the world's sweep_settings must be a mapping of name -> target")
    out = {}
    for name, target in declared.items():
        if not isinstance(target, Mapping) or len({"spec", "world_kwarg"} & set(target)) != 1:
            raise ValueError(f"{env_id}: sweep setting {name!r} must name exactly one of 'spec' or 'world_kwarg'")
        out[str(name)] = dict(target)
    return out


def parse_sweep(items: Sequence[str]) -> dict[str, list]:
    """``["image_size=32,48", "physics_dt=0.008"]`` -> {"image_size": [32, 48], "physics_dt": [0.008]}."""
    out: dict[str, list] = {}
    for item in items:
        name, eq, values = item.partition("=")
        name = name.strip()
        if not eq or not name or not values.strip():
            raise ValueError(f"--sweep {item!r} must look like NAME=V1,V2,...")
        if name in out:
            raise ValueError(f"--sweep names {name!r} twice")
        parsed = []
        for v in values.split(","):
            v = v.strip()
            try:
                parsed.append(json.loads(v))
            except json.JSONDecodeError:
                parsed.append(v)
        out[name] = parsed
    return out


def validate_sweep(env_id: str, sweep: Mapping[str, Sequence]) -> None:
    declared = declared_settings(env_id)
    for name in sweep:
        if name not in declared:
            have = ", ".join(sorted(declared)) or "none"
            raise ValueError(f"{env_id} has no sweep setting {name!r}; the settings it declares: {have}")


def overrides(env_id: str, name: str, value: Any) -> tuple[dict, dict]:
    """(spec overrides, world kwargs) that put ``name`` at ``value``."""
    target = declared_settings(env_id)[name]
    if "world_kwarg" in target:
        return {}, {target["world_kwarg"]: value}
    path = target["spec"].split(".")
    if path == ["image_size"]:
        size = [int(value), int(value)] if not isinstance(value, (list, tuple)) else [int(x) for x in value]
        return {"image_size": size}, {}
    if len(path) == 1:
        return {path[0]: value}, {}
    if len(path) == 2:
        return {path[0]: {path[1]: value}}, {}
    raise ValueError(f"{env_id}: sweep setting {name!r} has a spec path deeper than two levels")


def run_sweep(cfg, judges: dict, tasks: list, progress: bool, *, make_env, run) -> list[dict]:
    """Episodes of the sweep world at every setting (rows labelled ``sweep:NAME=VALUE``).

    The world's default setting is not rerun: where the sweep world is the study's reference or
    world under test, the analysis takes the default's episodes from the main run."""
    from kosmos_env.judges import make_judge
    from kosmos_env.spec import load_spec

    env_id = cfg.sweep_world or cfg.world
    spec = load_spec(env_id)
    own = make_judge(spec.judge) if spec.judge.get("type") != "state" else None
    rows: list[dict] = []
    jobs = [(p, t, i) for p in cfg.policies for t in tasks for i in range(cfg.sweep_seeds)]
    for name, values in cfg.sweep.items():
        for value in values:
            spec_over, kw = overrides(env_id, name, value)
            label = f"sweep:{name}={json.dumps(value)}"
            world_kwargs = {**cfg.world_kwargs, **kw} if env_id == cfg.world else kw
            env = make_env(env_id, world_kwargs=world_kwargs, spec_overrides=spec_over)
            # only the world's own judge: other judges may not read every setting (the frame
            # classifier reads 64x64 only)
            setting_judges = {"spec": own} if own is not None else {}
            got = run(
                label,
                env,
                cfg,
                setting_judges,
                jobs,
                tasks,
                is_reference=spec.world["type"] == "tabletop",
                progress=progress,
                examples={},
            )
            for r in got:
                r["sweep"] = {"name": name, "value": value, "world": env_id}
                if "state" in r["judges"]:
                    r["judges"]["spec"] = r["judges"]["state"]
            rows += got
    return rows
