"""The ``sb3:`` policy: a Stable-Baselines3 zip trained through ``kosmos_env.wrappers`` acts on raw
observations exactly as the model acts on wrapped ones, runs in ``eval`` (in-process and in a spawned
worker) and behind ``serve-policy``, hashes its zip's bytes, and never runs code pickled in the zip
unless the person running the command allowed it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
import zipfile

import gymnasium
import numpy as np
import pytest

from kosmos_env import cli
from kosmos_env.plugins import TRUST_REMOTE_CODE_ENV
from kosmos_env.policies import make_policy, policy_hash_from_files
from kosmos_env.wrappers import wrap_rl_env
from tests.conftest import requires_extra
from tests.support.campaign import tabletop_eval_argv

pytestmark = requires_extra("rl")

ENV = "Kosmos-Tabletop-v1"
SIZE = (36, 36)  # the smallest frame SB3's NatureCNN takes
# name -> (algorithm, task encoding, frame stack); A2C saves its policy_kwargs (RMSprop) pickled
SETTINGS = {"onehot-2": ("PPO", "onehot", 2), "index-1": ("PPO", "index", 1), "a2c": ("A2C", "onehot", 1)}


class RawObs(gymnasium.Wrapper):
    """Keeps the raw Kosmos observation that the RL wrappers above it encode."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.raw = obs
        return obs, info

    def step(self, action):
        out = self.env.step(action)
        self.raw = out[0]
        return out


def _wrapped(encoding: str, stack: int):
    raw = RawObs(gymnasium.make(ENV, image_size=(64, 64)))
    return wrap_rl_env(raw, task_encoding=encoding, image_size=SIZE, frame_stack=stack), raw


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Tiny models (16 env steps) trained through the wrappers, saved with ``model.save``."""
    import stable_baselines3
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small CNN: more threads only contend on a busy machine
    folder = tmp_path_factory.mktemp("sb3")
    out = {}
    for name, (algo, encoding, stack) in SETTINGS.items():
        env, _ = _wrapped(encoding, stack)
        settings = {"n_steps": 16} if algo == "A2C" else {"n_steps": 16, "batch_size": 16, "n_epochs": 1}
        model = getattr(stable_baselines3, algo)("MultiInputPolicy", env, seed=0, device="cpu", **settings)
        model.learn(16)
        path = folder / f"{name}.zip"
        model.save(path)
        out[name] = (model, path)
        env.close()
    yield out
    torch.set_num_threads(threads)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_actions_on_raw_observations_equal_the_models_on_wrapped_ones(models, setting):
    """Over two tasks (the second not the suite's first, so the task's position matters) and a reset
    between them (the frame stack starts again), ``act(raw)`` is ``model.predict(wrapped,
    deterministic=True)`` mapped to the env's bounds by the wrapper's own RescaleAction."""
    model, path = models[setting]
    algo, encoding, stack = SETTINGS[setting]
    policy = make_policy("sb3", path=str(path))
    assert (policy.algo, policy.task_encoding, policy.frame_stack, policy.image_size) == (algo, encoding, stack, SIZE)
    env, raw = _wrapped(encoding, stack)
    low, high = env.unwrapped.action_space.low, env.unwrapped.action_space.high
    seen = set()
    for task in ("stack_green_on_yellow", "carrot_on_plate"):
        obs, _ = env.reset(seed=7, options={"task": task})
        policy.reset(env.unwrapped.task.instruction, seed=7)
        for _ in range(3):
            action, _ = model.predict(obs, deterministic=True)
            expected = env.action(action)  # RescaleAction: [-1, 1] -> the env's units
            got = policy.act(raw.raw)
            assert got.dtype == np.float32 and got.shape == (7,)
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
            np.testing.assert_array_equal(got, np.clip(expected, low, high))
            seen.add(got.tobytes())
            obs, *_ = env.step(action)
    assert len(seen) > 1  # the observations moved the actions: not a constant compared with itself
    env.close()


def test_the_content_hash_is_the_zips_bytes_and_is_computed_without_loading(models, tmp_path):
    path = models["onehot-2"][1]
    built = make_policy("sb3", path=str(path))
    assert policy_hash_from_files("sb3", {"path": str(path)}) == built.content_hash()
    copy = tmp_path / "elsewhere.zip"
    shutil.copy(path, copy)
    assert make_policy("sb3", path=str(copy)).content_hash() == built.content_hash()  # not the path
    assert make_policy("sb3", path=str(models["index-1"][1])).content_hash() != built.content_hash()
    assert policy_hash_from_files("sb3", {"path": str(path), "algo": "PPO"}) == built.content_hash()
    sampled = {"path": str(path), "deterministic": False, "seed": 3}
    assert (
        policy_hash_from_files("sb3", sampled) == make_policy("sb3", **sampled).content_hash() != built.content_hash()
    )
    assert built.config()["zip_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_sampling_is_seeded_per_instance_and_leaves_torchs_global_generator_alone(models):
    import torch

    path = str(models["index-1"][1])
    obs = _raw_observation()
    runs = []
    for _ in range(2):
        policy = make_policy("sb3", path=path, deterministic=False, seed=1)
        policy.reset(obs["instruction"], seed=5)
        state = torch.random.get_rng_state()
        runs.append(np.stack([policy.act(obs) for _ in range(3)]))
        assert torch.equal(torch.random.get_rng_state(), state)
    np.testing.assert_array_equal(runs[0], runs[1])
    assert len({row.tobytes() for row in runs[0]}) == 3  # samples, not the mode thrice


def _raw_observation():
    env = gymnasium.make(ENV, image_size=(64, 64))
    obs, _ = env.reset(seed=0)
    env.close()
    return obs


def _rewrite(src, dst, change):
    """A copy of SB3 zip ``src`` whose ``data`` JSON went through ``change``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            body = zin.read(item.filename)
            if item.filename == "data":
                data = json.loads(body)
                change(data)
                body = json.dumps(data).encode()
            zout.writestr(item, body)
    return dst


