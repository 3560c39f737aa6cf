"""Batched Cosmos 3 forward-dynamics calls: N episodes' chunks through one denoising loop.

``Cosmos3OmniPipeline.__call__`` runs one sample per call (list prompts are collapsed to
their first entry) and its transformer packs one sequence per forward pass. This module
builds the batched call from the pipeline's own components, step for step as ``__call__``
does for an action run:

1. per request: tokenize the action-JSON prompt and the negative prompt (the pipeline's
   ``tokenize_prompt``) and pack the text segment;
2. the conditioning frames of all requests preprocessed and VAE-encoded in **one** batch;
3. per request: its initial noise drawn from **its own** ``torch.Generator`` (so a request's
   output does not depend on what else is in the batch);
4. one denoising loop: every step runs the transformer's decoder stack **once** over all
   requests' conditional and unconditional sequences stacked along a batch axis (shorter text
   prefixes right-padded and masked out of the generation pathway's keys), then one scheduler
   step over the stacked latents;
5. the final latents of all requests VAE-decoded in **one** batch.

Per request the output equals a single ``pipeline(**kwargs)`` call with the same generator
within float tolerance (tested on a tiny random pipeline). Requests in one batch must share
the sampler settings (steps, guidance, fps, chunk, resolution tier, mode); prompts, actions,
conditioning frames and seeds may differ. A pipeline with SeaCache enabled, context
parallelism or a sound stream is not batched here: :func:`generate_batch` then runs the
requests one by one through the pipeline (``batched`` is False in its report), so callers
always get correct frames.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

# the keyword arguments every request of one batch must share (they shape the loop itself)
_SHARED_KWARGS = (
    "fps",
    "num_inference_steps",
    "guidance_scale",
    "use_system_prompt",
    "output_type",
    "mixed_precision_format",
    "mixed_precision_first_steps",
    "mixed_precision_last_steps",
    "mixed_precision_reasoner_policy",
)
_SHARED_ACTION = ("mode", "chunk_size", "resolution_tier", "view_point")


@dataclass
class BatchReport:
    """How a batch was run: ``batched`` False means one pipeline call per request (fallback)."""

    batched: bool
    size: int
    reason: str = ""


def can_batch(pipe: Any) -> tuple[bool, str]:
    """Whether :func:`generate_batch` can run this pipeline's requests in one loop (and why not)."""
    transformer = pipe.transformer
    if getattr(transformer, "is_cache_enabled", False):
        return False, "SeaCache is enabled (its per-pass cache hooks live in the transformer's forward)"
    if (
        getattr(transformer, "_cp_shard_fn", None) is not None
        or getattr(transformer, "_cp_gather_fn", None) is not None
    ):
        return False, "context parallelism is installed on the transformer"
    return True, ""


def generate_batch(pipe: Any, requests: Sequence[Mapping[str, Any]]) -> tuple[list[np.ndarray], BatchReport]:
    """Videos (``output_type`` "np": float [T, H, W, 3] in [0, 1]) for each request's pipeline kwargs.

    Each request is the keyword dict one ``pipe(**kwargs)`` call would take (as
    :meth:`~kosmos_env.worlds.cosmos3.Cosmos3World.call_kwargs` builds it), each with its own
    ``generator``.
    """
    if not requests:
        return [], BatchReport(batched=True, size=0)
    _check_shared(requests)
    ok, reason = can_batch(pipe)
    if not ok:
        return [np.asarray(pipe(**dict(r)).video) for r in requests], BatchReport(False, len(requests), reason)
    if any(r.get("enable_safety_check") and getattr(pipe, "safety_checker", None) is not None for r in requests):
        reason = "a safety checker is attached and enabled"
        return [np.asarray(pipe(**dict(r)).video) for r in requests], BatchReport(False, len(requests), reason)
    return _BatchedCall(pipe, requests).run(), BatchReport(True, len(requests))


def _check_shared(requests: Sequence[Mapping[str, Any]]) -> None:
    first = requests[0]
    if first.get("action") is None or first["action"].mode != "forward_dynamics":
        raise ValueError("batched Cosmos 3 calls are forward-dynamics action runs (kwargs['action'].mode)")
    for r in requests[1:]:
        for key in _SHARED_KWARGS:
            if r.get(key) != first.get(key):
                raise ValueError(f"requests in one batch must share {key!r}: {first.get(key)!r} != {r.get(key)!r}")
        for key in _SHARED_ACTION + ("domain_name",):
            a, b = getattr(first["action"], key), getattr(r["action"], key)
            if a != b:
                raise ValueError(f"requests in one batch must share action.{key}: {a!r} != {b!r}")
    if first.get("output_type", "pil") != "np":
        raise ValueError("batched Cosmos 3 calls return numpy video (output_type='np')")


