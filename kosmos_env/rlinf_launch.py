"""Run RLinf's own entry scripts (PPO, GRPO, ...) on Kosmos envs without editing RLinf.

RLinf (0.3.0) builds env classes from a closed enum: ``rlinf.envs.SupportedEnvType`` is checked by
``rlinf.config.validate_cfg`` in the driver, and ``rlinf.envs.get_env_cls`` and
``rlinf.envs.action_utils.prepare_actions`` in every env worker. :func:`register` adds the
``kosmos`` member to that enum and maps it to :class:`kosmos_env.rlinf_adapter.KosmosRLinfEnv`,
with actions passed through unchanged (as RLinf does for ``robotwin`` and ``realworld``).

Env workers are Ray actors in other processes (on other nodes too), so registering in the driver
is not enough. RLinf's documented plug-in for that is ``RLINF_EXT_MODULE``: every RLinf ``Worker``
imports the module it names and calls its ``register()`` as the worker is created, and the
driver's environment variables set after ``ray start`` are forwarded to the workers on every node.
This module is such an extension module, and :func:`main` is the launcher that sets it::

    python -m kosmos_env.rlinf_launch RLinf/examples/embodiment/train_embodied_agent.py \\
        --config-path $PWD/examples/rlinf --config-name kosmos_tabletop_ppo_mlp

runs RLinf's entry script unchanged, after registering in the driver and exporting
``RLINF_EXT_MODULE=kosmos_env.rlinf_launch`` for the workers.

Why rebinding: ``rlinf.workers.env.env_worker`` imports ``get_env_cls`` and ``prepare_actions`` by
name, and the worker's ``register()`` runs after that import, so the wrapped functions are also
put in place of the originals in every ``rlinf`` module already loaded. Nothing of RLinf is
imported until :func:`register` is called, and importing this module needs no RLinf.
"""

from __future__ import annotations

import os
import runpy
import sys
from enum import Enum
from types import ModuleType
from typing import Any, Callable

ENV_TYPE = "kosmos"
MEMBER_NAME = "KOSMOS"
EXT_MODULE_VAR = "RLINF_EXT_MODULE"
EXT_MODULE = __name__ if __name__ != "__main__" else "kosmos_env.rlinf_launch"
# marks the wrappers, so a second register() (one per Worker in a process) changes nothing
_WRAPPED = "__kosmos_rlinf_wrapped__"

USAGE = (
    "usage: python -m kosmos_env.rlinf_launch RLINF_ENTRY_SCRIPT [hydra arguments...]\n"
    "  e.g. python -m kosmos_env.rlinf_launch RLinf/examples/embodiment/train_embodied_agent.py "
    "--config-path $PWD/examples/rlinf --config-name kosmos_tabletop_ppo_mlp\n"
    "Registers the 'kosmos' env type in RLinf (env.train.env_type: kosmos) in this process and, through "
    f"{EXT_MODULE_VAR}, in every RLinf worker, then runs the script as __main__."
)


def _env_type_name(env_type: Any) -> Any:
    """``"kosmos"`` for the string or the enum member (RLinf passes either)."""
    return env_type.value if isinstance(env_type, Enum) else env_type


def extend_enum(enum_cls: type[Enum], name: str, value: str) -> Enum:
    """Add member ``name = value`` to an existing plain ``Enum`` class (idempotent).

    The enum module offers no public way to add a member after the class is made; this sets the
    same tables the class statement fills (the name and value lookups and the member order), so
    ``enum_cls(value)``, ``enum_cls[name]``, ``enum_cls.<name>`` and iteration all see it.
    """
    existing = enum_cls._value2member_map_.get(value)
    if existing is not None:
        if existing.name != name:
            raise ValueError(f"{enum_cls.__name__} already has value {value!r} as {existing.name}")
        return existing
    if name in enum_cls._member_map_:
        raise ValueError(f"{enum_cls.__name__}.{name} already exists with value {enum_cls[name].value!r}")
    member = object.__new__(enum_cls)
    member._name_ = name
    member._value_ = value
    member.__objclass__ = enum_cls
    type.__setattr__(enum_cls, name, member)
    enum_cls._member_map_[name] = member
    enum_cls._value2member_map_[value] = member
    enum_cls._member_names_.append(name)
    return member


def _wrap_get_env_cls(original: Callable[..., Any], env_cls_loader: Callable[[], type]) -> Callable[..., Any]:
    def get_env_cls(env_type: Any, env_cfg: Any = None) -> type:
        if _env_type_name(env_type) == ENV_TYPE:
            return env_cls_loader()
        return original(env_type, env_cfg)

    get_env_cls.__doc__ = original.__doc__
    setattr(get_env_cls, _WRAPPED, original)
    return get_env_cls


