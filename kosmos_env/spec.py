"""Versioned env specs: a frozen config per env id, and its content hash.

An env id (``Kosmos-Tabletop-v1``) names a JSON file in ``envs_registry/``. The spec holds
everything that can change a result: the world and its settings, resolution, action bounds
and chunk, horizon, gate thresholds, judge, and the task suite (by content hash). Its
``spec_hash`` is the sha256 of a canonical JSON form; it is stamped on every episode and every
published result, and results with different hashes are never ranked together.

Spec files are data and are validated: unknown keys, wrong types and bad bounds are refused
with a message naming the field. Nothing in them is executed.

Versions, as Gymnasium keeps them: an id names one spec hash for good. ``envs_registry/
spec_hashes.json`` maps every built-in id to its frozen hash (the ids registered with Gymnasium
are exactly its keys) and ``tests/test_spec_versions.py`` fails when a spec's hash changes under
its id (:func:`check_frozen_hashes`). A change that moves a hash is a new version: a new file
``Name-v(N+1).json`` with its own frozen hash; the old file stays, with ``"deprecated"`` saying
what replaced it, and stays loadable, so a published result can be rerun by the id it names
(making it warns: Gymnasium's "out of date" DeprecationWarning and the spec's own reason). A change
to something several versions share (a task suite, a world's code version in
:data:`WORLD_VERSIONS`) must leave the old versions' hashes as they are (a new suite file, a
switch the new spec sets), or the test fails for them too.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Mapping

import numpy as np

from kosmos_env.actions import ACTION_DIM
from kosmos_env.errors import SpecError
from kosmos_env.hashing import canonical_json, sha256_hex

SPEC_SCHEMA_VERSION = 1

_TOP_LEVEL = {
    "schema_version": int,
    "id": str,
    "description": str,
    "world": dict,
    "image_size": list,
    "action": dict,
    "horizon": int,
    "render_fps": (int, float),
    "tasks": dict,
    "judge": dict,
    "gate": dict,
    "reward": dict,
    "deprecated": str,
}
MAX_HORIZON = 100_000  # steps per episode: far above any task, far below what would exhaust memory
_ENV_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(?<![.])")
_REQUIRED = ("schema_version", "id", "world", "image_size", "action", "horizon", "render_fps", "tasks", "judge", "gate")
# fields that describe, not configure: they never enter the hash
_NOT_HASHED = ("description", "deprecated")
# world "type" -> version of its code, for worlds whose code changed in a way that can alter frames
# after their first release. It enters the spec hash; a world not listed is at version 1 and adds
# nothing, so hashes published before this table existed stay valid. (Re-exported by
# kosmos_env.worlds; kept here because the spec layer sits below the worlds.)
#: reward modes (``reward.mode``): the judge's score at the last step (evaluation, the default), a
#: per-step potential-based reward from a step judge that reads only the world's frames, or the
#: simulator's own ground truth per step (labelled "oracle": a learned or generated world has none)
REWARD_MODES = ("terminal", "progress", "oracle")
_REWARD_KEYS = ("mode", "step_judge", "terminate_on_success", "success_threshold", "success_patience")
#: the learned tabletop's (``world.type == "tabletop_learned"``) switchable stages. ``world.rules``: the
#: engine's fixed rules that run (a subset of these; default all four), ``world.learned_dynamics``:
#: what moves the object (the learned dynamics and slip predictor, the hand-written "rules-only
#: kinematics" baseline, or nothing: renderer only). Defaults are left out of the spec, so the
#: registered hash is unchanged; any other setting is written out and changes it. (Here, not in the
#: world, because the spec layer validates without importing the worlds.)
LEARNED_TABLETOP_RULES = ("drop_released", "rest_on_supports", "keep_resting", "push_closed_fingers")
LEARNED_TABLETOP_DYNAMICS = ("learned", "rules", "none")
WORLD_VERSIONS = {
    "cosmos3": "2",  # real frames at 4:3, NVIDIA's statistics, "quantile" = all ten dims
    "tabletop_learned": "2",  # fixed object rules in the engine (drop, rest, push) and the slip predictor
}


@dataclass(frozen=True)
class EnvSpec:
    """A validated, frozen env spec. Build with :func:`load_spec` or :meth:`from_dict`."""

    id: str
    world: Mapping[str, Any]
    image_size: tuple[int, int]
    action_chunk: int
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    clip_actions: bool
    horizon: int
    render_fps: float
    tasks: Mapping[str, Any]
    judge: Mapping[str, Any]
    gate: Mapping[str, Any]
    reward: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_REWARD))
    description: str = ""
    deprecated: str = ""
    task_suite_sha256: str = ""
    _raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "EnvSpec":
        data = copy.deepcopy(dict(raw))
        for key in data:
            if key not in _TOP_LEVEL:
                raise SpecError(f"unknown spec field {key!r}; known fields: {sorted(_TOP_LEVEL)}")
        for key in _REQUIRED:
            if key not in data:
                raise SpecError(f"spec is missing required field {key!r}")
        for key, typ in _TOP_LEVEL.items():
            value = data.get(key)
            if key in data and (not isinstance(value, typ) or isinstance(value, bool)):
                raise SpecError(f"spec field {key!r} must be {_type_name(typ)}, got {type(data[key]).__name__}")
        if data["schema_version"] != SPEC_SCHEMA_VERSION:
            raise SpecError(
                f"spec schema_version {data['schema_version']} is not supported (expected {SPEC_SCHEMA_VERSION})"
            )
        size = data["image_size"]
        if len(size) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and 8 <= v <= 4096 for v in size):
            raise SpecError(f"spec field 'image_size' must be [height, width] integers in [8, 4096], got {size}")
        if not 1 <= data["horizon"] <= MAX_HORIZON:  # an episode is held in memory whole
            raise SpecError(f"spec field 'horizon' must be in [1, {MAX_HORIZON}], got {data['horizon']}")
        if not data["render_fps"] > 0:
            raise SpecError(f"spec field 'render_fps' must be > 0, got {data['render_fps']}")
        if "type" not in data["world"] or not isinstance(data["world"]["type"], str):
            raise SpecError("spec field 'world' must name its backend in world.type")
        if data["world"]["type"] == "tabletop_learned":
            _normalise_learned_tabletop(data["world"])
        if "type" not in data["judge"] or not isinstance(data["judge"]["type"], str):
            raise SpecError("spec field 'judge' must name its judge in judge.type")
        if "suite" not in data["tasks"] or not isinstance(data["tasks"]["suite"], str):
            raise SpecError("spec field 'tasks' must name a task suite in tasks.suite")
        action = data["action"]
        unknown = set(action) - {"chunk", "low", "high", "clip"}
        if unknown:
            raise SpecError(f"unknown action field(s) {sorted(unknown)}; known: chunk, low, high, clip")
        chunk = action.get("chunk", 1)
        if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
            raise SpecError(f"spec field 'action.chunk' must be an integer >= 1, got {chunk!r}")
        low, high = action.get("low"), action.get("high")
        for name, bound in (("low", low), ("high", high)):
            if not isinstance(bound, list) or len(bound) != ACTION_DIM or not all(_is_number(v) for v in bound):
                raise SpecError(f"spec field 'action.{name}' must be a list of {ACTION_DIM} numbers, got {bound!r}")
        if any(lo >= hi for lo, hi in zip(low, high, strict=True)):
            raise SpecError(f"spec field 'action.low' must be below 'action.high' in every dimension: {low} vs {high}")
        if not isinstance(action.get("clip", False), bool):
            raise SpecError("spec field 'action.clip' must be true or false")

        reward = _validated_reward(data.get("reward"), data["world"]["type"])
        if reward == DEFAULT_REWARD:
            # today's evaluation reward: the field is left out so that every hash published before
            # reward modes existed stays valid (``reward={"mode": "terminal"}`` is the same spec)
            data.pop("reward", None)
        else:
            data["reward"] = reward  # every setting written out, so the hash covers the defaults too

        from kosmos_env.tasks import load_suite  # local: tasks imports nothing heavy either

        suite = load_suite(data["tasks"]["suite"])
        default = data["tasks"].get("default")
        if default is not None and default not in suite.tasks:
            raise SpecError(f"spec field 'tasks.default' = {default!r} is not in suite {suite.name!r}: {suite.names}")
        return cls(
            id=data["id"],
            world=data["world"],
            image_size=(size[0], size[1]),
            action_chunk=chunk,
            action_low=tuple(float(v) for v in low),
            action_high=tuple(float(v) for v in high),
            clip_actions=bool(action.get("clip", False)),
            horizon=data["horizon"],
            render_fps=float(data["render_fps"]),
            tasks=data["tasks"],
            judge=data["judge"],
            gate=data["gate"],
            reward=reward,
            description=data.get("description", ""),
            deprecated=data.get("deprecated", ""),
            task_suite_sha256=suite.sha256,
            _raw=data,
        )

    # -- views --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The spec as data (a deep copy of what was loaded, overrides applied)."""
        return copy.deepcopy(dict(self._raw))

    def canonical(self) -> str:
        """Canonical JSON of every field that can change a result: task suite content and the world's
        code version (:data:`WORLD_VERSIONS`, for worlds listed there) included."""
        data = {k: v for k, v in self.to_dict().items() if k not in _NOT_HASHED}
        data["tasks"] = dict(data["tasks"], suite_sha256=self.task_suite_sha256)
        version = WORLD_VERSIONS.get(str(data["world"].get("type")))
        if version is not None:
            data["world_version"] = version
        return canonical_json(data)

    @property
    def hash(self) -> str:
        """sha256 of :meth:`canonical`."""
        return sha256_hex(self.canonical())

    @property
    def short_hash(self) -> str:
        return self.hash[:12]

    @property
    def action_low_array(self) -> np.ndarray:
        return np.asarray(self.action_low, dtype=np.float32)

    @property
    def action_high_array(self) -> np.ndarray:
        return np.asarray(self.action_high, dtype=np.float32)

    def with_overrides(self, **overrides: Any) -> "EnvSpec":
        """A new spec with top-level fields replaced; dict fields are merged one level deep.

        ``image_size=(64, 64)``, ``horizon=30``, ``world={"physics_dt": 0.002}``,
        ``gate={"enabled": False}``. The result is validated and has its own hash.
        """
        if not overrides:
            return self
        data = self.to_dict()
        for key, value in overrides.items():
            if key not in _TOP_LEVEL or key in ("schema_version", "id"):
                raise SpecError(
                    f"cannot override spec field {key!r}; overridable: "
                    f"{sorted(set(_TOP_LEVEL) - {'schema_version', 'id'})}"
                )
            if isinstance(value, tuple):
                value = list(value)
            if isinstance(data.get(key), dict) and isinstance(value, Mapping):
                merged = dict(data[key])
                merged.update(copy.deepcopy(dict(value)))
                value = merged
            data[key] = value
        return EnvSpec.from_dict(data)


