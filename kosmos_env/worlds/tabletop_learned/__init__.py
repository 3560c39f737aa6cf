"""A learned world model of the tabletop (``Kosmos-TabletopLearned-v1``): the evaluator-validity lab.

The model is trained only on recorded tabletop transitions (:mod:`.dataset`, :mod:`.train`)
and predicts the next frame from the last two frames and the action (:mod:`.model`). It has
no simulator state, so its episodes are judged by the robot-log judge on its *predicted*
gripper log or by a vision judge on its generated frames (:mod:`kosmos_env.judges.vision_frame`); the study
(:mod:`kosmos_env.study`) measures how far rankings made inside it agree with the simulator.

What is predicted and what is integrated (documented in the env card too):

- **predicted** by the network: every frame after the first, and the measured gripper
  opening (``gripper``, ``log["gripper_measured"]``) — whether the fingers stop short of
  the command because something is held is exactly what a world model must get right;
- **integrated** from the actions (no learning): ``ee_pos`` and ``ee_euler``, by the same
  clipped composition the simulator applies to its commanded pose (:mod:`.kinematics`);
- **rendered by the simulator**: the first frame only (the scene layout, like the initial
  photograph a video world model is conditioned on).

Nothing here imports torch at package import time.
"""