class _BatchedCall:
    """One batched forward-dynamics generation (see the module docstring for the steps)."""

    def __init__(self, pipe: Any, requests: Sequence[Mapping[str, Any]]):
        self.pipe, self.requests = pipe, list(requests)
        self.transformer = pipe.transformer
        self.device = pipe._get_execution_device()
        self.dtype = self.transformer.dtype
        first = self.requests[0]
        self.action0 = first["action"]
        self.fps = float(first.get("fps", 24.0))
        self.steps = int(first.get("num_inference_steps", 35))
        self.guidance = float(first.get("guidance_scale", 6.0))

    # -- preparation ------------------------------------------------------------------------
    def _canvas(self) -> tuple[int, int]:
        from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import _ACTION_RESOLUTION_BINS
        from diffusers.video_processor import VideoProcessor

        a = self.action0
        clip = [a.image] if a.image is not None else a.video
        probe = self.pipe.video_processor.preprocess_video(clip)
        return VideoProcessor.classify_height_width_bin(
            int(probe.shape[-2]), int(probe.shape[-1]), ratios=_ACTION_RESOLUTION_BINS[str(a.resolution_tier)]
        )

    def _texts(self, height: int, width: int, num_frames: int) -> list[tuple[dict, dict]]:
        out = []
        for r in self.requests:
            self.pipe.check_inputs(
                r["prompt"],
                r.get("negative_prompt"),
                None,
                None,
                None,
                None,
                self.guidance,
                False,
                ["latents"],
                r["action"],
            )
            prompt = r["prompt"][0] if isinstance(r["prompt"], list) else r["prompt"]
            negative = r.get("negative_prompt")
            negative = negative[0] if isinstance(negative, list) else negative
            cond_ids, uncond_ids = self.pipe.tokenize_prompt(
                prompt,
                negative,
                num_frames=num_frames,
                height=height,
                width=width,
                fps=self.fps,
                use_system_prompt=r.get("use_system_prompt"),
                add_resolution_template=True,
                add_duration_template=True,
                action_mode=r["action"].mode,
                action_view_point=r["action"].view_point,
            )
            out.append(
                (
                    self.pipe._prepare_text_segment(cond_ids, device=self.device),
                    self.pipe._prepare_text_segment(uncond_ids, device=self.device),
                )
            )
        return out

    def _latents(self, num_frames: int):
        """Clean conditioning latents (one batched VAE encode), noise per request, action tokens."""
        import torch
        from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import _EMBODIMENT_TO_DOMAIN_ID
        from diffusers.utils.torch_utils import randn_tensor

        pipe, f32 = self.pipe, torch.float32
        clips, sizes = [], []
        for r in self.requests:
            a = r["action"]
            clip = [a.image] if a.image is not None else a.video
            frames, image_size, _, _ = pipe._prepare_action_video_conditioning(
                clip, a.resolution_tier, num_frames, device=self.device, dtype=f32
            )
            clips.append(frames)
            sizes.append(image_size)
        x0_all = pipe._encode_video(torch.cat(clips, dim=0)).contiguous().float()
        chunk, action_dim = self.action0.chunk_size, self.transformer.action_dim
        latents, actions, masks, domains = [], [], [], []
        for i, r in enumerate(self.requests):
            x0 = pipe._remove_action_video_padding_from_latent(x0_all[i : i + 1], sizes[i])
            mask = torch.zeros((x0.shape[2], 1, 1), device=self.device, dtype=f32)
            mask[0, 0, 0] = 1.0  # forward dynamics: the first latent frame is the condition
            generator = r.get("generator")
            noise = randn_tensor(tuple(x0.shape), generator=generator, device=self.device, dtype=f32)
            latents.append(mask * x0.to(device=self.device, dtype=f32) + (1.0 - mask) * noise)
            raw = r["action"].raw_actions
            if raw is None:
                raise ValueError("action_mode='forward_dynamics' requires an action tensor.")
            raw = raw.to(device=self.device, dtype=f32)
            if raw.shape[0] < chunk:  # short inputs repeat the last action, as the pipeline does
                raw = torch.cat([raw, raw[-1:].expand(chunk - raw.shape[0], -1)], dim=0)
            raw = raw[:chunk]
            if raw.shape[-1] < action_dim:
                raw = torch.cat(
                    [raw, torch.zeros(raw.shape[0], action_dim - raw.shape[-1], dtype=f32, device=self.device)], -1
                )
            # every action token is a clean condition; the pipeline still draws (and masks) their noise,
            # which keeps each generator's state as a single call leaves it
            randn_tensor(tuple(raw.shape), generator=generator, device=self.device, dtype=f32)
            actions.append(raw)
            masks.append(mask)
            domain = r["action"].domain_name
            if domain not in _EMBODIMENT_TO_DOMAIN_ID:
                raise ValueError(f"Unknown Cosmos3 action domain_name={domain!r}")
            domains.append(torch.tensor([_EMBODIMENT_TO_DOMAIN_ID[domain]], dtype=torch.long, device=self.device))
        return latents, actions, masks, domains

    def _static(self, text: dict, latents: Any, actions: Any) -> dict[str, Any]:
        """The per-sequence packing the pipeline hoists out of its loop (one prompt, one request)."""
        import torch

        pipe = self.pipe
        vision = pipe._prepare_vision_segment(
            input_vision_tokens=latents,
            has_image_condition=True,
            mrope_offset=text["vision_start_temporal_offset"],
            vision_fps=self.fps,
            curr=text["und_len"],
            device=self.device,
            condition_frame_indexes=[0],
        )
        action = pipe._prepare_action_segment(
            input_action_tokens=actions,
            condition_frame_indexes=list(range(self.action0.chunk_size)),
            mrope_offset=text["vision_start_temporal_offset"],
            action_fps=self.fps,
            curr=text["und_len"] + vision["num_vision_tokens"],
            device=self.device,
        )
        return {
            **text,
            **vision,
            **action,
            "position_ids": torch.cat(
                [text["text_mrope_ids"], vision["vision_mrope_ids"], action["action_mrope_ids"]], 1
            ),
            "sequence_length": text["und_len"] + vision["num_vision_tokens"] + action["action_len"],
        }

    # -- the transformer over a batch of packed sequences -------------------------------------
    def _embed(self, static: dict, vision_tokens: Any, vision_temb: Any, action_tokens: Any, domain: Any):
        """One sequence's input hidden states and rotary tables (the transformer's forward, first half)."""
        tr = self.transformer
        text_emb = tr.embed_tokens(static["input_ids"])
        hidden = text_emb.new_zeros((static["sequence_length"], tr.config.hidden_size))
        hidden[static["text_indexes"]] = text_emb
        packed, _ = tr._patchify_and_pack_latents([vision_tokens])
        packed = tr._apply_timestep_embeds_to_noisy_tokens(
            packed_tokens=tr.proj_in(packed),
            packed_timestep_embeds=vision_temb,
            noisy_frame_indexes=static["vision_noisy_frame_indexes"],
            token_shapes=static["vision_token_shapes"],
        )
        hidden[static["vision_sequence_indexes"]] = packed
        packed_a, dom = tr._pack_action_latents([action_tokens], static["action_token_shapes"], [domain])
        packed_a = packed_a.to(text_emb.dtype)
        packed_a = tr.action_proj_in(packed_a, dom.to(packed_a.device)) + tr.action_modality_embed
        hidden[static["action_sequence_indexes"]] = packed_a  # all clean: no timestep embedding
        pos = static["position_ids"]
        cos, sin = tr.rotary_emb(
            position_ids=pos.unsqueeze(0) if pos.ndim == 1 else pos.unsqueeze(1),
            device=hidden.device,
            dtype=hidden.dtype,
        )
        return hidden, cos.squeeze(0), sin.squeeze(0)

    def _forward(self, rows: list[tuple[dict, Any, Any, Any]], timestep: float) -> list[Any]:
        """Vision velocity predictions for each (static, vision latents, action tokens, domain) row."""
        import torch

        tr = self.transformer
        t_vision = torch.full((rows[0][0]["num_noisy_vision_tokens"],), timestep, device=self.device)
        temb_dtype = next(tr.time_embedder.parameters()).dtype
        temb = tr.time_embedder(tr.time_proj(t_vision * tr.config.timestep_scale).to(temb_dtype))
        embedded = []
        for static, vision, action, domain in rows:
            hidden, cos, sin = self._embed(static, vision, temb.to(tr.embed_tokens.weight.dtype), action, domain)
            embedded.append((static["und_len"], hidden, cos, sin))
        gen_lens = {h.shape[0] - u for u, h, _, _ in embedded}
        if len(gen_lens) != 1:
            raise ValueError("requests in one batch must generate the same number of tokens")
        und_max = max(u for u, _, _, _ in embedded)

        def padded(parts, length):
            out = parts[0].new_zeros((len(parts), length, parts[0].shape[-1]))
            for i, p in enumerate(parts):
                out[i, : p.shape[0]] = p
            return out

        und = padded([h[:u] for u, h, _, _ in embedded], und_max)
        gen = torch.stack([h[u:] for u, h, _, _ in embedded])
        cos_und = padded([c[:u] for u, _, c, _ in embedded], und_max)
        sin_und = padded([s[:u] for u, _, _, s in embedded], und_max)
        cos_gen = torch.stack([c[u:] for u, _, c, _ in embedded])
        sin_gen = torch.stack([s[u:] for u, _, _, s in embedded])
        key_mask = None
        if any(u != und_max for u, _, _, _ in embedded):
            # generation queries attend to every real text key and every generation key, never to padding
            valid = torch.ones((len(rows), und_max + gen.shape[1]), dtype=torch.bool, device=self.device)
            for i, (u, _, _, _) in enumerate(embedded):
                valid[i, u:und_max] = False
            key_mask = valid[:, None, None, :]
        rotary = (cos_und, sin_und, cos_gen, sin_gen)
        for layer in tr.layers:
            und, gen = _decoder_layer(layer, und, gen, rotary, key_mask)
        und, gen = tr.norm(und), tr.norm_moe_gen(gen)
        preds = []
        for i, (u, _, _, _) in enumerate(embedded):
            static = rows[i][0]
            last = torch.cat([und[i, :u], gen[i]], dim=0)
            packed = tr.proj_out(last[static["vision_mse_loss_indexes"]])
            shape = tuple(rows[i][1].shape[2:])
            preds.append(
                tr._unpatchify_and_unpack_latents(
                    packed,
                    token_shapes_vision=static["vision_token_shapes"],
                    noisy_frame_indexes_vision=static["vision_noisy_frame_indexes"],
                    original_latent_shapes=[shape],
                )[0]
            )
        return preds

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> list[np.ndarray]:
        import torch
        from diffusers.pipelines.cosmos.mixed_precision import (
            Cosmos3MixedPrecisionConfig,
            apply_cosmos3_mixed_precision_step,
            reset_cosmos3_mixed_precision,
        )

        pipe, first = self.pipe, self.requests[0]
        num_frames = self.action0.chunk_size + 1
        height, width = self._canvas()
        with torch.inference_mode():
            texts = self._texts(height, width, num_frames)
            latents, actions, masks, domains = self._latents(num_frames)
            cfg = self.guidance > 1.0
            statics = [
                (self._static(c, lat, act), self._static(u, lat, act))
                for (c, u), lat, act in zip(texts, latents, actions, strict=True)
            ]
            # the pipeline's scheduler keeps per-call state: a private copy keeps it untouched
            scheduler = copy.deepcopy(pipe.scheduler)
            if pipe.config.use_native_flow_schedule:
                sigmas = np.linspace(1.0 - 1.0 / scheduler.config.num_train_timesteps, 0.0, self.steps + 1)[:-1]
                scheduler.set_timesteps(self.steps, device=self.device, sigmas=sigmas)
            else:
                scheduler.set_timesteps(self.steps, device=self.device)
            timesteps = scheduler.timesteps
            mixed = Cosmos3MixedPrecisionConfig.resolve(
                self.transformer,
                mixed_precision_format=first.get("mixed_precision_format"),
                mixed_precision_first_steps=first.get("mixed_precision_first_steps"),
                mixed_precision_last_steps=first.get("mixed_precision_last_steps"),
                mixed_precision_reasoner_policy=first.get("mixed_precision_reasoner_policy"),
            )
            batch = torch.cat(latents, dim=0)  # [N, C, T, H, W]
            try:
                for i, t in enumerate(timesteps):
                    apply_cosmos3_mixed_precision_step(self.transformer, mixed, i, len(timesteps), trace=[])
                    rows = []
                    for n, (cond, uncond) in enumerate(statics):
                        tokens = batch[n : n + 1].to(device=self.device, dtype=self.dtype)
                        action = actions[n].to(device=self.device, dtype=self.dtype)
                        rows.append((cond, tokens, action, domains[n]))
                        if cfg:
                            rows.append((uncond, tokens, action, domains[n]))
                    preds = self._forward(rows, t.item())
                    velocities = []
                    per = 2 if cfg else 1
                    for n in range(len(statics)):
                        noisy = (1.0 - masks[n]).to(dtype=preds[0].dtype)
                        cond_v = (preds[n * per] * noisy).float()
                        if cfg:
                            uncond_v = (preds[n * per + 1] * noisy).float()
                            velocities.append(uncond_v + self.guidance * (cond_v - uncond_v))
                        else:
                            velocities.append(cond_v)
                    batch = scheduler.step(torch.cat(velocities, dim=0), t, batch, return_dict=False)[0]
            finally:
                reset_cosmos3_mixed_precision(self.transformer, mixed)
            vae_dtype = pipe.vae.dtype
            mean = pipe._vae_latents_mean.to(device=batch.device, dtype=vae_dtype)
            inv_std = pipe._vae_latents_inv_std.to(device=batch.device, dtype=vae_dtype)
            z_raw = batch.to(vae_dtype) / inv_std.view(1, -1, 1, 1, 1) + mean.view(1, -1, 1, 1, 1)
            decoded = pipe.vae.decode(z_raw).sample.to(batch.dtype)
            videos = pipe.video_processor.postprocess_video(decoded, output_type="np")
        return [np.asarray(v) for v in videos]


