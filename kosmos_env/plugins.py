"""Name -> class resolution for worlds, policies and judges, and the entry points that extend them.

A world, policy or judge is named in data: an env spec's ``world.type``, a campaign's
``--policy``, a registration file received from someone else. Building one means importing a
module and calling a class, so a name is resolved in three steps, and nothing is called until
the last one has passed:

1. **Which target.** A built-in name (the tables in ``kosmos_env.worlds``, ``kosmos_env.policies``,
   ``kosmos_env.judges``) or an entry point of an installed package (groups ``kosmos_env.worlds``,
   ``kosmos_env.policies``, ``kosmos_env.judges``) is *registered*: the user installed it. A raw
   ``"module:attr"`` is imported only with an explicit opt-in (``allow_import=True``, the CLI's
   ``kosmos-env --allow-import ...`` or ``KOSMOS_ENV_ALLOW_IMPORT=1``); otherwise it is refused
   before any import.
2. **Import and look up.** The module is imported and the attribute fetched; nothing is called.
3. **Check the kind.** The object must be a class, and a class of the right kind: a subclass of
   :class:`kosmos_env.policies.Policy` for policies; for worlds and judges, whose contracts are
   ``typing.Protocol`` classes that built-ins implement without inheriting, a class that defines
   every method of the protocol (:class:`~kosmos_env.worlds.base.WorldModel`:
   ``state_space``, ``load``, ``reset``, ``step``, ``evaluate``, ``close``;
   :class:`~kosmos_env.judges.base.Judge`: ``judge``). ``os:system``, a function or a class of
   another kind is refused with :class:`PluginError`, one line naming what was found.

Env specs come from the ``kosmos_env.envs`` group: the entry point's name is the env id and its
object is the spec as data (a ``dict``), a path to a JSON file, or a zero-argument function
returning either. ``import kosmos_env`` registers those ids with Gymnasium from the installed
packages' metadata alone; the entry point itself is loaded only when the env is made.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any, Callable, Mapping

from kosmos_env.errors import PluginError

#: entry-point group of each plug-in kind
GROUPS = {
    "world": "kosmos_env.worlds",
    "policy": "kosmos_env.policies",
    "judge": "kosmos_env.judges",
    "env": "kosmos_env.envs",
}
#: how messages name each kind
LABELS = {"world": "world type", "policy": "policy", "judge": "judge type", "env": "env"}
#: set to 1 to let ``"module:attr"`` names be imported (what ``kosmos-env --allow-import`` does)
ALLOW_IMPORT_ENV = "KOSMOS_ENV_ALLOW_IMPORT"


#: set to 1 to let a checkpoint's own code run (``trust_remote_code``): what ``kosmos-env --trust-remote-code`` does
TRUST_REMOTE_CODE_ENV = "KOSMOS_ENV_TRUST_REMOTE_CODE"


def remote_code_allowed() -> bool:
    """Whether the person running the command allowed checkpoint code (the CLI flag or its variable)."""
    return os.environ.get(TRUST_REMOTE_CODE_ENV, "").strip().lower() in ("1", "true", "yes")


def check_remote_code(requested: bool, who: str) -> bool:
    """``trust_remote_code`` may be *requested* by any setting (a policy string, a judge spec, a
    protocol, a registration), but it runs only where the person running the command allowed it:
    a data file must never make this process execute code it names. Returns ``requested`` or
    raises one ValueError line saying how to allow it."""
    if requested and not remote_code_allowed():
        raise ValueError(
            f"{who} asks for trust_remote_code=true (running the checkpoint's own code); settings and "
            f"files cannot turn that on: rerun with `kosmos-env --trust-remote-code ...` (or "
            f"{TRUST_REMOTE_CODE_ENV}=1) if you trust that code"
        )
    return bool(requested)


#: the permission flags that belong to ``kosmos-env`` itself, before the command
GLOBAL_FLAGS = ("--allow-import", "--trust-remote-code")


def add_global_flag_hints(parser: Any) -> None:
    """Let a command's parser catch ``kosmos-env eval --allow-import ...`` (a permission flag given
    after the command, which argparse would answer with "unrecognized arguments") and say in one line
    where it goes, exit 2. The flags stay global on purpose: a permission is given to the whole
    invocation, and its workers inherit it through the environment."""
    import argparse

    class _Misplaced(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            import sys

            command = parser.prog.split()[-1]
            print(
                f"{parser.prog}: error: {option_string} goes before the command: kosmos-env {option_string} "
                f"{command} ...",
                file=sys.stderr,
            )
            raise SystemExit(2)

    for flag in GLOBAL_FLAGS:
        parser.add_argument(flag, nargs=0, action=_Misplaced, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def import_allowed(allow_import: bool | None = None) -> bool:
    """The explicit opt-in for ``"module:attr"`` names: the argument, else the environment variable."""
    if allow_import is not None:
        return bool(allow_import)
    return os.environ.get(ALLOW_IMPORT_ENV, "").strip().lower() in ("1", "true", "yes")


def entry_points(kind: str) -> dict[str, Any]:
    """Installed entry points of ``kind`` by name (metadata only: nothing is imported)."""
    from importlib.metadata import entry_points as _entry_points

    return {ep.name: ep for ep in _entry_points(group=GROUPS[kind])}


def registered_names(kind: str, builtins: Mapping[str, str]) -> list[str]:
    """Built-in names and installed plug-in names of ``kind``, sorted."""
    return sorted(set(builtins) | set(entry_points(kind)))


def resolve_class(
    kind: str,
    name: str,
    builtins: Mapping[str, str],
    check: Callable[[type], str | None],
    allow_import: bool | None = None,
    names_only: bool = False,
) -> type:
    """The class ``name`` stands for, checked to be of ``kind`` before anything calls it.

    ``check(cls)`` returns ``None`` for a class of the right kind, else what is wrong with it.
    ``names_only``: ``"module:attr"`` is never accepted, opt-in or not (world and judge types in
    specs). Raises :class:`PluginError` for an unknown name, a ``"module:attr"`` without the opt-in,
    an import that fails, a non-class or a class of the wrong kind.
    """
    label = LABELS.get(kind, kind)
    if not isinstance(name, str) or not name:
        raise PluginError(f"a {kind} must be named by a non-empty string, got {name!r}")
    if name in builtins:
        target, origin = builtins[name], "built-in"
    else:
        plugins = entry_points(kind)
        if name in plugins:
            target, origin = plugins[name].value, f"plug-in (entry point {GROUPS[kind]})"
        elif ":" in name and names_only:
            raise PluginError(
                f"{label} {name!r} is not registered; a {label} is a registered name (built-in or a "
                f"{GROUPS[kind]} entry point), never 'module:attr'; registered: "
                f"{', '.join(registered_names(kind, builtins))}"
            )
        elif ":" in name and _setting_without_key(name, builtins, plugins):
            head, _, value = name.partition(":")
            raise PluginError(
                f"{label} {name!r}: what follows '{head}:' must be key=value settings; write "
                f"'{head}:{_first_setting(kind, head, builtins, plugins)}={value}'"
            )
        elif ":" in name:
            if not import_allowed(allow_import):
                raise PluginError(
                    f"{label} {name!r} is not a registered {label} ({', '.join(registered_names(kind, builtins))}); "
                    f"importing 'module:attr' names needs an explicit opt-in: kosmos-env --allow-import "
                    f"(or {ALLOW_IMPORT_ENV}=1, or allow_import=True)"
                )
            target, origin = name, "import"
        else:
            raise PluginError(f"unknown {label} {name!r}; registered: {', '.join(registered_names(kind, builtins))}")
    obj = load_target(kind, name, target)
    if not inspect.isclass(obj):
        raise PluginError(
            f"{label} {name!r} ({origin}: {target}) is a {_describe(obj)}, not a class; nothing was called"
        )
    problem = check(obj)
    if problem:
        raise PluginError(
            f"{label} {name!r} ({origin}: {target}) is the class {obj.__module__}.{obj.__qualname__}, "
            f"which {problem}; nothing was called"
        )
    return obj


def _setting_without_key(name: str, builtins: Mapping[str, str], plugins: Mapping[str, Any]) -> bool:
    """``ckpt:runs/x.safetensors``: a registered name, then a value that cannot be a class name (a
    path, a URL): a setting whose ``key=`` was left out, not a ``module:attr`` to import."""
    head, _, rest = name.partition(":")
    return (head in builtins or head in plugins) and not all(part.isidentifier() for part in rest.split("."))


def _first_setting(kind: str, head: str, builtins: Mapping[str, str], plugins: Mapping[str, Any]) -> str:
    """The first constructor parameter of the registered class ``head`` (``path`` for ``ckpt``), the
    setting a bare value most likely meant; ``path`` when the class cannot be read."""
    target = builtins[head] if head in builtins else plugins[head].value
    try:
        params = [p for p in inspect.signature(load_target(kind, head, target).__init__).parameters if p != "self"]
    except Exception:  # noqa: BLE001 - only a hint: a class that cannot be loaded here still gets one
        return "path"
    named = [p for p in params if p not in ("args", "kwargs")]
    return named[0] if named else "path"


def load_target(kind: str, name: str, target: str) -> Any:
    """Import ``"module:attr"`` (attr may be dotted) and return the attribute without calling it."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f"{kind} {name!r} must name 'module:attr', got {target!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"{kind} {name!r}: cannot import module {module_name!r} ({exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{kind} {name!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def subclass_of(base: type) -> Callable[[type], str | None]:
    """A kind check: a subclass of ``base``."""

    def check(cls: type) -> str | None:
        if issubclass(cls, base):
            return None
        return f"is not a subclass of {base.__module__}.{base.__qualname__}"

    return check


def implements(protocol: type) -> Callable[[type], str | None]:
    """A kind check for a ``typing.Protocol``: the class defines every method the protocol declares."""
    methods = protocol_methods(protocol)

    def check(cls: type) -> str | None:
        missing = [m for m in methods if not callable(inspect.getattr_static(cls, m, None))]
        if missing:
            return (
                f"does not implement {protocol.__module__}.{protocol.__qualname__} "
                f"(missing method{'s' if len(missing) > 1 else ''} {', '.join(missing)})"
            )
        return None

    return check


def protocol_methods(protocol: type) -> list[str]:
    """Names of the methods a Protocol class declares (its own, not ``object``'s or Protocol's)."""
    return sorted(
        name for name, value in vars(protocol).items() if not name.startswith("_") and inspect.isfunction(value)
    )


def _describe(obj: Any) -> str:
    if inspect.isbuiltin(obj):
        return "built-in function"
    if inspect.isfunction(obj):
        return "function"
    if inspect.ismodule(obj):
        return "module"
    return f"{type(obj).__name__} object"


# -- env specs ------------------------------------------------------------------------------------
def plugin_env_ids() -> list[str]:
    """Env ids that installed packages provide through the ``kosmos_env.envs`` group."""
    return sorted(entry_points("env"))


def load_plugin_spec_data(env_id: str) -> dict[str, Any] | None:
    """The raw spec of a plug-in env id (validated by the caller), or None when no plug-in has it.

    The entry point's object must be a dict, a path to a JSON file (``str`` or ``os.PathLike``,
    e.g. an ``importlib.resources`` file), or a function taking no argument that returns either.
    """
    import json

    ep = entry_points("env").get(env_id)
    if ep is None:
        return None
    obj = load_target("env", env_id, ep.value)
    if inspect.isfunction(obj):
        if inspect.signature(obj).parameters:
            raise PluginError(
                f"env {env_id!r} (entry point {ep.value}) is a function with parameters; "
                f"it must be a spec dict, a JSON path, or a function taking no argument"
            )
        obj = obj()
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, (str, os.PathLike)) or hasattr(obj, "read_text"):
        text = obj.read_text(encoding="utf-8") if hasattr(obj, "read_text") else open(obj, encoding="utf-8").read()
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PluginError(f"env {env_id!r} (entry point {ep.value}): spec is not valid JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise PluginError(f"env {env_id!r} (entry point {ep.value}): spec must be a JSON object")
        return raw
    raise PluginError(
        f"env {env_id!r} (entry point {ep.value}) is a {_describe(obj)}; "
        f"it must be a spec dict, a JSON path, or a function taking no argument"
    )


def register_plugin_envs() -> list[str]:
    """Register every plug-in env id with Gymnasium (string entry point: nothing is imported now).

    Ids that Gymnasium already knows (a built-in of the same name) are left alone.
    """
    from gymnasium.envs.registration import register, registry

    added = []
    try:
        ids = plugin_env_ids()
    except Exception:  # broken metadata of some unrelated package must not break `import kosmos_env`
        return added
    for env_id in ids:
        if env_id in registry:
            continue
        try:
            register(id=env_id, entry_point="kosmos_env.env:KosmosEnv", kwargs={"spec_id": env_id})
        except Exception as exc:  # a malformed id from one plug-in: say so, keep the others
            import warnings

            warnings.warn(f"kosmos_env.envs entry point {env_id!r} not registered: {exc}", stacklevel=2)
            continue
        added.append(env_id)
    return added
