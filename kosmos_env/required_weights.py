"""Every downloaded weight an env needs, checked at once, before anything is built or written.

``gymnasium.make``, ``kosmos-env eval`` and ``kosmos-env doctor`` all call :func:`missing_weights`
(``make`` and ``eval`` through :func:`require_weights`), so each names *all* the missing weights of
an env in one message — the world's and every judge's — instead of failing on the first one it
happens to load (``make`` used to name only the world's, ``eval`` only the judge's, after it had
already created its run folder).

Only presence is checked here (cheap: a few ``stat`` calls and a look in the Hugging Face cache);
the loaders still check what they load (architecture, hashes). Shipped weights (the learned
tabletop, the frame judge) are always present and need no check.

:func:`require_ready` checks the optional packages first (``Kosmos-Bridge-v1`` is registered on a
core install, but its world and judge need the ``models`` extra): a missing one is a
``ModuleNotFoundError`` whose message names the extra, raised by ``make`` before anything loads.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from kosmos_env.errors import MissingWeightsError

# the VLM judge's environment variable (kosmos_env.judges.vlm.LOCAL_PATH_ENV; named here so this
# check needs neither transformers nor the judge module)
VLM_LOCAL_PATH_ENV = "KOSMOS_VLM_JUDGE_PATH"


def _world_missing(spec: Any, world_kwargs: Mapping[str, Any]) -> list[str]:
    if spec.world.get("type") != "cosmos3" or "pipeline" in world_kwargs:
        return []
    from kosmos_env.worlds import cosmos3

    cfg = cosmos3._validated_config(spec)
    try:
        cosmos3.resolve_weights(cfg, world_kwargs.get("weights_path"))
    except MissingWeightsError:
        folder = cfg["model_id"].split("/")[-1]
        given = world_kwargs.get("weights_path") or os.environ.get(cfg["local_path_env"])
        where = f" ({given} holds no diffusers checkpoint)" if given else ""
        return [
            f"world weights {cfg['model_id']} at revision {cfg['revision']!r}{where}: "
            f"hf download {cfg['model_id']} --revision {cfg['revision']} --local-dir ~/models/{folder} (older "
            f"clients: huggingface-cli download with the same arguments), then "
            f"export {cfg['local_path_env']}=~/models/{folder} (or world_kwargs={{'weights_path': ...}})"
        ]
    return []


#: judge types that load a Qwen-VL model (the VLM judge and the VLM progress judge share its weights)
VLM_TYPES = ("vlm", "vlm_progress")


def _vlm_specs(judge: Any) -> list[dict[str, Any]]:
    """Every ``{"type": "vlm", ...}`` (or ``vlm_progress``) inside a judge spec (combinators hold their
    judges inside)."""
    found = []
    if isinstance(judge, Mapping):
        if judge.get("type") in VLM_TYPES:
            found.append(dict(judge))
        for value in judge.values():
            found += _vlm_specs(value)
    elif isinstance(judge, (list, tuple)):
        for value in judge:
            found += _vlm_specs(value)
    return found


def _vlm_present(spec: Mapping[str, Any]) -> bool:
    model = spec.get("model")
    if model is not None and not isinstance(model, (str, os.PathLike)):
        return True  # a model object handed in: nothing to load
    local = spec.get("local_path") or os.environ.get(VLM_LOCAL_PATH_ENV)
    if isinstance(model, (str, os.PathLike)) and os.path.isdir(model):
        local = os.fspath(model)
    if local:
        return os.path.isfile(os.path.join(local, "config.json"))
    model_id = str(model) if isinstance(model, (str, os.PathLike)) else spec.get("model_id", "nvidia/Cosmos-Reason1-7B")
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # a core install (no models extra): read the cache's layout directly
        return _in_hf_cache(model_id, "config.json", spec.get("revision"))
    found = try_to_load_from_cache(model_id, "config.json", revision=spec.get("revision"))
    return isinstance(found, str)


def _in_hf_cache(repo_id: str, filename: str, revision: str | None) -> bool:
    """The Hugging Face cache layout (hub/models--ORG--NAME/{refs,snapshots}), read without
    huggingface_hub, so a core install still lists the judge's weights with the world's."""
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub"
    )
    repo = os.path.join(hub, "models--" + repo_id.replace("/", "--"))
    rev = revision or "main"
    ref = os.path.join(repo, "refs", rev)
    if os.path.isfile(ref):
        with open(ref, encoding="utf-8") as fh:
            rev = fh.read().strip()
    return os.path.isfile(os.path.join(repo, "snapshots", rev, filename))


def _judge_missing(judge: Any, seen: set | None = None) -> list[str]:
    """One line per missing VLM weight of a judge spec; ``seen`` (model id, revision, local path) skips
    weights another judge of the env already listed."""
    out = []
    seen = set() if seen is None else seen
    for spec in _vlm_specs(judge):
        if _vlm_present(spec):
            continue
        key = (spec.get("model_id", "nvidia/Cosmos-Reason1-7B"), spec.get("revision"), spec.get("local_path"))
        if key in seen:
            continue
        seen.add(key)
        model_id = spec.get("model_id", "nvidia/Cosmos-Reason1-7B")
        folder = str(model_id).split("/")[-1]
        local = spec.get("local_path") or os.environ.get(VLM_LOCAL_PATH_ENV)
        where = f" ({local} holds no config.json)" if local else ""
        rev = f" --revision {spec['revision']}" if spec.get("revision") else ""
        out.append(
            f"judge weights {model_id}{where}: hf download {model_id}{rev} --local-dir ~/models/{folder}, "
            f'then export {VLM_LOCAL_PATH_ENV}=~/models/{folder} (or --judge \'{{"type": "{spec["type"]}", '
            f'"local_path": ...}}\')'
        )
    return out


def _world_packages(spec: Any, world_kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    if spec.world.get("type") != "cosmos3" or "pipeline" in world_kwargs:
        return ()
    from kosmos_env.worlds.cosmos3 import REQUIRED_PACKAGES

    return tuple(REQUIRED_PACKAGES)


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: None in sys.modules (blocked), or no __spec__
        return False


def needs_models_extra(spec: Any, judge: Any = None) -> bool:
    """Whether ``spec``'s world or this judge needs the packages of the ``models`` extra at all."""
    if spec.world.get("type") == "cosmos3":
        return True
    judge = spec.judge if judge is None else ({"type": judge} if isinstance(judge, str) else judge)
    return bool(_vlm_specs(judge))


