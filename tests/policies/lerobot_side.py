"""Runs inside the separate LeRobot environment (scripts/build_lerobot_venv.sh), never in the main one.

``python tests/policies/lerobot_side.py build DIR``: a tiny ACT policy with random weights (seeded), its
normalisation statistics inside (LeRobot 0.3), saved with ``save_pretrained`` to DIR.
``python tests/policies/lerobot_side.py check DIR OBS.npz OUT.json``: loads DIR through the project's
LeRobot adapter and through LeRobot directly, feeds both the observation in OBS.npz, and writes
both actions, so the main environment can check the adapter's observation/action mapping on a
real LeRobot policy. The policy protocol module is loaded from its file alone first, to show it
needs nothing of kosmos_env (nor gymnasium).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]  # the repository


def load_protocol_standalone():
    spec = importlib.util.spec_from_file_location("kosmos_policy_protocol", ROOT / "policies" / "protocol.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "kosmos_env" not in sys.modules and "gymnasium" not in sys.modules
    return module


def build(out: str) -> None:
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy

    torch.set_num_threads(1)
    config = ACTConfig(
        input_features={
            "observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 64, 64)),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(7,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))},
        pretrained_backbone_weights=None,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        chunk_size=5,
        n_action_steps=5,
        use_vae=False,
        device="cpu",
    )
    # small action statistics keep the random outputs inside the tabletop's action box
    stats = {
        "observation.image": {"mean": torch.zeros(3, 1, 1), "std": torch.ones(3, 1, 1)},
        "observation.state": {"mean": torch.zeros(7), "std": torch.ones(7)},
        "action": {"mean": torch.tensor([0.0] * 6 + [0.5]), "std": torch.tensor([0.001] * 6 + [0.01])},
    }
    torch.manual_seed(0)
    ACTPolicy(config, dataset_stats=stats).save_pretrained(out)


def check(ckpt: str, obs_path: str, out: str) -> None:
    load_protocol_standalone()
    import torch

    torch.set_num_threads(1)
    from lerobot.policies.act.modeling_act import ACTPolicy

    from kosmos_env.policies import make_policy

    data = np.load(obs_path)
    obs = {k: data[k] for k in data.files}
    obs["instruction"] = "put the carrot on the plate"
    adapter = make_policy("lerobot", path=ckpt)
    adapter.reset(obs["instruction"], seed=0)
    via_adapter = adapter.act(obs)
    # the same observation mapped by hand, as LeRobot's own docs describe its batch
    raw = ACTPolicy.from_pretrained(ckpt, local_files_only=True).eval()
    raw.reset()
    image = torch.from_numpy(obs["image"]).permute(2, 0, 1).float().div(255.0)[None]
    state = torch.from_numpy(np.concatenate([obs["ee_pos"], obs["ee_euler"], obs["gripper"]]).astype(np.float32))[None]
    with torch.inference_mode():
        direct = raw.select_action(
            {"observation.image": image, "observation.state": state, "task": [obs["instruction"]]}
        )
    json.dump(
        {
            "adapter": via_adapter.tolist(),
            "adapter_dtype": str(via_adapter.dtype),
            "direct": direct.float().numpy().reshape(-1).tolist(),
            "name": adapter.name,
            "image_key": adapter.image_key,
            "state_dim": adapter.state_dim,
            "hash": adapter.content_hash(),
        },
        open(out, "w"),
    )


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    {"build": build, "check": check}[command](*rest)
