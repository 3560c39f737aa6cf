"""Refuse ``gymnasium.make_vec(..., vectorization_mode="async")`` settings that break Kosmos envs.

Gymnasium's ``AsyncVectorEnv`` defaults fail with these envs in two ways, silently:

- ``shared_memory=True`` (the default) reads the observation buffers once, at construction;
  that works for array observations (views) but freezes ``Text`` ones, so every
  ``instruction`` comes back as a string of the charset's first character.
- the ``fork`` start method (the default on Linux before Python 3.14) copies a process whose
  MuJoCo/EGL (or CUDA) context cannot be used in the child: the children hang for ever once
  the parent has rendered a frame.

``AsyncVectorEnv`` builds one env in the parent process to read the spaces before it starts
any child; that env's constructor calls :func:`check_async_vector_settings`, which finds the
``AsyncVectorEnv`` being built on the call stack and raises a ``ValueError`` naming the fix
before any child exists: ``vector_kwargs={"context": "spawn", "shared_memory": False}``.
"""

from __future__ import annotations

import sys

FIX = 'vector_kwargs={"context": "spawn", "shared_memory": False}'


def _async_vector_env_being_built():
    """The ``AsyncVectorEnv`` whose constructor is on this thread's call stack, if any."""
    vector = sys.modules.get("gymnasium.vector.async_vector_env")
    if vector is None:
        return None
    cls = vector.AsyncVectorEnv
    frame = sys._getframe(1)
    depth = 0
    while frame is not None and depth < 64:
        if frame.f_code.co_name == "__init__":
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, cls):
                return candidate
        frame = frame.f_back
        depth += 1
    return None


def check_async_vector_settings() -> None:
    """Raise ValueError when this env is being built for an AsyncVectorEnv with unsafe settings."""
    venv = _async_vector_env_being_built()
    if venv is None:
        return
    problems = []
    if getattr(venv, "shared_memory", False):
        problems.append(
            "shared_memory=True freezes the text 'instruction' observations (every instruction "
            "would come back as one repeated character)"
        )
    context = getattr(venv, "context", None)
    if context is None:
        import multiprocessing

        # what multiprocessing.get_context(None) will pick, read without fixing it as a side effect
        context = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if context == "fork":
        problems.append(
            "the 'fork' start method copies MuJoCo/EGL and CUDA state that the children cannot use "
            "(they hang once the parent has rendered)"
        )
    if problems:
        raise ValueError(
            "Kosmos envs cannot run in gymnasium's AsyncVectorEnv with these settings: "
            + "; ".join(problems)
            + f". Pass {FIX} to gymnasium.make_vec (scripts need the usual "
            '`if __name__ == "__main__":` guard), or use vectorization_mode="sync"'
        )
