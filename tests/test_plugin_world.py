"""The plug-in example, installed as a third party would install it, runs a campaign through
``kosmos-env eval`` with no change to Kosmos-Env.

``examples/plugin_world`` is pip-installed (no dependencies, no build isolation: offline) into a
temporary target directory put on PYTHONPATH, so the test venv is left as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV_ID = "KosmosReplay-BridgeReal-v1"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    target = tmp_path_factory.mktemp("plugin_site")
    build = tmp_path_factory.mktemp("plugin_build")
    source = build / "plugin_world"  # a copy: the build writes build/ and *.egg-info beside the sources
    shutil.copytree(
        ROOT / "examples" / "plugin_world", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=build,
        env=dict(os.environ, PIP_CONSTRAINT="", PIP_FIND_LINKS="", PIP_NO_INPUT="1", TMPDIR=str(build)),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert any(p.name.startswith("kosmos_replay_world") and p.name.endswith(".dist-info") for p in target.iterdir())
    return target


def _env(plugin_path):
    return dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(plugin_path), str(ROOT)]), MUJOCO_GL="egl", HF_HUB_OFFLINE="1"
    )


def _python(plugin_path, code):
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env(plugin_path), cwd=ROOT
    )


@pytest.mark.slow
def test_installed_plugin_env_is_seen_like_a_builtin(plugin_path):
    proc = _python(
        plugin_path,
        (
            "import gymnasium, numpy as np, kosmos_env, json\n"
            "from kosmos_env.spec import load_spec, registered_spec_ids\n"
            f"spec = load_spec({ENV_ID!r})\n"
            "env = gymnasium.make(spec.id)\n"
            "obs, info = env.reset(seed=0)\n"
            "first = obs['image'].copy()\n"
            "a = np.zeros(7, np.float32); a[6] = 1.0\n"
            "obs0, *_ = env.step(a)\n"
            "env.reset(seed=0)\n"
            "b = env.action_space.sample()\n"
            "obs1, *_ = env.step(b)\n"
            "print(json.dumps({'ids': registered_spec_ids(), 'world': spec.world['type'], 'shape': list(first.shape),\n"
            "  'same_whatever_the_action': bool(np.array_equal(obs0['image'], obs1['image'])),\n"
            "  'moved': float(np.abs(obs0['image'].astype(int) - first.astype(int)).mean())}))\n"
        ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ENV_ID in out["ids"] and "Kosmos-Tabletop-v1" in out["ids"]
    assert out["world"] == "replay" and out["shape"] == [96, 96, 3]
    # open loop: two different actions give the same next frame, and that frame is not the first one
    assert out["same_whatever_the_action"] and out["moved"] > 0.0


@pytest.mark.slow
def test_campaign_on_the_installed_plugin_world(plugin_path, tmp_path):
    out = tmp_path / "campaign"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kosmos_env.cli",
            "eval",
            "--env",
            ENV_ID,
            "--policy",
            "random:seed=0",
            "--policy",
            "random:seed=1",
            "--tasks",
            "move_can_to_left",
            "put_eggplant_in_pot",
            "--seeds",
            "2",
            "--no-video",
            "--no-progress",
            "--json",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(plugin_path),
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    camp = results["campaign"]
    assert camp["env_id"] == ENV_ID and camp["complete"] and len(results["per_episode"]) == 8
    outcomes = {e["outcome"] for e in results["per_episode"]}
    # the open-loop control: no policy can succeed; every episode ends judged or discarded by the gate
    assert "success" not in outcomes and "failure" in outcomes and outcomes <= {"failure", "discarded"}, outcomes
    assert all(e.get("error") in (None, "") for e in results["per_episode"])


def test_plugin_is_not_visible_without_installation():
    """Control for the tests above: without the plug-in on the path the env id is unknown."""
    from kosmos_env.spec import SpecError, load_spec, registered_spec_ids

    assert ENV_ID not in registered_spec_ids()
    with pytest.raises(SpecError, match="no env spec"):
        load_spec(ENV_ID)