def _wrap_prepare_actions(original: Callable[..., Any]) -> Callable[..., Any]:
    def prepare_actions(raw_chunk_actions: Any, env_type: Any, *args: Any, **kwargs: Any) -> Any:
        if _env_type_name(env_type) == ENV_TYPE:
            # the Kosmos env takes actions in its own units and clips them to its bounds itself;
            # only a tensor is made a float32 array on the CPU (bf16 has no numpy dtype)
            if hasattr(raw_chunk_actions, "detach"):
                return raw_chunk_actions.detach().float().cpu().numpy()
            return raw_chunk_actions
        return original(raw_chunk_actions, env_type, *args, **kwargs)

    prepare_actions.__doc__ = original.__doc__
    setattr(prepare_actions, _WRAPPED, original)
    return prepare_actions


def _rebind(name: str, original: Callable[..., Any], wrapped: Callable[..., Any], prefix: str) -> list[str]:
    """Put ``wrapped`` where a loaded ``prefix*`` module holds ``original`` under ``name``."""
    rebound = []
    for mod_name, module in list(sys.modules.items()):
        if not isinstance(module, ModuleType) or not (mod_name == prefix or mod_name.startswith(prefix + ".")):
            continue
        if getattr(module, name, None) is original:
            setattr(module, name, wrapped)
            rebound.append(mod_name)
    return rebound


def _load_kosmos_env_cls() -> type:
    from kosmos_env.rlinf_adapter import KosmosRLinfEnv

    return KosmosRLinfEnv


def register(
    envs_module: ModuleType | None = None,
    action_utils_module: ModuleType | None = None,
    package: str = "rlinf",
) -> dict[str, Any]:
    """Make RLinf build :class:`~kosmos_env.rlinf_adapter.KosmosRLinfEnv` for ``env_type: kosmos``.

    Called by RLinf in each worker (``RLINF_EXT_MODULE``) and by :func:`main` in the driver;
    calling it again is harmless. ``envs_module``/``action_utils_module`` default to
    ``rlinf.envs`` and ``rlinf.envs.action_utils``. Returns what it did, for logs and tests.
    """
    if envs_module is None:
        import importlib

        envs_module = importlib.import_module(f"{package}.envs")
    if action_utils_module is None:
        import importlib

        action_utils_module = importlib.import_module(f"{package}.envs.action_utils")
    member = extend_enum(envs_module.SupportedEnvType, MEMBER_NAME, ENV_TYPE)
    done: dict[str, Any] = {"member": member, "rebound": {}}
    for module, name, make in (
        (envs_module, "get_env_cls", lambda f: _wrap_get_env_cls(f, _load_kosmos_env_cls)),
        (action_utils_module, "prepare_actions", _wrap_prepare_actions),
    ):
        current = getattr(module, name)
        if getattr(current, _WRAPPED, None) is not None:
            done["rebound"][name] = _rebind(name, getattr(current, _WRAPPED), current, package)
            continue
        wrapped = make(current)
        done["rebound"][name] = _rebind(name, current, wrapped, package)
    return done


def export_for_workers(environ: dict[str, str] | os._Environ = os.environ) -> None:
    """Name this module in ``RLINF_EXT_MODULE`` so RLinf's workers call :func:`register`.

    RLinf loads one extension module; another one already named there is refused rather than
    silently replaced (its ``register()`` can call this module's ``register()``).
    """
    current = environ.get(EXT_MODULE_VAR)
    if current and current != EXT_MODULE:
        raise ValueError(
            f"{EXT_MODULE_VAR} is already {current!r}; RLinf loads one extension module: call "
            f"{EXT_MODULE}.register() from its register() and run the entry script directly"
        )
    environ[EXT_MODULE_VAR] = EXT_MODULE


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 0 if argv else 2
    script = argv[0]
    if not os.path.isfile(script):
        print(
            f"rlinf_launch: no entry script at {script!r} (RLinf's e.g. examples/embodiment/train_embodied_agent.py)",
            file=sys.stderr,
        )
        return 2
    try:
        import rlinf  # noqa: F401
    except ImportError:
        print(
            "rlinf_launch: rlinf is not importable in this interpreter; build its environment with "
            "scripts/build_rlinf_venv.sh and run this with that environment's python",
            file=sys.stderr,
        )
        return 2
    try:
        export_for_workers()
    except ValueError as exc:
        print(f"rlinf_launch: {exc}", file=sys.stderr)
        return 2
    register()
    # the entry script sees the argv it would see when run directly (Hydra reads it)
    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
