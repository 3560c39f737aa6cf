"""The learned tabletop's stages as spec fields: ``world.rules`` (the engine's four fixed rules) and
``world.learned_dynamics`` (learned | rules | none). Defaults keep the registered hash and the
world's behaviour; each switch changes what it should; bad values are one-line SpecErrors."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

import kosmos_env  # noqa: F401  (registers the env ids)
from kosmos_env.errors import SpecError
from kosmos_env.policies import make_policy, parse_policy_arg
from kosmos_env.spec import LEARNED_TABLETOP_RULES, load_spec

torch.set_num_threads(1)

ENV_ID = "Kosmos-TabletopLearned-v1"
#: the registered spec's hash before these fields existed (commit 28840a4): defaults must keep it
REGISTERED_HASH = "f5b6ee921416e66741964471a648913e489cc60070b3e2b7b7cace17da23906e"


def _episode(world: dict, task: str, seed: int, policy: str, horizon: int = 20, actions_out: list | None = None):
    """Run one episode; returns (object centre per state (T+1, 3), held per state, measured gripper
    (T,), commanded gripper (T,), frames (T+1, H, W, 3)); the actions go to ``actions_out``."""
    env = gymnasium.make(ENV_ID, world=world, horizon=horizon)
    name, kw = parse_policy_arg(policy)
    pol = make_policy(name, **kw)
    obs, _ = env.reset(seed=seed, options={"task": task})
    pol.reset(obs["instruction"], seed=seed)
    engine = env.unwrapped.world._engine
    objs, held, frames, cmd = [engine.obj.numpy()[0].copy()], [0.0], [obs["image"]], []
    while True:
        action = pol.act(obs)
        cmd.append(float(action[6]))
        if actions_out is not None:
            actions_out.append(np.asarray(action, dtype=np.float64))
        obs, _, term, trunc, _ = env.step(action)
        objs.append(engine.obj.numpy()[0].copy())
        held.append(float(engine.held[0]))
        frames.append(obs["image"])
        if term or trunc:
            break
    grip = env.unwrapped.rollout().log["gripper_measured"]
    env.close()
    return np.array(objs), np.array(held), np.asarray(grip), np.array(cmd), np.array(frames)


def test_defaults_keep_the_registered_hash_and_are_never_written_out():
    spec = load_spec(ENV_ID)
    assert spec.hash == REGISTERED_HASH
    assert "rules" not in spec.to_dict()["world"] and "learned_dynamics" not in spec.to_dict()["world"]
    spelled = spec.with_overrides(
        world={"rules": list(reversed(LEARNED_TABLETOP_RULES)), "learned_dynamics": "learned"}
    )
    assert spelled.hash == REGISTERED_HASH
    env = gymnasium.make(ENV_ID, world={"learned_dynamics": "learned"})
    assert env.unwrapped.spec_hash == REGISTERED_HASH
    env.close()


def test_every_other_setting_is_its_own_hash_and_order_does_not_matter():
    spec = load_spec(ENV_ID)
    settings = [
        {"rules": []},
        {"rules": ["drop_released"]},
        {"rules": ["keep_resting", "push_closed_fingers"]},
        {"learned_dynamics": "rules"},
        {"learned_dynamics": "rules", "rules": []},
        {"learned_dynamics": "none"},
    ]
    hashes = [spec.with_overrides(world=w).hash for w in settings]
    assert len(set(hashes + [spec.hash])) == len(settings) + 1
    a = spec.with_overrides(world={"rules": ["push_closed_fingers", "keep_resting"]})
    assert a.hash == hashes[2] and a.world["rules"] == ["keep_resting", "push_closed_fingers"]


@pytest.mark.parametrize(
    "world, field",
    [
        ({"rules": ["drop_released", "gravity"]}, "world.rules"),
        ({"rules": "drop_released"}, "world.rules"),
        ({"rules": ["keep_resting", "keep_resting"]}, "world.rules"),
        ({"learned_dynamics": "physics"}, "world.learned_dynamics"),
        ({"learned_dynamics": None}, "world.learned_dynamics"),
        ({"learned_dynamics": "none", "rules": []}, "world.rules"),
    ],
)
def test_bad_values_are_one_line_spec_errors_naming_the_field_and_the_choices(world, field):
    with pytest.raises(SpecError) as err:
        gymnasium.make(ENV_ID, world=world)
    message = str(err.value)
    assert "\n" not in message and field in message
    if "none" not in str(world.get("learned_dynamics")):
        assert ("drop_released" in message) if field == "world.rules" else ("'learned', 'rules', 'none'" in message)


def test_default_engine_runs_the_learned_stages_then_the_four_rules_in_order(monkeypatch):
    """The default path is the path the registered world always ran: dynamics, slip, then drop,
    rest, keep, push on every action (values pinned in the next test)."""
    from kosmos_env.worlds.tabletop_learned.engine import Engine
    from kosmos_env.worlds.tabletop_learned.slip import SlipTracker

    calls: list[str] = []
    for name in ("_drop_released_objects", "_rest_on_supports", "_keep_resting_objects", "_push_with_closed_fingers"):
        original = getattr(Engine, name)
        monkeypatch.setattr(Engine, name, lambda self, *a, _n=name, _o=original: (calls.append(_n), _o(self, *a))[1])
    original_slip = SlipTracker.step
    monkeypatch.setattr(
        SlipTracker, "step", lambda self, *a, **k: (calls.append("slip"), original_slip(self, *a, **k))[1]
    )
    _episode({}, "carrot_on_plate", 5, "scripted:skill=1.0", horizon=3)
    assert (
        calls
        == ["slip", "_drop_released_objects", "_rest_on_supports", "_keep_resting_objects", "_push_with_closed_fingers"]
        * 3
    )


def test_default_world_object_path_is_the_registered_worlds():
    """Final object centre and the gripper log of one episode, recorded with the code before the
    switches existed (commit 28840a4): the same to 1e-4, and the explicit defaults give identical frames."""
    objs, held, grip, _, frames = _episode({}, "carrot_on_plate", 5, "scripted:skill=1.0", horizon=40)
    np.testing.assert_allclose(objs[-1], [0.342742, -0.086092, 0.02], atol=1e-4)
    np.testing.assert_allclose(grip, [1.0] * 5 + [0.2665] * 10 + [1.0] * 25, atol=1e-4)
    spelled = {"rules": list(LEARNED_TABLETOP_RULES), "learned_dynamics": "learned"}
    objs2, held2, grip2, _, frames2 = _episode(spelled, "carrot_on_plate", 5, "scripted:skill=1.0", horizon=40)
    assert np.array_equal(frames, frames2) and np.array_equal(objs, objs2) and np.array_equal(grip, grip2)


def test_renderer_only_never_moves_the_object_and_the_fingers_meet_every_command():
    full, held_full, _, _, frames_full = _episode({}, "stack_green_on_yellow", 11, "scripted:skill=1.0")
    objs, held, grip, cmd, frames = _episode(
        {"learned_dynamics": "none"}, "stack_green_on_yellow", 11, "scripted:skill=1.0"
    )
    assert held_full.max() == 1.0 and np.abs(full - full[0]).max() > 0.05  # the full world carries it
    assert np.array_equal(objs, np.repeat(objs[:1], len(objs), axis=0))
    assert held.max() == 0.0
    np.testing.assert_allclose(grip, np.clip(cmd, 0, 1), atol=1e-6)
    assert not np.array_equal(frames, frames_full)


def test_without_rules_a_released_object_drifts_sideways_and_sinks_into_the_block_below():
    full, held, _, _, _ = _episode({}, "stack_green_on_yellow", 11, "scripted:skill=1.0")
    off, held_off, _, _, _ = _episode({"rules": []}, "stack_green_on_yellow", 11, "scripted:skill=1.0")
    release = int(np.flatnonzero((held[:-1] > 0.5) & (held[1:] <= 0.5))[0])
    assert np.array_equal(held, held_off)  # the rules never change the learned hold
    # drop_released: straight down on the release step with the rule, sideways without
    assert np.abs(full[release + 1, :2] - full[release, :2]).max() == 0.0
    assert np.abs(off[release + 1, :2] - off[release, :2]).max() > 0.005
    # rest_on_supports: on the yellow block's top with the rule, at table height (inside it) without
    assert full[-1, 2] > 0.06 and off[-1, 2] < 0.02
    only_rest_off = [r for r in LEARNED_TABLETOP_RULES if r != "rest_on_supports"]
    sunk, _, _, _, _ = _episode({"rules": only_rest_off}, "stack_green_on_yellow", 11, "scripted:skill=1.0")
    assert sunk[-1, 2] < 0.02 and np.abs(sunk[release + 1, :2] - sunk[release, :2]).max() == 0.0


def test_push_rule_moves_a_free_object_ahead_of_closed_fingers_only_when_on():
    policy = "deceptive:mode=knock_away,rate=1.0"
    full, held, _, _, _ = _episode({}, "carrot_on_plate", 3, policy)
    no_push = [r for r in LEARNED_TABLETOP_RULES if r != "push_closed_fingers"]
    off, _, _, _, _ = _episode({"rules": no_push}, "carrot_on_plate", 3, policy)
    moved = np.linalg.norm(np.diff(full[:, :2], axis=0), axis=1)
    k = int(np.flatnonzero((moved > 0.005) & (held[1:] <= 0.5))[0])  # the first push
    np.testing.assert_array_equal(off[: k + 1], full[: k + 1])  # identical until the first push
    assert np.linalg.norm(off[k + 1, :2] - off[k, :2]) < 0.5 * moved[k]


def test_keep_resting_puts_back_a_resting_object_the_dynamics_let_creep(monkeypatch):
    """The learned "moves" switch can fire on an object lying at rest with no finger near it; the
    keep_resting rule undoes that, and without it the creep stays (dynamics replaced by a stub that
    always creeps the object 1 cm along x)."""

    def creep(self, obj, tcp, tcp_next, cmd, grip, held, *a, **k):
        return obj + torch.tensor([[0.01, 0.0, 0.0]]), torch.zeros_like(held), None, None, cmd

    from kosmos_env.worlds.tabletop_learned.objects import ObjectDynamics

    monkeypatch.setattr(ObjectDynamics, "step", creep)
    for rules, moved in ((list(LEARNED_TABLETOP_RULES), False), (["drop_released", "rest_on_supports"], True)):
        env = gymnasium.make(ENV_ID, world={"rules": rules} if moved else {}, horizon=5)
        env.reset(seed=2, options={"task": "carrot_on_plate"})
        engine = env.unwrapped.world._engine
        before = engine.obj.numpy().copy()
        env.step(np.array([0.0, 0.0, 0.03, 0, 0, 0, 1.0], dtype=np.float32))  # the arm rises, far from it
        assert (
            np.abs(engine.obj.numpy() - before).max() > 0.009 if moved else np.array_equal(engine.obj.numpy(), before)
        )
        env.close()


def test_rules_only_kinematics_carries_without_any_network_and_the_batched_path_agrees(monkeypatch):
    from kosmos_env.worlds.tabletop_learned.objects import ObjectDynamics

    def refuse(*a, **k):
        raise AssertionError("the rules-only world must not call the learned dynamics")

    monkeypatch.setattr(ObjectDynamics, "step", refuse)
    objs, held, grip, cmd, _ = _episode(
        {"learned_dynamics": "rules"}, "stack_green_on_yellow", 11, "scripted:skill=1.0"
    )
    assert held.max() == 1.0 and objs[-1, 2] > 0.06  # grasped, carried, released onto the yellow block
    carried = held[1:] > 0.5
    assert np.all(grip[carried] == grip[carried][0]) and 0.03 < grip[carried][0] < 0.9  # fingers stop on it
    np.testing.assert_allclose(grip[~carried], np.clip(cmd[~carried], 0, 1), atol=1e-6)


@pytest.mark.parametrize(
    "world", [{"learned_dynamics": "rules"}, {"learned_dynamics": "none"}, {"rules": ["drop_released"]}]
)
def test_the_batched_engine_path_honours_the_switches(world):
    """``Engine.step_lanes`` (the batched vector env's path): two lanes stepped in one batch end
    exactly where each ends alone, and differ from the default world where the switch matters."""
    from kosmos_env.worlds.tabletop_learned.engine import Engine

    actions = [[], []]
    for i, seed in enumerate((11, 12)):
        _episode({}, "stack_green_on_yellow", seed, "scripted:skill=1.0", actions_out=actions[i])
    envs = [gymnasium.make(ENV_ID, world=w, horizon=20) for w in (world, world, world, world, {})]
    for i, env in enumerate(envs):
        env.reset(seed=(11, 12)[i % 2], options={"task": "stack_green_on_yellow"})
    engines = [e.unwrapped.world._engine for e in envs]
    paths: dict[int, list] = {0: [], 4: []}
    for t in range(len(actions[0])):
        step = np.stack([actions[0][t], actions[1][t]])
        Engine.step_lanes(engines[:2], step, [None, None])
        for i in range(2):  # lanes 2, 3 replay lanes 0, 1 alone; lane 4 is the default world
            engines[2 + i].step(step[i][None])
        engines[4].step(step[0][None])
        for i in paths:
            paths[i].append(np.r_[engines[i].obj.numpy()[0], engines[i].gripper.numpy()])
    for i in range(2):
        assert np.array_equal(engines[i].obj.numpy(), engines[2 + i].obj.numpy())
        assert np.array_equal(engines[i].held.numpy(), engines[2 + i].held.numpy())
        assert np.array_equal(engines[i].gripper.numpy(), engines[2 + i].gripper.numpy())
    assert not np.array_equal(np.array(paths[0]), np.array(paths[4]))  # object path or gripper log
    for e in envs:
        e.close()
