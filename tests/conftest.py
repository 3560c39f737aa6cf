"""Shared test settings: headless MuJoCo, no hub access, and how to build each registered env."""
from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import gymnasium  # noqa: E402
import pytest  # noqa: E402

import kosmos_env  # noqa: E402,F401


def kosmos_env_ids() -> list[str]:
    """Every env id this package registers (read from Gymnasium's registry, not hard-coded)."""
    return sorted(
        env_id for env_id, spec in gymnasium.registry.items()
        if isinstance(spec.entry_point, str) and spec.entry_point.startswith("kosmos_env.")
    )


def make_test_env(env_id: str, **kwargs):
    """Make a registered env runnable on CPU in tests: real-model worlds get a tiny random model."""
    from kosmos_env.spec import load_spec

    if load_spec(env_id).world["type"] == "cosmos3":
        # a tiny random Cosmos 3 pipeline on CPU; judging deferred (the VLM judge has its own tests)
        from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline

        size = kwargs.pop("image_size", (64, 64))
        kwargs = {"env_spec": tiny_bridge_spec(size=size[0]), "world_kwargs": {"pipeline": tiny_pipeline()},
                  "judge": "state", "defer_judging": True, **kwargs}
    return gymnasium.make(env_id, **kwargs)


@pytest.fixture
def tabletop_env():
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64))
    yield env
    env.close()
