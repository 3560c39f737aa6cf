"""Protocols for the registration tests, written with the hashes the code computes now."""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

from kosmos_env.policies import make_policy
from kosmos_env.spec import load_spec

ENV = "Kosmos-Tabletop-v1"
TASK = "carrot_on_plate"
POLICIES = ["scripted:skill=1.0", "random"]


def policy_hash(arg: str) -> str:
    from kosmos_env.policies import parse_policy_arg

    name, kwargs = parse_policy_arg(arg)
    return make_policy(name, **kwargs).content_hash()


def base_protocol(**changes) -> dict:
    """A tiny tabletop study: scripted:skill=1.0 vs random, 1 task x 3 seeds at 64x64 (a spec override)."""
    proto = {
        "schema_version": 1,
        "name": "tiny-tabletop",
        "hypothesis": "the perfect scripted policy succeeds; random does not",
        "env": {
            "id": ENV,
            "overrides": {"image_size": [64, 64]},
            "spec_hash": load_spec(ENV).with_overrides(image_size=[64, 64]).hash,
        },
        "policies": [{"policy": p, "content_hash": policy_hash(p)} for p in POLICIES],
        "tasks": [TASK],
        "seeds": 3,
        "judge": "state",
        "analysis": {"n_boot": 500, "seed": 0},
        "metrics": [
            {
                "name": "scripted_succeeds",
                "expr": 'success_rate(policy="scripted:skill=1.0")',
                "bar": {"op": ">=", "value": 0.3, "bound": "lower", "interval": "wilson"},
            },
            {
                "name": "random_succeeds",
                "expr": 'success_rate(policy="random")',
                "bar": {"op": ">=", "value": 0.8, "bound": "lower", "interval": "wilson", "level": 0.95},
            },
        ],
    }
    proto.update(changes)
    return proto


def write_protocol(directory: Path, proto: dict, name: str = "study.yaml") -> Path:
    path = Path(directory) / name
    path.write_text(yaml.safe_dump(proto, sort_keys=False), encoding="utf-8")
    return path


def write_reference(directory: Path, rows: list[tuple[str, str, float]], name: str = "ref.csv") -> tuple[Path, str]:
    text = "task,policy,reference\n" + "".join(f"{t},{p},{v}\n" for t, p, v in rows)
    path = Path(directory) / name
    path.write_text(text, encoding="utf-8")
    return path, hashlib.sha256(text.encode()).hexdigest()
