"""Study protocols: the schema, its validation, and the canonical form whose SHA-256 is the
registration hash.

A protocol (YAML, read with ``yaml.safe_load`` only) freezes a study before any result exists::

    schema_version: 1
    name: tabletop-scripted-vs-random          # letters, digits, . _ -
    description: ...                            # optional free text
    hypothesis: ...                             # optional free text
    env:
      id: Kosmos-Tabletop-v1
      overrides: {image_size: [64, 64]}         # optional; they change the spec hash
      spec_hash: <sha256 of the overridden spec>
    policies:
      - {policy: "scripted:skill=1.0", content_hash: <make_policy(...).content_hash()>}
      - {policy: random, content_hash: ...}
    tasks: [carrot_on_plate]                    # or "all"
    seeds: 3                                    # a count (N evaluation seeds from 100000) or a list
    repeats: 1                                  # optional, default 1
    judge: state                                # optional: a type name or a spec mapping; default the spec's
    reference: {path: ref.csv, sha256: ...}     # optional; path relative to the protocol file
    analysis: {n_boot: 2000, seed: 0}           # optional bootstrap settings
    metrics:
      - name: scripted_succeeds
        expr: success_rate(policy="scripted:skill=1.0")
        bar: {op: ">=", value: 0.8, bound: lower, interval: wilson, level: 0.95}

A bar always names the number it checks: ``bound: lower`` (the interval's lower bound),
``upper``, or ``estimate`` (the point estimate; the interval is still reported). ``interval``
defaults to Wilson for rates and the bootstrap otherwise; ``level`` to 0.95.

:func:`validate_protocol` checks the structure (unknown fields, wrong types, bad values: a
ValueError naming the field) and, unless told not to, the hashes against the code and data
as they are now: the env spec with the overrides, every policy's ``content_hash()``, the
reference file's sha256. It returns the canonical protocol (a plain dict with every default
made explicit); :func:`protocol_hash` is the SHA-256 of its canonical JSON.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

from kosmos_env.hashing import canonical_hash, canonical_json, sha256_file
from kosmos_env.utils.seed_ranges import evaluation_seeds, overlap_line

PROTOCOL_SCHEMA = "kosmos-env/protocol"
PROTOCOL_SCHEMA_VERSION = 1
DEFAULT_N_BOOT = 2000
MAX_N_BOOT = 100_000
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_TOP = {
    "schema",
    "schema_version",
    "name",
    "description",
    "hypothesis",
    "env",
    "policies",
    "tasks",
    "seeds",
    "repeats",
    "judge",
    "reference",
    "analysis",
    "metrics",
}
_REQUIRED = ("schema_version", "name", "env", "policies", "tasks", "seeds", "metrics")
BAR_OPS = (">=", ">", "<=", "<")
BAR_BOUNDS = ("lower", "upper", "estimate")


class ProtocolError(ValueError):
    """A protocol is invalid or does not match the code and data it names."""


def protocol_hash(canonical: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a canonical protocol's canonical JSON (:func:`kosmos_env.hashing.canonical_json`:
    sorted keys, no whitespace, ASCII, no NaN): the registration hash."""
    return canonical_hash(canonical)


