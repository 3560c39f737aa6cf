"""A tiny, randomly initialised ``Cosmos3OmniPipeline`` for CPU tests, benchmarks and laptop runs.

No weights can be downloaded on the machines this project is built on, so the Cosmos 3 backend
is exercised end to end with the *real* diffusers pipeline class built from small random
components: a 2-layer ``Cosmos3OmniTransformer`` with an action
head, a small ``AutoencoderKLWan``, a ``UniPCMultistepScheduler`` and a word-level tokenizer
built here. Everything is seeded, so two builds in two processes hold identical weights.

The built pipeline is cached per process (:func:`tiny_pipeline`), because building it costs
about a second and tests and the benchmark share it. Callers that change the pipeline (e.g. the
scheduler) should use :func:`build_tiny_pipeline` for a private copy. :func:`save_tiny_pipeline`
writes one to a folder laid out like a real checkpoint (``model_index.json`` and one folder per
component), which ``gymnasium.make("Kosmos-Bridge-v1", world_kwargs={"weights_path": DIR})``
loads with no spec override.
"""

from __future__ import annotations

import functools
import os

__all__ = [
    "build_tokenizer",
    "build_tiny_pipeline",
    "tiny_pipeline",
    "save_tiny_pipeline",
    "TEST_STATS",
    "tiny_bridge_spec",
]

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


def build_tiny_pipeline(seed: int = 0, vae_base_dim: int = 8, vae_res_blocks: int = 1):
    """Build a fresh tiny ``Cosmos3OmniPipeline`` (float32, CPU, safety checker off).

    ``vae_base_dim`` / ``vae_res_blocks`` set the VAE's channel width and depth; the VAE's
    full-resolution convolutions dominate a CPU call at the registered 240x320 input, so the saved
    laptop checkpoint uses a narrower, shallower one.
    """
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
        base_dim=vae_base_dim,
        z_dim=4,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=vae_res_blocks,
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


def save_tiny_pipeline(path: str | os.PathLike, seed: int = 0, vae_base_dim: int = 2, vae_res_blocks: int = 0) -> str:
    """Build a tiny pipeline and save it to ``path`` as a diffusers checkpoint folder; returns the path.

    The VAE is narrower and shallower than the in-memory test pipeline's (width 2, no extra residual
    blocks: about 3x faster than width 2 with one block), so the registered spec's 17 frames at
    240x320 encode and decode in seconds on a CPU.
    """
    path = os.fspath(path)
    pipe = build_tiny_pipeline(seed, vae_base_dim=vae_base_dim, vae_res_blocks=vae_res_blocks)
    pipe.save_pretrained(path, safe_serialization=True)
    return path


# Test statistics with round numbers (translation scaled by +-3 cm, rotation dims identity, gripper
# [0, 1]); kept for tests that want the conversion easy to read. The registered spec carries
# NVIDIA's real Bridge statistics.
TEST_STATS = {
    "method": "quantile",
    "q01": [-0.03] * 3 + [-1.0] * 6 + [0.0],
    "q99": [0.03] * 3 + [1.0] * 6 + [1.0],
    "clamp": False,
}


def tiny_bridge_spec(env_chunk: int = 4, model_chunk: int = 4, size: int = 48, steps: int = 2, **overrides):
    """Kosmos-Bridge-v1's spec with small CPU settings for fast tests (its own spec hash).

    ``size`` is the model's input height; the width keeps the registered 4:3 scene. The tiny
    pipeline also runs the registered spec unchanged (see :func:`save_tiny_pipeline`), only slower.
    """
    from kosmos_env.spec import load_spec

    spec = load_spec("Kosmos-Bridge-v1")
    world = {
        "device": "cpu",
        "dtype": "float32",
        "num_inference_steps": steps,
        "chunk_size": model_chunk,
        "input_size": [size, _width(size)],
    }
    world.update(overrides.pop("world", {}))
    action = dict(spec.to_dict()["action"], chunk=env_chunk)
    image_size = overrides.pop("image_size", (size, _width(size)))
    return spec.with_overrides(image_size=tuple(image_size), world=world, action=action, **overrides)


def _width(height: int) -> int:
    """The 4:3 width for a height (rounded to a multiple of 16, as the tiny VAE and patching need)."""
    return max(16, int(round(height * 4 / 3 / 16)) * 16)
