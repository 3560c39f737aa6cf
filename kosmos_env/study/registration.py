"""A study's registration: what will run, bound by content, written before any result exists.

``kosmos-env register --study ...`` is the only way to make one (:func:`write_registration`). It
binds, beside the design (policies, tasks, seeds, horizons, worlds run, controls, sweep) and the
bars:

- the world under test and the reference: env id, spec hash, the world's code version
  (``WORLD_VERSIONS``), the sha256 of its backend's Python files and, for worlds with weights, the
  sha256 of the weights file that will actually be loaded;
- the judges: code sha256 of each judge's module and the sha256 of its artifacts (the vision
  judge's weights, the learned action-only judge's coefficients);
- the policies: content hashes (a checkpoint's weights, a scripted policy's settings);
- the evaluation seeds, written out, each checked to lie in the evaluation range
  (:mod:`kosmos_env.study.seed_ranges`);
- the baselines the world is judged against, the package version.

``kosmos-env study --registration FILE`` recomputes the same record from its own arguments and
refuses, in one line naming the first differing field, any difference; it also refuses a
registration made after the run started. A study without one is exploratory.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Mapping

from kosmos_env.hashing import canonical_json, manifest_sha256, sha256_file, sha256_hex
from kosmos_env.stats.uncertainty import ALPHA

KIND = "kosmos-env validity study registration"
# settings that cannot change a number (thread count, how many example frames the report shows)
UNBOUND_CONFIG = ("threads", "keep_examples")
_STAMP = "%Y-%m-%dT%H:%M:%S.%fZ"  # microseconds: register-then-run in one second still orders


class RegistrationError(ValueError):
    """A registration that is missing, malformed, tampered with, late, or does not match the run."""


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime(_STAMP)


def code_digest(module: str) -> dict[str, Any]:
    """sha256 over the Python source of ``module``'s backend: the whole sub-package when the module
    lives in one (``kosmos_env.worlds.tabletop.world`` -> ``worlds/tabletop/*.py``), else the file."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise RegistrationError(f"cannot locate the source of {module}")
    origin = Path(spec.origin)
    parent = origin.parent
    # a package named itself (kosmos_env.gate) is hashed whole, not by its __init__.py alone
    is_package = spec.submodule_search_locations is not None
    root = parent if (parent / "__init__.py").is_file() and (module.count(".") >= 3 or is_package) else None
    files = sorted(root.rglob("*.py")) if root else [origin]
    base = root or origin.parent
    sha = manifest_sha256([(f.relative_to(base).as_posix(), sha256_file(f)) for f in files])
    return {"module": module, "files": len(files), "sha256": sha}


def world_binding(env_id: str, world_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Env id, spec hash, world code version and code sha256, and the weights file that will load."""
    from kosmos_env.spec import WORLD_VERSIONS, load_spec
    from kosmos_env.worlds import WORLD_BACKENDS

    spec = load_spec(env_id)
    kind = str(spec.world.get("type"))
    out: dict[str, Any] = {
        "id": env_id,
        "spec_hash": spec.hash,
        "world_type": kind,
        "world_version": WORLD_VERSIONS.get(kind),
    }
    if kind in WORLD_BACKENDS:
        out["code"] = code_digest(WORLD_BACKENDS[kind].split(":")[0])
    if kind == "tabletop_learned":
        from kosmos_env.worlds.tabletop_learned.world import weights_dir

        given = (world_kwargs or {}).get("weights_path")
        path = Path(given) if given else weights_dir() / spec.world["weights"]
        if not path.is_file():
            raise RegistrationError(f"world weights {path} do not exist")
        out["weights"] = {"file": path.name, "sha256": sha256_file(path)}
    return out


def judge_bindings(cfg) -> dict[str, Any]:
    """Code and artifact hashes of every judge the study runs."""
    from kosmos_env.judges import JUDGES
    from kosmos_env.judges.action_learned import load_coefficients
    from kosmos_env.judges.vision_frame import shipped_classifier_path

    out = {}
    for name, kind in (
        ("robot_log", "robot_log"),
        ("vision", "vision_frame"),
        ("action_only", "action_only"),
        ("action_learned", "action_learned"),
        ("state", "state"),
    ):
        out[name] = {"type": kind, "code": code_digest(JUDGES[kind].split(":")[0])}
    vision = Path(cfg.vision_weights) if cfg.vision_weights else shipped_classifier_path()
    if not vision.is_file():
        raise RegistrationError(f"vision-judge weights {vision} do not exist")
    out["vision"]["weights"] = {"file": vision.name, "sha256": sha256_file(vision)}
    out["action_learned"]["coefficients_sha256"] = load_coefficients()["sha256"]
    if cfg.gate:
        out["gate"] = {"type": "consistency_gate", "code": code_digest("kosmos_env.gate")}
    return out


def policy_bindings(policies) -> list[dict[str, str]]:
    """Each policy's content hash (a checkpoint's weights file, a scripted policy's settings), the
    same value a campaign protocol binds, computed from files: no policy is built, so registering
    loads no weights and runs no checkpoint code."""
    from kosmos_env.policies import parse_policy_arg, policy_hash_from_files

    out = []
    for p in policies:
        name, kwargs = parse_policy_arg(p)
        out.append({"policy": p, "content_hash": policy_hash_from_files(name, kwargs)})
    return out


def evaluation_seeds(cfg, tasks) -> dict[str, list[int]]:
    return {t: [cfg.seed_offset + 1000 * k + i for i in range(cfg.seeds)] for k, t in enumerate(tasks)}


def registration_body(cfg, tasks, bars, baselines, n_boot: int = 1000) -> dict[str, Any]:
    """Everything a registration binds, computed from the code, data and arguments as they are now."""
    from importlib.metadata import PackageNotFoundError, version

    from kosmos_env.study.seed_ranges import check_seeds

    seeds = evaluation_seeds(cfg, tasks)
    check_seeds([s for v in seeds.values() for s in v], "evaluation", "the study's evaluation seeds")
    try:
        pkg = version("kosmos-env")
    except PackageNotFoundError:
        pkg = None
    config = {k: v for k, v in cfg.to_dict().items() if k not in UNBOUND_CONFIG}
    body = {
        "kind": KIND,
        "alpha": ALPHA,
        "package_version": pkg,
        "config": config,
        "tasks": list(tasks),
        "evaluation_seeds": seeds,
        "world": world_binding(cfg.world, cfg.world_kwargs),
        "reference": world_binding(cfg.reference),
        "judges": judge_bindings(cfg),
        "policies": policy_bindings(cfg.policies),
        "baselines": list(baselines),
        "bars": list(bars),
        "analysis": {"n_boot": int(n_boot), "bootstrap_seed": 0},
    }
    return json.loads(canonical_json(body))


def _seal(body: Mapping[str, Any]) -> str:
    return sha256_hex(canonical_json(dict(body)))


def write_registration(body: Mapping[str, Any], path) -> dict[str, Any]:
    """Stamp (UTC time, sha256 over body and time) and write; an existing file is never overwritten."""
    path = Path(path)
    if path.exists():
        raise RegistrationError(f"{path} already exists; a registration is never overwritten (choose another --out)")
    record = {**body, "registered_utc": utc_now()}
    record["sha256"] = _seal(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return record


def load_registration_file(path) -> dict[str, Any]:
    """Read a registration and check its seal; one RegistrationError line otherwise."""
    path = Path(path)
    if not path.is_file():
        raise RegistrationError(f"registration {path} does not exist; make one with `kosmos-env register --study ...`")
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RegistrationError(f"registration {path} is not JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("kind") != KIND:
        raise RegistrationError(
            f"{path} is not a study registration (kind must be {KIND!r}; campaign protocols "
            f"are registered with `kosmos-env register PROTOCOL.yaml`)"
        )
    if not isinstance(record.get("registered_utc"), str) or not isinstance(record.get("sha256"), str):
        raise RegistrationError(f"registration {path} lacks registered_utc or sha256")
    body = {k: v for k, v in record.items() if k != "sha256"}
    if _seal(body) != record["sha256"]:
        raise RegistrationError(
            f"registration {path}: its sha256 does not match its content (edited after it was made)"
        )
    try:
        _dt.datetime.strptime(record["registered_utc"], _STAMP)
    except ValueError:
        raise RegistrationError(
            f"registration {path}: registered_utc {record['registered_utc']!r} is not YYYY-MM-DDTHH:MM:SS.ffffffZ"
        ) from None
    return record


def first_difference(registered: Any, current: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """The first field (dotted path, in sorted key order) where the two records differ, or None."""
    if isinstance(registered, dict) and isinstance(current, dict):
        for k in sorted(set(registered) | set(current)):
            if k in ("sha256", "registered_utc") and not where:
                continue
            sub = f"{where}.{k}" if where else k
            if k not in registered or k not in current:
                return sub, registered.get(k, "<absent>"), current.get(k, "<absent>")
            d = first_difference(registered[k], current[k], sub)
            if d:
                return d
        return None
    if isinstance(registered, list) and isinstance(current, list) and len(registered) == len(current):
        for i, (a, b) in enumerate(zip(registered, current, strict=True)):
            d = first_difference(a, b, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if registered == current else (where, registered, current)


def _short(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, str) else v
    return text if len(text) <= 80 else text[:77] + "..."


def check_registration(record: Mapping[str, Any], current: Mapping[str, Any], started_utc: str, path="") -> None:
    """Refuse (one line) a registration made at or after the run's start, or differing from it."""
    if record["registered_utc"] >= started_utc:
        raise RegistrationError(
            f"registration {path} was made at {record['registered_utc']}, not before this run "
            f"(started {started_utc}): register first, then run"
        )
    d = first_difference(dict(record), dict(current))
    if d:
        field, was, now = d
        raise RegistrationError(
            f"registration {path} does not match this run: {field} is {_short(was)} in the "
            f"registration, {_short(now)} now"
        )
