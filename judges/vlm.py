"""The VLM judge: a Qwen-VL-family model watches the rollout video and votes k times.

Supported (through transformers, natively; ``trust_remote_code`` is never turned on unless
asked): Qwen2.5-VL-Instruct and Cosmos-Reason1 (``Qwen2_5_VLForConditionalGeneration``), and
Qwen3-VL and Cosmos-Reason2 (``Qwen3VLForConditionalGeneration``). The family is read from the
model's config (``model_type``).

Per rollout the judge samples frames at ``sample_fps`` (the last frame always in), builds one
user turn ``[video, pinned prompt text]`` with the tokenizer's chat template, computes the
video patches itself (:mod:`~kosmos_env.judges.vlm_video`, so the input is pinned), and draws
``k`` answers with a seeded sampler. The answers are parsed strictly
(:mod:`~kosmos_env.judges.answer`) and combined by the quorum rule: majority of the valid
votes; abstain on a tie, when the video looks broken to most voters, or when fewer than
``min_valid`` answers parse. A random or confused model therefore ends as an abstention,
never as an unvalidated success.

Weights are loaded from disk only (``local_files_only=True``, by :mod:`~kosmos_env.judges.qwen_vl`,
which the progress judge shares): from ``local_path`` (or the ``KOSMOS_VLM_JUDGE_PATH`` environment
variable), else from the Hugging Face cache for ``model_id`` at ``revision``. Missing weights raise :class:`MissingWeightsError` saying what
to download. Tests pass prebuilt ``model`` and ``tokenizer`` (or ``processor``) objects.

Every judgment names the model that actually ran (``extras["model"]``, also :attr:`VLMJudge.model_identity`):
the folder it was loaded from (or ``"injected"``), the revision asked for, and a sha256 of the
weights (of the folder's files, or of the tensors of an injected model), computed once per judge.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from kosmos_env.judges.answer import quorum
from kosmos_env.judges.base import Judgment, Rollout
from kosmos_env.judges.kv_cache import decode_cache, prompt_keys_values
from kosmos_env.judges.vlm_prompt import PROMPT_SHA256, SYSTEM_PROMPT, render_user_text
from kosmos_env.judges.qwen_vl import LOCAL_PATH_ENV, QwenVLModel
from kosmos_env.judges.vlm_video import (
    VIDEO_BLOCK,
    group_timestamps,
    patchify_video,
    sample_indices,
    video_placeholder,
)

#: how sample seeds are drawn: per rollout (its content and the judge seed) and per sample index,
#: so a rollout's votes do not depend on which rollouts share its batch or where it sits in it
SEEDING = "per_rollout_content_v1"
DEFAULT_MODEL_ID = "nvidia/Cosmos-Reason1-7B"


class VLMJudge(QwenVLModel):
    """Quorum-of-k VLM judge over a rollout video (see the module docstring).

    Spec fields (all keyword arguments): ``model_id``, ``revision``, ``local_path``,
    ``sample_fps`` (frames per second shown to the model, default 4 as Cosmos-Reason uses),
    ``max_frames``, ``k`` (samples), ``min_valid`` (quorum size ``q``), ``temperature``,
    ``top_p``, ``max_new_tokens``, ``seed``, ``batch_size`` (rollouts decoded together in
    :meth:`judge_batch`; with ``memory_budget_mb`` it is the cap and the budget sizes each
    batch from an estimate of its KV cache and vision activations), ``max_pixels`` / ``min_pixels`` (per-frame pixel budget),
    ``prompt_sha256`` (must equal :data:`PROMPT_SHA256` when given: the spec pins the prompt),
    ``device``, ``dtype``, ``trust_remote_code`` (default False), ``adapter`` (a folder with a
    LoRA adapter saved by peft, e.g. by ``kosmos-env judge-distill``; it is applied on top of the
    base model and its sha256, ``adapter_sha256``, enters the spec). Runtime objects (not spec): ``model``,
    ``tokenizer``, ``processor``; ``model`` may also be a string, read as ``local_path`` when it
    is a folder and as ``model_id`` otherwise (so ``{"type": "vlm", "model": PATH}`` works).
    Every judgment's ``extras`` carries the full raw answers and the generated-token counts.
    """

    name = "vlm"
    label = "VLM judge"
    local_path_env = LOCAL_PATH_ENV

    def __init__(
        self,
        model_id: str = DEFAULT_MODEL_ID,
        revision: str | None = None,
        local_path: str | None = None,
        sample_fps: float = 4.0,
        max_frames: int = 32,
        k: int = 5,
        min_valid: int = 3,
        temperature: float = 0.7,
        top_p: float = 0.95,
        max_new_tokens: int = 256,
        seed: int = 0,
        batch_size: int = 4,
        memory_budget_mb: float | None = None,
        max_pixels: int | None = None,
        min_pixels: int | None = None,
        prompt_sha256: str | None = None,
        device: str | None = None,
        dtype: str = "auto",
        trust_remote_code: bool = False,
        adapter: str | None = None,
        model: Any = None,
        tokenizer: Any = None,
        processor: Any = None,
    ):
        if prompt_sha256 is not None and prompt_sha256 != PROMPT_SHA256:
            raise ValueError(
                f"the spec pins VLM judge prompt {prompt_sha256[:12]}..., but this code's prompt is "
                f"{PROMPT_SHA256[:12]}...: the spec belongs to another version of the judge"
            )
        if k < 1 or not 1 <= min_valid <= k:
            raise ValueError(f"need k >= 1 and 1 <= min_valid <= k, got k={k}, min_valid={min_valid}")
        if sample_fps <= 0 or max_frames < 2 or max_new_tokens < 1 or batch_size < 1:
            raise ValueError("sample_fps must be > 0, max_frames >= 2, max_new_tokens >= 1, batch_size >= 1")
        if temperature <= 0 or not 0 < top_p <= 1:
            raise ValueError(f"temperature must be > 0 and top_p in (0, 1], got {temperature}, {top_p}")
        self.model_id, self.revision = model_id, revision
        self.sample_fps, self.max_frames = float(sample_fps), int(max_frames)
        self.k, self.min_valid = int(k), int(min_valid)
        self.temperature, self.top_p, self.max_new_tokens = float(temperature), float(top_p), int(max_new_tokens)
        self.seed, self.batch_size = int(seed), int(batch_size)
        if memory_budget_mb is not None and memory_budget_mb <= 0:
            raise ValueError(f"memory_budget_mb must be > 0, got {memory_budget_mb}")
        self.memory_budget_mb = None if memory_budget_mb is None else float(memory_budget_mb)
        from kosmos_env.plugins import check_remote_code

        # a spec, registration or bundle may ask; only the person running the command can allow it
        self.trust_remote_code = check_remote_code(bool(trust_remote_code), f"judge {self.name}")
        self._attach_model(model, tokenizer, processor, local_path, device, dtype, adapter, min_pixels, max_pixels)

    # -- spec -------------------------------------------------------------------------------
    @property
    def spec(self) -> dict[str, Any]:
        """The settings that can change a verdict (for env specs and ledgers)."""
        return {
            "type": self.name,
            "model_id": self.model_id,
            "revision": self.revision,
            "family": self.family,
            "sample_fps": self.sample_fps,
            "max_frames": self.max_frames,
            "k": self.k,
            "min_valid": self.min_valid,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
            "seed": self.seed,
            "min_pixels": self.video.min_pixels,
            "max_pixels": self.video.max_pixels,
            "prompt_sha256": PROMPT_SHA256,
            "seeding": SEEDING,
            # only present with an adapter, so the spec of a plain judge is unchanged
            **({"adapter_sha256": self.adapter_sha256} if self.adapter else {}),
        }

    # -- judging ----------------------------------------------------------------------------
    def judge(self, rollout: Rollout) -> Judgment:
        return self.judge_batch([rollout])[0]

    def judge_batch(self, rollouts: Sequence[Rollout]) -> list[Judgment]:
        """Judge rollouts in batches; each rollout's ``k`` samples come from the same ``generate`` call.

        Batches hold ``batch_size`` rollouts, or as many as ``memory_budget_mb`` allows (see
        :meth:`plan_batches`). Each rollout's video is patchified once and encoded by the vision
        tower once, in the single prefill of its prompt; the ``k`` samples decode from copies of
        that prompt's key/value cache, and the whole batch's ``len(batch) * k`` rows decode
        together (see :meth:`_generate`). Sample ``j`` of a rollout is drawn with its own
        generator seeded from the judge seed, the rollout's content and ``j``
        (:func:`rollout_seed`), so the votes are the same whichever rollouts share the batch (up
        to float rounding of padded batches).
        """
        items = [self._inputs(r) for r in rollouts]
        seeds = [rollout_seed(self.seed, r) for r in rollouts]
        out: list[Judgment | None] = [None] * len(rollouts)
        model_identity = self.model_identity
        for batch in self.plan_batches(items):
            t0 = time.perf_counter()
            texts, n_tokens = self._generate([items[i] for i in batch], seeds=[seeds[i] for i in batch])
            seconds = (time.perf_counter() - t0) / len(batch)
            for pos, i in enumerate(batch):
                answers = texts[pos * self.k : (pos + 1) * self.k]
                tokens = n_tokens[pos * self.k : (pos + 1) * self.k]
                res = quorum(answers, self.min_valid)
                out[i] = Judgment(
                    success=res.success,
                    score=res.score,
                    rationale=res.rationale,
                    votes=res.votes,
                    judge=self.name,
                    model_id=self.model_id + (f"@{self.revision}" if self.revision else ""),
                    prompt_sha256=PROMPT_SHA256,
                    seconds=seconds + items[i]["prep_seconds"],
                    extras={
                        "n_valid": res.n_valid,
                        "k": self.k,
                        "min_valid": self.min_valid,
                        "family": self.family,
                        "frames_shown": items[i]["frames_shown"],
                        "video_grid_thw": list(items[i]["grid"]),
                        "raw_answers": list(answers),
                        "generated_tokens": tokens,
                        "generate_seconds": seconds,
                        "batch_rollouts": len(batch),
                        "sample_seed": seeds[i],
                        "model": model_identity,
                    },
                )
        return out  # type: ignore[return-value]

    def estimate_bytes(self, item: dict[str, Any]) -> int:
        """Working memory of one rollout's ``k`` samples in a batch (an estimate, for batch sizing).

        KV cache of its k rows over prompt + ``max_new_tokens`` tokens, the text activations of
        its prompt's prefill (one row: a few hidden-size vectors per token), the vision tower's
        activations over its patches (encoded once), and the float32 logits of one decoding step
        per row. Summed over a batch this over-counts the prefills, which run one rollout at a time.
        """
        cfg = self.model.config
        text = getattr(cfg, "text_config", cfg)
        vision = getattr(cfg, "vision_config", None)
        nbytes = next(self.model.parameters()).element_size()
        heads = int(text.num_attention_heads)
        head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
        kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
        tokens = len(item["ids"]) + self.max_new_tokens
        kv = 2 * int(text.num_hidden_layers) * kv_heads * head_dim * nbytes * tokens * self.k
        prefill = 4 * int(text.hidden_size) * nbytes * len(item["ids"])
        patches = int(np.prod(item["grid"]))
        vision_hidden = int(getattr(vision, "hidden_size", 0) or getattr(vision, "embed_dim", 0) or 0)
        vis = 8 * vision_hidden * nbytes * patches
        logits = 4 * int(text.vocab_size) * self.k
        return kv + prefill + vis + logits

    def plan_batches(self, items: Sequence[dict[str, Any]]) -> list[list[int]]:
        """Indices of the rollouts in each batch, in order (at least one rollout per batch)."""
        batches: list[list[int]] = []
        budget = None if self.memory_budget_mb is None else self.memory_budget_mb * 2**20
        current: list[int] = []
        used = 0
        for i, item in enumerate(items):
            need = self.estimate_bytes(item) if budget is not None else 0
            full = len(current) >= self.batch_size or (budget is not None and current and used + need > budget)
            if full:
                batches.append(current)
                current, used = [], 0
            current.append(i)
            used += need
        if current:
            batches.append(current)
        return batches

    def _inputs(self, rollout: Rollout) -> dict[str, Any]:
        """Token ids, patches and grid for one rollout (not yet batched)."""
        t0 = time.perf_counter()
        frames = np.asarray(rollout.frames)
        idx = sample_indices(len(frames), float(rollout.fps), self.sample_fps, self.max_frames)
        patches, grid = patchify_video(frames[idx], self.video)
        messages = [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
            {
                "role": "user",
                "content": [{"type": "video"}, {"type": "text", "text": render_user_text(rollout.instruction)}],
            },
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if text.count(VIDEO_BLOCK) != 1:
            raise ValueError(
                f"the chat template must render exactly one video placeholder {VIDEO_BLOCK!r}; got {text.count(VIDEO_BLOCK)}"
            )
        timestamps = None
        if self.family == "qwen3_vl":
            # stamps are the source times of the frames shown (as the Qwen3-VL processor computes them)
            timestamps = group_timestamps(idx, float(rollout.fps), self.video.temporal_patch_size)
        text = text.replace(VIDEO_BLOCK, video_placeholder(self.family, grid, self.video.merge_size, timestamps))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        n_video = sum(1 for t in ids if t == self._video_token_id)
        expected = grid[0] * grid[1] * grid[2] // self.video.merge_size**2
        if n_video != expected:
            raise RuntimeError(f"tokenised prompt has {n_video} video tokens, the video needs {expected}")
        return {
            "ids": ids,
            "patches": patches,
            "grid": grid,
            "frames_shown": len(idx),
            "second_per_grid": self.video.temporal_patch_size / self.sample_fps,
            "prep_seconds": time.perf_counter() - t0,
        }

    def _generate(self, items: Sequence[dict[str, Any]], seeds: Sequence[int]) -> tuple[list[str], list[int]]:
        """Sample ``k`` answers for each item: one prompt prefill per item, one batched decoding loop.

        The ``k`` samples of an item share its prompt, so the prompt (video included) is prefilled
        once per item, as a single unpadded row: on a CPU an unpadded prefill takes the causal
        attention kernel, while a padded batch needs a mask and a much slower kernel. The items'
        key/value caches are then left-padded to a common width, repeated ``k`` times and handed
        to ``generate``, which decodes all ``len(items) * k`` rows together from the last prompt
        token on. :class:`_SeededSampler` draws every token of row ``(item, j)`` from a generator
        seeded with ``seeds[item] + j``. Returns len(items) * k texts and, per text, the number of
        tokens generated (up to and including the first end-of-sequence token).
        """
        import torch
        from transformers import LogitsProcessorList

        pad_id, input_ids, attention, mm_types = self._left_padded(items)
        lengths, width = [len(r["ids"]) for r in items], input_ids.shape[1]
        device = self.model.device
        vision_dtype = next(self.model.parameters()).dtype
        grids = torch.tensor([r["grid"] for r in items], dtype=torch.long, device=device)
        video_kwargs: dict[str, Any] = {"video_grid_thw": grids}
        if self.family == "qwen2_5_vl":
            video_kwargs["second_per_grid_ts"] = torch.tensor(
                [r["second_per_grid"] for r in items], dtype=torch.float32, device=device
            )
        input_ids, attention, mm_types = input_ids.to(device), attention.to(device), mm_types.to(device)
        sampler = _SeededSampler([s + j for s in seeds for j in range(self.k)], self.temperature, self.top_p)
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            # the model's own multimodal (mRoPE) positions of the padded batch, as generate computes them
            positions = self.model._prepare_position_ids_for_generation(
                input_ids, {"attention_mask": attention, "mm_token_type_ids": mm_types, **video_kwargs}
            )
            per_layer: list[list[tuple[Any, Any]]] = []
            for i, r in enumerate(items):
                # the prompt but its last token, which generate feeds to produce the first sample token
                span = slice(width - lengths[i], width - 1)
                video = {key: v[i : i + 1] for key, v in video_kwargs.items()}
                out = self.model(
                    input_ids=input_ids[i : i + 1, span],
                    position_ids=positions[:, i : i + 1, span],
                    mm_token_type_ids=mm_types[i : i + 1, span],
                    use_cache=True,
                    logits_to_keep=1,
                    pixel_values_videos=torch.from_numpy(r["patches"]).to(device, vision_dtype),
                    **video,
                )
                per_layer.append(prompt_keys_values(out))
            # the decode cache is allocated once at its final width and written in place: growing a
            # cache by concatenation copies all len(items) * k rows' keys and values at every step
            cache = decode_cache(self.model.config, per_layer, width - 1, self.k, self.max_new_tokens)
            # the sampler decides each token (a one-hot distribution); generate's own sampling
            # then picks it whatever the global RNG holds, and its warpers are switched off
            generated = self.model.generate(
                input_ids=input_ids.repeat_interleave(self.k, dim=0),
                attention_mask=attention.repeat_interleave(self.k, dim=0),
                position_ids=positions.repeat_interleave(self.k, dim=1),
                cache=cache,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                logits_processor=LogitsProcessorList([sampler]),
                max_new_tokens=self.max_new_tokens,
                pad_token_id=pad_id,
            )
        new = generated[:, width:]
        return self.tokenizer.batch_decode(new, skip_special_tokens=True), _generated_lengths(
            new, self._eos_ids(pad_id)
        )


def rollout_seed(judge_seed: int, rollout: Rollout) -> int:
    """The base sampling seed of a rollout: a hash of the judge seed and what the judge sees."""
    import hashlib

    h = hashlib.sha256(f"{SEEDING}|{int(judge_seed)}|{rollout.instruction}|{float(rollout.fps)!r}|".encode())
    frames = np.ascontiguousarray(rollout.frames)
    h.update(f"{frames.shape}|{frames.dtype}|".encode())
    h.update(frames.tobytes())
    return int.from_bytes(h.digest()[:7], "big")  # < 2**56: seed + j stays a valid torch seed


class _SeededSampler:
    """A logits processor that samples each row's next token with that row's own generator.

    Temperature and nucleus (top-p) filtering as ``generate`` would apply them, then one draw
    per row by the exponential race: the token maximising ``p / e`` with ``e ~ Exp(1)`` drawn,
    one per token, from ``torch.Generator(seed_of_row)`` (an exact draw from ``p``, and the
    draw ``torch.multinomial(p, 1, generator=...)`` makes with the same generator). The
    returned scores are 0 at the chosen token and -inf elsewhere, so generate's own sampling
    can only pick it.
    """

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float):
        import torch

        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.temperature, self.top_p = float(temperature), float(top_p)
        self._race: Any = None  # the exponential draws of one step, one row per generator

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if scores.shape[0] != len(self.generators):
            raise RuntimeError(f"sampler has {len(self.generators)} generators for {scores.shape[0]} rows")
        probs = torch.softmax(scores.float() / self.temperature, dim=-1).cpu()
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # keep the smallest head whose mass reaches top_p (the first token always stays)
        drop = (sorted_p.cumsum(-1) - sorted_p) > self.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        # only the random numbers are drawn row by row (each row has its own generator)
        # drawn in place into one reused buffer: the same draws as a fresh tensor per row, without
        # allocating and stacking len(rows) tensors at every step
        if self._race is None or self._race.shape != sorted_p.shape:
            self._race = torch.empty(sorted_p.shape)
        race = self._race
        for row, gen in zip(race, self.generators, strict=True):
            row.exponential_(generator=gen)
        chosen = order.gather(1, (sorted_p / race).argmax(dim=-1, keepdim=True)).squeeze(1)
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(scores.shape[0]), chosen.to(scores.device)] = 0.0
        return out


def _generated_lengths(new: Any, eos_ids: set[int]) -> list[int]:
    """Per row of generated ids: tokens up to and including the first end token, else all."""
    lengths = []
    for row in new.tolist():
        end = next((j for j, t in enumerate(row) if t in eos_ids), None)
        lengths.append(len(row) if end is None else end + 1)
    return lengths
