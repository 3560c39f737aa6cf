"""Errors shared across layers, in one module that imports nothing of the package.

Worlds, policies and judges all raise :class:`MissingWeightsError`; specs and task suites raise
:class:`SpecError`; plug-in resolution raises :class:`PluginError`. Keeping them here lets each
layer raise them without importing another layer (``kosmos_env.worlds.base.MissingWeightsError``
and ``kosmos_env.spec.SpecError`` remain importable under their old names).

A missing optional package is named here too: :func:`missing_module_message` turns a
``ModuleNotFoundError`` for a third-party module into one line naming the extra that installs it,
and :func:`dependency_floor` / :func:`require_version` read the minimum versions from the one
place they are declared, ``pyproject.toml`` (in a clone) or the installed package's metadata, so
the doctor, the Cosmos 3 world and the VLM judge can never disagree about a floor.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path


class MissingWeightsError(RuntimeError):
    """A real model was asked for but its weights are not on disk (the message says what to fetch)."""


class SpecError(ValueError):
    """An env spec file or override is invalid (the message names the field)."""


class PluginError(ValueError):
    """A world, policy, judge or env named in data cannot be used: unknown, not importable without
    the opt-in, not a class, or a class of the wrong kind. Raised before anything is called."""


# Import names that differ from the distribution that provides them (everything else: the import
# name with "_" read as "-").
_IMPORT_TO_DIST = {
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
    "cv2": "opencv-python-headless",
    "stable_baselines3": "stable-baselines3",
    "importlinter": "import-linter",
    "imageio_ffmpeg": "imageio-ffmpeg",
    "pytest_timeout": "pytest-timeout",
}
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(?:>=\s*([0-9][^,;\s]*))?")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
# the aggregate extras name every other one; a hint names the specific extra instead
_AGGREGATE_EXTRAS = ("dev",)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.lru_cache(maxsize=1)
def _requirement_lines() -> tuple[str, ...]:
    return read_requirement_lines(Path(__file__).resolve().parents[1] / "pyproject.toml")


def read_requirement_lines(pyproject: Path) -> tuple[str, ...]:
    """kosmos-env's requirements as ``name>=x; extra == "e"`` lines: from ``pyproject`` when the
    package runs from a clone (the file is the source; installed metadata is a copy made at install
    time and goes stale when the file changes), else from the installed distribution's metadata."""
    if pyproject.is_file():
        import tomllib  # Python >= 3.11, the project's floor; imported only here, never by `import kosmos_env`

        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == "kosmos-env":
            lines = list(project.get("dependencies", []))
            for extra, reqs in project.get("optional-dependencies", {}).items():
                lines += [f'{r}; extra == "{extra}"' for r in reqs]
            return tuple(lines)
    from importlib import metadata

    try:
        return tuple(metadata.requires("kosmos-env") or ())
    except metadata.PackageNotFoundError:
        return ()


@functools.lru_cache(maxsize=1)
def requirement_table() -> dict[str, dict]:
    """``{distribution: {"floor": "5.24" | None, "core": bool, "extras": [...]}}`` (names normalised)."""
    table: dict[str, dict] = {}
    for line in _requirement_lines():
        req, _, marker = line.partition(";")
        m = _REQ.match(req)
        if not m:
            continue
        name = _norm(m.group(1))
        if name == "kosmos-env":  # an aggregate extra naming the others
            continue
        entry = table.setdefault(name, {"floor": None, "core": False, "extras": []})
        if m.group(3) and entry["floor"] is None:
            entry["floor"] = m.group(3)
        extra = _EXTRA_MARKER.search(marker)
        if extra:
            if extra.group(1) not in entry["extras"]:
                entry["extras"].append(extra.group(1))
        else:
            entry["core"] = True
    return table


def dependency_floor(dist: str) -> str | None:
    """The minimum version of ``dist`` that pyproject.toml declares (``None`` if it names none)."""
    entry = requirement_table().get(_norm(dist))
    return entry["floor"] if entry else None


def version_tuple(version: str) -> tuple[int, ...]:
    """``"5.24.0.dev0+cu128"`` -> ``(5, 24, 0)``: numeric release parts only (enough to compare floors)."""
    out = []
    for part in version.split("+")[0].split("."):
        digits = re.match(r"\d+", part)
        if not digits:
            break
        out.append(int(digits.group()))
    return tuple(out)


def version_at_least(installed: str, floor: str) -> bool:
    return version_tuple(installed) >= version_tuple(floor)


def install_hint(extra: str | None, upgrade: bool = False) -> str:
    """The install command for an extra (``None``: the core package), for a clone and for PyPI."""
    flag = "-U " if upgrade else ""
    if extra is None:
        return f"pip install {flag}-e . (in a clone) or pip install {flag}kosmos-env"
    return f"pip install {flag}-e '.[{extra}]' (in a clone) or pip install {flag}'kosmos-env[{extra}]'"


def extra_for_module(module: str) -> tuple[str, str | None] | None:
    """``(distribution, extra)`` that installs the top-level module ``module`` (extra ``None``: a core
    dependency), or ``None`` when pyproject.toml does not name it."""
    top = module.split(".")[0]
    dist = _norm(_IMPORT_TO_DIST.get(top, top))
    entry = requirement_table().get(dist)
    if entry is None:
        return None
    if entry["core"]:
        return dist, None
    named = [e for e in entry["extras"] if e not in _AGGREGATE_EXTRAS]
    return dist, (named or entry["extras"])[0]


def missing_module_message(exc: BaseException) -> str | None:
    """One line naming the extra to install for a ``ModuleNotFoundError`` of a package that
    pyproject.toml declares; ``None`` for any other error (a missing module of the package itself
    is a bug, and keeps its traceback)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    found = extra_for_module(exc.name)
    if found is None:
        return None
    dist, extra = found
    if extra is None:
        return f"{dist} is not installed, and kosmos-env needs it: {install_hint(None)}"
    return f"{dist} is not installed; it comes with the '{extra}' extra: {install_hint(extra)}"


def missing_extra_line(module: str, who: str, extra: str | None = None) -> str | None:
    """One line when ``module`` (a package pyproject.toml declares) is not installed, naming who needs
    it and the extra that installs it (``extra``, or the one pyproject.toml lists it in; give it for a
    package several extras list); None when it is there. Checked with ``find_spec``, nothing is
    imported: a command calls this for every flag it was given before any work starts."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails to import, a module set to None
        found = False
    if found:
        return None
    dist, listed = extra_for_module(module) or (module, None)
    extra = extra or listed
    if extra is None:
        return f"{dist} is not installed; {who} needs it: {install_hint(None)}"
    return f"{dist} is not installed; {who} needs it (the '{extra}' extra): {install_hint(extra)}"


def require_version(dist: str, installed: str, what: str) -> None:
    """Raise RuntimeError (one line, with the install command) when ``installed`` is below the floor
    pyproject.toml declares for ``dist``; ``what`` names who needs it (e.g. "the VLM judge")."""
    floor = dependency_floor(dist)
    if floor is not None and not version_at_least(installed, floor):
        found = extra_for_module(dist)
        extra = found[1] if found else None
        raise RuntimeError(
            f"{what} needs {dist}>={floor} (installed: {installed}); {install_hint(extra, upgrade=True)}"
        )


__all__ = [
    "MissingWeightsError",
    "PluginError",
    "SpecError",
    "dependency_floor",
    "extra_for_module",
    "install_hint",
    "missing_extra_line",
    "missing_module_message",
    "require_version",
    "requirement_table",
    "version_at_least",
]
