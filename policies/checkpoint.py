"""Trained image-conditioned policies: the network, its checkpoint file, and the ``ckpt`` policy.

A checkpoint is ONE ``.safetensors`` file: the network's float32 tensors, and in the safetensors
header's string metadata ``format`` (:data:`FORMAT`), ``format_version`` and ``kosmos_policy``,
a JSON object with everything needed to rebuild and replay the network (see
:data:`REQUIRED_META`): the env id and spec hash it was trained in, the reward mode, seed, stage
(``bc``/``ppo``), env steps and update number, the instruction list of the task one-hot, the
image size, frame stack, the env's action bounds, the network sizes and the kosmos-env version.
Loading needs torch and safetensors only: no pickle, no stable-baselines3.

:class:`PolicyNet` reads what ``kosmos_env.wrappers.make_rl_env`` hands an RL library, in the
layout stable-baselines3 feeds its policies: the image channel-first as float in [0, 1]
(``uint8 / 255``, stacked frames along channels), the ``state`` vector and the ``task`` one-hot.
Its Gaussian action mean lives in the rescaled action space [-1, 1]^7. :class:`CheckpointPolicy`
encodes a raw env observation exactly as the wrapper does (:mod:`kosmos_env.utils.obs_encoding`), takes
the mean (or a seeded sample), clips it to [-1, 1] as stable-baselines3's ``predict`` does, maps it
back to the env's bounds and clips to them.
"""

from __future__ import annotations

import json
import zipfile
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kosmos_env.hashing import sha256_file
from kosmos_env.utils.obs_encoding import STATE_DIM, STATE_KEYS, encode_state, encode_task, resize_image
from kosmos_env.policies.base import Policy, policy_hash

FORMAT = "kosmos-policy-checkpoint"
FORMAT_VERSION = 1
ACTION_DIM = 7
STAGES = ("bc", "ppo")
#: fields every checkpoint's ``kosmos_policy`` metadata carries
REQUIRED_META = (
    "env_id",
    "spec_hash",
    "reward",
    "seed",
    "stage",
    "env_steps",
    "update",
    "instructions",
    "image_size",
    "frame_stack",
    "action_low",
    "action_high",
    "net",
    "kosmos_env_version",
)


#: bounds on a network's settings, checked before anything is allocated (:meth:`NetConfig.check`): far
#: above the shipped networks (64x64 frames, 3 conv layers of 32 channels, 16 keypoints, 2 hidden
#: layers of 128), far below what exhausts a machine's memory
NET_LIMITS = {
    "image_size": 1024,
    "frame_stack": 16,
    "n_tasks": 1024,
    "state_dim": 256,
    "channels": 1024,
    "keypoints": 1024,
    "image_features": 16384,
    "hidden": 16384,
}
#: layers a network may list in ``channels`` or ``hidden``
MAX_LAYERS = 16
#: parameters (float32: 4 bytes each) a checkpoint's network may hold: 64 M, 256 MB; the shipped ones hold 67 k
MAX_PARAMETERS = 64_000_000


