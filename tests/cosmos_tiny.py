"""A tiny, randomly initialised ``Cosmos3OmniPipeline`` for CPU tests and benchmarks.

No weights can be downloaded on the machines this project is built on, so the Cosmos 3 backend
is exercised end to end with the *real* diffusers pipeline class built from small random
components (see "Real backends without weights" in docs/architecture.md): a 2-layer ``Cosmos3OmniTransformer`` with an action
head, a small ``AutoencoderKLWan``, a ``UniPCMultistepScheduler`` and a word-level tokenizer
built here. Everything is seeded, so two builds in two processes hold identical weights.

The built pipeline is cached per process (:func:`tiny_pipeline`), because building it costs
about a second and tests and the benchmark share it. Callers that change the pipeline (e.g. the
scheduler) should use :func:`build_tiny_pipeline` for a private copy.
"""
from __future__ import annotations

import functools

_SPECIAL_TOKENS = ["<unk>", "<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>"]
_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|> {{ message['role'] }} {{ message['content'] }} <|im_end|> "
    "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
)
# Words the action prompt JSON and the task instructions use; anything else maps to <unk>.
_WORDS = (
    "system user assistant you are a helpful who will generate videos images from give prompt "
    "this video is captured first-person perspective looking at the scene cinematography framing "
    "actions time description duration fps resolution h w aspect_ratio put pick place move open close "
    "spoon towel pot drawer cloth carrot plate sink left right of on in to and the"
).split()


def build_tokenizer():
    """A ``PreTrainedTokenizerFast`` with the special tokens and chat template the pipeline uses."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(_SPECIAL_TOKENS + sorted(set(_WORDS)))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>", "<|vision_start|>"],
    )
    tok.chat_template = _CHAT_TEMPLATE
    return tok


def build_tiny_pipeline(seed: int = 0):
    """Build a fresh tiny ``Cosmos3OmniPipeline`` (float32, CPU, safety checker off)."""
    import torch
    from diffusers import AutoencoderKLWan, Cosmos3OmniPipeline, UniPCMultistepScheduler
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3OmniTransformer

    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    transformer = Cosmos3OmniTransformer(
        head_dim=16,
        hidden_size=32,
        intermediate_size=64,
        latent_channel=4,
        num_attention_heads=2,
        num_hidden_layers=2,
        num_key_value_heads=1,
        patch_latent_dim=16,
        action_dim=16,
        action_gen=True,
        vocab_size=len(tokenizer) + 16,
        rope_axes_dim=[2, 3, 3],
        dtype="float32",
    )
    torch.manual_seed(seed + 1)
    vae = AutoencoderKLWan(
        base_dim=8,
        z_dim=4,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        latents_mean=[0.0] * 4,
        latents_std=[1.0] * 4,
    )
    pipe = Cosmos3OmniPipeline(
        transformer=transformer.eval(),
        text_tokenizer=tokenizer,
        vae=vae.eval(),
        scheduler=UniPCMultistepScheduler(),
        enable_safety_checker=False,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


@functools.lru_cache(maxsize=1)
def tiny_pipeline():
    """The per-process shared tiny pipeline (built once)."""
    return build_tiny_pipeline()


# Bridge statistics for tests only (the real ones are not known here): translation scaled by
# +-3 cm, rotation dims identity, gripper [0, 1]. Any 10 numbers exercise the same code path.
TEST_STATS = {
    "method": "quantile_rot",
    "q01": [-0.03] * 3 + [-1.0] * 6 + [0.0],
    "q99": [0.03] * 3 + [1.0] * 6 + [1.0],
    "clamp": False,
}


def tiny_bridge_spec(env_chunk: int = 4, model_chunk: int = 4, size: int = 64, steps: int = 2, **overrides):
    """Kosmos-Bridge-v1's spec with the CPU settings the tiny pipeline needs (its own spec hash)."""
    from kosmos_env.spec import load_spec

    spec = load_spec("Kosmos-Bridge-v1")
    world = {
        "device": "cpu",
        "dtype": "float32",
        "num_inference_steps": steps,
        "chunk_size": model_chunk,
        "input_size": [size, size],
        "bridge": dict(spec.world["bridge"], normalization=dict(TEST_STATS)),
    }
    world.update(overrides.pop("world", {}))
    action = dict(spec.to_dict()["action"], chunk=env_chunk)
    return spec.with_overrides(image_size=(size, size), world=world, action=action, **overrides)
