"""Rollouts and demonstrations written out in other projects' dataset formats.

- :mod:`.lerobot`: LeRobot's dataset format (codebase version v3.0, LeRobot 0.4), written from
  episodes of frames, actions, states and an instruction;
- :mod:`.sources`: those episodes, read from a campaign folder (``kosmos-env eval --out``) or a
  ``train-policy`` demonstrations file.

``kosmos-env export`` (:mod:`kosmos_env.commands.export`) joins the two.
"""
