"""Kosmos-Env: rank robot manipulation policies inside world models, and measure the evaluator.

Importing this package registers every env id with Gymnasium, built-in and from installed
plug-ins (``kosmos_env.envs`` entry points; see :mod:`kosmos_env.plugins`), as string entry
points: nothing heavy is imported until an env is made.
"""

from __future__ import annotations

import os

from gymnasium.envs.registration import register

# Headless rendering for the embedded MuJoCo world: MuJoCo reads MUJOCO_GL when it is first
# imported, so the default has to be in place before any world module imports it. A value the
# user set is kept.
os.environ.setdefault("MUJOCO_GL", "egl")

__version__ = "0.1.0"


def _register_builtin_envs() -> None:
    """Register every id frozen in ``envs_registry/spec_hashes.json``, deprecated versions included
    (a published result is rerun by the id it names; Gymnasium warns that a newer one exists).
    The vector entry point batches what a world can batch (the MuJoCo tabletop steps sub-envs in
    turn on one EGL context; Cosmos 3 and the learned tabletop make one model call for N episodes)."""
    import json
    from importlib import resources

    frozen = json.loads((resources.files("kosmos_env.envs_registry") / "spec_hashes.json").read_text(encoding="utf-8"))
    for env_id in sorted(frozen):
        register(
            id=env_id,
            entry_point="kosmos_env.env:KosmosEnv",
            kwargs={"spec_id": env_id},
            vector_entry_point="kosmos_env.batched_vector:make_batched_vec",
        )


_register_builtin_envs()


def _register_plugin_envs() -> None:
    # env ids from installed plug-ins (entry-point group kosmos_env.envs), from metadata only
    from kosmos_env.plugins import register_plugin_envs

    register_plugin_envs()


_register_plugin_envs()