@dataclass(frozen=True)
class NetConfig:
    """Sizes of :class:`PolicyNet` (stored in the checkpoint, so a file rebuilds its own network)."""

    image_size: tuple[int, int] = (64, 64)
    frame_stack: int = 1
    n_tasks: int = 4
    state_dim: int = STATE_DIM
    #: ``"keypoints"``: a spatial softmax turns each of ``keypoints`` feature maps into the expected
    #: (x, y) where it fires, so the features are image positions (of the object, the target, the
    #: gripper) that the actor can subtract; ``"flatten"``: strided convs, flattened, one dense layer
    encoder: str = "keypoints"
    channels: tuple[int, ...] = (32, 32, 32)
    keypoints: int = 16
    image_features: int = 128  # "flatten" only
    hidden: tuple[int, ...] = (128, 128)
    init_log_std: float = -1.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "NetConfig":
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown network setting(s) {sorted(unknown)}; known: {sorted(known)}")
        d = dict(data)
        if d.get("encoder", "keypoints") not in ("keypoints", "flatten"):
            raise ValueError(f"unknown network encoder {d['encoder']!r}; known: keypoints, flatten")
        for key in ("image_size", "channels", "hidden"):
            if key in d:
                if not isinstance(d[key], (list, tuple)) or len(d[key]) > MAX_LAYERS:
                    raise ValueError(f"network setting {key!r} must be a list of at most {MAX_LAYERS} sizes")
                d[key] = tuple(int(v) for v in d[key])
        return cls(**d)

    def check(self) -> None:
        """Refuse (one ValueError line naming the setting) sizes out of :data:`NET_LIMITS`, before any
        tensor exists: a checkpoint's JSON asking for a 6e6-wide layer would otherwise take gigabytes
        before its tensors are found not to fit."""

        def bounded(name: str, value: Any, high: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ValueError(f"network setting {name!r} must be an integer in [1, {high}], got {value!r}")

        if len(self.image_size) != 2:
            raise ValueError(f"network setting 'image_size' must be [height, width], got {list(self.image_size)}")
        for v in self.image_size:
            bounded("image_size", v, NET_LIMITS["image_size"])
        for name in ("frame_stack", "n_tasks", "state_dim", "keypoints", "image_features"):
            bounded(name, getattr(self, name), NET_LIMITS[name])
        for name in ("channels", "hidden"):
            if len(getattr(self, name)) > MAX_LAYERS:
                raise ValueError(f"network setting {name!r} lists more than {MAX_LAYERS} layers")
            for v in getattr(self, name):
                bounded(name, v, NET_LIMITS[name])
        if not self.channels:
            raise ValueError("network setting 'channels' must list at least one conv layer")
        if not (isinstance(self.init_log_std, (int, float)) and np.isfinite(self.init_log_std)):
            raise ValueError(f"network setting 'init_log_std' must be a finite number, got {self.init_log_std!r}")


def _torch():
    import torch

    return torch


def build_net(cfg: NetConfig):
    """A :class:`PolicyNet` for ``cfg`` (torch is imported here, so importing this module stays light).

    Its sizes are checked first (:meth:`NetConfig.check`, then :func:`net_shapes`: at most
    :data:`MAX_PARAMETERS`), so no settings, whichever file they come from (a ``ckpt:`` file, an
    ``sb3:`` zip's ``net_config``), allocate more than that."""
    net_shapes(cfg)
    return _net_class()(cfg)


def net_shapes(cfg: NetConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor of ``cfg``'s network (its ``state_dict``), found by building it
    on torch's ``meta`` device, which allocates no memory; a network of more than
    :data:`MAX_PARAMETERS` parameters is refused (one ValueError line)."""
    cfg.check()
    torch = _torch()
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in _net_class()(cfg).state_dict().items()}
    n = sum(int(np.prod(s, dtype=np.int64)) for s in shapes.values())
    if n > MAX_PARAMETERS:
        raise ValueError(
            f"these network settings make {n:,} parameters, more than the {MAX_PARAMETERS:,} a policy "
            "checkpoint may hold"
        )
    return shapes


_NET_CLASS = None


def _net_class():
    """Define the torch module class once, on first use (torch stays out of module import)."""
    global _NET_CLASS
    if _NET_CLASS is not None:
        return _NET_CLASS
    torch = _torch()
    from torch import nn

    class PolicyNet(nn.Module):
        """CNN over the (stacked) frame + normalised state + task one-hot; Gaussian actor and value critic.

        ``encode`` gives the shared features; ``pi_trunk`` -> ``mean_head`` the action mean in
        [-1, 1] space with a state-independent ``log_std``; ``vf_trunk`` -> ``value_head`` the
        value. stable-baselines3 drives the same submodules (``kosmos_env.training.sb3``), so PPO
        trains exactly these tensors and a checkpoint is this module's ``state_dict``.
        """

        def __init__(self, cfg: NetConfig):
            super().__init__()
            self.cfg = cfg
            h, w = cfg.image_size
            layers: list[nn.Module] = []
            c_in = 3 * cfg.frame_stack
            keypoints = cfg.encoder == "keypoints"
            for i, c_out in enumerate(cfg.channels):
                # a 5x5 first layer sees a whole small object at 64 px; every layer halves the size,
                # except that the keypoint encoder's last layers stay at a quarter of the frame
                # (16x16 at 64 px: the spatial softmax interpolates positions between cells, and
                # finer maps cost 4x the compute on a CPU)
                k = 5 if i == 0 else 3
                stride = 2 if (i < 2 or not keypoints) else 1
                layers += [nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2), nn.ReLU()]
                c_in = c_out
                h, w = (h + stride - 1) // stride, (w + stride - 1) // stride
            if keypoints:
                layers.append(nn.Conv2d(c_in, cfg.keypoints, 1))
                self.conv = nn.Sequential(*layers)
                self.image_fc = _SpatialSoftmax(h, w)
                image_features = 2 * cfg.keypoints
            else:
                self.conv = nn.Sequential(*layers, nn.Flatten())
                self.image_fc = nn.Sequential(nn.Linear(c_in * h * w, cfg.image_features), nn.ReLU())
                image_features = cfg.image_features
            # fixed per-dimension state normalisation, set from demonstrations (not trained):
            # positions are centimetres-scale numbers in metres and would barely move a layer
            self.register_buffer("state_mean", torch.zeros(cfg.state_dim * cfg.frame_stack))
            self.register_buffer("state_std", torch.ones(cfg.state_dim * cfg.frame_stack))
            self.features_dim = image_features + cfg.state_dim * cfg.frame_stack + cfg.n_tasks
            self.pi_trunk = self._mlp(self.features_dim, cfg.hidden)
            self.vf_trunk = self._mlp(self.features_dim, cfg.hidden)
            last = cfg.hidden[-1] if cfg.hidden else self.features_dim
            self.mean_head = nn.Linear(last, ACTION_DIM)
            self.value_head = nn.Linear(last, 1)
            self.log_std = nn.Parameter(torch.full((ACTION_DIM,), float(cfg.init_log_std)))
            with torch.no_grad():  # a small first mean: an untrained actor starts near "stay put"
                self.mean_head.weight.mul_(0.1)
                self.mean_head.bias.zero_()

        @staticmethod
        def _mlp(n_in: int, sizes: Sequence[int]) -> nn.Module:
            layers: list[nn.Module] = []
            for n_out in sizes:
                layers += [nn.Linear(n_in, n_out), nn.Tanh()]
                n_in = n_out
            return nn.Sequential(*layers)

        def encode(self, image, state, task):
            """Features from image (B, 3k, H, W) float in [0, 1], state (B, 7k), task (B, n_tasks)."""
            img = self.image_fc(self.conv(image - 0.5))
            st = (state - self.state_mean) / self.state_std
            return torch.cat([img, st, task], dim=1)

        def forward(self, image, state, task):
            """(action mean in [-1, 1] space, value) for a batch."""
            feats = self.encode(image, state, task)
            return self.mean_head(self.pi_trunk(feats)), self.value_head(self.vf_trunk(feats)).squeeze(-1)

    class _SpatialSoftmax(nn.Module):
        """(B, K, H, W) maps -> (B, 2K): each map's softmax-weighted mean (x, y) in [-1, 1]."""

        def __init__(self, h: int, w: int):
            super().__init__()
            ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
            self.register_buffer("grid", torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=1), persistent=False)

        def forward(self, maps):
            b, k = maps.shape[:2]
            weights = torch.softmax(maps.reshape(b, k, -1), dim=-1)
            return (weights @ self.grid).reshape(b, 2 * k)

    _NET_CLASS = PolicyNet
    return PolicyNet


# -- observation encoding -------------------------------------------------------------------


def image_to_input(images: np.ndarray):
    """uint8 (B, H, W, C) -> float tensor (B, C, H, W) in [0, 1], as stable-baselines3 preprocesses images."""
    torch = _torch()
    t = torch.as_tensor(np.ascontiguousarray(images)).permute(0, 3, 1, 2)
    return t.float() / 255.0


def encode_observation(
    obs: Mapping[str, Any], instructions: Sequence[str], image_size: Sequence[int]
) -> dict[str, np.ndarray]:
    """One raw env observation as the RL wrapper encodes it (before frame stacking):
    ``image`` uint8 (H, W, 3) at ``image_size``, ``state`` float32 (7,), ``task`` one-hot float32.

    Raises ``ValueError`` (one line) for an observation of the wrong kind.
    """
    if not isinstance(obs, Mapping):
        raise ValueError(
            f"a checkpoint policy needs a dict observation (image, instruction, {', '.join(STATE_KEYS)}), "
            f"got {type(obs).__name__}"
        )
    if "image" not in obs:
        raise ValueError(
            f"observation has no 'image'; a checkpoint policy reads image, instruction and {list(STATE_KEYS)}"
        )
    image = np.asarray(obs["image"])
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"observation 'image' must be uint8 (H, W, 3), got {image.dtype} {image.shape}")
    try:
        state = encode_state(obs)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    if state.shape != (STATE_DIM,) or not np.all(np.isfinite(state)):
        raise ValueError(
            f"observation state {list(STATE_KEYS)} must be {STATE_DIM} finite numbers, got shape {state.shape}"
        )
    out = {"image": resize_image(image, image_size), "state": state}
    if "instruction" in obs:
        out["task"] = encode_task(obs["instruction"], instructions)
    return out