def _registry_root() -> Any:
    """The folder of the built-in spec files (a Traversable; one place, so a test can point it at a copy)."""
    return resources.files("kosmos_env.envs_registry")


#: the committed map of built-in env id -> frozen spec hash, in ``envs_registry/``
FROZEN_HASHES_FILE = "spec_hashes.json"
#: a versioned id: ``Name-vN`` (Gymnasium's form; N >= 1)
VERSIONED_ID = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*?)-v(?P<version>[1-9][0-9]*)")


def builtin_spec_ids() -> list[str]:
    """Every env id with a spec file in ``envs_registry/`` (deprecated versions included)."""
    root = _registry_root()
    return sorted(
        p.name[: -len(".json")] for p in root.iterdir() if p.name.endswith(".json") and p.name != FROZEN_HASHES_FILE
    )


def registered_spec_ids() -> list[str]:
    """Every env id with a spec file in ``envs_registry/`` or from an installed plug-in."""
    from kosmos_env.plugins import plugin_env_ids

    return sorted(set(builtin_spec_ids()) | set(plugin_env_ids()))


def frozen_spec_hashes() -> dict[str, str]:
    """``{env id: spec hash}`` as frozen in ``envs_registry/spec_hashes.json`` (built-in ids only:
    a plug-in freezes its own)."""
    path = _registry_root() / FROZEN_HASHES_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(
            f"envs_registry/{FROZEN_HASHES_FILE} is missing or not JSON ({exc}); reinstall kosmos-env"
        ) from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise SpecError(f"envs_registry/{FROZEN_HASHES_FILE} must map env ids to spec hashes")
    return data


