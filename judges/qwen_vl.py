"""A Qwen-VL-family model loaded for a judge: weights from disk, chat template, video settings, identity.

Shared by the VLM judge (:mod:`~kosmos_env.judges.vlm`) and the VLM progress judge
(:mod:`~kosmos_env.judges.vlm_progress`), so both load, check and describe their model the same way.
Supported (through transformers, natively; ``trust_remote_code`` is never turned on unless asked):
Qwen2.5-VL-Instruct and Cosmos-Reason1 (``Qwen2_5_VLForConditionalGeneration``), Qwen3-VL and
Cosmos-Reason2 (``Qwen3VLForConditionalGeneration``); the family is read from the model's config.

Weights are loaded from disk only (``local_files_only=True``): from ``local_path`` (or the judge's
environment variable, :data:`LOCAL_PATH_ENV` by default), else from the Hugging Face cache for
``model_id`` at ``revision``. Missing weights raise :class:`MissingWeightsError` saying what to download.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from kosmos_env.errors import MissingWeightsError
from kosmos_env.judges.vlm_video import FAMILY_SETTINGS, VideoSettings

LOCAL_PATH_ENV = "KOSMOS_VLM_JUDGE_PATH"
_MODEL_CLASSES = {
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
}


class QwenVLModel:
    """Mixin: loads (or takes) the model and tokenizer, and describes them.

    A judge class sets ``name`` (its type), ``label`` (how messages name it) and ``local_path_env``,
    sets ``model_id``, ``revision`` and ``trust_remote_code``, then calls :meth:`_attach_model`.
    """

    name = "vlm"
    label = "VLM judge"
    local_path_env = LOCAL_PATH_ENV

    def _attach_model(
        self,
        model: Any,
        tokenizer: Any,
        processor: Any,
        local_path: str | None,
        device: str | None,
        dtype: str,
        adapter: str | None,
        min_pixels: int | None,
        max_pixels: int | None,
    ) -> None:
        """Load the model unless ``model`` and ``tokenizer`` are given (``model`` may name a folder or
        a model id), apply a LoRA ``adapter``, read the family and the video settings."""
        if isinstance(model, (str, os.PathLike)):
            if os.path.isdir(model):
                local_path = os.fspath(model)
            else:
                self.model_id = str(model)
            model = None
        if tokenizer is None and processor is not None:
            tokenizer = getattr(processor, "tokenizer", None)
        self._loaded_from: str | None = None  # folder the weights came from; None when injected
        self._model_identity: dict[str, Any] | None = None
        if model is None or tokenizer is None:
            model, tokenizer = self._load(local_path or os.environ.get(self.local_path_env), device, dtype)
        self.adapter, self.adapter_sha256 = None, None
        if adapter is not None:
            model, self.adapter, self.adapter_sha256 = _apply_adapter(model, os.fspath(adapter))
        self.model, self.tokenizer = model, tokenizer
        self.family = getattr(model.config, "model_type", "")
        if self.family not in FAMILY_SETTINGS:
            raise ValueError(f"the {self.label} supports model types {sorted(FAMILY_SETTINGS)}, got {self.family!r}")
        self.video = self._video_settings(processor, min_pixels, max_pixels)
        self._video_token_id = model.config.video_token_id
        self._image_token_id = model.config.image_token_id

    def _load(self, local_path: str | None, device: str | None, dtype: str):
        import transformers
        from transformers import AutoConfig, AutoTokenizer

        from kosmos_env.errors import require_version

        require_version("transformers", transformers.__version__, f"the {self.label}")  # pyproject.toml's floor
        source = local_path or self.model_id
        common = {"local_files_only": True, "trust_remote_code": self.trust_remote_code}
        if not local_path and self.revision:
            common["revision"] = self.revision
        try:
            config = AutoConfig.from_pretrained(source, **common)
        except (OSError, ValueError) as exc:
            rev = f" --revision {self.revision}" if self.revision else ""
            raise MissingWeightsError(
                f"{self.label} weights for {self.model_id!r} are not on disk ({type(exc).__name__}: {exc}).\n"
                f"Download them on a machine with network access:\n"
                f"    hf download {self.model_id}{rev} --local-dir /path/to/{self.model_id.split('/')[-1]}\n"
                f"then point the judge at them with judge={{'type': '{self.name}', 'local_path': '/path/to/...'}} "
                f"or the environment variable {self.local_path_env}=/path/to/..."
            ) from None
        cls_name = _MODEL_CLASSES.get(config.model_type)
        if cls_name is None:
            raise ValueError(
                f"{source} is a {config.model_type!r} model; the {self.label} supports {sorted(_MODEL_CLASSES)}"
            )
        model_cls = getattr(transformers, cls_name)
        if not hasattr(model_cls, "_prepare_position_ids_for_generation"):
            # the prefill-once decode (_generate) computes the multimodal positions as generate does
            from kosmos_env.errors import dependency_floor, install_hint  # the floor is pyproject.toml's

            raise RuntimeError(
                f"the {self.label} needs transformers>={dependency_floor('transformers')} (installed: "
                f"{transformers.__version__}); {install_hint('models', upgrade=True)}"
            )
        model = model_cls.from_pretrained(source, dtype=dtype, **common)
        if device:
            model = model.to(device)
        elif _cuda_available():
            model = model.to("cuda")
        tokenizer = AutoTokenizer.from_pretrained(source, padding_side="left", **common)
        if getattr(tokenizer, "chat_template", None) is None:
            template = _read_chat_template(source, common)
            if template is None:
                raise ValueError(f"{source} has no chat template (chat_template.jinja / chat_template.json)")
            tokenizer.chat_template = template
        self._preprocessor_config = _read_json(source, "preprocessor_config.json", common)
        config_file = _resolve(source, "config.json", common)
        self._loaded_from = os.path.dirname(os.path.abspath(config_file)) if config_file else None
        return model.eval(), tokenizer

    def _video_settings(self, processor: Any, min_pixels: int | None, max_pixels: int | None) -> VideoSettings:
        base = FAMILY_SETTINGS[self.family]
        vc = self.model.config.vision_config
        fields = {
            "patch_size": int(vc.patch_size),
            "temporal_patch_size": int(vc.temporal_patch_size),
            "merge_size": int(vc.spatial_merge_size),
        }
        # normalisation statistics: the model's own preprocessor config when we have it
        pre = getattr(self, "_preprocessor_config", None) or {}
        ip = getattr(processor, "image_processor", None)
        mean = pre.get("image_mean", getattr(ip, "image_mean", None))
        std = pre.get("image_std", getattr(ip, "image_std", None))
        if mean is not None and std is not None:
            fields["image_mean"], fields["image_std"] = tuple(float(v) for v in mean), tuple(float(v) for v in std)
        if min_pixels is not None:
            fields["min_pixels"] = int(min_pixels)
        if max_pixels is not None:
            fields["max_pixels"] = int(max_pixels)
        merged = {**base.__dict__, **fields}
        if merged["min_pixels"] > merged["max_pixels"]:
            merged["min_pixels"] = merged["max_pixels"]
        return VideoSettings(**merged)

    @property
    def model_identity(self) -> dict[str, Any]:
        """The model that runs: ``{"model_id", "revision", "source", "path", "weights_sha256", "family"}``."""
        if self._model_identity is None:
            ident: dict[str, Any] = {"model_id": self.model_id, "revision": self.revision, "family": self.family}
            if self._loaded_from is not None:
                from kosmos_env.hashing import folder_digest

                ident.update(
                    source="folder", path=self._loaded_from, weights_sha256=folder_digest(self._loaded_from)["sha256"]
                )
            else:
                from kosmos_env.utils.weights import module_digest

                ident.update(source="injected", path=None, weights_sha256=module_digest(self.model))
            if self.adapter:
                ident["adapter_sha256"] = self.adapter_sha256
            self._model_identity = ident
        return dict(self._model_identity)

    def _left_padded(self, items: Sequence[Mapping[str, Any]]) -> tuple[int, Any, Any, Any]:
        """(pad id, input ids, attention mask, multimodal token types) of a left-padded batch of the
        items' token ids (``item["ids"]``): left padding, so generation continues every row at its end."""
        import torch

        pad_id = self.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.tokenizer.eos_token_id
        lengths = [len(r["ids"]) for r in items]
        width = max(lengths)
        input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(items), width), dtype=torch.long)
        for i, r in enumerate(items):
            input_ids[i, width - lengths[i] :] = torch.tensor(r["ids"], dtype=torch.long)
            attention[i, width - lengths[i] :] = 1
        mm_types = torch.zeros_like(input_ids, dtype=torch.int32)
        mm_types[input_ids == self._video_token_id] = 2
        mm_types[input_ids == self._image_token_id] = 1
        return pad_id, input_ids, attention, mm_types

    def _eos_ids(self, pad_id: int) -> set[int]:
        """Token ids that end generation (generation config and tokenizer); padding follows them."""
        ids = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids = set(ids if isinstance(ids, (list, tuple)) else [] if ids is None else [ids])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids or {pad_id}


