"""A spec's ``world`` keys are the ones its world declares: an unknown or misspelt key is refused
when the world is built, as an unknown gate setting is, and every registered spec still builds
with its hash unchanged (issue 43 item 4)."""

from __future__ import annotations

import json

import gymnasium
import pytest

import kosmos_env  # noqa: F401  (registers the env ids)
from kosmos_env.errors import SpecError
from kosmos_env.spec import builtin_spec_ids, load_spec
from kosmos_env.worlds import resolve_world
from tests.support.paths import ROOT


@pytest.mark.parametrize("env_id", builtin_spec_ids())
def test_every_registered_spec_uses_only_declared_settings(env_id):
    spec = load_spec(env_id)
    from kosmos_env.worlds import check_world_settings

    cls = resolve_world(spec.world["type"], env_id)
    assert cls.world_settings, f"{cls.__name__} declares no world_settings"
    check_world_settings(cls, spec)  # raises on a key the world does not declare
    frozen = json.loads((ROOT / "envs_registry" / "spec_hashes.json").read_text())
    assert spec.hash == frozen[env_id]


def test_the_tiny_bridge_spec_of_the_tests_is_declared_too():
    from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec
    from kosmos_env.worlds import check_world_settings

    check_world_settings(resolve_world("cosmos3"), tiny_bridge_spec())


@pytest.mark.parametrize(
    "env_id, key",
    [
        ("Kosmos-Tabletop-v1", "physics_dtt"),  # a typo of physics_dt: silently ignored before
        ("Kosmos-Tabletop-v1", "weights"),  # the learned world's key means nothing to the simulator
        ("Kosmos-TabletopLearned-v1", "no_such_setting"),
        ("Kosmos-Bridge-v1", "guidance"),  # not guidance_scale
    ],
)
def test_an_unknown_world_key_is_refused_with_the_known_ones(env_id, key):
    from kosmos_env.worlds import check_world_settings

    spec = load_spec(env_id).with_overrides(world={key: 1})
    with pytest.raises(SpecError) as err:
        check_world_settings(resolve_world(spec.world["type"], env_id), spec)
    message = str(err.value)
    assert f"unknown world setting(s) ['{key}']" in message and f"world type '{spec.world['type']}'" in message
    assert "known: [" in message and "\n" not in message


def test_gymnasium_make_refuses_an_unknown_world_key_as_it_refuses_an_unknown_gate_key():
    with pytest.raises(ValueError, match=r"unknown gate setting\(s\) \['no_such_gate_key'\]"):
        gymnasium.make("Kosmos-Tabletop-v1", gate={"no_such_gate_key": 1})
    with pytest.raises(SpecError, match=r"unknown world setting\(s\) \['physics_dtt'\].*known: \[.*'physics_dt'"):
        gymnasium.make("Kosmos-Tabletop-v1", world={"physics_dtt": 0.002})
    # a known setting and the control key every world takes still build
    env = gymnasium.make("Kosmos-Tabletop-v1", world={"physics_dt": 0.002, "control": "shuffled"})
    env.close()


def test_a_world_that_declares_nothing_is_not_checked():
    """A plug-in world written before ``world_settings`` existed keeps working: only declared worlds are checked."""
    from kosmos_env.worlds import COMMON_WORLD_SETTINGS, check_world_settings

    assert {"type", "control"} == COMMON_WORLD_SETTINGS

    class Undeclared:
        pass

    spec = load_spec("Kosmos-Tabletop-v1").with_overrides(world={"anything": 1})
    check_world_settings(Undeclared, spec)