def newer_versions(env_id: str, ids: list[str] | None = None) -> list[str]:
    """The ids of the same name with a higher version than ``env_id`` (oldest first)."""
    match = VERSIONED_ID.fullmatch(env_id)
    if match is None:
        return []
    out = []
    for other in builtin_spec_ids() if ids is None else ids:
        m = VERSIONED_ID.fullmatch(other)
        if m and m["name"] == match["name"] and int(m["version"]) > int(match["version"]):
            out.append((int(m["version"]), other))
    return [other for _, other in sorted(out)]


def check_frozen_hashes(
    specs: Mapping[str, "EnvSpec"] | None = None, frozen: Mapping[str, str] | None = None
) -> list[str]:
    """What breaks the versioning rule (empty when nothing does); one sentence per problem.

    ``specs`` (default: every built-in spec file, loaded) is compared with ``frozen`` (default:
    ``envs_registry/spec_hashes.json``): a hash that moved under its id, a spec file with no frozen
    hash or a frozen id with no spec file, an id not of the form ``Name-vN``, and a deprecated
    version with no newer version to name.
    """
    if specs is None:
        specs = {env_id: load_spec(env_id) for env_id in builtin_spec_ids()}
    frozen = frozen_spec_hashes() if frozen is None else frozen
    problems = []
    for env_id in sorted(set(specs) | set(frozen)):
        if VERSIONED_ID.fullmatch(env_id) is None:
            problems.append(f"{env_id}: an env id must end in a version, Name-vN (N >= 1)")
        if env_id not in frozen:
            problems.append(
                f'{env_id}: no frozen hash; add "{env_id}": "{specs[env_id].hash}" to '
                f"envs_registry/{FROZEN_HASHES_FILE}"
            )
            continue
        if env_id not in specs:
            problems.append(
                f"{env_id}: frozen in envs_registry/{FROZEN_HASHES_FILE} but has no spec file; a "
                f"released version is never removed (mark it deprecated instead)"
            )
            continue
        spec = specs[env_id]
        if spec.hash != frozen[env_id]:
            match = VERSIONED_ID.fullmatch(env_id)
            bump = f"{match['name']}-v{int(match['version']) + 1}" if match else "a new version"
            problems.append(
                f"{env_id}: spec hash {spec.hash[:12]}... is not its frozen hash {frozen[env_id][:12]}...: a "
                f"changed spec is a new version. Restore {env_id} and add the change as {bump} "
                f'(envs_registry/{bump}.json and its hash in {FROZEN_HASHES_FILE}), with "deprecated" in '
                f"{env_id}.json naming {bump}"
            )
        if spec.deprecated and not newer_versions(env_id, list(specs)):
            problems.append(f"{env_id}: deprecated, but no newer version of it is registered")
    return problems


