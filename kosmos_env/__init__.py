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

register(id="Kosmos-Tabletop-v1", entry_point="kosmos_env.env:KosmosEnv", kwargs={"spec_id": "Kosmos-Tabletop-v1"},
         vector_entry_point="kosmos_env.batched_vector:make_batched_vec")  # MuJoCo: sub-envs step in turn (EGL)
register(id="Kosmos-Bridge-v1", entry_point="kosmos_env.env:KosmosEnv", kwargs={"spec_id": "Kosmos-Bridge-v1"},
         vector_entry_point="kosmos_env.batched_vector:make_batched_vec")  # N episodes, one model call
register(id="Kosmos-TabletopLearned-v1", entry_point="kosmos_env.env:KosmosEnv", kwargs={"spec_id": "Kosmos-TabletopLearned-v1"},
         vector_entry_point="kosmos_env.batched_vector:make_batched_vec")  # N episodes, one engine pass


def _register_plugin_envs() -> None:
    # env ids from installed plug-ins (entry-point group kosmos_env.envs), from metadata only
    from kosmos_env.plugins import register_plugin_envs

    register_plugin_envs()


_register_plugin_envs()
