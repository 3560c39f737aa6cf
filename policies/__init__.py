"""Policy adapters, imported as ``kosmos_env.policies``.

``make_policy("scripted", skill=0.6)`` builds a built-in adapter by name; any other class is
reachable as ``make_policy("my_pkg.module:MyPolicy", **kwargs)``. Adapters with heavy stacks
import them only when built.
"""
from __future__ import annotations

import importlib
from typing import Any

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
}


def make_policy(name: str, **kwargs: Any) -> Policy:
    """Build a policy by built-in name or by ``"module:Class"`` entry point."""
    target = POLICIES.get(name, name)
    if ":" not in target:
        raise ValueError(f"unknown policy {name!r}; built-in: {sorted(POLICIES)}, or pass 'module:Class'")
    module_name, attr = target.split(":", 1)
    cls = getattr(importlib.import_module(module_name), attr)
    policy = cls(**kwargs)
    if not isinstance(policy, Policy):
        raise TypeError(f"{target} does not build a kosmos_env.policies.Policy")
    return policy


def parse_policy_arg(arg: str) -> tuple[str, dict[str, Any]]:
    """Parse the CLI form ``name:k=v,k2=v2`` (or ``module:Class:k=v``) into (name, kwargs).

    Values are parsed as JSON when they parse (numbers, booleans), else kept as strings.
    """
    import json

    head, _, tail = arg.partition(":")
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


__all__ = ["Policy", "POLICIES", "make_policy", "parse_policy_arg"]
