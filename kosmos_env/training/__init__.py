"""Training policies inside Kosmos envs: demonstrations, behaviour cloning, PPO fine-tuning, checkpoints."""
