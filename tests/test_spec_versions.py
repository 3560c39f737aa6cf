"""Versions as Gymnasium keeps them: an id names one spec hash for good.

``envs_registry/spec_hashes.json`` freezes every built-in id's hash; a spec whose hash moves under
its id fails here (the change must be a new ``-vN``); an old version stays registered, loadable with
its old hash, and warns that it is deprecated.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from pathlib import Path

import gymnasium
import pytest

from kosmos_env.spec import (
    WORLD_VERSIONS,
    builtin_spec_ids,
    check_frozen_hashes,
    frozen_spec_hashes,
    load_spec,
    newer_versions,
)

REGISTRY = Path(__file__).resolve().parent.parent / "envs_registry"


def _builtin_specs():
    return {env_id: load_spec(env_id) for env_id in builtin_spec_ids()}


def test_every_builtin_spec_has_its_frozen_hash():
    assert check_frozen_hashes() == []
    frozen = frozen_spec_hashes()
    assert sorted(frozen) == builtin_spec_ids()
    assert {env_id: load_spec(env_id).hash for env_id in frozen} == frozen


def test_gymnasium_registers_exactly_the_frozen_ids():
    from tests.conftest import kosmos_env_ids

    assert set(frozen_spec_hashes()) <= set(kosmos_env_ids())
    for env_id in frozen_spec_hashes():
        assert gymnasium.registry[env_id].kwargs == {"spec_id": env_id}


def test_a_changed_spec_under_the_same_id_fails():
    """A setting changed in the spec file: the check names the id and the version to add instead."""
    specs = _builtin_specs()
    tabletop = specs["Kosmos-Tabletop-v1"]
    specs["Kosmos-Tabletop-v1"] = tabletop.with_overrides(horizon=tabletop.horizon + 1)
    problems = check_frozen_hashes(specs)
    assert len(problems) == 1
    assert problems[0].startswith("Kosmos-Tabletop-v1: spec hash ")
    assert "Kosmos-Tabletop-v2" in problems[0] and "deprecated" in problems[0]


def test_a_change_in_what_versions_share_fails_too(monkeypatch):
    """A task suite's content or a world's code version enters the hash: editing either in place
    moves every version that uses it, and the check catches it."""
    specs = _builtin_specs()
    bridge = specs["Kosmos-Bridge-v1"]
    specs["Kosmos-Bridge-v1"] = dataclasses.replace(bridge, task_suite_sha256="0" * 64)
    assert [p.split(":")[0] for p in check_frozen_hashes(specs)] == ["Kosmos-Bridge-v1"]

    monkeypatch.setitem(WORLD_VERSIONS, "tabletop", "2")  # the MuJoCo world's code "changed"
    assert [p.split(":")[0] for p in check_frozen_hashes()] == ["Kosmos-Tabletop-v1"]


def test_what_describes_a_spec_is_not_a_new_version():
    specs = _builtin_specs()
    tabletop = specs["Kosmos-Tabletop-v1"]
    reworded = tabletop.with_overrides(description="reworded")
    assert reworded.hash == tabletop.hash
    specs["Kosmos-Tabletop-v1"] = reworded
    assert check_frozen_hashes(specs) == []


def test_frozen_file_problems_are_named():
    specs = _builtin_specs()
    frozen = frozen_spec_hashes()
    missing = {k: v for k, v in frozen.items() if k != "Kosmos-Bridge-v1"}
    assert check_frozen_hashes(specs, missing) == [
        f'Kosmos-Bridge-v1: no frozen hash; add "Kosmos-Bridge-v1": "{frozen["Kosmos-Bridge-v1"]}" to '
        "envs_registry/spec_hashes.json"
    ]
    removed = {k: v for k, v in specs.items() if k != "Kosmos-Bridge-v1"}
    assert "never removed" in check_frozen_hashes(removed, frozen)[0]
    unversioned = dict(specs, **{"Kosmos-Odd": specs["Kosmos-Tabletop-v1"]})
    problems = check_frozen_hashes(unversioned, dict(frozen, **{"Kosmos-Odd": frozen["Kosmos-Tabletop-v1"]}))
    assert problems == ["Kosmos-Odd: an env id must end in a version, Name-vN (N >= 1)"]
    orphan = dict(specs, **{"Kosmos-Tabletop-v1": specs["Kosmos-Tabletop-v1"].with_overrides(deprecated="old")})
    assert check_frozen_hashes(orphan, frozen) == [
        "Kosmos-Tabletop-v1: deprecated, but no newer version of it is registered"
    ]


def test_newer_versions_compare_numbers_not_text():
    ids = ["Kosmos-X-v1", "Kosmos-X-v2", "Kosmos-X-v10", "Kosmos-Y-v3", "Kosmos-X-v1b"]
    assert newer_versions("Kosmos-X-v2", ids) == ["Kosmos-X-v10"]
    assert newer_versions("Kosmos-X-v1", ids) == ["Kosmos-X-v2", "Kosmos-X-v10"]
    assert newer_versions("Kosmos-Y-v3", ids) == []


@pytest.fixture
def bumped_registry(tmp_path, monkeypatch):
    """A registry copy with one env bumped as the rule says: ``Kosmos-BumpDemo-v1`` (today's tabletop
    spec, now deprecated) and ``Kosmos-BumpDemo-v2`` (horizon changed), both frozen and registered."""
    import kosmos_env.spec as spec_module

    root = tmp_path / "envs_registry"
    shutil.copytree(REGISTRY, root, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    raw = json.loads((REGISTRY / "Kosmos-Tabletop-v1.json").read_text())
    v1 = dict(raw, id="Kosmos-BumpDemo-v1", deprecated="superseded by Kosmos-BumpDemo-v2 (horizon + 10)")
    v2 = dict(raw, id="Kosmos-BumpDemo-v2", horizon=raw["horizon"] + 10)
    for data in (v1, v2):
        (root / f"{data['id']}.json").write_text(json.dumps(data, indent=1))
    monkeypatch.setattr(spec_module, "_registry_root", lambda: root)
    frozen = frozen_spec_hashes()
    frozen.update({d["id"]: load_spec(d["id"]).hash for d in (v1, v2)})
    (root / "spec_hashes.json").write_text(json.dumps(frozen, indent=1, sort_keys=True))
    for env_id in ("Kosmos-BumpDemo-v1", "Kosmos-BumpDemo-v2"):
        gymnasium.register(id=env_id, entry_point="kosmos_env.env:KosmosEnv", kwargs={"spec_id": env_id})
    try:
        yield frozen
    finally:
        for env_id in ("Kosmos-BumpDemo-v1", "Kosmos-BumpDemo-v2"):
            gymnasium.registry.pop(env_id, None)


def test_an_old_version_loads_with_its_own_hash_and_a_deprecation_warning(bumped_registry):
    frozen = bumped_registry
    assert check_frozen_hashes() == []  # the bump follows the rule
    assert frozen["Kosmos-BumpDemo-v1"] != frozen["Kosmos-BumpDemo-v2"]  # (the id is part of the hash)

    with pytest.warns(DeprecationWarning) as caught:
        old = gymnasium.make("Kosmos-BumpDemo-v1")  # as frozen: an override is another hash
    try:
        messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
        assert any("Kosmos-BumpDemo-v1 is out of date" in m and "v2" in m for m in messages), messages  # Gymnasium's
        assert any("superseded by Kosmos-BumpDemo-v2" in m for m in messages), messages  # the spec's reason
        assert old.unwrapped.spec_hash == frozen["Kosmos-BumpDemo-v1"]
        obs, _ = old.reset(seed=0)
        assert obs["image"].shape == (*old.unwrapped.kosmos_spec.image_size, 3)
    finally:
        old.close()

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the newest version makes without one
        new = gymnasium.make("Kosmos-BumpDemo-v2")
    try:
        assert new.unwrapped.spec_hash == frozen["Kosmos-BumpDemo-v2"]
    finally:
        new.close()


def test_a_bump_that_edits_the_old_file_fails(bumped_registry, tmp_path):
    """Bumping by editing v1 in place (instead of adding v2 beside it) is caught under v1's id."""
    import kosmos_env.spec as spec_module

    path = spec_module._registry_root() / "Kosmos-BumpDemo-v1.json"
    raw = json.loads(path.read_text())
    path.write_text(json.dumps(dict(raw, horizon=raw["horizon"] + 10)))
    problems = check_frozen_hashes()
    assert [p.split(":")[0] for p in problems] == ["Kosmos-BumpDemo-v1"]
    assert "Kosmos-BumpDemo-v2" in problems[0]


def test_learned_tabletop_v1_keeps_its_hash_and_is_not_deprecated_by_v2():
    """Issue 41's decision, on the registered evidence (bench/results/world_v2/study_reading.md and
    study2/reading.md): v2 ranks worse overall and loses the deceptive policies, so v1's spec is not
    deprecated. Gymnasium still warns that -v1 is "out of date" (it does for any id with a higher
    version); the spec's own deprecation reason is absent, and v1 makes with its frozen hash."""
    frozen = frozen_spec_hashes()
    assert load_spec("Kosmos-TabletopLearned-v1").deprecated == ""
    assert newer_versions("Kosmos-TabletopLearned-v1", list(builtin_spec_ids())) == ["Kosmos-TabletopLearned-v2"]
    with pytest.warns(DeprecationWarning) as caught:
        env = gymnasium.make("Kosmos-TabletopLearned-v1")
    try:
        messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
        assert any("out of date" in m for m in messages), messages  # Gymnasium's generic notice
        assert not any("is deprecated:" in m for m in messages), messages  # not the spec's
        assert env.unwrapped.spec_hash == frozen["Kosmos-TabletopLearned-v1"]
    finally:
        env.close()
