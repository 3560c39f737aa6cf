"""`kosmos-env train-policy` as an RL researcher drives it: the --out rule (--resume, --overwrite),
missing extras and bad arguments refused in one line before any work, TensorBoard and W&B logs read
back from their own files, and the held-out curve (tuning seeds, true success, Wilson intervals).

Tiny budgets: 2 PPO updates of 32 env steps, 1 held-out seed per task, horizons of 8 or 16 steps.
The logged run starts from a checkpoint shipped with the package, whose held-out episodes are not
all failures, so the held-out verdicts are checked against episodes played here independently.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from kosmos_env.cli import main
from kosmos_env.hashing import sha256_file
from tests.conftest import requires_extra

pytest.importorskip("torch")

# the actor trains from the first update (no critic warm-up), so every logged update has a policy of its own
TINY = ["--steps", "64", "--n-envs", "2", "--n-steps", "16", "--batch-size", "16", "--critic-warmup", "0", "--quiet"]
BC_TINY = ["--bc-steps", "5", "--demo-seeds", "1", "--horizon", "8"]
LOGGED_HORIZON = 16


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one command; argparse's own refusals exit with SystemExit."""
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("kosmos-env train-policy: error: "), lines[0]
    return lines[0]


# -- refusals before any work -------------------------------------------------------------------


