"""The policy-training recipe: checkpoint format and ``ckpt`` policy, demonstrations, behaviour
cloning, SB3 PPO over the same network, and ``kosmos-env train-policy``.

Small on purpose (short horizons, a few dozen gradient steps, one torch thread): each test
checks a property that breaks when the code is wrong, not how well a policy learns.
"""

from __future__ import annotations

import json

import gymnasium
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from kosmos_env.policies import make_policy, parse_policy_arg  # noqa: E402
from kosmos_env.policies.checkpoint import build_net, load_checkpoint, read_checkpoint_meta, save_checkpoint  # noqa: E402
from kosmos_env.training.bc import BCConfig, behaviour_clone, imitation_mse  # noqa: E402
from kosmos_env.training.demos import Demos, record_demos  # noqa: E402
from tests.conftest import requires_extra  # noqa: E402

ENV = "Kosmos-Tabletop-v1"
HORIZON = 6
SIM = {"image_size": (64, 64), "horizon": HORIZON}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("demos") / "demos.npz"
    record_demos(
        ENV, policy="scripted:skill=0.5", seeds_per_task=2, seed_start=0, env_kwargs=SIM, out=path, progress=False
    )
    return Demos.load(path)


@pytest.fixture(scope="module")
def bc_ckpt(demos, tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("bc") / "bc.safetensors"
    return behaviour_clone(demos, out, BCConfig(steps=120, batch=32, seed=0), progress=False)


def _episode(policy, seed=7, task="carrot_on_plate"):
    env = gymnasium.make(ENV, **SIM)
    try:
        obs, _ = env.reset(seed=seed, options={"task": task})
        policy.reset(obs["instruction"], seed=seed)
        actions, done = [], False
        while not done:
            a = policy.act(obs)
            actions.append(a)
            obs, _, term, trunc, _ = env.step(a)
            done = term or trunc
        return np.stack(actions), env.action_space
    finally:
        env.close()


def test_demos_are_encoded_as_the_wrapper_encodes(demos):
    from kosmos_env.wrappers import wrap_rl_env

    assert demos.n_episodes == 8 and len(demos) == 8 * HORIZON
    assert demos.image.dtype == np.uint8 and demos.image.shape[1:] == (64, 64, 3)
    assert demos.action.dtype == np.float32 and np.all(np.abs(demos.action) <= 1.0)
    env = wrap_rl_env(gymnasium.make(ENV, **SIM))  # rendered at 64 px (make_rl_env's image_size would resize)
    try:
        assert demos.meta["instructions"] == list(env.get_wrapper_attr("instructions"))
        obs, _ = env.reset(seed=0, options={"task": "spoon_on_towel"})
        first = int(np.flatnonzero((demos.step == 0) & (demos.task == 0))[0])  # spoon_on_towel, seed 0
        np.testing.assert_array_equal(obs["image"], demos.image[first])
        np.testing.assert_array_equal(obs["state"], demos.state[first])
    finally:
        env.close()


def test_checkpoint_round_trip_acts_in_bounds_and_deterministically(bc_ckpt):
    name, kwargs = parse_policy_arg(f"ckpt:path={bc_ckpt}")
    a1, space = _episode(make_policy(name, **kwargs))
    a2, _ = _episode(make_policy("ckpt", path=str(bc_ckpt)))
    assert a1.dtype == np.float32 and a1.shape == (HORIZON, 7)
    assert np.all(a1 >= space.low) and np.all(a1 <= space.high)
    np.testing.assert_array_equal(a1, a2)
    p, q = make_policy("ckpt", path=str(bc_ckpt)), make_policy("ckpt", path=str(bc_ckpt))
    assert p.content_hash() == q.content_hash() and p.config()["weights_sha256"] == q.config()["weights_sha256"]
    # sampling: seeded, reproducible, not the mean, still inside the bounds
    s1, _ = _episode(make_policy("ckpt", path=str(bc_ckpt), sample=True, seed=3))
    s2, _ = _episode(make_policy("ckpt", path=str(bc_ckpt), sample=True, seed=3))
    np.testing.assert_array_equal(s1, s2)
    assert not np.array_equal(s1, a1) and np.all(s1 >= space.low) and np.all(s1 <= space.high)
    assert make_policy("ckpt", path=str(bc_ckpt), sample=True, seed=3).content_hash() != p.content_hash()
    meta = read_checkpoint_meta(bc_ckpt)
    assert meta["stage"] == "bc" and meta["env_id"] == ENV and meta["image_size"] == [64, 64]
    assert meta["frame_stack"] == 1 and meta["action_high"][6] == 1.0 and meta["kosmos_env_version"]


def test_behaviour_cloning_reduces_imitation_error(demos, bc_ckpt):
    net, meta = load_checkpoint(bc_ckpt)
    torch.manual_seed(0)
    untrained = build_net(net.cfg)  # same sizes and seed, no training
    untrained.load_state_dict({**untrained.state_dict(), "state_mean": net.state_mean, "state_std": net.state_std})
    before, after = imitation_mse(untrained, demos), imitation_mse(net, demos)
    assert after < 0.5 * before, (before, after)
    assert meta["bc"]["imitation_mse_after"] == pytest.approx(after, rel=1e-4)
    assert net.log_std.detach().numpy() == pytest.approx(np.full(7, -1.0))  # BC leaves the std where it was set


def test_frame_stack_policy_matches_the_wrapper_stack(demos, tmp_path):
    """A frame-stacked checkpoint stacks raw observations exactly as StackFrames stacks them."""
    from kosmos_env.policies.checkpoint import image_to_input, unscale_action
    from kosmos_env.wrappers import wrap_rl_env

    path = behaviour_clone(
        demos, tmp_path / "fs2.safetensors", BCConfig(steps=2, batch=8, frame_stack=2), progress=False
    )
    pol = make_policy("ckpt", path=str(path))
    raw = gymnasium.make(ENV, **SIM)
    wrapped = wrap_rl_env(gymnasium.make(ENV, **SIM), frame_stack=2, rescale_actions=False)
    try:
        obs, _ = raw.reset(seed=5, options={"task": "eggplant_in_basket"})
        wobs, _ = wrapped.reset(seed=5, options={"task": "eggplant_in_basket"})
        pol.reset(obs["instruction"])
        for _ in range(3):
            assert wobs["image"].shape == (64, 64, 6) and wobs["state"].shape == (14,)
            with torch.no_grad():  # the network on the wrapper's stacked observation
                mean, _ = pol.net(
                    image_to_input(wobs["image"][None]),
                    torch.as_tensor(wobs["state"][None]),
                    torch.as_tensor(wobs["task"][None]),
                )
            a = pol.act(obs)  # the policy on the raw observation, stacking itself
            np.testing.assert_allclose(a, unscale_action(mean[0].numpy(), pol.low, pol.high), rtol=0, atol=1e-6)
            obs, *_ = raw.step(a)
            wobs, *_ = wrapped.step(a)
    finally:
        raw.close()
        wrapped.close()


def _oracle_ppo(bc_ckpt, out_dir, config):
    """24 env steps of PPO (2 envs, oracle reward, short horizon) from ``bc_ckpt``, a checkpoint per update."""
    from kosmos_env.training.ppo import finetune_ppo

    return finetune_ppo(
        ENV,
        bc_ckpt,
        reward="oracle",
        total_steps=24,
        n_envs=2,
        seed=0,
        out_dir=out_dir,
        checkpoint_every=1,
        env_kwargs={"horizon": HORIZON},
        config=config,
        progress=False,
    )


@pytest.mark.slow
@requires_extra("rl")  # stable-baselines3
def test_ppo_export_acts_as_sb3_predict(bc_ckpt, tmp_path):
    from gymnasium.wrappers import RescaleAction
    from stable_baselines3 import PPO

    from kosmos_env.training.ppo import PPOConfig
    from kosmos_env.wrappers import KosmosObservation

    paths = _oracle_ppo(
        bc_ckpt, tmp_path, PPOConfig(n_steps=6, batch_size=12, n_epochs=2, learning_rate=1e-3, critic_warmup=0)
    )
    assert [p.name for p in paths] == ["ppo_update_0001.safetensors", "ppo_update_0002.safetensors"]
    meta = read_checkpoint_meta(paths[-1])
    assert meta["stage"] == "ppo" and meta["env_steps"] == 24 and meta["update"] == 2 and meta["seed"] == 0
    assert meta["reward"]["mode"] == "oracle" and meta["training"]["init_checkpoint"]["stage"] == "bc"
    bc_net, _ = load_checkpoint(bc_ckpt)
    ppo_net, _ = load_checkpoint(paths[-1])
    assert not torch.equal(bc_net.mean_head.weight, ppo_net.mean_head.weight)  # PPO trained the cloned tensors

    model = PPO.load(tmp_path / "sb3_last.zip", device="cpu")
    policy = make_policy("ckpt", path=str(paths[-1]))
    raw = gymnasium.make(ENV, **SIM, reward={"mode": "oracle"})
    encoder = KosmosObservation(raw)  # the wrapper's own encoding of each raw observation
    rescale = RescaleAction(encoder, np.float32(-1.0), np.float32(1.0))
    try:
        for seed, task in ((11, "stack_green_on_yellow"), (12, "spoon_on_towel")):
            obs, _ = raw.reset(seed=seed, options={"task": task})
            policy.reset(obs["instruction"])
            for _ in range(HORIZON):
                mine = policy.act(obs)
                sb3, _ = model.predict(encoder.observation(obs), deterministic=True)
                np.testing.assert_allclose(mine, rescale.action(sb3), rtol=0, atol=1e-5)
                obs, _, term, trunc, _ = raw.step(mine)
                if term or trunc:
                    break
    finally:
        raw.close()


@requires_extra("rl")  # stable-baselines3
def test_critic_warmup_trains_only_the_critic_first(bc_ckpt, tmp_path):
    from kosmos_env.training.ppo import PPOConfig

    paths = _oracle_ppo(
        bc_ckpt,
        tmp_path,
        PPOConfig(n_steps=4, batch_size=8, n_epochs=2, learning_rate=1e-2, critic_warmup=2, init_log_std=None),
    )
    start, _ = load_checkpoint(bc_ckpt)
    nets = [load_checkpoint(p)[0] for p in paths]  # after updates 1, 2 (warm-up) and 3
    assert len(nets) == 3

    def moved(net, prefix):
        ref = dict(start.named_parameters())
        return [n for n, p in net.named_parameters() if n.startswith(prefix) and not torch.equal(p, ref[n])]

    for net in nets[:2]:  # the critic learned while everything else stayed as cloned
        assert moved(net, "vf_trunk") and moved(net, "value_head")
        assert not moved(net, "conv") and not moved(net, "pi_trunk") and not moved(net, "mean_head")
        assert not moved(net, "log_std")
    assert moved(nets[2], "pi_trunk") and moved(nets[2], "mean_head")  # then the actor trains too


@pytest.mark.slow
@requires_extra("rl")
def test_train_policy_cli_end_to_end(tmp_path, capsys):
    from kosmos_env.cli import main

    out = tmp_path / "run"
    rc = main(
        [
            "train-policy",
            "--stage",
            "both",
            "--env",
            ENV,
            "--demos",
            str(tmp_path / "demos.npz"),
            "--demo-seeds",
            "1",
            "--bc-steps",
            "10",
            "--reward",
            "oracle",
            "--steps",
            "24",
            "--n-envs",
            "2",
            "--n-steps",
            "6",
            "--batch-size",
            "12",
            "--checkpoint-every",
            "1",
            "--horizon",
            str(HORIZON),
            "--seed",
            "1",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    for name in (
        "bc.safetensors",
        "ppo_update_0001.safetensors",
        "ppo_update_0002.safetensors",
        "curve.png",
        "curve.csv",
        "curve.json",
    ):
        assert (out / name).is_file(), name
    assert (tmp_path / "demos.npz").is_file()
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curve = json.loads((out / "curve.json").read_text())
    assert [u["env_steps"] for u in curve["updates"]] == [12, 24]
    assert all(u["mean_reward"] is not None and u["success_rate"] is not None for u in curve["updates"])
    meta = read_checkpoint_meta(out / "ppo_update_0002.safetensors")
    assert meta["seed"] == 1 and meta["reward"]["mode"] == "oracle" and len(meta["spec_hash"]) == 64
    # the product loads as a policy by name and acts
    name, kwargs = parse_policy_arg(f"ckpt:path={out / 'ppo_update_0002.safetensors'}")
    actions, _ = _episode(make_policy(name, **kwargs))
    assert actions.shape == (HORIZON, 7)
    # PPO again from the written BC checkpoint
    rc = main(
        [
            "train-policy",
            "--stage",
            "ppo",
            "--init",
            str(out / "bc.safetensors"),
            "--steps",
            "12",
            "--n-envs",
            "2",
            "--n-steps",
            "6",
            "--batch-size",
            "12",
            "--horizon",
            str(HORIZON),
            "--out",
            str(tmp_path / "again"),
            "--quiet",
        ]
    )
    assert rc == 0 and (tmp_path / "again" / "ppo_update_0001.safetensors").is_file()


# -- refusals: one line each, naming the problem ------------------------------------------------


def _one_line_value_error(fn, match):
    with pytest.raises(ValueError, match=match) as info:
        fn()
    assert "\n" not in str(info.value)


def test_bad_checkpoint_files_are_refused_in_one_line(bc_ckpt, tmp_path):
    from safetensors.torch import load_file, save_file

    from kosmos_env.policies.checkpoint import FORMAT

    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x07" * 64)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(bc_ckpt.read_bytes()[:-100])
    world = __import__("kosmos_env.worlds.tabletop_learned", fromlist=["x"]).__path__[0] + "/weights/world.safetensors"
    future = tmp_path / "future.safetensors"
    header = json.loads(json.dumps(read_checkpoint_meta(bc_ckpt)))
    save_file(
        load_file(str(bc_ckpt)),
        str(future),
        metadata={"format": FORMAT, "format_version": "99", "kosmos_policy": json.dumps(header)},
    )

    _one_line_value_error(lambda: make_policy("ckpt", path=str(tmp_path / "missing.safetensors")), "no such file")
    _one_line_value_error(lambda: make_policy("ckpt", path=str(corrupt)), "not a safetensors file or corrupt")
    _one_line_value_error(lambda: make_policy("ckpt", path=str(truncated)), "not a safetensors file or corrupt")
    _one_line_value_error(lambda: make_policy("ckpt", path=world), "not a Kosmos policy checkpoint")
    _one_line_value_error(lambda: make_policy("ckpt", path=str(future)), "unknown format version '99'")

    pol = make_policy("ckpt", path=str(bc_ckpt))
    _one_line_value_error(lambda: pol.reset("juggle three oranges"), "unknown instruction")
    pol.reset(read_checkpoint_meta(bc_ckpt)["instructions"][0])
    _one_line_value_error(lambda: pol.act(np.zeros((64, 64, 3), np.uint8)), "needs a dict observation")
    _one_line_value_error(lambda: pol.act({"image": np.zeros((64, 64, 3), np.uint8)}), "ee_pos")
    _one_line_value_error(
        lambda: pol.act({"image": np.zeros((64, 64), np.float32), "ee_pos": np.zeros(3)}), "uint8 \\(H, W, 3\\)"
    )


@requires_extra("rl")  # train-policy names the missing extra before it reads its inputs
def test_cli_refuses_bad_inputs_in_one_line(bc_ckpt, tmp_path, capsys):
    from kosmos_env.cli import main

    net, meta = load_checkpoint(bc_ckpt)
    wide = tmp_path / "wide_bounds.safetensors"
    save_checkpoint(net, wide, {**meta, "action_high": [0.1, 0.1, 0.1, 0.5, 0.5, 0.5, 1.0]})
    other_tasks = tmp_path / "other_tasks.safetensors"
    save_checkpoint(net, other_tasks, {**meta, "instructions": list(reversed(meta["instructions"]))})
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"not a checkpoint")
    world = __import__("kosmos_env.worlds.tabletop_learned", fromlist=["x"]).__path__[0] + "/weights/world.safetensors"
    base = [
        "train-policy",
        "--stage",
        "ppo",
        "--steps",
        "12",
        "--horizon",
        str(HORIZON),
        "--out",
        str(tmp_path / "o"),
        "--quiet",
        "--init",
    ]
    cases = [
        (base + [str(wide)], "action bounds"),
        (base + [str(other_tasks)], "instruction list"),
        (base + [str(corrupt)], "not a safetensors file"),
        (base + [world], "not a Kosmos policy checkpoint"),
        (["train-policy", "--stage", "ppo", "--out", str(tmp_path / "o")], "give --init"),
        (["train-policy", "--stage", "both", "--steps", "0"], "--steps must be >= 1"),
        (["train-policy", "--reward", "terminal", "--terminate-on-success"], "needs --reward progress or oracle"),
    ]
    for argv, message in cases:
        rc = main(argv)
        err = capsys.readouterr().err.strip()
        assert rc != 0, argv
        assert message in err and len(err.splitlines()) == 1, (argv, err)
        assert "Traceback" not in err
    assert not list((tmp_path / "o").glob("*.safetensors")) if (tmp_path / "o").exists() else True


def test_demonstrations_under_a_wrapped_world_save_and_name_it(tmp_path):
    """DART-style recording (bench/train_recipe_pilot.py --dart-level): the simulator executes the
    demonstrator's commands with noise, the commands are the labels; the wrapper is named in the
    demos' metadata, never serialised, and the labels are the commands, not what was executed."""
    from kosmos_env.spec import load_spec
    from kosmos_env.worlds import make_world
    from kosmos_env.worlds.noisy import NoisyDynamicsWorld

    spec = load_spec(ENV).with_overrides(image_size=[64, 64])
    world = NoisyDynamicsWorld(make_world(spec), 0.2, flip_per_level=0.0)
    path = tmp_path / "dart.npz"
    kw = {"image_size": (64, 64), "world_model": world}
    demos = record_demos(
        ENV,
        policy="scripted:skill=1.0",
        seeds_per_task=1,
        tasks=["carrot_on_plate"],
        env_kwargs=kw,
        out=path,
        progress=False,
    )
    meta = Demos.load(path).meta
    assert meta["env_kwargs"]["world_model"].startswith("NoisyDynamicsWorld(level=0.2, flip=0.0")
    plain = record_demos(
        ENV, policy="scripted:skill=1.0", seeds_per_task=1, tasks=["carrot_on_plate"], env_kwargs=SIM, progress=False
    )
    assert np.array_equal(demos.image[0], plain.image[0])  # the same scene
    assert np.array_equal(demos.action[0], plain.action[0])  # the same first command: the same plan
    assert not np.array_equal(demos.image[1], plain.image[1])  # the noisy execution moved elsewhere
