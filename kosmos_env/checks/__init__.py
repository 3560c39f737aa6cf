"""Checks and diagnostics: is this install, this world, this judge fit to produce a result?

- :mod:`~kosmos_env.checks.doctor`: ``kosmos-env doctor``, every check of an install and an env.
- :mod:`~kosmos_env.checks.judge_readiness`: a judge must tell the real Bridge episode from its
  derived negatives before a campaign trusts it (``kosmos-env judge-check``).
- :mod:`~kosmos_env.checks.controls`: the gate's controls (worlds that freeze, pan or shuffle) and
  their measurement (``kosmos-env gate-check``, the validity study).
- :mod:`~kosmos_env.checks.bridge_gate`: the gate replayed on the real Bridge episode.
- :mod:`~kosmos_env.checks.bridge_reference`: that episode (shipped in ``kosmos_env/tasks/bridge_real/``)
  and the negatives derived from it.
- :mod:`~kosmos_env.checks.progress_calibration`: a progress judge's per-step progress against the
  simulator's true distance to the goal on the tabletop (``bench/progress_calibration.py``).

They sit above the campaign, the env and the worlds in the layers (``.importlinter``) and below the
study and the commands that run them. Importing this package imports none of them.
"""