# -- file format ----------------------------------------------------------------------------


def save_checkpoint(net, path: str | Path, meta: Mapping[str, Any]) -> Path:
    """Write ``net``'s tensors and ``meta`` (every field of :data:`REQUIRED_META` but ``net``,
    which comes from the network) to ``path`` as a Kosmos policy checkpoint."""
    from safetensors.torch import save_file

    meta = dict(meta)
    meta["net"] = net.cfg.to_dict()
    meta.setdefault("kosmos_env_version", _package_version())
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise ValueError(f"checkpoint metadata lacks {missing}")
    if meta["stage"] not in STAGES:
        raise ValueError(f"checkpoint stage must be one of {STAGES}, got {meta['stage']!r}")
    # clone: parameters SB3 shares between modules would otherwise be refused as shared memory
    tensors = {k: v.detach().to("cpu", dtype=v.dtype).contiguous().clone() for k, v in net.state_dict().items()}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(
        tensors,
        str(tmp),
        metadata={
            "format": FORMAT,
            "format_version": str(FORMAT_VERSION),
            "kosmos_policy": json.dumps(jsonable(meta), sort_keys=True),
        },
    )
    tmp.replace(path)  # a reader never sees a half-written checkpoint
    return path


def read_checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """The ``kosmos_policy`` metadata of a checkpoint file; every problem is a one-line ``ValueError``."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"policy checkpoint {path}: no such file")
    refuse_sb3_archive(path)
    try:
        with safe_open(str(path), framework="pt") as fh:
            header = fh.metadata() or {}
    except Exception as exc:  # safetensors raises its own (non-OSError) error type for a bad file
        raise ValueError(
            f"policy checkpoint {path}: not a safetensors file or corrupt "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None
    if header.get("format") != FORMAT:
        raise ValueError(
            f"policy checkpoint {path}: a safetensors file but not a Kosmos policy checkpoint "
            f"(metadata format {header.get('format')!r}, expected {FORMAT!r})"
        )
    version = header.get("format_version")
    if version != str(FORMAT_VERSION):
        raise ValueError(
            f"policy checkpoint {path}: unknown format version {version!r} "
            f"(this kosmos-env reads version {FORMAT_VERSION})"
        )
    try:
        meta = json.loads(header.get("kosmos_policy", ""))
    except json.JSONDecodeError:
        raise ValueError(f"policy checkpoint {path}: corrupt metadata (kosmos_policy is not JSON)") from None
    missing = [k for k in REQUIRED_META if k not in meta] if isinstance(meta, dict) else list(REQUIRED_META)
    if missing:
        raise ValueError(f"policy checkpoint {path}: metadata lacks {missing}")
    return meta


def is_sb3_archive(path: str | Path) -> bool:
    """Whether ``path`` is a zip that Stable-Baselines3's ``model.save()`` wrote (a ``data`` entry and
    ``policy.pth`` or ``_stable_baselines3_version``); reads the zip's directory only."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False
    return "data" in names and bool(names & {"policy.pth", "_stable_baselines3_version"})


