"""The env specs this plug-in registers (entry-point group ``kosmos_env.envs``)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def bridge_real_spec() -> dict[str, Any]:
    """``KosmosReplay-BridgeReal-v1``: the spec as data; Kosmos-Env validates it like a built-in one."""
    path = resources.files("kosmos_replay_world") / "KosmosReplay-BridgeReal-v1.json"
    return json.loads(path.read_text(encoding="utf-8"))
