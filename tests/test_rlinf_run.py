"""RLinf on Kosmos-Tabletop-v1 in RLinf's own environment (opt-in): two PPO updates through
``python -m kosmos_env.rlinf_launch`` with two RLinf env workers (Ray actors, each registering the
``kosmos`` env type through ``RLINF_EXT_MODULE``), on the CPU.

RLinf does not install beside this project (scripts/build_rlinf_venv.sh builds its environment:
about 6 minutes and 7 GB), so this runs only when ``KOSMOS_RLINF_PYTHON`` names that environment's
python. What runs and what does not on a CPU is in tests/support/rlinf_side.py: RLinf's config
validation, cluster, placement and env workers run for real; its rollout and FSDP actor workers need
an accelerator, so their two calls (the MLP policy's action sampling, RLinf's advantage and PPO loss
functions) run in the driver. About 80 s on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PYTHON = os.environ.get("KOSMOS_RLINF_PYTHON")
pytestmark = pytest.mark.skipif(
    not PYTHON,
    reason="RLinf runs in its own environment: build it with scripts/build_rlinf_venv.sh and set "
    "KOSMOS_RLINF_PYTHON=<that environment>/bin/python",
)

NUM_ENVS, HORIZON, CHUNK_STEPS, UPDATES, WORKERS = 4, 6, 8, 2, 2


def run_rlinf(out: Path) -> subprocess.CompletedProcess:
    command = [
        PYTHON,
        "-m",
        "kosmos_env.rlinf_launch",
        str(ROOT / "tests" / "support" / "rlinf_side.py"),
        "--config",
        str(ROOT / "examples" / "rlinf" / "kosmos_tabletop_ppo_mlp.yaml"),
        "--out",
        str(out),
        "--updates",
        str(UPDATES),
        "--env-workers",
        str(WORKERS),
        f"env.train.total_num_envs={NUM_ENVS}",
        f"env.train.max_steps_per_rollout_epoch={CHUNK_STEPS}",
        f"env.train.max_episode_steps={CHUNK_STEPS}",
        f"env.train.init_params.horizon={HORIZON}",
        f"actor.global_batch_size={NUM_ENVS * CHUNK_STEPS}",
        f"actor.micro_batch_size={NUM_ENVS * CHUNK_STEPS}",
        "algorithm.update_epoch=2",
    ]
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "OMP_NUM_THREADS": "1"}
    env.pop("RLINF_EXT_MODULE", None)
    return subprocess.run(command, capture_output=True, text=True, cwd=out.parent, env=env, timeout=900)


def test_rlinf_ppo_updates_on_the_tabletop_through_rlinfs_env_workers(tmp_path):
    out = tmp_path / "rlinf_run.json"
    run = run_rlinf(out)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    summary = json.loads(out.read_text())

    # two RLinf env workers, each built KosmosRLinfEnv (Kosmos instructions, 7-d states, 64x64 frames)
    assert summary["env_workers"] == WORKERS
    per_worker = NUM_ENVS // WORKERS
    instructions = {"put the carrot on the plate", "put the spoon on the towel"}
    for descriptions in summary["task_descriptions"]:
        assert len(descriptions) == per_worker and set(descriptions) <= instructions
    assert summary["states_shape"] == [[per_worker, 7]] * WORKERS
    assert summary["images_shape"] == [[per_worker, 64, 64, 3]] * WORKERS

    assert len(summary["updates"]) == UPDATES
    for update in summary["updates"]:
        # RLinf's batch layout: [chunk steps, envs, actions per chunk]
        assert update["rewards_shape"] == update["advantages_shape"] == [CHUNK_STEPS, NUM_ENVS, 1]
        assert update["reward_chunk_shape"] == [per_worker, 1]
        # the progress reward is paid on every step, and every env ended one horizon-long episode
        assert update["reward_nonzero"] > 0
        assert update["episodes_ended"] == NUM_ENVS * (CHUNK_STEPS // HORIZON)
        lengths = [n for info in update["env_infos"] for n in info["episode_len"]]
        assert lengths == [HORIZON] * NUM_ENVS
        assert all(math.isfinite(x) for x in update["losses"]) and len(update["losses"]) == 2
        for key in ("actor/policy_loss", "actor/ratio", "critic/value_loss"):
            assert math.isfinite(update["metrics"][key]), key
    # the updates moved the policy
    assert summary["param_change"] > 0
