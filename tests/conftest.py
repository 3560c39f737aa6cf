"""Shared test settings: headless MuJoCo, no hub access, and how to build each registered env."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import gymnasium  # noqa: E402
import pytest  # noqa: E402

import kosmos_env  # noqa: E402,F401


def missing_from_extra(extra: str) -> list[str]:
    """The distributions of pyproject's optional-dependency group ``extra`` that are not importable
    here (``[]``: the extra is installed). Read from pyproject through kosmos_env.errors, the table
    the CLI's one-line "install the X extra" messages come from, so tests and CLI name the same extra."""
    import importlib.util

    from kosmos_env.errors import _IMPORT_TO_DIST, requirement_table

    dists = [dist for dist, entry in requirement_table().items() if extra in entry["extras"]]
    if not dists:
        raise ValueError(f"pyproject.toml declares no optional-dependency group {extra!r}")
    import_name = {dist: module for module, dist in _IMPORT_TO_DIST.items()}
    # find_spec only looks the module up: nothing heavy is imported at collection time
    return [d for d in dists if importlib.util.find_spec(import_name.get(d, d.replace("-", "_"))) is None]


def requires_extra(*extras: str) -> pytest.MarkDecorator:
    """Skip (with the install command in the reason) unless every package of each named extra is
    importable: a core-install run then skips, by name, what needs an extra instead of failing.
    Use as a decorator, in ``pytestmark`` or in ``pytest.param(..., marks=...)``."""
    missing = {extra: missing_from_extra(extra) for extra in extras}
    reasons = [
        f"needs the {extra} extra (pip install -e '.[{extra}]'): {', '.join(dists)} not installed"
        for extra, dists in missing.items()
        if dists
    ]
    return pytest.mark.skipif(bool(reasons), reason="; ".join(reasons) or f"the {', '.join(extras)} extra is installed")


def kosmos_env_ids() -> list[str]:
    """Every env id this package registers (read from Gymnasium's registry, not hard-coded)."""
    return sorted(
        env_id
        for env_id, spec in gymnasium.registry.items()
        if isinstance(spec.entry_point, str) and spec.entry_point.startswith("kosmos_env.")
    )


def make_test_env(env_id: str, **kwargs):
    """Make a registered env runnable on CPU in tests: real-model worlds get a tiny random model."""
    from kosmos_env.spec import load_spec

    if load_spec(env_id).world["type"] == "cosmos3":
        # a tiny random Cosmos 3 pipeline on CPU; judging deferred (the VLM judge has its own tests)
        from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline

        size = kwargs.pop("image_size", (64, 64))
        kwargs = {
            "env_spec": tiny_bridge_spec(size=size[0]),
            "world_kwargs": {"pipeline": tiny_pipeline()},
            "judge": "state",
            "defer_judging": True,
            **kwargs,
        }
    return gymnasium.make(env_id, **kwargs)


@pytest.fixture
def tabletop_env():
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64))
    yield env
    env.close()
