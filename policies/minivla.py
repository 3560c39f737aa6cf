"""MiniVLA (Stanford's OpenVLA/Prismatic fork on Qwen2.5-0.5B): its action-token vocabulary.

MiniVLA keeps OpenVLA's binning (256 uniform edges on [-1, 1], 255 centres, q01/q99
un-normalisation) but does not overwrite the least-used ids of the language vocabulary: its
action tokens are 256 tokens *appended* to the Qwen2.5 tokenizer (the ``<extra_i>`` tokens;
prismatic's ``ActionTokenizer(use_extra=True)`` counts ``len(tokenizer)`` instead of
``tokenizer.vocab_size``). So the id -> bin map is the same formula with
``vocab_end = len(tokenizer)``: ``bin = clip(len(tokenizer) - id - 1, 0, 254)``.

MiniVLA has no transformers model class: its checkpoints load with the ``prismatic`` package of
the openvla-mini repository (``prismatic.models.load_vla``). This adapter uses it when it is
installed (otherwise a clear error says so); the decoding path is this module's own and is tested
on token ids. The VQ action-chunk variants (Bridge: horizon 8) decode through a VQ-VAE that ships
with those checkpoints; they are served best from their own environment
(``kosmos-env serve-policy minivla:...`` there, ``--policy remote:url=...`` here).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kosmos_env.policies.openvla import ActionTokenDecoder, OpenVLAPolicy, action_stats

N_ACTION_TOKENS = 256


def minivla_decoder(
    tokenizer: Any = None, tokenizer_len: int | None = None, n_bins: int = N_ACTION_TOKENS
) -> ActionTokenDecoder:
    """The decoder for a tokenizer whose last ``n_bins`` entries are the appended action tokens.

    Pass the tokenizer (``len(tokenizer)`` is used; its last ``n_bins`` tokens must be added
    tokens, not base vocabulary) or ``tokenizer_len`` directly.
    """
    if tokenizer is not None:
        tokenizer_len = len(tokenizer)
        base = int(getattr(tokenizer, "vocab_size", 0) or 0)
        if base and tokenizer_len - n_bins < base:
            raise ValueError(
                f"this tokenizer has {tokenizer_len - base} added tokens beyond its {base}-token vocabulary; "
                f"MiniVLA appends {n_bins} action tokens, so this is not a MiniVLA tokenizer"
            )
    if tokenizer_len is None:
        raise ValueError("minivla_decoder needs the tokenizer or tokenizer_len")
    return ActionTokenDecoder(vocab_end=int(tokenizer_len), n_bins=n_bins)


class MiniVLAPolicy(OpenVLAPolicy):
    """MiniVLA through the openvla-mini ``prismatic`` package (not installable from the registry).

    ``model_path``: a MiniVLA run directory or checkpoint as ``prismatic.models.load_vla`` takes it.
    Prompting, preprocessing and the prismatic model's ``generate`` are prismatic's; token
    decoding and un-normalisation are :func:`minivla_decoder` + OpenVLA's arithmetic. The model
    call is written against openvla-mini's published code and is NOT exercised by this project's
    tests (prismatic cannot be installed here); the decoding path is.
    """

    name = "minivla"
    action_convention = "MiniVLA (Bridge): base-frame deltas + roll/pitch/yaw + gripper 1=open/0=closed"

    def __init__(
        self,
        model_path: str,
        unnorm_key: str | None = "bridge_orig",
        device: str = "cpu",
        gripper_threshold: float | None = None,
        hf_token: str | None = None,
        **kwargs: Any,
    ):
        self._hf_token = hf_token
        super().__init__(
            model_path,
            unnorm_key=unnorm_key,
            device=device,
            gripper_threshold=gripper_threshold,
            empty_token_id=None,
            **kwargs,
        )
        self.decoder = minivla_decoder(self.processor)

    @classmethod
    def _openvla_args(cls, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """What this constructor hands :class:`OpenVLAPolicy` (``empty_token_id`` is always None)."""
        import inspect

        try:
            bound = inspect.signature(cls.__init__).bind(None, **kwargs)
        except TypeError as exc:
            raise ValueError(f"policy {cls.name}: {exc}") from None
        bound.apply_defaults()
        args = dict(bound.arguments)
        extra = args.pop("kwargs", {})
        forwarded = {k: args[k] for k in ("model_path", "unnorm_key", "device", "gripper_threshold")}
        return super()._openvla_args({**forwarded, "empty_token_id": None, **extra})

    def _load(self) -> tuple[Any, Any]:
        from pathlib import Path

        from kosmos_env.errors import MissingWeightsError

        if not Path(self.model_path).exists():
            raise MissingWeightsError(
                f"no MiniVLA checkpoint at {self.model_path!r}: download a MiniVLA run (e.g. Stanford-ILIAD's "
                f"minivla checkpoints on the Hugging Face Hub) on a machine with access and pass its local path"
            )
        try:
            from prismatic.models import load_vla  # openvla-mini's package
        except ImportError:
            raise ImportError(
                "MiniVLA needs the `prismatic` package from the openvla-mini repository (not on the package "
                "registry); install it in its own environment and serve the policy from there with "
                "`kosmos-env serve-policy minivla:model_path=...`"
            ) from None
        vla = load_vla(self.model_path, hf_token=self._hf_token, load_for_training=False)
        return vla.to(self.device).eval(), vla.llm_backbone.get_tokenizer()

    def _norm_stats(self, given: str | Mapping[str, Any] | None) -> Mapping[str, Any]:
        stats = getattr(self.model, "norm_stats", None)
        if given is None and stats:
            return stats
        return super()._norm_stats(given)

    def predict_token_ids(self, obs: Mapping[str, Any]) -> np.ndarray:
        import torch

        instruction = obs.get("instruction") or self._instruction
        if not instruction:
            raise RuntimeError("call reset(instruction) before act(), or pass obs['instruction']")
        builder = self.model.get_prompt_builder()
        builder.add_turn("human", f"What action should the robot take to {instruction.lower()}?")
        prompt = builder.get_prompt()
        ids = self.processor(prompt, truncation=True, return_tensors="pt").input_ids.to(self.device)
        pixels = self.model.vision_backbone.get_image_transform()(self.preprocess(obs["image"]))
        pixels = (
            {k: v[None].to(self.device) for k, v in pixels.items()}
            if isinstance(pixels, dict)
            else pixels[None].to(self.device)
        )
        n = self.stats["q01"].shape[0]
        from prismatic.models.vlms.prismatic import PrismaticVLM

        with torch.inference_mode():  # prismatic's own predict_action calls the HF generate the same way
            out = super(PrismaticVLM, self.model).generate(
                input_ids=ids, pixel_values=pixels, max_new_tokens=n, do_sample=False
            )
        return out[0, -n:].cpu().numpy()


__all__ = ["MiniVLAPolicy", "minivla_decoder", "action_stats"]
