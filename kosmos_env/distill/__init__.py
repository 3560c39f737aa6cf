"""Judge distillation: label rollouts with a large judge, LoRA-tune a small one, audit the pair.

The three steps are the ``kosmos-env judge-label``, ``judge-distill`` and ``judge-audit``
commands:

- :mod:`~kosmos_env.distill.labels`: run a teacher judge over a campaign's stored rollouts and
  keep every judgment (votes, raw text, prompt hash, model) in a resumable parquet dataset.
- :mod:`~kosmos_env.distill.train`: LoRA fine-tuning (peft) of a smaller Qwen-VL-family student
  on (video, prompt) -> the teacher's JSON answer, with a held-out split fixed by rollout hash
  (:mod:`~kosmos_env.distill.split`) before any training.
- :mod:`~kosmos_env.distill.audit`: a paired teacher/student report on held-out rollouts only
  that keeps engineering gains (valid format, bare JSON, tokens, speed) apart from
  judging-quality claims (agreement with the teacher and with ground truth), and makes a
  quality claim only where its interval supports it.

Nothing here imports torch, transformers or peft at import time.
"""
