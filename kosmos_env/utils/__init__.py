"""Small utilities every stage uses, importing nothing of the package but :mod:`kosmos_env.hashing`.

- :mod:`~kosmos_env.utils.rotations`: Euler angles, matrices, 6-D rotations, axis-angle, quaternions (numpy only).
- :mod:`~kosmos_env.utils.camera`: pinhole camera geometry shared by worlds, the gate and policies.
- :mod:`~kosmos_env.utils.fileio`: crash-safe file writes and cross-process locks.
- :mod:`~kosmos_env.utils.video`: MP4 writing for rollouts.
- :mod:`~kosmos_env.utils.weights`: checkpoint hashes and memory estimates.
- :mod:`~kosmos_env.utils.obs_encoding`: observation encoding shared by the RL wrappers and the
  trained-checkpoint policy.
- :mod:`~kosmos_env.utils.vector_guard`: refuses ``AsyncVectorEnv`` settings that break these envs.
- :mod:`~kosmos_env.utils.seed_ranges`: the declared training, tuning and evaluation seed ranges.
- :mod:`~kosmos_env.utils.threads`: the one rule for torch's CPU threads (campaign workers, commands,
  ``gymnasium.make(id, threads=N)``).

Importing this package imports none of them.
"""