def _decoder_layer(layer: Any, und: Any, gen: Any, rotary: tuple, key_mask: Any) -> tuple[Any, Any]:
    """``Cosmos3VLTextMoTDecoderLayer.forward`` over [batch, tokens, hidden] sequences."""
    und_attn, gen_attn = _attention(
        layer.self_attn, layer.input_layernorm(und), layer.input_layernorm_moe_gen(gen), rotary, key_mask
    )
    und = und + und_attn
    gen = gen + gen_attn
    return (
        und + layer.mlp(layer.post_attention_layernorm(und)),
        gen + layer.mlp_moe_gen(layer.post_attention_layernorm_moe_gen(gen)),
    )


def _attention(attn: Any, und: Any, gen: Any, rotary: tuple, key_mask: Any) -> tuple[Any, Any]:
    """The dual-pathway attention of ``Cosmos3AttnProcessor`` with a leading batch axis.

    Text (understanding) tokens attend causally among themselves: right padding never reaches
    a real token. Generation tokens attend to all text and generation keys; ``key_mask``
    (True = attend) hides the padding when the text prefixes differ in length.
    """
    import torch
    from diffusers.models.attention_dispatch import dispatch_attention_fn

    b, lu, lg = und.shape[0], und.shape[1], gen.shape[1]
    h, hk, d = attn.num_attention_heads, attn.num_key_value_heads, attn.head_dim
    q_und = attn.norm_q(attn.to_q(und).view(b, lu, h, d))
    k_und = attn.norm_k(attn.to_k(und).view(b, lu, hk, d))
    v_und = attn.to_v(und).view(b, lu, hk, d)
    k_und_for_gen = attn.k_norm_und_for_gen(k_und) if attn.k_norm_und_for_gen is not None else k_und
    q_gen = attn.norm_added_q(attn.add_q_proj(gen).view(b, lg, h, d))
    k_gen = attn.norm_added_k(attn.add_k_proj(gen).view(b, lg, hk, d))
    v_gen = attn.add_v_proj(gen).view(b, lg, hk, d)
    cos_und, sin_und, cos_gen, sin_gen = (x.unsqueeze(2) for x in rotary)
    q_und = q_und * cos_und + _rotate_half(q_und) * sin_und
    k_und = k_und * cos_und + _rotate_half(k_und) * sin_und
    k_und_for_gen = k_und_for_gen * cos_und + _rotate_half(k_und_for_gen) * sin_und
    q_gen = q_gen * cos_gen + _rotate_half(q_gen) * sin_gen
    k_gen = k_gen * cos_gen + _rotate_half(k_gen) * sin_gen
    backend = getattr(attn.processor, "_attention_backend", None)
    causal = dispatch_attention_fn(q_und, k_und, v_und, is_causal=True, enable_gqa=True, backend=backend)
    full = dispatch_attention_fn(
        q_gen,
        torch.cat((k_und_for_gen, k_gen), 1),
        torch.cat((v_und, v_gen), 1),
        attn_mask=key_mask,
        is_causal=False,
        enable_gqa=True,
        backend=backend,
    )
    return attn.to_out(causal.flatten(-2, -1)), attn.to_add_out(full.flatten(-2, -1))


def _rotate_half(x: Any) -> Any:
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
