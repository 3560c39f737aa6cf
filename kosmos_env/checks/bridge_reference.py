"""The real Bridge episode shipped with the package, and the negatives derived from it.

``bridge_real_can_to_left.mp4`` (``kosmos_env/tasks/bridge_real/``, Apache-2.0, see the NOTICE
there) is 37 real 640x480 frames at 5 fps of a WidowX arm carrying a can to the left in the toy
kitchen. It is the one piece of real Bridge video a CPU machine can check things against:

- the action-consistency gate must pass it and reject the derived negatives;
- a judge must tell it apart from the negatives before a campaign trusts that judge.

Negatives are derived deterministically (no randomness outside the given seed), so every run
sees the same bytes:

- ``frozen``: the first frame repeated (a world that never moved);
- ``panned``: the real frames shifted sideways by a growing number of pixels (a world whose
  camera drifts while the scene moves);
- ``shuffled``: the real frames in a seeded random order, first frame kept first (motion that
  no command sequence produced).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import numpy as np

from kosmos_env.hashing import sha256_hex

EPISODE_FILE = "bridge_real_can_to_left.mp4"
EPISODE_SHA256 = "643f1406ba5e38071a3f11d30961d5b22192d33efcbf2c5fcb8c0b7ba4408544"
EPISODE_INSTRUCTION = "move the can to the left"
EPISODE_FPS = 5.0
EPISODE_FRAMES = 37
NEGATIVES = ("frozen", "panned", "shuffled")


class ReferenceDataError(RuntimeError):
    """A shipped reference file is missing or does not match its recorded sha256."""


@dataclass(frozen=True)
class ReferenceEpisode:
    """Frames (T, H, W, 3) uint8, the episode's own instruction, its frame rate and its kind."""

    frames: np.ndarray
    instruction: str
    fps: float
    kind: str  # "real" or one of NEGATIVES


def reference_path(name: str):
    """Path (a Traversable) of a file shipped in ``kosmos_env/tasks/bridge_real/``."""
    return resources.files("kosmos_env.tasks") / "bridge_real" / name


def load_real_episode() -> ReferenceEpisode:
    """Decode the shipped real episode after checking its sha256."""
    path = reference_path(EPISODE_FILE)
    if not path.is_file():
        raise ReferenceDataError(
            f"the real Bridge episode {EPISODE_FILE} is missing from the package; reinstall kosmos-env"
        )
    data = path.read_bytes()
    digest = sha256_hex(data)
    if digest != EPISODE_SHA256:
        raise ReferenceDataError(f"{EPISODE_FILE} has sha256 {digest}, expected {EPISODE_SHA256}; reinstall kosmos-env")
    import imageio.v3 as iio

    frames = np.ascontiguousarray(iio.imread(data, extension=".mp4"))
    if frames.ndim != 4 or frames.shape[0] != EPISODE_FRAMES or frames.shape[-1] != 3:
        raise ReferenceDataError(
            f"{EPISODE_FILE} decoded to shape {frames.shape}, expected ({EPISODE_FRAMES}, H, W, 3)"
        )
    return ReferenceEpisode(frames=frames, instruction=EPISODE_INSTRUCTION, fps=EPISODE_FPS, kind="real")


def frozen_copy(frames: np.ndarray) -> np.ndarray:
    """The first frame repeated for the episode's length."""
    return np.repeat(frames[:1], len(frames), axis=0)


def panned_copy(frames: np.ndarray, px_per_frame: float = 4.0) -> np.ndarray:
    """Each frame shifted right by ``t * px_per_frame`` pixels (edge pixels repeated)."""
    import cv2

    out = np.empty_like(frames)
    h, w = frames.shape[1:3]
    for t, frame in enumerate(frames):
        m = np.float32([[1, 0, t * px_per_frame], [0, 1, 0]])
        out[t] = cv2.warpAffine(frame, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return out


def time_shuffled(frames: np.ndarray, seed: int = 0) -> np.ndarray:
    """The frames in a seeded random order; frame 0 stays first (the world's input frame)."""
    order = 1 + np.random.default_rng(seed).permutation(len(frames) - 1)
    return np.concatenate([frames[:1], frames[order]], axis=0)


def negative(kind: str, episode: ReferenceEpisode | None = None, seed: int = 0) -> ReferenceEpisode:
    """One derived negative of the real episode, by name (``frozen``, ``panned``, ``shuffled``)."""
    if kind not in NEGATIVES:
        raise ValueError(f"unknown negative {kind!r}; choose one of {NEGATIVES}")
    ep = episode or load_real_episode()
    make = {"frozen": frozen_copy, "panned": panned_copy, "shuffled": lambda f: time_shuffled(f, seed)}[kind]
    return ReferenceEpisode(frames=make(ep.frames), instruction=ep.instruction, fps=ep.fps, kind=kind)
