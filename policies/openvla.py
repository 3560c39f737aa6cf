"""OpenVLA (``openvla/openvla-7b`` and fine-tunes) through transformers, with its action decoding.

Published scheme (OpenVLA's prismatic ``ActionTokenizer`` and ``OpenVLAForActionPrediction.predict_action``):

- prompt ``"In: What action should the robot take to {instruction.lower()}?\\nOut:"``, one 224 px
  image (the processor normalises it), and the Llama "empty" token 29871 appended after ``Out:``
  when the tokenizer did not put it there (training inputs had it);
- greedy generation of 7 tokens (one per action dimension);
- 256 uniform bin *edges* on [-1, 1] and their 255 *centres*; token id -> bin index
  ``clip(vocab_size - id - 1, 0, 254)`` with ``vocab_size = 32000`` (the Llama-2 vocabulary
  without the 64 padding rows: the last 256 ids are the action tokens);
- un-normalisation with the checkpoint's ``norm_stats[unnorm_key]["action"]``:
  ``a = 0.5 (n + 1)(q99 - q01) + q01`` on the dimensions ``mask`` marks (default all); the
  others pass through. For ``bridge_orig`` the mask leaves the gripper out.
- output convention (Open X-Embodiment standardisation, ``bridge_orig`` binarised): base-frame
  ``[dx, dy, dz, droll, dpitch, dyaw]`` + gripper with 1 = open, 0 = closed. That is already the
  env contract; the gripper (a pass-through bin centre, so in [-1, 1]) is clipped to [0, 1], or
  binarised with ``gripper_threshold`` (SimplerEnv uses 0.5).

The released checkpoint needs its remote code (``trust_remote_code=True``, which this adapter
never turns on by itself) and an old transformers (4.40); when that cannot share a process with
the evaluator, serve it from its own environment: ``kosmos-env serve-policy openvla:model_path=...``
there and ``--policy remote:url=...`` here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from kosmos_env.hashing import files_sha256
from kosmos_env.policies.base import Policy, policy_hash
from kosmos_env.policies.conventions import ActionConvention, unnormalize_bounds

OPENVLA_PROMPT = "In: What action should the robot take to {instruction}?\nOut:"
LLAMA2_VOCAB_SIZE = 32000
LLAMA2_EMPTY_TOKEN_ID = 29871
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json", ".model", ".py", ".txt")


def _hash_settings(
    unnorm_key, dtype, prompt, image_size, vocab_size, empty_token_id, gripper_threshold, norm_stats
) -> dict[str, Any]:
    """The constructor settings that change actions, as given (paths of files hashed with them elsewhere)."""
    stats = norm_stats if norm_stats is None or isinstance(norm_stats, Mapping) else str(norm_stats)
    if isinstance(norm_stats, (str, Path)) and Path(norm_stats).is_file():
        stats = files_sha256([norm_stats])  # the statistics decide the actions, not the file's name
    return {
        "unnorm_key": unnorm_key,
        "dtype": dtype,
        "prompt": prompt,
        "image_size": int(image_size),
        "vocab_size": vocab_size,
        "empty_token_id": empty_token_id,
        "gripper_threshold": gripper_threshold,
        "norm_stats": stats,
    }


def _files_hash(class_name: str, model_path: str, settings: Mapping[str, Any]) -> str:
    files = files_sha256([model_path], _WEIGHT_SUFFIXES)
    return policy_hash({"files": files, "settings": settings, "class": class_name}, default=str)


def _hash_from_files(cls: type, args: Mapping[str, Any]) -> str:
    from kosmos_env.plugins import check_remote_code

    # refused here as when built: a protocol asking for checkpoint code is refused at register too
    check_remote_code(bool(args.get("trust_remote_code")), f"policy {cls.name}")
    if args.get("model") is not None or args.get("processor") is not None:
        raise ValueError(f"policy {cls.name}: a model handed in memory has no content hash from files")
    path = str(args["model_path"])
    if not Path(path).is_dir():
        raise FileNotFoundError(f"policy {cls.name}: no checkpoint folder at {path!r} to hash")
    settings = _hash_settings(
        args["unnorm_key"],
        args["dtype"],
        args["prompt"],
        args["image_size"],
        args["vocab_size"],
        args["empty_token_id"],
        args["gripper_threshold"],
        args["norm_stats"],
    )
    return _files_hash(cls.__name__, path, settings)


class ActionTokenDecoder:
    """Token ids <-> normalised actions for "last n_bins ids of the vocabulary" action tokens.

    ``vocab_end`` is the id one past the last action token (OpenVLA: 32000, the Llama-2 vocab
    size; MiniVLA: ``len(tokenizer)``, its appended ``<extra_i>`` tokens being the last 256).
    """

    def __init__(self, vocab_end: int = LLAMA2_VOCAB_SIZE, n_bins: int = 256, low: float = -1.0, high: float = 1.0):
        if n_bins < 2 or vocab_end < n_bins or not low < high:
            raise ValueError(
                f"need n_bins >= 2, vocab_end >= n_bins and low < high; got {n_bins}, {vocab_end}, {low}, {high}"
            )
        self.vocab_end, self.n_bins, self.low, self.high = int(vocab_end), int(n_bins), float(low), float(high)
        self.bins = np.linspace(low, high, n_bins)
        self.bin_centers = (self.bins[:-1] + self.bins[1:]) / 2.0

    @property
    def first_action_token(self) -> int:
        return self.vocab_end - self.n_bins

    def decode(self, token_ids: Any) -> np.ndarray:
        """Token ids -> normalised actions in [low, high] (bin centres)."""
        ids = np.asarray(token_ids, dtype=np.int64)
        index = np.clip(self.vocab_end - ids - 1, 0, self.bin_centers.shape[0] - 1)
        return self.bin_centers[index]

    def encode(self, normalized: Any) -> np.ndarray:
        """Normalised actions -> token ids (the training-time tokenisation, for tests and tools)."""
        n = np.clip(np.asarray(normalized, dtype=np.float64), self.low, self.high)
        return (self.vocab_end - np.digitize(n, self.bins)).astype(np.int64)


def action_stats(norm_stats: Mapping[str, Any], unnorm_key: str | None) -> dict[str, np.ndarray]:
    """Pick ``norm_stats[unnorm_key]["action"]`` and return q01, q99 and mask as arrays."""
    if unnorm_key is None:
        if len(norm_stats) != 1:
            raise ValueError(
                f"this checkpoint has statistics for several datasets {sorted(norm_stats)}: pass unnorm_key"
            )
        unnorm_key = next(iter(norm_stats))
    if unnorm_key not in norm_stats:
        raise ValueError(
            f"unnorm_key {unnorm_key!r} is not in the checkpoint's norm_stats; available: {sorted(norm_stats)}"
        )
    stats = norm_stats[unnorm_key]
    stats = stats.get("action", stats)
    q01, q99 = np.asarray(stats["q01"], dtype=np.float64), np.asarray(stats["q99"], dtype=np.float64)
    mask = np.asarray(stats.get("mask", np.ones_like(q01, dtype=bool)), dtype=bool)
    if not q01.shape == q99.shape == mask.shape or q01.ndim != 1:
        raise ValueError(
            f"norm_stats[{unnorm_key!r}] q01/q99/mask shapes differ: {q01.shape}, {q99.shape}, {mask.shape}"
        )
    return {"q01": q01, "q99": q99, "mask": mask}


def decode_actions(token_ids: Any, decoder: ActionTokenDecoder, stats: Mapping[str, np.ndarray]) -> np.ndarray:
    """Action token ids -> un-normalised model actions (OpenVLA's ``predict_action`` arithmetic)."""
    return unnormalize_bounds(decoder.decode(token_ids), stats["q01"], stats["q99"], stats["mask"])


class OpenVLAPolicy(Policy):
    """OpenVLA from a local checkpoint directory (never downloads).

    ``model_path``: directory with config, weights, processor files (and
    ``dataset_statistics.json`` when the config has no ``norm_stats``). ``unnorm_key``: which
    dataset's statistics un-normalise actions (``bridge_orig`` for Bridge/WidowX). The adapter
    builds the inputs, calls ``model.generate`` and decodes the tokens itself (the published
    arithmetic above), so any Prismatic-style vision-language model whose processor takes
    ``text=`` and ``images=`` works; ``prompt`` overrides the template (``{instruction}`` is
    lower-cased as OpenVLA does).
    """

    name = "openvla"
    action_convention = (
        "OpenVLA (Bridge, Open X-Embodiment): base-frame deltas + roll/pitch/yaw + gripper 1=open/0=closed"
    )

    def __init__(
        self,
        model_path: str,
        unnorm_key: str | None = "bridge_orig",
        trust_remote_code: bool = False,
        device: str = "cpu",
        dtype: str = "float32",
        prompt: str = OPENVLA_PROMPT,
        image_size: int = 224,
        vocab_size: int | None = None,
        empty_token_id: int | None = LLAMA2_EMPTY_TOKEN_ID,
        gripper_threshold: float | None = None,
        norm_stats: str | Mapping[str, Any] | None = None,
        model: Any = None,
        processor: Any = None,
    ):
        from kosmos_env.plugins import check_remote_code

        self.model_path = str(model_path)
        # the settings as given (not as derived from the loaded model): the hash computed from files
        # alone (content_hash_from_files) and the built policy's hash are then the same by construction
        self._hash_settings = _hash_settings(
            unnorm_key, dtype, prompt, image_size, vocab_size, empty_token_id, gripper_threshold, norm_stats
        )
        # before anything is read from model_path: a protocol naming this policy cannot run its code
        self.unnorm_key = unnorm_key
        self.trust_remote_code = check_remote_code(bool(trust_remote_code), f"policy {self.name}")
        self.device, self.dtype, self.prompt, self.image_size = device, dtype, prompt, int(image_size)
        self.empty_token_id = empty_token_id
        self.gripper_threshold = gripper_threshold
        self.convention = ActionConvention(gripper="unit_open", gripper_threshold=gripper_threshold)
        if model is None or processor is None:
            model, processor = self._load()
        self.model, self.processor = model, processor
        self.norm_stats = self._norm_stats(norm_stats)
        self.stats = action_stats(self.norm_stats, unnorm_key)
        self.decoder = ActionTokenDecoder(vocab_end=vocab_size or self._vocab_size())
        self._instruction: str | None = None
        self._hash: str | None = None

    # -- loading -------------------------------------------------------------------------------
    def _load(self) -> tuple[Any, Any]:
        from kosmos_env.errors import MissingWeightsError

        path = Path(self.model_path)
        if not (path.is_dir() and (path / "config.json").is_file()):
            raise MissingWeightsError(
                f"no {self.name} checkpoint at {self.model_path!r} (a directory with config.json and weights). "
                f"Download it on a machine with access, e.g. `huggingface-cli download openvla/openvla-7b "
                f"--local-dir /models/openvla-7b`, and pass model_path=/models/openvla-7b (and "
                f"trust_remote_code=true if you accept running the checkpoint's own code)."
            )
        import torch
        import transformers

        config = transformers.AutoConfig.from_pretrained(
            path, trust_remote_code=self.trust_remote_code, local_files_only=True
        )
        auto_map = getattr(config, "auto_map", None) or {}
        if auto_map and not self.trust_remote_code:
            raise ValueError(
                f"the checkpoint at {self.model_path} ships its own model code ({sorted(auto_map)}); pass "
                f"trust_remote_code=true to run it (it is never enabled by default)"
            )
        classes = [
            getattr(transformers, n)
            for n in ("AutoModelForVision2Seq", "AutoModelForImageTextToText")
            if hasattr(transformers, n)
        ]
        last: Exception | None = None
        for cls in classes:
            try:
                model = cls.from_pretrained(
                    path,
                    trust_remote_code=self.trust_remote_code,
                    local_files_only=True,
                    dtype=getattr(torch, self.dtype),
                )
                break
            except (ValueError, KeyError) as exc:  # this auto class does not know the architecture
                last = exc
        else:
            raise ValueError(
                f"transformers {transformers.__version__} cannot build the model at {self.model_path}: {last}"
            )
        processor = transformers.AutoProcessor.from_pretrained(
            path, trust_remote_code=self.trust_remote_code, local_files_only=True
        )
        return model.to(self.device).eval(), processor

    def _norm_stats(self, given: str | Mapping[str, Any] | None) -> Mapping[str, Any]:
        if isinstance(given, Mapping):
            return given
        candidates = [Path(given)] if given else [Path(self.model_path) / "dataset_statistics.json"]
        stats = getattr(getattr(self.model, "config", None), "norm_stats", None)
        if given is None and stats:
            return stats
        for path in candidates:
            if path.is_file():
                return json.loads(path.read_text())
        raise FileNotFoundError(
            f"{self.name}: no action statistics: the model config has no norm_stats and {candidates[0]} does not exist; "
            f"pass norm_stats=<dataset_statistics.json>"
        )

    def _vocab_size(self) -> int:
        config = getattr(self.model, "config", None)
        text = getattr(config, "text_config", None)
        if text is not None and getattr(text, "vocab_size", None):
            return int(text.vocab_size) - int(getattr(config, "pad_to_multiple_of", 0) or 0)
        return LLAMA2_VOCAB_SIZE

    # -- policy API ----------------------------------------------------------------------------
    def reset(self, instruction: str, seed: int | None = None) -> None:
        self._instruction = instruction
        if seed is not None:
            import torch

            torch.manual_seed(seed)  # greedy decoding needs none; sampling options would

    def prompt_for(self, instruction: str) -> str:
        return self.prompt.format(instruction=instruction.lower())

    def preprocess(self, image: np.ndarray):
        """uint8 HxWx3 -> PIL image at ``image_size`` (Lanczos, as the RLDS training pipeline resized)."""
        from PIL import Image

        image = np.asarray(image)
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"{self.name} needs obs['image'] as (H, W, 3) uint8, got {image.shape} {image.dtype}")
        pil = Image.fromarray(image)
        if pil.size != (self.image_size, self.image_size):
            pil = pil.resize((self.image_size, self.image_size), Image.Resampling.LANCZOS)
        return pil

    def predict_token_ids(self, obs: Mapping[str, Any]) -> np.ndarray:
        import torch

        instruction = obs.get("instruction") or self._instruction
        if not instruction:
            raise RuntimeError("call reset(instruction) before act(), or pass obs['instruction']")
        inputs = self.processor(
            text=self.prompt_for(instruction), images=self.preprocess(obs["image"]), return_tensors="pt"
        )
        inputs = {k: v.to(self.device) for k, v in dict(inputs).items() if hasattr(v, "to")}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(getattr(torch, self.dtype))
        ids = inputs["input_ids"]
        if self.empty_token_id is not None and int(ids[0, -1]) != self.empty_token_id:
            ids = torch.cat([ids, torch.tensor([[self.empty_token_id]], device=ids.device, dtype=ids.dtype)], dim=1)
            inputs["input_ids"] = ids
            if "attention_mask" in inputs:
                mask = inputs["attention_mask"]
                inputs["attention_mask"] = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        n = self.stats["q01"].shape[0]
        with torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        return out[0, -n:].cpu().numpy()

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        raw = decode_actions(self.predict_token_ids(obs), self.decoder, self.stats)
        if raw.shape != (7,):
            raise ValueError(f"{self.name} decoded a {raw.shape[0]}-D action; the env contract is 7-D")
        return self.convention.to_env(raw)

    def config(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path,
            "unnorm_key": self.unnorm_key,
            "prompt": self.prompt,
            "image_size": self.image_size,
            "vocab_end": self.decoder.vocab_end,
            "dtype": self.dtype,
            "gripper_threshold": self.gripper_threshold,
        }

    def content_hash(self) -> str:
        """sha256 of the checkpoint files (weights, configs, code) and the decoding settings."""
        if self._hash is None:
            if Path(self.model_path).is_dir():
                self._hash = _files_hash(type(self).__name__, self.model_path, self._hash_settings)
            else:  # a model handed in memory: only its derived settings identify it
                settings = {**self._hash_settings, "vocab_end": self.decoder.vocab_end}
                self._hash = policy_hash(
                    {"files": "in-memory", "settings": settings, "class": type(self).__name__}, default=str
                )
        return self._hash

    @classmethod
    def content_hash_from_files(cls, **kwargs: Any) -> str | None:
        """The built policy's ``content_hash()`` from the checkpoint folder's files and the settings,
        without loading the model or running any of the checkpoint's code."""
        return _hash_from_files(cls, cls._openvla_args(kwargs))

    @classmethod
    def _openvla_args(cls, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``kwargs`` bound to :class:`OpenVLAPolicy`'s constructor, defaults filled in."""
        import inspect

        try:
            bound = inspect.signature(OpenVLAPolicy.__init__).bind(None, **kwargs)
        except TypeError as exc:
            raise ValueError(f"policy {cls.name}: {exc}") from None
        bound.apply_defaults()
        return {k: v for k, v in bound.arguments.items() if k != "self"}

    def close(self) -> None:
        self.model = None
