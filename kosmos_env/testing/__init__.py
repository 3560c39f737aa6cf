"""Tiny randomly initialised models for running the real model code paths without real weights.

- :mod:`kosmos_env.testing.cosmos_tiny`: a tiny ``Cosmos3OmniPipeline`` (the real diffusers class,
  2-layer transformer with an action head, small Wan VAE, word-level tokenizer), in memory or
  saved to a folder that ``Kosmos-Bridge-v1`` loads like a real checkpoint.
- :mod:`kosmos_env.testing.qwen_tiny`: tiny Qwen2.5-VL / Qwen3-VL models with a local byte-level
  tokenizer, in memory or saved to a folder the VLM judge loads.
- :mod:`kosmos_env.testing.tiny_run`: the ``--tiny`` switch of ``kosmos-env eval``, ``doctor`` and
  ``judge-check``: builds both once per folder and says how to point the env and judge at them.

Random weights make random videos and random verdicts: these exist to check that everything
runs end to end (on a laptop, in CI), never to measure a policy or a judge. Importing this
package is cheap; torch, diffusers and transformers are imported only when a model is built.
"""
