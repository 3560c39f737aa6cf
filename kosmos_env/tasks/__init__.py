"""Task suites: each task is data (instruction, scene or initial frame, success rule).

A suite is a JSON file next to this module (``tabletop.json``, ``bridge.json``). Worlds
interpret a task's ``params``; the env only needs its name and instruction. A suite's sha256
(of its canonical JSON) enters the env spec hash, so editing a task changes the hash.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Mapping

from kosmos_env.errors import SpecError
from kosmos_env.hashing import canonical_hash


@dataclass(frozen=True)
class TaskSpec:
    """One task: its name, the instruction a policy receives, and world-specific parameters."""

    name: str
    instruction: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskSuite:
    name: str
    tasks: Mapping[str, TaskSpec]
    sha256: str

    @property
    def names(self) -> list[str]:
        return list(self.tasks)


def available_suites() -> list[str]:
    root = resources.files("kosmos_env.tasks")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load_suite(name: str) -> TaskSuite:
    """Load and validate the task suite ``name`` shipped with the package."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name):
        # a suite is named, never a path: "../x" would read a file outside the package
        raise SpecError(f"task suite {name!r} is not a suite name (no paths); available: {available_suites()}")
    path = resources.files("kosmos_env.tasks") / f"{name}.json"
    if not path.is_file():
        raise SpecError(f"unknown task suite {name!r}; available: {available_suites()}")
    raw = json.loads(path.read_text(encoding="utf-8"))
    return suite_from_dict(raw, canonical_hash(raw), SpecError)


def suite_from_dict(raw: Mapping[str, Any], digest: str, error: type[Exception] = ValueError) -> TaskSuite:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("tasks"), list) or not raw["tasks"]:
        raise error("a task suite must be an object with a non-empty 'tasks' list")
    tasks: dict[str, TaskSpec] = {}
    for i, entry in enumerate(raw["tasks"]):
        if not isinstance(entry, Mapping):
            raise error(f"task #{i} must be an object")
        name, instruction = entry.get("name"), entry.get("instruction")
        if not isinstance(name, str) or not name:
            raise error(f"task #{i} needs a non-empty string 'name'")
        if not isinstance(instruction, str) or not instruction:
            raise error(f"task {name!r} needs a non-empty string 'instruction'")
        if name in tasks:
            raise error(f"task name {name!r} appears twice in suite {raw.get('suite')!r}")
        params = {k: v for k, v in entry.items() if k not in ("name", "instruction")}
        tasks[name] = TaskSpec(name=name, instruction=instruction, params=params)
    return TaskSuite(name=str(raw.get("suite", "")), tasks=tasks, sha256=digest)