class _Touch:
    """Pickles as "open this marker for writing": unpickling it leaves the file behind."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _evil(marker) -> dict:
    return {":type:": "<class 'object'>", ":serialized:": base64.b64encode(pickle.dumps(_Touch(marker))).decode()}


def test_pickled_entries_are_never_run_unless_the_user_allows_it(models, tmp_path, monkeypatch):
    """Every pickled entry inference does not need is skipped (here: replaced by code that would
    leave a marker file); a needed entry naming anything off the allow-list is refused in one line
    naming the opt-in, which a setting alone cannot give."""
    monkeypatch.delenv(TRUST_REMOTE_CODE_ENV, raising=False)
    model, path = models["onehot-2"]
    marker = tmp_path / "ran"

    def skipped_entries(data):
        for key, value in data.items():
            if (
                isinstance(value, dict)
                and ":serialized:" in value
                and key not in ("observation_space", "action_space", "policy_class")
            ):
                data[key] = _evil(marker)

    quiet = _rewrite(path, tmp_path / "quiet.zip", skipped_entries)
    policy = make_policy("sb3", path=str(quiet))
    obs = _raw_observation()
    policy.reset(obs["instruction"])
    reference = make_policy("sb3", path=str(path))
    reference.reset(obs["instruction"])
    np.testing.assert_array_equal(policy.act(obs), reference.act(obs))
    assert not marker.exists()

    loud = _rewrite(path, tmp_path / "loud.zip", lambda data: data.update(policy_kwargs=_evil(marker)))
    with pytest.raises(
        ValueError, match=r"policy_kwargs.*names (builtins|io|_io)\.open.*unpickle=true.*--trust-remote-code"
    ) as err:
        make_policy("sb3", path=str(loud))
    assert "\n" not in str(err.value) and not marker.exists()
    assert policy_hash_from_files("sb3", {"path": str(loud)})  # hashing decodes nothing
    for build in (
        lambda: make_policy("sb3", path=str(loud), unpickle=True),
        lambda: policy_hash_from_files("sb3", {"path": str(loud), "unpickle": True}),
    ):
        with pytest.raises(ValueError, match="unpickle=true.*load only files you trust.*--trust-remote-code"):
            build()
    assert not marker.exists()

    # allowed by the person running the command: SB3's own unpickling, code and all
    monkeypatch.setenv(TRUST_REMOTE_CODE_ENV, "1")
    plain = make_policy("sb3", path=str(path), unpickle=True)
    plain.reset(obs["instruction"])
    np.testing.assert_array_equal(plain.act(obs), reference.act(obs))
    with pytest.raises(ValueError):
        make_policy("sb3", path=str(loud), unpickle=True)  # its policy_kwargs is no mapping
    assert marker.exists()


def test_the_decoder_refuses_state_written_onto_a_class():
    """A pickle may name an allowed class and then write attributes onto it (BUILD): refused."""
    from kosmos_env.policies.sb3_policy import decode_entries

    payload = b"cstable_baselines3.common.policies\nBasePolicy\n(N}S'planted'\nI1\nstb."
    entry = {":type:": "<class 'type'>", ":serialized:": base64.b64encode(payload).decode()}
    with pytest.raises(ValueError, match="sets attributes of the class stable_baselines3.common.policies.BasePolicy"):
        decode_entries({"observation_space": entry}, "x.zip")


def test_ckpt_points_an_sb3_zip_to_the_sb3_policy_and_bad_files_are_one_line(models, tmp_path):
    path = models["index-1"][1]
    one_line = f"this is a Stable-Baselines3 archive: use --policy sb3:path={path}"
    with pytest.raises(ValueError, match="Stable-Baselines3 archive") as err:
        make_policy("ckpt", path=str(path))
    assert str(err.value).endswith(one_line) and "corrupt" not in str(err.value)
    with pytest.raises(ValueError, match="Stable-Baselines3 archive"):
        policy_hash_from_files("ckpt", {"path": str(path)})

    with pytest.raises(
        ValueError, match=r"policy sb3: no such file .*nowhere\.zip.*model\.save\(\).*not run.*only for files you trust"
    ):
        make_policy("sb3", path=str(tmp_path / "nowhere.zip"))
    text = tmp_path / "notes.zip"
    text.write_text("not a zip")
    with pytest.raises(ValueError, match="not a Stable-Baselines3 model zip"):
        make_policy("sb3", path=str(text))
    with pytest.raises(ValueError, match="needs path=MODEL.zip"):
        make_policy("sb3")
    with pytest.raises(ValueError, match="unknown algo 'os'.*PPO"):
        make_policy("sb3", path=str(path), algo="os")
    with pytest.raises(ValueError, match="holds a .*MultiInputActorCriticPolicy, not a SAC policy"):
        make_policy("sb3", path=str(path), algo="SAC")
    with pytest.raises(ValueError, match="knows 4 tasks; Kosmos-Bridge-v1's suite has"):
        make_policy("sb3", path=str(path), env="Kosmos-Bridge-v1")


def test_layer_widths_the_weights_do_not_have_are_refused_before_the_policy_is_built(models, tmp_path, monkeypatch):
    """A ``data`` JSON asking for a layer far wider than policy.pth holds (issue 43 item 4): SB3 would
    allocate it before load_state_dict noticed; it is refused first, naming the width."""
    path = models["index-1"][1]
    wide = _rewrite(
        path, tmp_path / "wide.zip", lambda d: d.update(policy_kwargs={"net_arch": {"pi": [100000], "vf": [64]}})
    )
    from stable_baselines3.common.policies import BasePolicy

    def built(self, *args, **kwargs):
        raise AssertionError("the policy was built before its widths were checked")

    monkeypatch.setattr(BasePolicy, "__init__", built)
    with pytest.raises(ValueError) as err:
        make_policy("sb3", path=str(wide))
    assert str(err.value) == (
        f"policy sb3: {str(wide)!r}: its policy_kwargs ask for layer width(s) [100000] that no tensor in its "
        "policy.pth has (its weights do not fit its policy settings)"
    )


def test_without_stable_baselines3_the_error_names_the_rl_extra(models, monkeypatch):
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # `import stable_baselines3` now fails
    with pytest.raises(
        ModuleNotFoundError, match=r"stable-baselines3 is not installed.*pip install 'kosmos-env\[rl\]'"
    ):
        make_policy("sb3", path=str(models["index-1"][1]))


def test_eval_runs_the_zip_in_process_and_in_a_spawned_worker(models, tmp_path, monkeypatch, capsys):
    """``kosmos-env eval --policy sb3:path=...``: one worker in this process, then the same episode
    in a spawned worker process that builds the policy from its name and settings; same records."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the spawned worker's torch
    policy = f"sb3:path={models['onehot-2'][1]}"
    built = make_policy("sb3", path=str(models["onehot-2"][1]))
    runs, workers = {}, {}
    for name, extra in (("inline", ()), ("spawned", ("--workers", "1", "--executor", "process"))):
        out = tmp_path / name
        assert cli.main(tabletop_eval_argv(out, [policy], *extra, seeds=1)) == 0
        results = json.loads((out / "results.json").read_text())
        # the actions artifact is named by its sha256: the same name is the same actions
        runs[name] = [(e["seed"], e["outcome"], e["steps"], e["artifacts"]["actions"]) for e in results["per_episode"]]
        workers[name] = results["per_episode"][0]["worker"]
        assert results["campaign"]["policies"][0]["content_hash"] == built.content_hash()
    assert runs["inline"] == runs["spawned"] and len(runs["inline"]) == 1
    assert workers["inline"] != workers["spawned"]  # another process built the policy from name and settings

    argv = tabletop_eval_argv(tmp_path / "ckpt", [f"ckpt:path={models['onehot-2'][1]}"], seeds=1)
    assert cli.main(argv) == 2
    assert "this is a Stable-Baselines3 archive: use --policy sb3:path=" in capsys.readouterr().err


def test_serve_policy_serves_the_zip(models):
    path = models["index-1"][1]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kosmos_env.cli", "serve-policy", f"sb3:path={path}", "--port", "0", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline and "serving" not in line:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                pytest.fail(f"serve-policy exited early: {proc.stderr.read()}")
        remote = make_policy("remote", url=line.rsplit(" at ", 1)[1].strip())
        local = make_policy("sb3", path=str(path))
        assert remote.content_hash() == local.content_hash()
        obs = _raw_observation()
        remote.reset(obs["instruction"], seed=1)
        local.reset(obs["instruction"], seed=1)
        for _ in range(2):
            np.testing.assert_array_equal(remote.act(obs), local.act(obs))
        remote.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
