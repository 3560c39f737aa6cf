"""Policy adapters, imported as ``kosmos_env.policies``.

``make_policy("scripted", skill=0.6)`` builds a built-in adapter by name, or one an installed
package registers under the ``kosmos_env.policies`` entry-point group. Any other class is reachable
as ``make_policy("my_pkg.module:MyPolicy", allow_import=True, **kwargs)`` (CLI: ``kosmos-env
--allow-import ...``): without that opt-in a ``module:attr`` name is refused before it is imported.
Whatever the name, the object is checked to be a :class:`Policy` subclass before it is called
(:mod:`kosmos_env.plugins`). Adapters with heavy stacks import them only when built.
"""

from __future__ import annotations

from typing import Any, Mapping

from kosmos_env.policies.base import Policy

# built-in adapter name -> "module:Class"
POLICIES = {
    "random": "kosmos_env.policies.random_policy:RandomPolicy",
    "scripted": "kosmos_env.policies.scripted:ScriptedPolicy",
    "deceptive": "kosmos_env.policies.deceptive:DeceptivePolicy",
    "remote": "kosmos_env.policies.remote:RemotePolicy",
    "openvla": "kosmos_env.policies.openvla:OpenVLAPolicy",
    "minivla": "kosmos_env.policies.minivla:MiniVLAPolicy",
    "lerobot": "kosmos_env.policies.lerobot_policy:LeRobotPolicy",
    "ckpt": "kosmos_env.policies.checkpoint:CheckpointPolicy",  # kosmos-env train-policy checkpoints
    "sb3": "kosmos_env.policies.sb3_policy:SB3Policy",  # Stable-Baselines3 model.save() zips
}


def resolve_policy(name: str, allow_import: bool | None = None) -> type[Policy]:
    """The :class:`Policy` subclass ``name`` stands for, checked before anything calls it."""
    from kosmos_env.plugins import resolve_class, subclass_of

    return resolve_class("policy", name, POLICIES, subclass_of(Policy), allow_import=allow_import)


def make_policy(name: str, allow_import: bool | None = None, **kwargs: Any) -> Policy:
    """Build a policy by registered name (built-in or plug-in) or, with the opt-in, ``"module:Class"``."""
    return resolve_policy(name, allow_import)(**kwargs)


def policy_hash_from_files(name: str, kwargs: Mapping[str, Any] | None = None, allow_import: bool | None = None) -> str:
    """``make_policy(name, **kwargs).content_hash()`` without loading a model: adapters that load
    checkpoints (openvla, minivla, ckpt, sb3) hash the checkpoint's files and their settings
    (:meth:`Policy.content_hash_from_files`), so registering a protocol never loads weights or runs
    a checkpoint's code. Adapters that load nothing (random, scripted, ...) are built to hash them."""
    cls = resolve_policy(name, allow_import)
    kwargs = dict(kwargs or {})
    value = cls.content_hash_from_files(**kwargs)
    if value is not None:
        return value
    policy = cls(**kwargs)
    try:
        return policy.content_hash()
    finally:
        policy.close()


def parse_policy_arg(arg: str) -> tuple[str, dict[str, Any]]:
    """Parse the CLI form ``name:k=v,k2=v2`` (or ``module:Class:k=v``) into (name, kwargs).

    Values are parsed as JSON when they parse (numbers, booleans), else kept as strings.
    """
    import json

    head, _, tail = arg.partition(":")
    if head in POLICIES and tail and "=" not in tail and not all(p.isidentifier() for p in tail.split(".")):
        # `ckpt:runs/x.safetensors`, `remote:http://host:8000`: a value whose key= was left out; kept
        # whole so that resolving it names the setting to write (kosmos_env.plugins.resolve_class)
        return arg, {}
    if tail and "=" not in tail.split(",")[0].split(":")[0]:  # module:Class[:k=v,...]
        cls, _, tail = tail.partition(":")
        head = f"{head}:{cls}"
    kwargs: dict[str, Any] = {}
    if tail:
        for item in tail.split(","):
            key, eq, value = item.partition("=")
            if not eq or not key:
                raise ValueError(f"policy argument {item!r} in {arg!r} must look like key=value")
            try:
                kwargs[key] = json.loads(value)
            except json.JSONDecodeError:
                kwargs[key] = value
    return head, kwargs


__all__ = ["Policy", "POLICIES", "make_policy", "parse_policy_arg", "policy_hash_from_files", "resolve_policy"]