def _apply_adapter(model: Any, adapter: str) -> tuple[Any, str, str]:
    """Wrap ``model`` with the LoRA adapter saved in folder ``adapter`` (peft); returns (model, path, sha256).

    The adapter's layers are injected into ``model`` itself (peft replaces the target modules),
    so a model object passed in is changed; load a fresh one for the base judge.
    """
    from kosmos_env.hashing import files_sha256

    cfg = os.path.join(adapter, "adapter_config.json")
    if not os.path.isfile(cfg):
        raise FileNotFoundError(f"no LoRA adapter in {adapter!r} (adapter_config.json is missing)")
    try:
        from peft import PeftModel
    except ImportError as exc:  # pragma: no cover - peft is in the models extra
        raise RuntimeError("loading a judge adapter needs peft: pip install peft") from exc
    # the adapter's own files (adapter_config.json, adapter_model.safetensors), by name
    sha = files_sha256(
        [
            os.path.join(adapter, n)
            for n in os.listdir(adapter)
            if n.startswith("adapter_") and os.path.isfile(os.path.join(adapter, n))
        ]
    )
    wrapped = PeftModel.from_pretrained(model, adapter, is_trainable=False).eval()
    return wrapped, os.path.abspath(adapter), sha


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _read_json(source: str, filename: str, common: dict[str, Any]) -> dict[str, Any] | None:
    import json

    path = _resolve(source, filename, common)
    if path is None:
        return None
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _read_chat_template(source: str, common: dict[str, Any]) -> str | None:
    path = _resolve(source, "chat_template.jinja", common)
    if path is not None:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    data = _read_json(source, "chat_template.json", common)
    return None if data is None else data.get("chat_template")


def _resolve(source: str, filename: str, common: dict[str, Any]) -> str | None:
    """A file of a local model folder or of the cached snapshot, or None when absent."""
    if os.path.isdir(source):
        path = os.path.join(source, filename)
        return path if os.path.isfile(path) else None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(source, filename, revision=common.get("revision"))
    return found if isinstance(found, str) else None
