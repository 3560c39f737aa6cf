"""Publishing results: the Hugging Face Hub, a leaderboard built only from verified
submissions, and Weights & Biases dashboards.

- :mod:`kosmos_env.publish.validate` checks a results bundle without trusting any of it
  (manifest hashes, spec hash, the episode design) and recomputes every aggregate.
- :mod:`kosmos_env.publish.hub` turns a bundle into one atomic Hub commit (or a dry-run tree),
  plus ``.eval_results/*.yaml`` entries for policies that name a Hub model.
- :mod:`kosmos_env.publish.card` writes the dataset card; :mod:`kosmos_env.publish.leaderboard`
  ranks verified submissions and renders a static HTML page.
- :mod:`kosmos_env.publish.wandb_logger` logs episodes and rollouts to W&B.

Nothing here imports huggingface_hub, pyarrow or wandb at import time.
"""

from __future__ import annotations