def test_missing_extras_are_named_before_anything_runs(tmp_path, capsys, monkeypatch):
    """A missing stable-baselines3 is named at once, not after minutes of demonstrations and cloning."""
    for module in ("stable_baselines3", "matplotlib", "tensorboard", "wandb"):
        monkeypatch.setitem(sys.modules, module, None)  # find_spec answers None, as when it is absent
    out, demos = tmp_path / "run", tmp_path / "demos.npz"
    argv = ["train-policy", "--out", str(out), "--demos", str(demos), "--tensorboard", "--wandb"]
    rc, _, err = _cli(argv, capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 4 and "Traceback" not in err
    expected = [
        ("stable-baselines3", "rl"),
        ("matplotlib", "rl"),
        ("tensorboard", "tensorboard"),
        ("wandb", "wandb"),
    ]
    for line, (dist, extra) in zip(lines, expected, strict=True):
        assert line.startswith(f"kosmos-env train-policy: error: {dist} is not installed")
        assert f"pip install -e '.[{extra}]'" in line and f"pip install 'kosmos-env[{extra}]'" in line
    assert not out.exists() and not demos.exists()
    # the behaviour-cloning stage alone needs none of them
    rc, _, err = _cli(["train-policy", "--stage", "bc", "--out", str(out), "--bc-steps", "0"], capsys)
    assert rc == 2 and "--bc-steps must be >= 1" in _one_line(err)


@requires_extra("rl", "tensorboard")
@pytest.mark.parametrize(
    "args, message",
    [
        (["--env", "Kosmos-Tabletp-v1"], "did you mean Kosmos-Tabletop-v1?"),
        (["--env", "../specs/evil"], "is not an env id"),
        (["--env", "sub/Kosmos-Tabletop-v1"], "is not an env id"),
        (["--env", "a\\b"], "is not an env id"),
        (["--env", ".Kosmos-Tabletop-v1"], "is not an env id"),
        (["--demo-seed-start", "-5"], "--demo-seed-start must be >= 0, got -5"),
        (["--demo-seed-start", "1.5"], "invalid int value: '1.5'"),
        (["--demo-seed-start", "99999", "--demo-seeds", "2"], "must lie in one training seed range"),
        (["--seed", "-1"], "--seed must be in [0, 2**32)"),
        (["--threads", "100000"], "at most"),
        (["--init-log-std", "nan"], "--init-log-std must be a finite number, got nan"),
        (["--success-threshold", "inf"], "--success-threshold must be a finite number, got inf"),
        (["--demo-skill", "nan"], "--demo-skill must be a finite number"),
        (["--eval-units", "101"], "--eval-units must be at most 100"),
        (["--eval-every", "-1"], "--eval-every must be >= 0"),
        (["--learning-rate", "nan"], "--learning-rate must be a finite number"),
        (["--learning-rate", "0"], "--learning-rate must be > 0"),
        (["--clip-range", "0"], "--clip-range must be in (0, 1)"),
        (["--clip-range", "nan"], "--clip-range must be a finite number"),
        (["--critic-warmup", "-1"], "--critic-warmup must be >= 0"),
        (["--n-epochs", "0"], "--n-epochs must be >= 1"),
        (["--demos", "{folder}"], "is a folder"),
        (["--demos", "{text}"], "not a demonstrations .npz"),
        (["--stage", "ppo", "--init", "{folder}"], "is a folder, not a checkpoint file"),
        (["--stage", "ppo", "--init", "{text}"], "not a safetensors file"),
        (["--stage", "bc", "--tensorboard"], "--tensorboard and --wandb log PPO"),
        (["--resume", "--overwrite"], "not allowed with argument"),
        (["--stage", "dagger"], "invalid choice: 'dagger'"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    text = tmp_path / "notes.txt"
    text.write_text("not what it should be")
    args = [a.format(folder=folder, text=text) for a in args]
    out = tmp_path / "run"
    rc, _, err = _cli(["train-policy", *args, "--out", str(out)], capsys)
    assert rc == 2 and message in _one_line(err)
    assert not out.exists()


# -- the --out rule ----------------------------------------------------------------------------


def test_a_non_empty_out_is_refused_and_overwrite_deletes_only_run_files(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "tensorboard" / "run_1").mkdir(parents=True)
    (out / "tensorboard" / "run_1" / "events.out.tfevents.1").write_text("old")
    for name in ("bc.safetensors", "ppo_update_0009.safetensors", "curve.json", "curve.png", "sb3_last.zip"):
        (out / name).write_text("from an earlier run")
    (out / "notes.txt").write_text("mine")
    (out / "demos.npz").write_text("an input, never deleted")

    rc, _, err = _cli(["train-policy", "--stage", "bc", "--out", str(out), *BC_TINY, "--quiet"], capsys)
    line = _one_line(err)
    assert rc == 2 and f"--out {out} is not empty" in line and "--resume" in line and "--overwrite" in line
    assert (out / "ppo_update_0009.safetensors").read_text() == "from an earlier run"

    rc, _, err = _cli(["train-policy", "--stage", "bc", "--out", str(out), *BC_TINY, "--quiet", "--overwrite"], capsys)
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["bc.safetensors", "demos.npz", "notes.txt"]
    assert (out / "notes.txt").read_text() == "mine" and (out / "demos.npz").read_text() == "an input, never deleted"
    from kosmos_env.policies.checkpoint import read_checkpoint_meta

    assert read_checkpoint_meta(out / "bc.safetensors")["stage"] == "bc"  # this run's clone, not the old file

    # --overwrite refuses to delete the checkpoint it is told to start from
    argv = ["train-policy", "--stage", "ppo", "--init", str(out / "bc.safetensors"), "--out", str(out), "--overwrite"]
    rc, _, err = _cli(argv + TINY, capsys)
    assert rc == 2 and "is among what --overwrite would delete" in _one_line(err)
    assert (out / "bc.safetensors").is_file()


# -- --resume -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A run of 2 PPO updates; a copy of it; both resumed to 4 updates."""
    pytest.importorskip("stable_baselines3")
    root = tmp_path_factory.mktemp("resume")
    first = root / "first"
    base = ["train-policy", *BC_TINY, *TINY, "--checkpoint-every", "1", "--eval-every", "1", "--eval-units", "1"]
    assert main([*base, "--out", str(first)]) == 0
    before = {p.name: sha256_file(p) for p in first.glob("*.safetensors")}
    curve_before = json.loads((first / "curve.json").read_text())
    twin = root / "twin"
    shutil.copytree(first, twin)
    grown = [a if a != "64" else "128" for a in base]  # --steps 128
    assert main([*grown, "--out", str(first), "--resume"]) == 0
    assert main([*grown, "--out", str(twin), "--resume"]) == 0
    return {"run": first, "twin": twin, "before": before, "curve_before": curve_before, "argv": grown}


@requires_extra("rl")
def test_resume_keeps_earlier_outputs_and_continues_the_count(resumed):
    run, before = resumed["run"], resumed["before"]
    assert set(before) == {"bc.safetensors", "ppo_update_0001.safetensors", "ppo_update_0002.safetensors"}
    for name, digest in before.items():  # the clone was reused and the earlier checkpoints kept, byte for byte
        assert sha256_file(run / name) == digest, name
    assert (run / "ppo_update_0003.safetensors").is_file() and (run / "ppo_update_0004.safetensors").is_file()
    curve = json.loads((run / "curve.json").read_text())
    assert [u["update"] for u in curve["updates"]] == [1, 2, 3, 4]
    assert [u["env_steps"] for u in curve["updates"]] == [32, 64, 96, 128]
    assert curve["updates"][:2] == resumed["curve_before"]["updates"]
    assert [h["update"] for h in curve["heldout"]] == [0, 1, 2, 3, 4]  # nothing evaluated twice
    assert curve["heldout"][:3] == resumed["curve_before"]["heldout"]
    assert curve["meta"]["resumes"] == [{"update": 2, "env_steps": 64}] and curve["meta"]["complete"]
    assert curve["meta"]["checkpoints"] == [f"ppo_update_{u:04d}.safetensors" for u in (1, 2, 3, 4)]
    assert curve["meta"]["sb3_last_sha256"] == sha256_file(run / "sb3_last.zip")
    rows = (run / "curve.csv").read_text().splitlines()[1:]
    assert {int(r.split(",")[1]) for r in rows} == {1, 2, 3, 4}

    from stable_baselines3 import PPO

    from kosmos_env.policies.checkpoint import load_checkpoint, read_checkpoint_meta

    model = PPO.load(run / "sb3_last.zip", device="cpu")  # this test's own archive
    # the optimiser's update counter went on from the archive: 4 updates of n_epochs each
    assert model.num_timesteps == 128 and model._n_updates == 4 * model.n_epochs
    net, _ = load_checkpoint(run / "ppo_update_0004.safetensors")
    for name, tensor in net.state_dict().items():
        assert np.array_equal(tensor.numpy(), model.policy.net.state_dict()[name].numpy()), name
    meta = read_checkpoint_meta(run / "ppo_update_0003.safetensors")
    assert meta["update"] == 3 and meta["env_steps"] == 96


@requires_extra("rl")
def test_a_resumed_run_is_reproducible(resumed):
    from safetensors.numpy import load_file

    a = load_file(str(resumed["run"] / "ppo_update_0004.safetensors"))
    b = load_file(str(resumed["twin"] / "ppo_update_0004.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@requires_extra("rl")
def test_resume_refuses_what_it_cannot_continue_honestly(resumed, tmp_path, capsys):
    run, argv = resumed["run"], resumed["argv"]
    # the run already holds --steps: nothing to do, nothing written
    digest = sha256_file(run / "sb3_last.zip")
    rc, out, err = _cli([*argv, "--out", str(run), "--resume"], capsys)
    assert rc == 0 and "nothing to continue" in out and sha256_file(run / "sb3_last.zip") == digest
    grown = [a if a != "128" else "192" for a in argv]
    # other PPO settings than the run was started with
    changed = [a if a != "16" else "8" for a in grown]  # --n-steps 8 --batch-size 8
    rc, _, err = _cli([*changed, "--out", str(run), "--resume"], capsys)
    assert rc == 2 and "it was trained with n_steps 16 (now 8)" in _one_line(err)
    # another clone than the one in the folder
    rc, _, err = _cli([*[a if a != "5" else "6" for a in grown], "--out", str(run), "--resume"], capsys)
    assert rc == 2 and "was cloned with --bc-steps 5 (now 6)" in _one_line(err)
    # an archive that is not the one curve.json records is never unpickled
    tampered = tmp_path / "tampered"
    shutil.copytree(run, tampered)
    with open(tampered / "sb3_last.zip", "ab") as fh:
        fh.write(b"\0")
    rc, _, err = _cli([*grown, "--out", str(tampered), "--resume"], capsys)
    assert rc == 2 and "is not the archive its curve.json records" in _one_line(err)
    assert not (tampered / "ppo_update_0005.safetensors").exists()
    # PPO checkpoints without an archive to continue from
    (tampered / "sb3_last.zip").unlink()
    rc, _, err = _cli([*grown, "--out", str(tampered), "--resume"], capsys)
    assert rc == 2 and "no sb3_last.zip to continue from" in _one_line(err)


# -- the held-out curve, TensorBoard and W&B -----------------------------------------------------


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """PPO from a shipped clone with held-out evaluation every update, TensorBoard and W&B (offline)."""
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    from kosmos_env.policies.checkpoint import shipped_checkpoint_path

    root = tmp_path_factory.mktemp("logged")
    init = shipped_checkpoint_path("bc_clone_6000")
    out, tb = root / "run", root / "tb"
    with pytest.MonkeyPatch.context() as mp:
        for var in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
            (root / var.lower()).mkdir()
            mp.setenv(var, str(root / var.lower()))
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        mp.delenv("WANDB_API_KEY", raising=False)
        argv = [
            "train-policy",
            "--stage",
            "ppo",
            "--init",
            str(init),
            "--horizon",
            str(LOGGED_HORIZON),
            *TINY,
            "--checkpoint-every",
            "2",
            "--eval-every",
            "1",
            "--eval-units",
            "1",
            "--tensorboard",
            str(tb),
            "--wandb",
            "kosmos-test",
            "--out",
            str(out),
        ]
        assert main(argv) == 0
    (wandb_run,) = (root / "wandb_dir" / "wandb").glob("offline-run-*")
    return {
        "out": out,
        "tb": tb,
        "wandb": wandb_run,
        "init": init,
        "curve": json.loads((out / "curve.json").read_text()),
    }


@requires_extra("rl")
def test_heldout_curve_is_true_success_on_tuning_seeds(logged):
    from kosmos_env.policies import make_policy
    from kosmos_env.stats.intervals import wilson
    from kosmos_env.study.seed_ranges import stage_of
    from kosmos_env.training.evaluate import TRUTH, EnvConfig, rollout_units

    curve = logged["curve"]
    held = curve["heldout"]
    # the start (update 0), every update, the checkpoints at updates 2 (checkpoint-every) in between
    assert [h["update"] for h in held] == [0, 1, 2] and [h["env_steps"] for h in held] == [0, 32, 64]
    design = curve["meta"]["training"]["heldout"]
    units = [tuple(u) for u in design["units"]]
    assert design["mode"] == "truth" and design["env_id"] == "Kosmos-Tabletop-v1"
    assert units == [
        ("spoon_on_towel", 329000),
        ("carrot_on_plate", 329100),
        ("stack_green_on_yellow", 329200),
        ("eggplant_in_basket", 329300),
    ]
    assert {stage_of(s) for _, s in units} == {"tuning"}
    # the verdicts are the simulator's, for the deterministic ckpt policy of the start and of the last checkpoint
    truth = EnvConfig(TRUTH.env_id, {**TRUTH.kwargs, "horizon": LOGGED_HORIZON})
    for row, ckpt in ((held[0], logged["init"]), (held[2], logged["out"] / "ppo_update_0002.safetensors")):
        records = rollout_units(lambda c=ckpt: make_policy("ckpt", path=str(c)), truth, units)
        assert row["verdicts"] == [int(r["true_success"]) for r in records]
        k, n = sum(row["verdicts"]), len(units)
        assert (row["k"], row["n"], row["undecided"]) == (k, n, 0) and row["success"] == k / n
        interval = wilson(k, n)
        assert row["wilson_95"] == pytest.approx([interval.lower, interval.upper], abs=1e-6)
    assert 0 < held[0]["k"] < held[0]["n"]  # the shipped clone solves some held-out units and fails others
    assert (logged["out"] / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@requires_extra("rl", "tensorboard")
def test_tensorboard_events_hold_losses_reward_heldout_and_settings(logged):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    (folder,) = logged["tb"].iterdir()
    assert folder.name == "run_1"  # SB3's run folder, named after --out
    events = EventAccumulator(str(folder))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    for tag in (
        "train/loss",
        "train/value_loss",
        "train/policy_gradient_loss",
        "train/approx_kl",
        "rollout/mean_episode_reward",
        "rollout/episode_success_rate",
        "heldout/success",
        "heldout/wilson_95_lo",
        "heldout/wilson_95_hi",
    ):
        assert tag in scalars, (tag, sorted(scalars))
        assert all(math.isfinite(e.value) for e in events.Scalars(tag)), tag
    assert [e.step for e in events.Scalars("train/loss")] == [32, 64]
    held = logged["curve"]["heldout"]
    assert [(e.step, e.value) for e in events.Scalars("heldout/success")] == [
        (h["env_steps"], pytest.approx(h["success"])) for h in held
    ]
    updates = logged["curve"]["updates"]
    assert [e.value for e in events.Scalars("rollout/mean_episode_reward")] == pytest.approx(
        [u["mean_reward"] for u in updates]
    )
    # hyper-parameters: the HPARAMS tab and a settings text
    start = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    ).session_start_info.hparams
    assert start["training/ppo/n_steps"].number_value == 16 and start["env_id"].string_value == "Kosmos-Tabletop-v1"
    (text,) = events.Tensors("settings/text_summary")
    assert '"n_steps": 16' in text.tensor_proto.string_val[0].decode()


def _wandb_records(path: Path):
    """The protobuf records of an offline run file (LevelDB-log framing: 32 KiB blocks, 7-byte headers)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


@requires_extra("rl", "wandb")
def test_wandb_offline_run_holds_config_losses_heldout_and_videos(logged):
    from kosmos_env.utils.video import read_video

    (run_file,) = logged["wandb"].glob("run-*.wandb")
    history, config = [], {}
    for record in _wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
        elif kind in ("run", "config"):  # the command opens the run; PPO adds its settings
            items = record.run.config.update if kind == "run" else record.config.update
            config.update({i.key: json.loads(i.value_json) for i in items})
    assert config["env_id"] == "Kosmos-Tabletop-v1" and config["seed"] == 0
    assert config["training"]["ppo"]["n_steps"] == 16 and config["training"]["n_envs"] == 2
    assert config["training"]["heldout"]["units_per_task"] == 1
    assert config["command"]["eval_every"] == 1 and config["command"]["stage"] == "ppo"
    by_step = {row["_step"]: row for row in history}
    held = logged["curve"]["heldout"]
    assert sorted(by_step) == [0, 32, 64]
    for h in held:
        row = by_step[h["env_steps"]]
        assert row["heldout/success"] == pytest.approx(h["success"]) and row["heldout/n"] == h["n"]
        assert row["heldout/rollout/_type"] == "video-file"
        assert row["heldout/rollout/caption"].startswith(f"update {h['update']} | spoon_on_towel | seed 329000")
    for u in logged["curve"]["updates"]:
        row = by_step[u["env_steps"]]
        assert math.isfinite(row["train/loss"]) and math.isfinite(row["train/value_loss"])
        assert row["rollout/mean_episode_reward"] == pytest.approx(u["mean_reward"])
        assert row["rollout/episodes"] == u["episodes"]
    videos = sorted((logged["wandb"] / "files").glob("media/videos/heldout/*.mp4"))
    assert len(videos) == len(held)
    frames = read_video(videos[0])
    assert frames.shape == (LOGGED_HORIZON, 64, 64, 3)  # the frames the policy saw in the first held-out episode
    # the product still loads as a policy by name
    from kosmos_env.policies import make_policy, parse_policy_arg

    name, kwargs = parse_policy_arg(f"ckpt:path={logged['out'] / 'ppo_update_0002.safetensors'}")
    assert make_policy(name, **kwargs).config()["stage"] == "ppo"