def refuse_sb3_archive(path: str | Path) -> None:
    """One ValueError line pointing a Stable-Baselines3 zip handed to ``ckpt:`` to the ``sb3:`` policy."""
    if is_sb3_archive(path):
        raise ValueError(f"policy checkpoint {path}: this is a Stable-Baselines3 archive: use --policy sb3:path={path}")


def stored_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor in a safetensors file, read from its header (no tensor is loaded)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return {k: tuple(fh.get_slice(k).get_shape()) for k in fh.keys()}


def load_checkpoint(path: str | Path):
    """(network in eval mode, metadata) from a checkpoint file; problems are one-line ``ValueError``s.

    Nothing is allocated before the network settings are known to be in bounds and the file's
    tensors (their shapes, read from the safetensors header) to be exactly the ones those settings
    make: the network is built, and the tensors read, only then."""
    from safetensors.torch import load_file

    meta = read_checkpoint_meta(path)
    try:
        if not isinstance(meta["net"], Mapping):
            raise ValueError("'net' is not an object")
        cfg = NetConfig.from_dict(meta["net"])
        want = net_shapes(cfg)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"policy checkpoint {path}: bad network settings ({exc})") from None
    try:
        have = stored_shapes(path)
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own (non-OSError) error type
        raise ValueError(f"policy checkpoint {path}: corrupt tensors ({type(exc).__name__})") from None
    problem = _shape_problem(want, have)
    if problem:
        raise ValueError(f"policy checkpoint {path}: tensors do not fit its network settings ({problem})")
    net = build_net(cfg)
    try:
        tensors = load_file(str(path))
    except Exception as exc:
        raise ValueError(f"policy checkpoint {path}: corrupt tensors ({type(exc).__name__})") from None
    try:
        net.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:
        raise ValueError(
            f"policy checkpoint {path}: tensors do not fit its network settings ({str(exc).splitlines()[0]})"
        ) from None
    low, high = np.asarray(meta["action_low"], np.float32), np.asarray(meta["action_high"], np.float32)
    if low.shape != (ACTION_DIM,) or high.shape != (ACTION_DIM,) or not np.all(high > low):
        raise ValueError(f"policy checkpoint {path}: action bounds must be 7 numbers with high > low")
    if len(meta["instructions"]) != cfg.n_tasks or tuple(meta["image_size"]) != cfg.image_size:
        raise ValueError(
            f"policy checkpoint {path}: instruction list or image size disagrees with its network settings"
        )
    net.eval()
    return net, meta


