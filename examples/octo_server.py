"""Serve Octo (JAX) to Kosmos-Env over the remote-policy protocol.

Octo runs on JAX + TensorFlow and is not on the package registry, so it cannot share a process
with the evaluator. This script runs in *Octo's* environment and needs only Octo's own install,
numpy, and the one protocol file (``policies/protocol.py`` of kosmos-env, standard library +
numpy only): copy it next to this script, or install kosmos-env there.

How to run (not runnable on the kosmos-env CI machines: no JAX/Octo there)::

    # in Octo's environment (https://github.com/octo-models/octo, its README pins jax/tensorflow)
    cp /path/to/kosmos-env/policies/protocol.py .
    python octo_server.py --model hf://rail-berkeley/octo-small-1.5 --port 8766
    # in the evaluator's environment
    kosmos-env rollout Kosmos-Bridge-v1 --policy remote:url=http://127.0.0.1:8766

What it does per request: keeps Octo's 2-frame observation history (``image_primary`` at 256 px,
``timestep_pad_mask`` false for the missing first frame), builds the language task once per
episode, samples a 4-action chunk un-normalised with the Bridge statistics, and answers the chunk
as a (4, 7) float32 action. The evaluator feeds chunks to a 1-action env with
``ChunkedPolicy`` (or consumes them whole when the env's ``action_chunk`` is 4).
Octo's Bridge head emits base-frame deltas + roll/pitch/yaw + gripper in [0, 1] with 1 = open
(Open X-Embodiment standardisation), which is the env contract; the gripper is clipped to [0, 1].
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import deque

import numpy as np

try:  # kosmos-env installed in Octo's environment
    from kosmos_env.policies import protocol
except ImportError:  # or protocol.py copied next to this script
    import protocol  # type: ignore[no-redef]

HISTORY = 2
IMAGE_SIZE = 256


class OctoAdapter:
    """Duck-typed policy for ``protocol.PolicyServer``: ``reset(instruction, seed)`` and ``act(obs)``."""

    def __init__(self, model_path: str, dataset: str = "bridge_dataset", seed: int = 0):
        import jax
        from octo.model.octo_model import OctoModel

        self.jax = jax
        self.model = OctoModel.load_pretrained(model_path)
        self.model_path, self.dataset = model_path, dataset
        if dataset not in self.model.dataset_statistics:
            raise ValueError(f"{model_path} has no statistics for {dataset!r}: {sorted(self.model.dataset_statistics)}")
        self.stats = self.model.dataset_statistics[dataset]["action"]
        self.rng = jax.random.PRNGKey(seed)
        self.history: deque[np.ndarray] = deque(maxlen=HISTORY)
        self.task = None
        self.instruction: str | None = None

    def reset(self, instruction: str, seed: int | None = None) -> None:
        self.history.clear()
        self.instruction = instruction
        self.task = self.model.create_tasks(texts=[instruction])
        if seed is not None:
            self.rng = self.jax.random.PRNGKey(seed)

    def act(self, obs: dict) -> np.ndarray:
        import tensorflow as tf

        if self.task is None or obs["instruction"] != self.instruction:
            self.reset(obs["instruction"])
        image = tf.image.resize(obs["image"], (IMAGE_SIZE, IMAGE_SIZE), method="lanczos3", antialias=True)
        image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8).numpy()
        if not self.history:
            self.history.extend([image] * HISTORY)  # pad with the first frame, masked out below
            pad = np.array([[False] * (HISTORY - 1) + [True]])
        else:
            self.history.append(image)
            pad = np.ones((1, HISTORY), dtype=bool)
        observation = {"image_primary": np.stack(self.history)[None], "timestep_pad_mask": pad}
        self.rng, key = self.jax.random.split(self.rng)
        actions = self.model.sample_actions(observation, self.task, unnormalization_statistics=self.stats, rng=key)
        chunk = np.asarray(actions[0], dtype=np.float32)  # (4, 7)
        chunk[:, 6] = np.clip(chunk[:, 6], 0.0, 1.0)
        return chunk

    def info(self) -> dict:
        config = {"model": self.model_path, "dataset": self.dataset, "history": HISTORY, "image_size": IMAGE_SIZE}
        return {
            "name": "octo",
            "action_convention": "Octo (Bridge, Open X-Embodiment): base-frame deltas + roll/pitch/yaw + gripper 1=open; chunk of 4",
            # identify the weights: Octo checkpoints are loaded by name; hash the name + config + statistics
            "content_hash": hashlib.sha256(
                json.dumps(
                    {"config": config, "stats": {k: np.asarray(v).tolist() for k, v in self.stats.items()}},
                    sort_keys=True,
                ).encode()
            ).hexdigest(),
            "config": config,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default="hf://rail-berkeley/octo-small-1.5", help="Octo checkpoint (local path or hf://)"
    )
    parser.add_argument("--dataset", default="bridge_dataset", help="un-normalisation statistics to use")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: this machine only)")
    parser.add_argument("--port", type=int, default=8766)
    args = parser.parse_args()
    adapter = OctoAdapter(args.model, args.dataset)
    server = protocol.PolicyServer(adapter, adapter.info(), host=args.host, port=args.port, log=print)
    print(f"serving octo at {server.url} (protocol {protocol.PROTOCOL} v{protocol.VERSION})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


if __name__ == "__main__":
    main()