def load_spec(env_id: str) -> EnvSpec:
    """Load the frozen spec of a registered env id (built-in, else a ``kosmos_env.envs`` plug-in)."""
    if not isinstance(env_id, str) or not _ENV_ID.fullmatch(env_id):
        # an id names a registered spec, never a path: "../x" would read a file outside the registry
        raise SpecError(
            f"{env_id!r} is not an env id (letters, digits, '.', '_', '-'; no path); registered: "
            f"{registered_spec_ids()}"
        )
    root = _registry_root()
    path = root / f"{env_id}.json"
    if path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise SpecError(f"env spec {env_id!r} is not valid JSON: {exc}") from None
    else:
        from kosmos_env.plugins import load_plugin_spec_data

        raw = load_plugin_spec_data(env_id)
        if raw is None:
            raise SpecError(f"no env spec for {env_id!r}; registered: {registered_spec_ids()}")
    spec = EnvSpec.from_dict(raw)
    if spec.id != env_id:
        raise SpecError(f"env spec file {env_id}.json declares id {spec.id!r}")
    return spec


def _normalise_learned_tabletop(world: dict) -> None:
    """Validate the learned tabletop's ``world.rules`` and ``world.learned_dynamics`` in place.

    A default (all four rules, in any order; ``"learned"``) is removed, so the registered spec and
    one that spells out its defaults have one hash; ``rules`` is kept in the canonical order, so
    two orders of the same subset are one world. ``"none"`` turns the whole object stage off
    (nothing moves the object), so a ``rules`` subset with it would name a second hash for the same
    world and is refused.
    """
    dynamics = world.get("learned_dynamics", "learned")
    if not isinstance(dynamics, str) or dynamics not in LEARNED_TABLETOP_DYNAMICS:
        raise SpecError(
            f"spec field 'world.learned_dynamics' must be one of {list(LEARNED_TABLETOP_DYNAMICS)}, got {dynamics!r}"
        )
    if dynamics == "learned":
        world.pop("learned_dynamics", None)
    if "rules" not in world:
        return
    rules = world["rules"]
    if isinstance(rules, tuple):
        rules = list(rules)
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise SpecError(
            f"spec field 'world.rules' must be a list of rule names from {list(LEARNED_TABLETOP_RULES)}, got {rules!r}"
        )
    unknown = [r for r in rules if r not in LEARNED_TABLETOP_RULES]
    if unknown or len(set(rules)) != len(rules):
        what = f"unknown rule(s) {unknown}" if unknown else f"a rule listed twice in {rules}"
        raise SpecError(f"spec field 'world.rules' has {what}; choices: {list(LEARNED_TABLETOP_RULES)}")
    if set(rules) == set(LEARNED_TABLETOP_RULES):
        world.pop("rules")
        return
    if dynamics == "none":
        raise SpecError(
            "spec field 'world.rules' has no effect with world.learned_dynamics 'none' (nothing moves "
            "the object); leave world.rules out"
        )
    world["rules"] = [r for r in LEARNED_TABLETOP_RULES if r in rules]


