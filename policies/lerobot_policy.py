"""Any LeRobot ``PreTrainedPolicy`` (ACT, Diffusion, pi0, SmolVLA, ...) as a Kosmos policy.

LeRobot policies take a *batch* dict and keep their own action queue: ``reset()`` empties it and
``select_action(batch)`` returns the next action (B, action_dim), re-planning a chunk when the
queue is empty. This adapter maps the env observation onto LeRobot's keys:

==========================  ====================================================================
env observation             LeRobot batch
==========================  ====================================================================
``image`` uint8 (H, W, 3)   ``image_key`` (default ``observation.image``): float32 (1, 3, h, w)
                            in [0, 1], resized to the policy's declared visual shape
``ee_pos``, ``ee_euler``,   ``state_key`` (``observation.state``): float32 (1, D), the listed
``gripper`` (state_from)    obs keys concatenated in order (D must match the policy's feature)
``instruction``             ``task_key`` (``task``): ``[instruction]`` (language-conditioned policies)
==========================  ====================================================================

The policy's 7-D output is converted to the env contract by ``convention`` (a
:class:`~kosmos_env.policies.conventions.ActionConvention`; default: already in the env contract).
Normalisation: LeRobot 0.3 keeps it inside the policy (built from ``dataset_stats``); LeRobot 0.4
moved it to processor pipelines, which pass here as ``preprocessor`` / ``postprocessor``
(or are loaded from ``path`` with the checkpoint).

LeRobot pins older torch releases than this project's (see the project README): install it in
its own environment and serve the policy with ``kosmos-env serve-policy lerobot:path=...`` when
it cannot share one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

import numpy as np

from kosmos_env.hashing import canonical_json
from kosmos_env.policies.base import Policy
from kosmos_env.policies.conventions import ActionConvention

DEFAULT_STATE_FROM = ("ee_pos", "ee_euler", "gripper")


def observation_to_batch(
    obs: Mapping[str, Any],
    image_key: str = "observation.image",
    image_shape: Sequence[int] | None = None,
    state_key: str | None = "observation.state",
    state_from: Sequence[str] = DEFAULT_STATE_FROM,
    state_dim: int | None = None,
    task_key: str | None = "task",
    device: str = "cpu",
) -> dict[str, Any]:
    """Build LeRobot's batch (batch size 1, torch tensors) from one env observation."""
    import torch

    image = np.asarray(obs["image"])
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"obs['image'] must be (H, W, 3) uint8, got {image.shape} {image.dtype}")
    pixels = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float().div_(255.0)
    if image_shape is not None and tuple(pixels.shape[1:]) != tuple(image_shape):
        c, h, w = image_shape
        if c != 3:
            raise ValueError(f"the policy's {image_key} has {c} channels; the env gives RGB")
        pixels = torch.nn.functional.interpolate(
            pixels, size=(h, w), mode="bilinear", align_corners=False, antialias=True
        )
    batch: dict[str, Any] = {image_key: pixels.to(device)}
    if state_key:
        missing = [k for k in state_from if k not in obs]
        if missing:
            raise ValueError(f"the policy needs {state_key} from obs keys {list(state_from)}; missing {missing}")
        state = np.concatenate([np.asarray(obs[k], dtype=np.float32).reshape(-1) for k in state_from])
        if state_dim is not None and state.shape[0] != state_dim:
            raise ValueError(
                f"{state_key} built from {list(state_from)} has {state.shape[0]} dims; the policy expects {state_dim}"
            )
        batch[state_key] = torch.from_numpy(state)[None].to(device)
    if task_key:
        batch[task_key] = [str(obs.get("instruction", ""))]
    return batch


