"""Judge specs on the command line, and the identity (hash) of a built judge.

``vlm:model=PATH,k=3,adapter=DIR`` is parsed like a policy argument (``name:key=value,...``,
values read as JSON when they parse) into ``{"type": "vlm", "model": PATH, "k": 3, ...}``; a
JSON object is accepted too. The *identity* of a built judge is its verdict-relevant spec plus
a fingerprint of the weights it loaded from disk (sha256 of every file of the model folder), so
labels from different weights that happen to sit at the same path are never mixed.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from kosmos_env.hashing import canonical_hash, folder_sha256


def parse_judge_arg(arg: str) -> dict[str, Any]:
    """``name[:k=v,...]`` or a JSON object -> a judge spec mapping with ``type``."""
    if not isinstance(arg, str) or not arg.strip():
        raise ValueError("a judge spec must be a non-empty string like vlm:model=PATH,k=3")
    arg = arg.strip()
    if arg.startswith("{"):
        try:
            spec = json.loads(arg)
        except json.JSONDecodeError as exc:
            raise ValueError(f"judge spec {arg!r} is not valid JSON: {exc.msg}") from None
        if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
            raise ValueError(f"a JSON judge spec must be an object with a string 'type', got {arg!r}")
        return spec
    name, _, tail = arg.partition(":")
    if not name:
        raise ValueError(f"judge spec {arg!r} has no judge type before ':'")
    spec: dict[str, Any] = {"type": name}
    if tail:
        for item in tail.split(","):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"judge argument {item!r} in {arg!r} must look like key=value")
            key = key.strip()
            if key in spec:
                raise ValueError(f"judge argument {key!r} is given twice in {arg!r}")
            try:
                spec[key] = json.loads(value)
            except json.JSONDecodeError:
                spec[key] = value
    return spec


def build_judge(spec: Mapping[str, Any], **runtime: Any):
    """Build the judge (``kosmos_env.judges.make_judge``); ``runtime`` passes model objects in tests."""
    from kosmos_env.judges import make_judge

    return make_judge(dict(spec), **runtime)


def identity_hash(data: Any) -> str:
    """sha256 of a distilled judge's identity, split or label set: canonical JSON with NaN kept and
    paths and dtypes written as text (the form these hashes were first published in)."""
    return canonical_hash(data, allow_nan=True, default=str)


def model_source(spec: Mapping[str, Any]) -> str | None:
    """The local weights folder a VLM spec loads from (``model``/``local_path``/env var), if any."""
    for key in ("model", "local_path"):
        value = spec.get(key)
        if isinstance(value, (str, os.PathLike)) and os.path.isdir(value):
            return os.path.abspath(value)
    from kosmos_env.judges.vlm import LOCAL_PATH_ENV

    env = os.environ.get(LOCAL_PATH_ENV)
    if spec.get("type") == "vlm" and env and os.path.isdir(env) and "model_id" not in spec and "model" not in spec:
        return os.path.abspath(env)
    return None


def judge_identity(judge: Any, spec: Mapping[str, Any]) -> dict[str, Any]:
    """What makes two judges' labels interchangeable: the judge's spec + a weights fingerprint.

    ``spec`` is the spec the judge was built from (to find its weights folder). A judge built
    from in-memory objects (tests) has no folder; its identity is then its spec alone.
    """
    judge_spec = dict(getattr(judge, "spec", None) or {k: v for k, v in spec.items() if k not in ("model",)})
    source = model_source(spec)
    weights = (
        {"folder_sha256": folder_sha256(source)}
        if source
        else {"model_id": judge_spec.get("model_id", spec.get("model"))}
    )
    return {"judge": judge_spec, "weights": weights}


def spec_hash(identity: Mapping[str, Any]) -> str:
    return identity_hash(identity)


def resolve_judge_arg(arg: str) -> dict[str, Any]:
    """Like :func:`parse_judge_arg`, but a folder holding ``judge_spec.json`` (a distilled
    adapter written by ``judge-distill``) stands for the spec saved there."""
    path = os.path.join(arg, "judge_spec.json") if isinstance(arg, str) else ""
    if path and os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            spec = json.load(fh)
        if not isinstance(spec, dict) or "type" not in spec:
            raise ValueError(f"{path} is not a judge spec (an object with 'type')")
        return spec
    return parse_judge_arg(arg)


def model_label(spec: Mapping[str, Any]) -> str:
    """What the spec names as its model (path or hub id), for label rows."""
    for key in ("model", "local_path", "model_id"):
        if isinstance(spec.get(key), (str, os.PathLike)):
            return os.fspath(spec[key])
    return str(spec.get("type", ""))
