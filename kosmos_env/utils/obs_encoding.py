"""How an env observation becomes arrays an RL library (or a trained network) reads.

One place for the encoding, used by the RL wrappers (:mod:`kosmos_env.wrappers`) and by the
checkpoint policy (``ckpt:``) that replays a network trained through them: a policy trained on
wrapped observations sees exactly the same arrays when it is evaluated on raw ones.

- ``state``: ``[ee_pos (3), ee_euler (3), gripper (1)]`` as float32 (the tabletop worlds' extras);
- ``task``: the instruction as its index in a fixed instruction list, or a one-hot of it;
- ``image``: uint8 H×W×3, resized with area averaging when another size is asked for.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

#: observation extras concatenated, in this order, into the ``state`` vector
STATE_KEYS = ("ee_pos", "ee_euler", "gripper")
STATE_DIM = 7


def encode_state(obs: Mapping[str, Any], keys: Sequence[str] = STATE_KEYS) -> np.ndarray:
    """The state extras of ``obs`` as one float32 vector; a missing key is a ``KeyError`` naming it."""
    parts = []
    for key in keys:
        if key not in obs:
            raise KeyError(
                f"observation has no {key!r}; the state vector needs {list(keys)} (tabletop worlds have them)"
            )
        parts.append(np.asarray(obs[key], dtype=np.float32).reshape(-1))
    return np.concatenate(parts).astype(np.float32, copy=False)


def task_index(instruction: str, instructions: Sequence[str]) -> int:
    """Position of ``instruction`` in ``instructions`` (case and surrounding space ignored)."""
    key = str(instruction).strip().lower()
    for i, known in enumerate(instructions):
        if known.strip().lower() == key:
            return i
    raise ValueError(f"unknown instruction {instruction!r}; this encoding knows {list(instructions)}")


def encode_task(instruction: str, instructions: Sequence[str], onehot: bool = True) -> np.ndarray:
    """The instruction as a float32 one-hot over ``instructions``, or as an int64 index (shape ())."""
    i = task_index(instruction, instructions)
    if not onehot:
        return np.asarray(i, dtype=np.int64)
    out = np.zeros(len(instructions), dtype=np.float32)
    out[i] = 1.0
    return out


def resize_image(image: np.ndarray, size: Sequence[int] | None) -> np.ndarray:
    """``image`` (H, W, 3) uint8 at ``size`` = (height, width); unchanged when it already is (or no size)."""
    image = np.asarray(image)
    if size is None or tuple(image.shape[:2]) == (int(size[0]), int(size[1])):
        return image
    import cv2

    return cv2.resize(image, (int(size[1]), int(size[0])), interpolation=cv2.INTER_AREA)