def _shape_problem(want: Mapping[str, tuple[int, ...]], have: Mapping[str, tuple[int, ...]]) -> str | None:
    """The first way the stored tensor shapes ``have`` differ from the network's ``want`` (None: none)."""
    missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
    if missing:
        return f"missing tensor(s) {missing[:5]}"
    if extra:
        return f"unexpected tensor(s) {extra[:5]}"
    for name, shape in want.items():
        if tuple(have[name]) != shape:
            return f"tensor {name!r} is {list(have[name])}, the settings make {list(shape)}"
    return None


def unscale_action(action: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """[-1, 1] -> [low, high], clipped to the bounds (float32)."""
    a = np.clip(np.asarray(action, np.float32), -1.0, 1.0)
    return np.clip(low + (a + 1.0) * 0.5 * (high - low), low, high).astype(np.float32)


def rescale_action(action: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """[low, high] -> [-1, 1] (float32), the inverse of :func:`unscale_action`."""
    a = np.asarray(action, np.float32)
    return np.clip(2.0 * (a - low) / (high - low) - 1.0, -1.0, 1.0).astype(np.float32)


def checkpoint_fit_problem(
    meta: Mapping[str, Any],
    *,
    action_low,
    action_high,
    instructions: Sequence[str],
    image_size: Sequence[int] | None = None,
    frame_stack: int | None = None,
) -> str | None:
    """Why a checkpoint cannot drive an env with these settings (None when it can)."""
    low, high = np.asarray(action_low, np.float32).reshape(-1), np.asarray(action_high, np.float32).reshape(-1)
    if not (np.allclose(meta["action_low"], low) and np.allclose(meta["action_high"], high)):
        return f"its action bounds {meta['action_low']}..{meta['action_high']} differ from the env's {low.tolist()}..{high.tolist()}"
    if [s.strip().lower() for s in meta["instructions"]] != [s.strip().lower() for s in instructions]:
        return f"its instruction list {meta['instructions']} differs from the env's {list(instructions)}"
    if image_size is not None and tuple(meta["image_size"]) != tuple(int(v) for v in image_size):
        return f"its image size {tuple(meta['image_size'])} differs from the env's {tuple(image_size)}"
    if frame_stack is not None and int(meta["frame_stack"]) != int(frame_stack):
        return f"its frame stack {meta['frame_stack']} differs from the env's {frame_stack}"
    return None


class FrameStacker:
    """Stacks the last ``k`` encoded frames and states along channels, oldest first.

    At an episode's first observation the buffer is filled with copies of it, as the RL wrapper
    pads a fresh episode, so the network sees the same arrays in training and in evaluation.
    """

    def __init__(self, k: int):
        self.k = int(k)
        self.images: deque[np.ndarray] = deque(maxlen=self.k)
        self.states: deque[np.ndarray] = deque(maxlen=self.k)

    def clear(self) -> None:
        self.images.clear()
        self.states.clear()

    def push(self, image: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self.images:
            for _ in range(self.k - 1):
                self.images.append(image)
                self.states.append(state)
        self.images.append(image)
        self.states.append(state)
        return np.concatenate(list(self.images), axis=-1), np.concatenate(list(self.states), axis=-1)


#: checkpoints shipped with the package (``ckpt:shipped=NAME``): the closed-loop, image-conditioned
#: members of the validity study's population; ``checkpoints/manifest.json`` says where each was
#: trained, with which reward, and its true success on evaluation units
SHIPPED_DIR = Path(__file__).with_name("checkpoints")


def shipped_checkpoints() -> dict[str, dict[str, Any]]:
    """Name -> manifest entry (``file``, ``trained_in``, ``reward``, ``env_steps``, ...) of the shipped checkpoints."""
    manifest = SHIPPED_DIR / "manifest.json"
    if not manifest.is_file():
        return {}
    return {e["name"]: e for e in json.loads(manifest.read_text())["checkpoints"]}


def shipped_checkpoint_path(name: str) -> Path:
    """The file of shipped checkpoint ``name`` (only names the manifest lists: never a path)."""
    known = shipped_checkpoints()
    if name not in known:
        raise ValueError(f"unknown shipped checkpoint {name!r}; shipped: {sorted(known) or 'none'}")
    return SHIPPED_DIR / known[name]["file"]


class CheckpointPolicy(Policy):
    """A trained checkpoint (``kosmos-env train-policy``) as a policy: ``ckpt:path=FILE``, or
    ``ckpt:shipped=NAME`` for a checkpoint shipped with the package (:func:`shipped_checkpoints`).

    Deterministic by default (the Gaussian mean); ``sample=True`` draws from the Gaussian with a
    generator seeded by ``seed`` (and re-seeded by ``reset(..., seed=)``).
    """

    name = "ckpt"

    def __init__(self, path: str = "", sample: bool = False, seed: int | None = None, shipped: str = ""):
        if bool(path) == bool(shipped):
            raise ValueError(
                "the ckpt policy needs exactly one of path=FILE (a checkpoint written by kosmos-env "
                "train-policy) or shipped=NAME (a checkpoint shipped with the package)"
            )
        self.path = shipped_checkpoint_path(shipped) if shipped else Path(path)
        self.net, self.meta = load_checkpoint(self.path)
        self.sha256 = sha256_file(self.path)
        self.sample = bool(sample)
        self.seed = seed
        self.instructions = list(self.meta["instructions"])
        self.image_size = tuple(int(v) for v in self.meta["image_size"])
        self.low = np.asarray(self.meta["action_low"], np.float32)
        self.high = np.asarray(self.meta["action_high"], np.float32)
        self._stack = FrameStacker(int(self.meta["frame_stack"]))
        self._task: np.ndarray | None = None
        self._gen = None
        self._reseed(seed)

    def _reseed(self, seed: int | None) -> None:
        if self.sample:
            torch = _torch()
            self._gen = torch.Generator().manual_seed(int(seed) if seed is not None else 0)

    def config(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "weights_sha256": self.sha256,
            "sample": self.sample,
            "seed": self.seed if self.sample else None,
            "stage": self.meta["stage"],
            "env_id": self.meta["env_id"],
            "env_steps": self.meta["env_steps"],
        }

    def content_hash(self) -> str:
        return self._hash(self.sha256, self.sample, self.seed)

    @classmethod
    def _hash(cls, sha256: str, sample: bool, seed: int | None) -> str:
        # the weights decide the actions, not where the file lies: the path stays out of the hash
        payload = {
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "weights_sha256": sha256,
            "sample": bool(sample),
            "seed": seed if sample else None,
        }
        return policy_hash(payload)

    @classmethod
    def content_hash_from_files(
        cls, path: str = "", sample: bool = False, seed: int | None = None, shipped: str = ""
    ) -> str | None:
        """The built policy's ``content_hash()`` from the checkpoint file's bytes (nothing unpickled)."""
        if bool(path) == bool(shipped):
            raise ValueError(
                "the ckpt policy needs exactly one of path=FILE (a checkpoint written by kosmos-env "
                "train-policy) or shipped=NAME (a checkpoint shipped with the package)"
            )
        file = shipped_checkpoint_path(shipped) if shipped else Path(path)
        if not Path(file).is_file():
            raise FileNotFoundError(f"policy ckpt: no checkpoint file at {str(file)!r} to hash")
        refuse_sb3_archive(file)
        return cls._hash(sha256_file(file), sample, seed)

    def reset(self, instruction: str, seed: int | None = None) -> None:
        self._task = encode_task(instruction, self.instructions)  # ValueError naming the known list
        self._stack.clear()
        if seed is not None:
            self._reseed(seed)

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        if self._task is None:
            raise RuntimeError("call reset(instruction) before act()")
        enc = encode_observation(obs, self.instructions, self.image_size)
        task = enc.get("task", self._task)
        image, state = self._stack.push(enc["image"], enc["state"])
        torch = _torch()
        with torch.no_grad():
            mean, _ = self.net(image_to_input(image[None]), torch.as_tensor(state[None]), torch.as_tensor(task[None]))
            action = mean[0]
            if self.sample:
                noise = torch.randn(ACTION_DIM, generator=self._gen)
                action = action + noise * self.net.log_std.exp()
        return unscale_action(action.numpy(), self.low, self.high)


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("kosmos-env")
    except Exception:  # an uninstalled source tree: the loaded package's own string (no new import)
        import sys

        return str(getattr(sys.modules.get("kosmos_env"), "__version__", "unknown"))


def jsonable(value: Any) -> Any:
    """Plain JSON values: mappings, lists and tuples walked, numpy arrays and scalars to Python."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
