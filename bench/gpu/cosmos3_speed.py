"""Cosmos 3 speed on a GPU at the size of a released checkpoint, with random weights.

Builds ``Cosmos3OmniPipeline`` with a ``Cosmos3OmniTransformer`` at the architecture size of
``nvidia/Cosmos3-Nano`` and a Wan 2.2-size ``AutoencoderKLWan``, both randomly initialised (the
seconds and bytes of a forward pass do not depend on the weight values; no weights are
downloaded), then times action-conditioned forward-dynamics calls (one call = one chunk of
actions -> chunk+1 frames, domain ``bridge_orig_lerobot``) over a grid of

- sampling steps (``--steps``),
- resolution tiers (``--tiers``; the pipeline's action resolution bins),
- batch sizes (``--batch-sizes``): B episodes' chunks per call; B > 1 goes through
  :func:`kosmos_env.worlds.cosmos3_batch.generate_batch` (one denoising loop over B latents;
  options it cannot batch, e.g. SeaCache, fall back to B single calls and say so),
- diffusers speed options (``--options``): ``baseline``; ``text_kv_cache`` (exact text K/V
  caching, lossless); ``sea_cache`` (SeaCache step skipping, approximate); ``attn:<backend>``
  (e.g. ``attn:_native_cudnn``, ``attn:flash``: ``set_attention_backend``); ``compile``
  (``torch.compile`` of the transformer; its first call is reported separately); ``offload``
  (``enable_model_cpu_offload``: a memory lever, slower),

and writes a table of seconds per chunk (median over ``--reps`` after one warm-up call) and
peak GPU memory (``torch.cuda.max_memory_allocated``) per cell, as Markdown and JSON.

Where the architecture numbers come from (see bench/gpu/README.md): diffusers'
``Cosmos3OmniTransformer`` signature defaults, documented on the class page whose loading example
is ``nvidia/Cosmos3-Nano`` (hidden 4096, 36 layers, 32 heads of 128, 8 KV heads, MLP 12288,
latent channels 48, patch latent dim 192, vocab 151936); two such towers (understanding and
generation, a Mixture-of-Transformers) are ~16B parameters, the size the model card gives
for Nano. The script prints the parameter count it built so this can be checked. If a real
``transformer/config.json`` (and ``vae/config.json``) is at hand, pass ``--transformer-config``
/ ``--vae-config`` and those values are used instead (only the JSON is read, never weights).

``--smoke`` runs the same code on CPU with the tiny test configuration (kosmos_env/testing/cosmos_tiny.py),
one cell per option, to check the script executes; its numbers mean nothing for a GPU.

    python bench/gpu/cosmos3_speed.py --out bench/results/gpu_cosmos3_speed      # on a GPU machine
    python bench/gpu/cosmos3_speed.py --smoke --out /tmp/smoke                    # anywhere
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

# diffusers' Cosmos3OmniTransformer defaults (docs page loading nvidia/Cosmos3-Nano); see README
NANO_TRANSFORMER = dict(
    head_dim=128,
    hidden_size=4096,
    intermediate_size=12288,
    latent_channel=48,
    num_attention_heads=32,
    num_hidden_layers=36,
    num_key_value_heads=8,
    patch_latent_dim=192,
    latent_patch_size=2,
    vocab_size=151936,
    action_gen=True,
    action_dim=32,
    num_embodiment_domains=32,
    dtype="bfloat16",
)
# Wan 2.2 (TI2V-5B) VAE shape: 48 latent channels, 16x spatial / 4x temporal compression.
# From memory of Wan2.2's vae/config.json, not read here: pass --vae-config to use the real file.
WAN22_VAE = dict(
    base_dim=160,
    decoder_base_dim=256,
    z_dim=48,
    dim_mult=[1, 2, 4, 4],
    num_res_blocks=2,
    temperal_downsample=[False, True, True],
    is_residual=True,
    in_channels=12,
    out_channels=12,
    patch_size=2,
    scale_factor_spatial=16,
    scale_factor_temporal=4,
)


def build(args):
    """The pipeline (random weights) on the target device, and a description of what was built."""
    import torch
    from diffusers import AutoencoderKLWan, Cosmos3OmniPipeline, UniPCMultistepScheduler
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3OmniTransformer

    from kosmos_env.testing.cosmos_tiny import build_tiny_pipeline, build_tokenizer

    if args.smoke:
        pipe = build_tiny_pipeline()
        return pipe, "tiny test configuration (kosmos_env/testing/cosmos_tiny.py), float32, CPU"
    tcfg = dict(NANO_TRANSFORMER)
    if args.transformer_config:
        with open(args.transformer_config) as fh:
            tcfg = {k: v for k, v in json.load(fh).items() if not k.startswith("_")}
    vcfg = dict(WAN22_VAE)
    if args.vae_config:
        with open(args.vae_config) as fh:
            vcfg = {k: v for k, v in json.load(fh).items() if not k.startswith("_")}
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device(args.device):
        prev = torch.get_default_dtype()
        torch.set_default_dtype(dtype)  # initialise straight in bf16 on the GPU (no fp32 copy)
        try:
            transformer = Cosmos3OmniTransformer(**tcfg).eval()
            vae = AutoencoderKLWan(**vcfg).eval()
        finally:
            torch.set_default_dtype(prev)
    pipe = Cosmos3OmniPipeline(
        transformer=transformer,
        text_tokenizer=build_tokenizer(),
        vae=vae,
        scheduler=UniPCMultistepScheduler(),
        enable_safety_checker=False,
    )
    pipe.set_progress_bar_config(disable=True)
    n_t = sum(p.numel() for p in transformer.parameters())
    n_v = sum(p.numel() for p in vae.parameters())
    desc = (
        f"Cosmos3OmniTransformer {n_t / 1e9:.2f}B params ({json.dumps(tcfg, sort_keys=True)}), "
        f"AutoencoderKLWan {n_v / 1e6:.0f}M params, {args.dtype} on {args.device}, random weights, "
        f"built in {time.perf_counter() - t0:.0f} s"
    )
    return pipe, desc


def call(pipe, args, tier: int, steps: int, batch: int = 1):
    """One forward-dynamics chunk per episode for ``batch`` episodes; returns (frames, batched?)."""
    import numpy as np
    import torch
    from diffusers import CosmosActionCondition

    rng = np.random.default_rng(0)
    h, w = (64, 64) if args.smoke else (256, 320)
    requests = []
    for b in range(batch):
        image = rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8)
        actions = torch.as_tensor(rng.uniform(-1, 1, size=(args.chunk, 10)), dtype=torch.float32)
        requests.append(
            dict(
                prompt="put the carrot on the plate",
                action=CosmosActionCondition(
                    mode="forward_dynamics",
                    chunk_size=args.chunk,
                    domain_name="bridge_orig_lerobot",
                    resolution_tier=tier,
                    raw_actions=actions,
                    image=image,
                    view_point="ego_view",
                ),
                fps=5.0,
                num_inference_steps=steps,
                guidance_scale=1.0,
                use_system_prompt=False,
                generator=torch.Generator().manual_seed(1 + b),
                output_type="np",
            )
        )
    if batch == 1:
        return pipe(**requests[0]).video, False
    from kosmos_env.worlds.cosmos3_batch import generate_batch

    videos, report = generate_batch(pipe, requests)
    return np.stack(videos), report.batched


def apply_option(pipe, option: str, args) -> None:
    import torch

    if option == "baseline":
        return
    if option == "text_kv_cache":
        from diffusers.hooks import TextKVCacheConfig

        pipe.transformer.enable_cache(TextKVCacheConfig())
    elif option == "sea_cache":
        from diffusers.hooks import SeaCacheConfig

        pipe.transformer.enable_cache(SeaCacheConfig())
    elif option.startswith("attn:"):
        pipe.transformer.set_attention_backend(option.split(":", 1)[1])
    elif option == "compile":
        pipe.transformer = torch.compile(pipe.transformer)
    elif option == "offload":
        pipe.enable_model_cpu_offload()
    else:
        raise ValueError(f"unknown option {option!r}")


def undo_option(pipe, option: str, original_transformer) -> None:
    if option in ("text_kv_cache", "sea_cache"):
        pipe.transformer.disable_cache()
    elif option.startswith("attn:"):
        pipe.transformer.set_attention_backend("native")
    elif option == "compile":
        pipe.transformer = original_transformer
    elif option == "offload":
        pipe.remove_all_hooks()
        pipe.to(original_transformer.device)


def measure(pipe, args, tier, steps, option, batch=1) -> dict:
    import torch

    cuda = torch.cuda.is_available() and not args.smoke

    def sync():
        if cuda:
            torch.cuda.synchronize()

    original = pipe.transformer
    row = {"tier": tier, "steps": steps, "option": option, "batch": batch}
    try:
        apply_option(pipe, option, args)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        sync()
        t0 = time.perf_counter()
        video, row["batched"] = call(pipe, args, tier, steps, batch)
        sync()
        row["first_call_s"] = time.perf_counter() - t0
        times = []
        for _ in range(args.reps):
            sync()
            t0 = time.perf_counter()
            video, _ = call(pipe, args, tier, steps, batch)
            sync()
            times.append(time.perf_counter() - t0)
        shape = getattr(video, "shape", None)
        row.update(
            s_per_chunk=statistics.median(times),
            s_min=min(times),
            frames_shape=list(shape) if shape else None,
            s_per_episode_chunk=statistics.median(times) / batch,
            s_per_step=statistics.median(times) / steps,
            peak_gb=torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        )
    except Exception as exc:  # an option unavailable here (e.g. no flash-attn) is a row, not a crash
        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        try:
            undo_option(pipe, option, original)
        except Exception as exc:
            row["undo_error"] = f"{type(exc).__name__}: {exc}"
    return row


def table(rows) -> str:
    lines = [
        "| tier | steps | option | batch | s/call (median) | s/call (min) | s/episode-chunk | s/step | first call s | "
        "peak GPU GiB | output | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f = lambda k, fmt: fmt.format(r[k]) if r.get(k) is not None else "-"  # noqa: E731
        note = r.get("error", "") or (
            "" if r.get("batched", True) or r.get("batch", 1) == 1 else "not batched (fallback)"
        )
        lines.append(
            f"| {r['tier']} | {r['steps']} | {r['option']} | {r.get('batch', 1)} | {f('s_per_chunk', '{:.3f}')} | "
            f"{f('s_min', '{:.3f}')} | {f('s_per_episode_chunk', '{:.3f}')} | "
            f"{f('s_per_step', '{:.3f}')} | {f('first_call_s', '{:.2f}')} | {f('peak_gb', '{:.1f}')} | "
            f"{r.get('frames_shape') or '-'} | {note} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny config on CPU, to check that the script runs")
    ap.add_argument("--steps", type=int, nargs="+", default=None, help="sampling steps (default 10 30; smoke: 2)")
    ap.add_argument("--tiers", type=int, nargs="+", default=None, help="resolution tiers (default 256 480; smoke: 256)")
    ap.add_argument(
        "--options",
        nargs="+",
        default=None,
        help="default: baseline text_kv_cache sea_cache attn:_native_cudnn attn:flash compile "
        "(smoke: baseline text_kv_cache sea_cache)",
    )
    ap.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=None,
        help="episodes per call (default 1 4 8; smoke: 1); B > 1 uses the batched call",
    )
    ap.add_argument(
        "--chunk", type=int, default=None, help="actions per call (default 16, the docs' Bridge chunk; smoke: 4)"
    )
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--transformer-config", default=None, help="a real transformer/config.json to size the model from")
    ap.add_argument("--vae-config", default=None, help="a real vae/config.json")
    ap.add_argument(
        "--out", default=os.path.join(ROOT, "bench", "results", "gpu_cosmos3_speed"), help="writes OUT.md and OUT.json"
    )
    args = ap.parse_args(argv)
    import torch

    if args.smoke:
        args.device, args.dtype = "cpu", "float32"
        args.steps, args.tiers = args.steps or [2], args.tiers or [256]
        args.options = args.options or ["baseline", "text_kv_cache", "sea_cache"]
        args.chunk, args.reps = args.chunk or 4, min(args.reps, 1)
        args.batch_sizes = args.batch_sizes or [1]
    else:
        if not torch.cuda.is_available():
            raise SystemExit(
                "no CUDA device: this benchmark is for a GPU machine (use --smoke to check it runs on CPU)"
            )
        args.steps, args.tiers = args.steps or [10, 30], args.tiers or [256, 480]
        args.options = args.options or [
            "baseline",
            "text_kv_cache",
            "sea_cache",
            "attn:_native_cudnn",
            "attn:flash",
            "compile",
        ]
        args.chunk = args.chunk or 16
        args.batch_sizes = args.batch_sizes or [1, 4, 8]
    pipe, desc = build(args)
    if not args.smoke:
        pipe.to(args.device)
    import diffusers

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() and not args.smoke else "none (CPU)"
    header = [
        f"# Cosmos 3 speed, {time.strftime('%Y-%m-%d %H:%M:%S')}{' (SMOKE: tiny model on CPU, numbers meaningless)' if args.smoke else ''}",
        f"- machine: {platform.node()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, GPU {gpu}",
        f"- torch {torch.__version__}, diffusers {diffusers.__version__}",
        f"- model: {desc}",
        f"- call: forward dynamics, chunk {args.chunk} actions -> {args.chunk + 1} frames, guidance 1.0, "
        f"{args.reps} timed reps after 1 warm-up call per cell; batch B = B episodes' chunks in one call",
    ]
    print("\n".join(header), flush=True)
    rows = []
    options = [o for o in args.options if o != "compile"] + [o for o in args.options if o == "compile"]  # compile last
    for tier in args.tiers:
        for steps in args.steps:
            for option in options:
                for batch in args.batch_sizes:
                    row = measure(pipe, args, tier, steps, option, batch)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    text = "\n".join(header) + "\n\n" + table(rows) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".md", "w") as fh:
        fh.write(text)
    with open(args.out + ".json", "w") as fh:
        json.dump({"header": header, "rows": rows}, fh, indent=1)
    print(text)
    print(f"wrote {args.out}.md and {args.out}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