def _refuse_aliases(yaml: Any, text: str, path: Path) -> None:
    """Refuse YAML anchors and aliases before building anything: a protocol never needs them, and
    nested aliases (a "billion laughs" of 9 x 9 references) expand exponentially inside safe_load.
    The event stream is scanned lazily, so the refusal comes at the first alias, at no cost."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise ProtocolError(
                f"{path} uses YAML anchors or aliases (line {event.start_mark.line + 1}); a protocol "
                f"must spell out every value"
            )


def load_protocol_file(path: str | Path) -> dict:
    """Read a protocol YAML (or JSON) file with ``yaml.safe_load``; it must hold a mapping."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"protocol file not found: {p}")
    text = p.read_text(encoding="utf-8")
    try:
        _refuse_aliases(yaml, text, p)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProtocolError(f"{p} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"{p} must hold a mapping of protocol fields, got {type(data).__name__}")
    return data


# ----------------------------------------------------------------------------- small checks


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _type(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _str(v: Any, where: str, *, empty: bool = False) -> str:
    if not isinstance(v, str) or (not empty and not v.strip()):
        raise ProtocolError(f"{where} must be a{'' if empty else ' non-empty'} string, got {_type(v)} {v!r}")
    return v


def _hex(v: Any, where: str) -> str:
    if not isinstance(v, str) or not _HEX64.match(v):
        raise ProtocolError(f"{where} must be a sha256 (64 lowercase hex digits), got {v!r}")
    return v


def _mapping(v: Any, where: str, allowed: set[str], required: tuple[str, ...] = ()) -> dict:
    if not isinstance(v, dict):
        raise ProtocolError(f"{where} must be a mapping, got {_type(v)}")
    unknown = sorted(set(map(str, v)) - allowed)
    if unknown:
        raise ProtocolError(f"unknown field(s) {unknown} in {where}; allowed: {sorted(allowed)}")
    for key in required:
        if key not in v:
            raise ProtocolError(f"{where} is missing required field {key!r}")
    return v


def _jsonable(v: Any, where: str) -> Any:
    """Plain JSON data only (YAML dates, sets or non-finite floats are refused)."""
    if v is None or isinstance(v, (str, bool)) or _is_int(v):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ProtocolError(f"{where} holds a non-finite number {v}")
        return v
    if isinstance(v, list):
        return [_jsonable(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if isinstance(v, dict):
        if not all(isinstance(k, str) for k in v):
            raise ProtocolError(f"{where} has a non-string key")
        return {k: _jsonable(x, f"{where}.{k}") for k, x in v.items()}
    raise ProtocolError(f"{where} holds a {type(v).__name__}, which is not plain JSON data (quote dates as strings)")


# ----------------------------------------------------------------------------- validation


def validate_protocol(raw: Mapping[str, Any], base_dir: str | Path | None = None, *, check_hashes: bool = True) -> dict:
    """Validate a protocol mapping and return its canonical form (see the module docstring).

    ``base_dir`` resolves a relative reference path. ``check_hashes=False`` checks structure
    only (used when re-reading a registration, where the hashes are checked at eval time).
    """
    from kosmos_env.campaign.design import PolicyRef, parse_judge
    from kosmos_env.policies import resolve_policy
    from kosmos_env.registration.metrics import METRICS, default_interval, canonical_expr
    from kosmos_env.spec import load_spec
    from kosmos_env.tasks import load_suite

    _mapping(raw, "protocol", _TOP, _REQUIRED)
    if raw.get("schema", PROTOCOL_SCHEMA) != PROTOCOL_SCHEMA:
        raise ProtocolError(f"protocol.schema must be {PROTOCOL_SCHEMA!r}, got {raw['schema']!r}")
    if raw["schema_version"] != PROTOCOL_SCHEMA_VERSION or not _is_int(raw["schema_version"]):
        raise ProtocolError(f"protocol.schema_version must be {PROTOCOL_SCHEMA_VERSION}, got {raw['schema_version']!r}")
    name = _str(raw["name"], "protocol.name")
    if not _NAME.match(name):
        raise ProtocolError(f"protocol.name {name!r} must be letters, digits, '.', '_' or '-' (at most 128)")
    description = _str(raw.get("description", ""), "protocol.description", empty=True)
    hypothesis = _str(raw.get("hypothesis", ""), "protocol.hypothesis", empty=True)

    # env and its spec
    env = _mapping(raw["env"], "protocol.env", {"id", "spec_hash", "overrides"}, ("id", "spec_hash"))
    env_id = _str(env["id"], "protocol.env.id")
    spec_hash = _hex(env["spec_hash"], "protocol.env.spec_hash")
    overrides = _jsonable(env.get("overrides") or {}, "protocol.env.overrides")
    if not isinstance(overrides, dict):
        raise ProtocolError(f"protocol.env.overrides must be a mapping of spec fields, got {_type(overrides)}")
    try:
        spec = load_spec(env_id).with_overrides(**overrides)
    except ValueError as exc:
        raise ProtocolError(f"protocol.env: {exc}") from None
    if check_hashes and spec.hash != spec_hash:
        hint = (
            f" with overrides {canonical_json(overrides)}"
            if overrides
            else " (no overrides declared: a non-default image size or horizon is an override and changes the hash)"
        )
        raise ProtocolError(
            f"protocol.env.spec_hash {spec_hash[:12]}... does not match the current spec of {env_id}"
            f"{hint}: {spec.hash}. The env changed since the protocol was written, or the "
            f"protocol names the wrong spec"
        )

    # policies
    pols = raw["policies"]
    if not isinstance(pols, list) or not pols:
        raise ProtocolError(f"protocol.policies must be a non-empty list, got {_type(pols)}")
    policies = []
    for i, entry in enumerate(pols):
        where = f"protocol.policies[{i}]"
        entry = _mapping(entry, where, {"policy", "content_hash"}, ("policy", "content_hash"))
        try:
            ref = PolicyRef.parse(_str(entry["policy"], f"{where}.policy"))
            # a protocol received from elsewhere names only registered policies (or module:Class with
            # the user's own --allow-import); the class is checked, nothing is built here
            resolve_policy(ref.name)
        except ValueError as exc:
            raise ProtocolError(f"{where}.policy: {exc}") from None
        _jsonable(dict(ref.kwargs), where)
        policies.append({"policy": ref.label, "content_hash": _hex(entry["content_hash"], f"{where}.content_hash")})
    labels = [p["policy"] for p in policies]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ProtocolError(f"protocol.policies lists {dupes} more than once")
    if check_hashes:
        for i, (p, ref) in enumerate(zip(policies, policy_refs({"policies": policies}), strict=True)):
            actual = policy_content_hash(ref.name, ref.kwargs)
            if actual != p["content_hash"]:
                raise ProtocolError(
                    f"protocol.policies[{i}] ({p['policy']}): content_hash {p['content_hash'][:12]}... "
                    f"does not match make_policy(...).content_hash() = {actual}"
                )

    # tasks, seeds, repeats
    suite = load_suite(spec.tasks["suite"]).names
    tasks = raw["tasks"]
    if tasks == "all":
        tasks = list(suite)
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks):
        raise ProtocolError(f"protocol.tasks must be 'all' or a non-empty list of task names, got {tasks!r}")
    unknown = [t for t in tasks if t not in suite]
    if unknown:
        raise ProtocolError(f"protocol.tasks: unknown task(s) {unknown} for {env_id}; tasks: {suite}")
    if len(set(tasks)) != len(tasks):
        raise ProtocolError(f"protocol.tasks lists a task twice: {tasks}")
    seeds = raw["seeds"]
    if _is_int(seeds):
        if seeds < 1:
            raise ProtocolError(f"protocol.seeds must be at least 1, got {seeds}")
        seeds = evaluation_seeds(seeds)  # a count: the first N evaluation seeds of seed_ranges.json
    if not isinstance(seeds, list) or not seeds or not all(_is_int(s) and s >= 0 for s in seeds):
        raise ProtocolError(f"protocol.seeds must be a count or a list of non-negative integers, got {raw['seeds']!r}")
    if len(set(seeds)) != len(seeds):
        raise ProtocolError(f"protocol.seeds lists a seed twice: {seeds}")
    if check_hashes:  # against the seed ranges as declared now, as the hashes are checked against the code
        overlap = overlap_line(seeds)
        if overlap:
            raise ProtocolError(
                f"protocol.seeds: {overlap}; a registered study runs on evaluation seeds: write `seeds: "
                f"{len(seeds)}` (evaluation seeds from {evaluation_seeds(1)[0]}) or list seeds in that range"
            )
    repeats = raw.get("repeats", 1)
    if not _is_int(repeats) or repeats < 1:
        raise ProtocolError(f"protocol.repeats must be an integer >= 1, got {repeats!r}")

    # judge
    judge_raw = raw.get("judge")
    if judge_raw is not None and not isinstance(judge_raw, (str, dict)):
        raise ProtocolError(
            f"protocol.judge must be a judge type name or a mapping with 'type', got {_type(judge_raw)}"
        )
    try:
        judge = parse_judge(_jsonable(judge_raw, "protocol.judge") if judge_raw is not None else None, spec.judge)
    except ValueError as exc:
        raise ProtocolError(f"protocol.judge: {exc}") from None

    # reference
    reference = None
    if raw.get("reference") is not None:
        ref = _mapping(raw["reference"], "protocol.reference", {"path", "sha256"}, ("path", "sha256"))
        reference = {
            "path": _str(ref["path"], "protocol.reference.path"),
            "sha256": _hex(ref["sha256"], "protocol.reference.sha256"),
        }
        if check_hashes:
            path = resolve_reference(reference["path"], base_dir)
            actual = sha256_file(path)
            if actual != reference["sha256"]:
                raise ProtocolError(
                    f"protocol.reference.sha256 {reference['sha256'][:12]}... does not match {path}: {actual}"
                )
            check_reference_rows(parse_reference_text(path.read_text(encoding="utf-8"), str(path)), labels, tasks)

    # analysis settings
    analysis = _mapping(raw.get("analysis") or {}, "protocol.analysis", {"n_boot", "seed"})
    n_boot = analysis.get("n_boot", DEFAULT_N_BOOT)
    if not _is_int(n_boot) or not 100 <= n_boot <= MAX_N_BOOT:
        raise ProtocolError(f"protocol.analysis.n_boot must be an integer in [100, {MAX_N_BOOT}], got {n_boot!r}")
    boot_seed = analysis.get("seed", 0)
    if not _is_int(boot_seed) or boot_seed < 0:
        raise ProtocolError(f"protocol.analysis.seed must be a non-negative integer, got {boot_seed!r}")

    # metrics and bars
    ms = raw["metrics"]
    if not isinstance(ms, list) or not ms:
        raise ProtocolError("protocol.metrics must be a non-empty list: a study registers at least one metric")
    metrics = []
    for i, m in enumerate(ms):
        where = f"protocol.metrics[{i}]"
        m = _mapping(m, where, {"name", "expr", "bar"}, ("name", "expr", "bar"))
        mname = _str(m["name"], f"{where}.name")
        if not _NAME.match(mname):
            raise ProtocolError(f"{where}.name {mname!r} must be letters, digits, '.', '_' or '-'")
        try:
            expr = canonical_expr(_str(m["expr"], f"{where}.expr"), labels, tasks, reference is not None)
        except ValueError as exc:
            raise ProtocolError(f"{where}.expr: {exc}") from None
        fn = expr.split("(", 1)[0]
        bar = _mapping(
            m["bar"], f"{where}.bar", {"op", "value", "bound", "interval", "level"}, ("op", "value", "bound")
        )
        if bar["op"] not in BAR_OPS:
            raise ProtocolError(f"{where}.bar.op must be one of {list(BAR_OPS)}, got {bar['op']!r}")
        if not _is_num(bar["value"]):
            raise ProtocolError(
                f"{where}.bar.value must be a finite number, got {_type(bar['value'])} {bar['value']!r}"
            )
        if bar["bound"] not in BAR_BOUNDS:
            raise ProtocolError(
                f"{where}.bar.bound must be one of {list(BAR_BOUNDS)} (which number the bar checks: "
                f"the interval's lower or upper bound, or the point estimate), got {bar['bound']!r}"
            )
        interval = bar.get("interval", default_interval(fn))
        if interval not in METRICS[fn].intervals:
            raise ProtocolError(
                f"{where}.bar.interval {interval!r} is not available for {fn}; "
                f"choose from {list(METRICS[fn].intervals)}"
            )
        level = bar.get("level", 0.95)
        if not _is_num(level) or not 0.5 <= level < 1:
            raise ProtocolError(f"{where}.bar.level must be a number in [0.5, 1), got {level!r}")
        metrics.append(
            {
                "name": mname,
                "expr": expr,
                "bar": {
                    "op": bar["op"],
                    "value": float(bar["value"]),
                    "bound": bar["bound"],
                    "interval": interval,
                    "level": float(level),
                },
            }
        )
    names = [m["name"] for m in metrics]
    dupes = sorted({x for x in names if names.count(x) > 1})
    if dupes:
        raise ProtocolError(f"protocol.metrics: name(s) {dupes} used more than once")

    return {
        "schema": PROTOCOL_SCHEMA,
        "schema_version": PROTOCOL_SCHEMA_VERSION,
        "name": name,
        "description": description,
        "hypothesis": hypothesis,
        "env": {"id": env_id, "overrides": overrides, "spec_hash": spec_hash},
        "policies": policies,
        "tasks": list(tasks),
        "seeds": list(seeds),
        "repeats": int(repeats),
        "judge": judge,
        "reference": reference,
        "analysis": {"n_boot": int(n_boot), "seed": int(boot_seed)},
        "metrics": metrics,
    }


def policy_refs(protocol: Mapping[str, Any]) -> list:
    """The registered policies as :class:`~kosmos_env.campaign.design.PolicyRef` (label, name, kwargs)."""
    from kosmos_env.campaign.design import PolicyRef

    return [PolicyRef.parse(p["policy"]) for p in protocol["policies"]]


def policy_content_hash(name: str, kwargs: Mapping[str, Any]) -> str:
    """``make_policy(name, **kwargs).content_hash()``, computed from the checkpoint's files where the
    policy loads one (never by loading the model: a protocol must not make register run a
    checkpoint's code or load its weights); see :func:`kosmos_env.policies.policy_hash_from_files`."""
    from kosmos_env.policies import policy_hash_from_files

    return policy_hash_from_files(name, kwargs)


def resolve_reference(path: str, base_dir: str | Path | None) -> Path:
    p = Path(path)
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    if not p.is_file():
        raise FileNotFoundError(f"protocol.reference.path: reference file not found: {p}")
    return p


def parse_reference_text(text: str, source: str = "reference") -> list[dict]:
    """Rows {task, policy, reference} of a reference CSV (columns task, policy, reference)."""
    import tempfile

    from kosmos_env.report.analysis import read_reference_csv

    with tempfile.TemporaryDirectory() as tmp:  # the CSV reader takes a path
        path = Path(tmp) / "reference.csv"
        path.write_text(text, encoding="utf-8")
        try:
            return read_reference_csv(path)
        except ValueError as exc:
            raise ProtocolError(f"{source}: {str(exc).replace(str(path), 'reference CSV')}") from None


def check_reference_rows(rows: list[dict], policies: list[str], tasks: list[str]) -> None:
    """A reference must give values to at least 2 registered policies on some registered task."""
    from kosmos_env.campaign.design import PolicyRef

    usable: dict[str, int] = {}
    for r in rows:
        if r["task"] in tasks and PolicyRef.parse(r["policy"]).label in policies:
            usable[r["task"]] = usable.get(r["task"], 0) + 1
    if not any(n >= 2 for n in usable.values()):
        raise ProtocolError(
            f"the reference has no registered task with values for at least 2 registered policies "
            f"(policies {policies}, tasks {tasks})"
        )