DEFAULT_REWARD = {"mode": "terminal", "terminate_on_success": False}
#: the step judge that ``reward.mode 'progress'`` uses when it names none, per world type: the frame
#: classifier the training code uses on both tabletop worlds (the same settings written out, so the
#: spec, and its hash, are those of ``{"mode": "progress", "step_judge": {"type": "vision_frame"}}``).
#: It fills in only a progress reward that names no step judge, so no registered spec moves.
DEFAULT_STEP_JUDGES: Mapping[str, Mapping[str, Any]] = {
    "tabletop": {"type": "vision_frame"},
    "tabletop_learned": {"type": "vision_frame"},
}
#: settings written into a step judge of a type listed here when the spec leaves them out: what pins
#: the judge's scores (model, revision, prompt sha256, frames shown, answer length), so the spec hash
#: covers them and a change of the judge's defaults cannot change a reward under an unchanged hash.
#: The VLM progress judge's values are its code's (``kosmos_env.judges.vlm_progress``; the spec layer
#: sits below the judges, so a test checks the copy). The Cosmos 3 (Bridge) world has no default step
#: judge: a progress reward there names ``{"type": "vlm_progress"}`` (a 7B model loaded beside the world
#: and the terminal judge is a choice for the user to make, not a side effect of ``mode``).
STEP_JUDGE_PINS: Mapping[str, Mapping[str, Any]] = {
    "vlm_progress": {
        "model_id": "nvidia/Cosmos-Reason1-7B",
        "revision": "main",
        "fps": 5.0,
        "max_frames": 8,
        "first_frame": True,
        "max_new_tokens": 64,
        "prompt_sha256": "fc5f3e28cae14cddfc7539fec3f2c91827db5fc6d216a538fa10e48e593985fc",
    },
}