def reads_video(judge: Any) -> bool:
    """Whether a judge spec holds a video judge (the VLM judge): what the doctor's readiness videos test."""
    return bool(_vlm_specs({"type": judge} if isinstance(judge, str) else judge))


def missing_packages(
    spec: Any, world_kwargs: Mapping[str, Any] | None = None, judge: Any = None, check_world: bool = True
) -> list[str]:
    """Top-level modules the env's world and judges import that are not installed (without importing
    them: ``find_spec`` only)."""
    needed = list(_world_packages(spec, dict(world_kwargs or {}))) if check_world else []
    if judge is None:
        judge = spec.judge
    if isinstance(judge, str):
        judge = {"type": judge}
    specs = _vlm_specs(judge) + _vlm_specs(_step_judge(spec))
    if specs and any(s.get("model") is None or isinstance(s.get("model"), (str, os.PathLike)) for s in specs):
        needed.append("transformers")
    return [m for m in dict.fromkeys(needed) if not _installed(m)]


def require_ready(
    spec: Any, world_kwargs: Mapping[str, Any] | None = None, judge: Any = None, check_world: bool = True
) -> None:
    """The packages, then every weight, ``spec`` needs with this judge: ``ModuleNotFoundError`` naming
    the extra (the first missing package), or :class:`MissingWeightsError` naming every missing weight."""
    missing = missing_packages(spec, world_kwargs, judge, check_world)
    if missing:
        from kosmos_env.errors import missing_module_message

        exc = ModuleNotFoundError(f"No module named {missing[0]!r}", name=missing[0])
        raise ModuleNotFoundError(
            f"{spec.id} needs {', '.join(missing)}: {missing_module_message(exc) or exc}", name=missing[0]
        )
    require_weights(spec, world_kwargs, judge, check_world)


def missing_weights(
    spec: Any, world_kwargs: Mapping[str, Any] | None = None, judge: Any = None, check_world: bool = True
) -> list[str]:
    """One line per weight ``spec`` needs that is not on disk (world first, then each judge), each
    with the command that fetches it and how to point the env at it; ``[]`` when all are there.

    ``judge`` is the judge spec that will run (``None``: the spec's own; a judge object: nothing to
    check); ``check_world=False`` when a world object is handed in.
    """
    problems = _world_missing(spec, dict(world_kwargs or {})) if check_world else []
    if judge is None:
        judge = spec.judge
    if isinstance(judge, str):
        judge = {"type": judge}
    seen: set = set()
    if isinstance(judge, Mapping):
        problems += _judge_missing(judge, seen)
    # the step judge of a progress reward loads its own model (e.g. vlm_progress)
    problems += _judge_missing(_step_judge(spec), seen)
    return problems


def _step_judge(spec: Any) -> Any:
    """The spec's ``reward.step_judge`` when its reward mode is ``progress``, else ``None``."""
    reward = getattr(spec, "reward", None) or {}
    return reward.get("step_judge") if reward.get("mode") == "progress" else None


def require_weights(
    spec: Any, world_kwargs: Mapping[str, Any] | None = None, judge: Any = None, check_world: bool = True
) -> None:
    """Raise :class:`MissingWeightsError` naming every missing weight of ``spec`` at once."""
    problems = missing_weights(spec, world_kwargs, judge, check_world)
    if problems:
        raise MissingWeightsError(
            f"{spec.id} needs {len(problems)} weight folder(s) that are not on disk: "
            + "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
            + " — `kosmos-env doctor --env "
            + f"{spec.id}` checks them all, `--tiny` runs without them"
        )