class LeRobotPolicy(Policy):
    """Wraps a LeRobot ``PreTrainedPolicy``: pass the object (``policy=``) or a local ``path``.

    ``path`` is a directory saved by ``save_pretrained`` (config.json + model.safetensors);
    ``policy_type`` (``act``, ``diffusion``, ...) is read from its config when omitted. Nothing
    is downloaded.
    """

    name = "lerobot"

    def __init__(
        self,
        policy: Any = None,
        path: str | None = None,
        policy_type: str | None = None,
        image_key: str | None = None,
        state_key: str | None = "observation.state",
        state_from: Sequence[str] = DEFAULT_STATE_FROM,
        task_key: str | None = "task",
        device: str = "cpu",
        rotation: str = "euler",
        gripper: str = "unit_open",
        translation_scale: float = 1.0,
        rotation_scale: float = 1.0,
        gripper_threshold: float | None = None,
        preprocessor: Any = None,
        postprocessor: Any = None,
    ):
        if (policy is None) == (path is None):
            raise ValueError(
                "LeRobotPolicy needs exactly one of policy= (a PreTrainedPolicy) or path= (a local checkpoint)"
            )
        self.path, self.device = path, device
        if policy is None:
            policy, preprocessor, postprocessor = _load(path, policy_type, device, preprocessor, postprocessor)
        self.policy = policy.to(device).eval() if hasattr(policy, "to") else policy
        self.preprocessor, self.postprocessor = preprocessor, postprocessor
        cfg = policy.config
        self.policy_type = getattr(cfg, "type", None) or type(policy).__name__
        self.name = f"lerobot-{self.policy_type}"
        features = dict(getattr(cfg, "input_features", {}) or {})
        visual = [k for k, f in features.items() if _feature_type(f) == "VISUAL"]
        self.image_key = image_key or (visual[0] if visual else "observation.image")
        if visual and self.image_key not in visual:
            raise ValueError(f"image_key {self.image_key!r} is not a visual input of this policy: {visual}")
        if len(visual) > 1:
            raise ValueError(f"the policy has several cameras {visual}; the env gives one image")
        self.image_shape = tuple(features[self.image_key].shape) if self.image_key in features else None
        self.state_key = state_key if state_key in features else None
        self.state_dim = int(features[state_key].shape[0]) if self.state_key else None
        self.state_from, self.task_key = tuple(state_from), task_key
        self.convention = ActionConvention(
            rotation, gripper, float(translation_scale), float(rotation_scale), gripper_threshold
        )
        self.action_convention = f"LeRobot {self.policy_type}: {self.convention.describe()}"
        self._hash: str | None = None

    def reset(self, instruction: str, seed: int | None = None) -> None:
        import torch

        if seed is not None:
            torch.manual_seed(seed)  # diffusion sampling, VAE priors
        self.policy.reset()
        for proc in (self.preprocessor, self.postprocessor):
            if proc is not None and hasattr(proc, "reset"):
                proc.reset()

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        import torch

        batch = observation_to_batch(
            obs,
            self.image_key,
            self.image_shape,
            self.state_key,
            self.state_from,
            self.state_dim,
            self.task_key,
            self.device,
        )
        with torch.inference_mode():
            if self.preprocessor is not None:
                batch = self.preprocessor(batch)
            action = self.policy.select_action(batch)
            if self.postprocessor is not None:
                action = self.postprocessor(action)
        action = action.detach().float().cpu().numpy().reshape(-1)
        if action.shape != (7,):
            raise ValueError(
                f"{self.name} returned a {action.shape[0]}-D action; the env contract is 7-D "
                f"[dx,dy,dz,droll,dpitch,dyaw,gripper]"
            )
        return self.convention.to_env(action)

    def config(self) -> dict[str, Any]:
        cfg = self.policy.config
        try:
            import dataclasses

            cfg_dict = json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
        except TypeError:
            cfg_dict = {"repr": repr(cfg)}
        return {
            "policy_type": self.policy_type,
            "path": self.path,
            "image_key": self.image_key,
            "state_key": self.state_key,
            "state_from": list(self.state_from),
            "task_key": self.task_key,
            "convention": self.convention.to_dict(),
            "policy_config": cfg_dict,
        }

    def content_hash(self) -> str:
        """sha256 of the weights (every tensor of the state dict, names sorted) and the adapter config."""
        if self._hash is None:
            import torch

            digest = hashlib.sha256()
            for key, tensor in sorted(self.policy.state_dict().items()):
                digest.update(key.encode() + b"\0" + str(tuple(tensor.shape)).encode() + str(tensor.dtype).encode())
                digest.update(tensor.detach().cpu().contiguous().view(-1).view(dtype=torch.uint8).numpy().tobytes())
            config = _canonical({k: v for k, v in self.config().items() if k != "path"})
            digest.update(canonical_json(config, spaced=True, allow_nan=True, default=str).encode())
            self._hash = digest.hexdigest()
        return self._hash

    def close(self) -> None:
        self.policy = None


def _canonical(value: Any) -> Any:
    """Booleans as ints: LeRobot's config round trip turns some ``false`` into ``0`` (int-typed fields)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _feature_type(feature: Any) -> str:
    kind = getattr(feature, "type", None)
    return getattr(kind, "name", str(kind)).upper()


def _load(path: str, policy_type: str | None, device: str, preprocessor: Any, postprocessor: Any):
    from pathlib import Path

    from kosmos_env.errors import MissingWeightsError

    root = Path(path)
    if not (root / "config.json").is_file():
        raise MissingWeightsError(
            f"no LeRobot checkpoint at {path!r} (a directory with config.json and model.safetensors, as "
            f"save_pretrained writes it); download it with `huggingface-cli download <repo> --local-dir DIR`"
        )
    try:
        from lerobot.policies.factory import get_policy_class
    except ImportError:
        raise ImportError(
            "the LeRobot adapter needs the `lerobot` package (see the README for the versions that install "
            "beside this project's torch); otherwise serve it from its own environment with "
            "`kosmos-env serve-policy lerobot:path=...`"
        ) from None
    policy_type = policy_type or json.loads((root / "config.json").read_text()).get("type")
    if not policy_type:
        raise ValueError(f"{root / 'config.json'} has no 'type'; pass policy_type=act|diffusion|...")
    policy = get_policy_class(policy_type).from_pretrained(str(root), local_files_only=True)
    if preprocessor is None and postprocessor is None:
        try:  # LeRobot >= 0.4 saves normalisation as processor pipelines beside the weights
            from lerobot.policies.factory import make_pre_post_processors

            if any(root.glob("*processor*.json")):
                preprocessor, postprocessor = make_pre_post_processors(policy.config, pretrained_path=str(root))
        except ImportError:
            pass
    return policy, preprocessor, postprocessor