def _validated_reward(raw: Any, world_type: str = "") -> dict[str, Any]:
    """The spec's ``reward`` section with every setting filled in; a bad one is a :class:`SpecError`.

    ``mode``: one of :data:`REWARD_MODES` (default ``terminal``). ``step_judge``: the judge that scores
    each step's frame, or each step's chunk as task progress (``progress`` only; default
    :data:`DEFAULT_STEP_JUDGES` of ``world_type``, and required on a world with none, e.g.
    ``{"type": "vlm_progress"}``; the settings of :data:`STEP_JUDGE_PINS` are filled in).
    ``terminate_on_success``: end the episode (``terminated=True``) once the step signal has been at
    or above ``success_threshold`` (a probability in [0, 1], default 0.5) for ``success_patience``
    consecutive steps (default 1; a frame judge can see "success" for a step or two while the object
    is still held over its target), or, with a progress judge that gives a success flag, once it has
    said success for that many consecutive steps; it needs a step signal, so not with ``terminal``.
    """
    if raw is None:
        return dict(DEFAULT_REWARD)
    unknown = sorted(set(raw) - set(_REWARD_KEYS))
    if unknown:
        raise SpecError(f"unknown reward field(s) {unknown}; known: {list(_REWARD_KEYS)}")
    mode = raw.get("mode", "terminal")
    if mode not in REWARD_MODES:
        raise SpecError(f"unknown reward.mode {mode!r}; known modes: {list(REWARD_MODES)}")
    terminate = raw.get("terminate_on_success", False)
    if not isinstance(terminate, bool):
        raise SpecError(f"spec field 'reward.terminate_on_success' must be true or false, got {terminate!r}")
    out: dict[str, Any] = {"mode": mode, "terminate_on_success": terminate}
    if mode == "progress":
        judge = raw.get("step_judge", DEFAULT_STEP_JUDGES.get(world_type))
        if not isinstance(judge, Mapping) or not isinstance(judge.get("type"), str):
            raise SpecError(
                f"reward.mode 'progress' needs reward.step_judge naming a judge that scores single frames "
                f'or task progress, e.g. {{"type": "vision_frame"}} or {{"type": "vlm_progress"}} (the '
                f"{world_type or 'spec'!r} world has no default step judge; the tabletop worlds default to vision_frame)"
            )
        out["step_judge"] = copy.deepcopy(dict(judge))
        for key, value in STEP_JUDGE_PINS.get(judge["type"], {}).items():
            out["step_judge"].setdefault(key, value)
    elif "step_judge" in raw:
        raise SpecError(f"reward.step_judge is used by reward.mode 'progress' only, not {mode!r}")
    if terminate and mode == "terminal":
        raise SpecError(
            "reward.terminate_on_success needs a per-step success signal: set reward.mode to "
            "'progress' (a step judge) or 'oracle' (the simulator's ground truth)"
        )
    for key in ("success_threshold", "success_patience"):
        if mode == "terminal" and key in raw:
            raise SpecError(f"reward.{key} is used by reward.mode 'progress' or 'oracle' only")
    if mode != "terminal":
        threshold = raw.get("success_threshold", 0.5)
        if not _is_number(threshold) or not 0.0 <= float(threshold) <= 1.0:
            raise SpecError(f"spec field 'reward.success_threshold' must be a number in [0, 1], got {threshold!r}")
        out["success_threshold"] = float(threshold)
        patience = raw.get("success_patience", 1)
        if not isinstance(patience, int) or isinstance(patience, bool) or not 1 <= patience <= 1000:
            raise SpecError(f"spec field 'reward.success_patience' must be an integer in [1, 1000], got {patience!r}")
        out["success_patience"] = patience
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)


def _type_name(typ: Any) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return typ.__name__
