"""A campaign's frozen design: which policies, tasks, seeds and repeats, in which env.

The design is *paired*: every policy runs on exactly the same (task, seed, repeat) cells, so
each cell's initial scene is shared and per-cell differences cancel the scene's difficulty.
An episode is keyed by (policy label, task, seed, repeat); together with the campaign id (the
config's content hash) that key is idempotent: running it again can only find it done.

Everything that can change a result (env id and spec hash, policies with their kwargs, tasks,
seeds, repeats, judge, whether videos are kept) goes into :meth:`CampaignConfig.identity`,
whose hash freezes the campaign. Settings that do not change results (worker count, price
table, lease length) stay out of it, so a campaign can resume with more workers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from kosmos_env.hashing import canonical_hash

CONFIG_SCHEMA_VERSION = 1


def env_seed(seed: int, repeat: int) -> int:
    """The seed an episode resets its env and policy with.

    Repeat 0 uses the campaign seed itself (so ``--repeats 1`` episodes match ``kosmos-env
    rollout`` with the same seed); repeat r > 0 uses a stable hash of (seed, r). All policies
    share it, which keeps the design paired across repeats too.
    """
    if repeat == 0:
        return int(seed)
    digest = hashlib.sha256(f"kosmos-env/repeat:{int(seed)}:{int(repeat)}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class PolicyRef:
    """One policy of the campaign: a label (its key in ledgers and reports), name and kwargs."""

    label: str
    name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, arg: str) -> "PolicyRef":
        """From the CLI form ``name[:k=v,...]``; the label is normalised (kwargs sorted)."""
        from kosmos_env.policies import parse_policy_arg

        name, kwargs = parse_policy_arg(arg.strip())
        return cls(label=policy_label(name, kwargs), name=name, kwargs=dict(kwargs))

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "name": self.name, "kwargs": dict(self.kwargs)}


def policy_label(name: str, kwargs: Mapping[str, Any]) -> str:
    """``scripted:skill=0.6`` style label with kwargs in sorted order."""
    if not kwargs:
        return name
    parts = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(kwargs.items())]
    return f"{name}:{','.join(parts)}"


@dataclass(frozen=True)
class EpisodeKey:
    """One planned episode. ``order`` is its position in the claim order."""

    policy: str
    task: str
    seed: int
    repeat: int
    order: int = 0

    @property
    def episode_id(self) -> str:
        return f"{self.policy}|{self.task}|{self.seed}|{self.repeat}"

    @property
    def env_seed(self) -> int:
        return env_seed(self.seed, self.repeat)


@dataclass(frozen=True)
class CampaignConfig:
    """The frozen configuration of a campaign. Build with :func:`make_config`."""

    env_id: str
    spec_overrides: Mapping[str, Any]
    spec: Mapping[str, Any]
    spec_hash: str
    policies: tuple[PolicyRef, ...]
    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    repeats: int
    judge: Mapping[str, Any]
    gate: Mapping[str, Any]
    video: bool = True

    def identity(self) -> dict[str, Any]:
        """Every field that can change a result (the spec enters through its hash)."""
        return {
            "schema_version": CONFIG_SCHEMA_VERSION,
            "env_id": self.env_id,
            "spec_hash": self.spec_hash,
            "policies": [p.to_dict() for p in self.policies],
            "tasks": list(self.tasks),
            "seeds": list(self.seeds),
            "repeats": self.repeats,
            "judge": dict(self.judge),
            "video": self.video,
        }

    @property
    def config_hash(self) -> str:
        return canonical_hash(self.identity())

    @property
    def campaign_id(self) -> str:
        return f"c-{self.config_hash[:16]}"

    def episodes(self) -> list[EpisodeKey]:
        """Every planned episode, in claim order: repeat, seed, task, then policy.

        Interleaving policies means a campaign stopped half-way still holds a paired
        comparison of every policy on the same cells.
        """
        keys = []
        for repeat in range(self.repeats):
            for seed in self.seeds:
                for task in self.tasks:
                    for pol in self.policies:
                        keys.append(EpisodeKey(pol.label, task, seed, repeat, order=len(keys)))
        return keys

    @property
    def n_episodes(self) -> int:
        return len(self.policies) * len(self.tasks) * len(self.seeds) * self.repeats

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "spec_overrides": dict(self.spec_overrides),
            "spec": dict(self.spec),
            "spec_hash": self.spec_hash,
            "policies": [p.to_dict() for p in self.policies],
            "tasks": list(self.tasks),
            "seeds": list(self.seeds),
            "repeats": self.repeats,
            "judge": dict(self.judge),
            "gate": dict(self.gate),
            "video": self.video,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CampaignConfig":
        return cls(
            env_id=data["env_id"],
            spec_overrides=dict(data.get("spec_overrides", {})),
            spec=dict(data["spec"]),
            spec_hash=data["spec_hash"],
            policies=tuple(PolicyRef(p["label"], p["name"], dict(p.get("kwargs", {}))) for p in data["policies"]),
            tasks=tuple(data["tasks"]),
            seeds=tuple(int(s) for s in data["seeds"]),
            repeats=int(data["repeats"]),
            judge=dict(data["judge"]),
            gate=dict(data.get("gate", {})),
            video=bool(data.get("video", True)),
        )


def parse_judge(arg: str | Mapping[str, Any] | None, default: Mapping[str, Any]) -> dict[str, Any]:
    """``--judge``: a judge type name (``state``), inline JSON (``{"type": "vlm", ...}``), or None."""
    if arg is None:
        return dict(default)
    if isinstance(arg, Mapping):
        spec = dict(arg)
    elif arg.strip().startswith("{"):
        try:
            spec = json.loads(arg)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--judge is not valid JSON: {exc}") from None
    else:
        spec = {"type": arg.strip()}
    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
        raise ValueError(f"a judge spec must name its type, e.g. 'state' or '{{\"type\": \"vlm\"}}'; got {arg!r}")
    from kosmos_env.judges import JUDGES

    if spec["type"] not in JUDGES:
        raise ValueError(f"unknown judge type {spec['type']!r}; known: {sorted(JUDGES)}")
    return spec


#: the most episodes one campaign plans (its ledger holds a row per episode)
MAX_EPISODES = 1_000_000
#: the largest campaign seed: a repeat's derived seed is 31 bits too (:func:`env_seed`)
MAX_SEED = 2**31 - 1


def make_config(
    env_id: str,
    policies: Sequence[str | PolicyRef],
    tasks: Iterable[str] | None = None,
    seeds: int | Sequence[int] = 5,
    repeats: int = 1,
    judge: str | Mapping[str, Any] | None = None,
    image_size: Sequence[int] | None = None,
    video: bool = True,
    spec_overrides: Mapping[str, Any] | None = None,
    seed_offset: int = 0,
) -> CampaignConfig:
    """Validate the inputs and freeze them (the spec is loaded to get its hash and tasks).

    ``seeds`` is a count (seeds ``seed_offset`` .. ``seed_offset + N - 1``) or an explicit list;
    ``tasks`` None or ``["all"]`` means every task of the spec's suite. The library takes seeds as
    given (offset 0 by default, which keeps pinned config hashes); ``kosmos-env eval`` passes the
    first evaluation seed (:func:`kosmos_env.utils.seed_ranges.evaluation_start`) unless told.
    """
    from kosmos_env.policies import resolve_policy
    from kosmos_env.spec import load_spec
    from kosmos_env.tasks import load_suite

    refs = [p if isinstance(p, PolicyRef) else PolicyRef.parse(p) for p in policies]
    for ref in refs:  # unknown, not opted-in or wrong-kind: refused before any episode runs (nothing built)
        resolve_policy(ref.name)
    if not refs:
        raise ValueError("a campaign needs at least one --policy")
    labels = [r.label for r in refs]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"policy given twice: {dupes}; each --policy must differ")
    overrides = dict(spec_overrides or {})
    if image_size is not None:
        if len(image_size) != 2:
            raise ValueError(f"--image-size takes H W, got {list(image_size)}")
        overrides["image_size"] = [int(v) for v in image_size]
    spec = load_spec(env_id).with_overrides(**overrides)
    suite_tasks = load_suite(spec.tasks["suite"]).names
    task_list = list(tasks) if tasks is not None else []
    if not task_list or task_list == ["all"]:
        task_list = list(suite_tasks)
    unknown = [t for t in task_list if t not in suite_tasks]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown} for {env_id}; tasks: {suite_tasks}")
    if len(set(task_list)) != len(task_list):
        raise ValueError(f"a task is listed twice in {task_list}")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"--seeds must be at least 1, got {seeds}")
        if seeds > MAX_EPISODES:  # checked before the list is built: a billion seeds would hang here
            raise ValueError(f"--seeds {seeds} is more than a campaign can plan ({MAX_EPISODES} episodes at most)")
        if not 0 <= seed_offset <= MAX_SEED - seeds + 1:
            raise ValueError(
                f"--seed-offset must be in [0, {MAX_SEED - seeds + 1}] for {seeds} seeds (seeds are at most "
                f"{MAX_SEED}), got {seed_offset}"
            )
        seed_list = list(range(seed_offset, seed_offset + seeds))
    else:
        seed_list = [int(s) for s in seeds]
        if not seed_list or len(set(seed_list)) != len(seed_list) or min(seed_list) < 0 or max(seed_list) > MAX_SEED:
            raise ValueError(f"seeds must be distinct integers in [0, {MAX_SEED}], got {seed_list}")
    if repeats < 1:
        raise ValueError(f"--repeats must be at least 1, got {repeats}")
    n = len(refs) * len(task_list) * len(seed_list) * int(repeats)
    if n > MAX_EPISODES:
        raise ValueError(
            f"the campaign plans {n} episodes ({len(refs)} policies x {len(task_list)} tasks x "
            f"{len(seed_list)} seeds x {repeats} repeats); at most {MAX_EPISODES} fit one ledger"
        )
    return CampaignConfig(
        env_id=env_id,
        spec_overrides=overrides,
        spec=spec.to_dict(),
        spec_hash=spec.hash,
        policies=tuple(refs),
        tasks=tuple(task_list),
        seeds=tuple(seed_list),
        repeats=int(repeats),
        judge=parse_judge(judge, spec.judge),
        gate=dict(spec.gate),
        video=bool(video),
    )


def describe_difference(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """Name the identity fields that differ between two configs (for the refusal message)."""
    keys = sorted(set(old) | set(new))
    diffs = []
    for key in keys:
        if old.get(key) != new.get(key):
            a, b = json.dumps(old.get(key)), json.dumps(new.get(key))
            if len(a) > 80:
                a = a[:77] + "..."
            if len(b) > 80:
                b = b[:77] + "..."
            diffs.append(f"{key}: {a} (existing) vs {b} (now)")
    return "; ".join(diffs) if diffs else "no field differs"
