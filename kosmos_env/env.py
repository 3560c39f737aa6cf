"""KosmosEnv: one Gymnasium env class over any :class:`~kosmos_env.worlds.base.WorldModel`."""

from __future__ import annotations

import string
import time
from typing import Any, Mapping

import gymnasium
import numpy as np
from gymnasium import spaces

from kosmos_env.actions import validate_action
from kosmos_env.judges.base import PENDING, Judge, Judgment, Rollout
from kosmos_env.spec import EnvSpec, load_spec
from kosmos_env.utils.threads import set_torch_threads, threads_problem
from kosmos_env.utils.vector_guard import check_async_vector_settings
from kosmos_env.tasks import TaskSpec, load_suite

INSTRUCTION_CHARSET = string.ascii_letters + string.digits + " .,;:'!?-_()/&"
INSTRUCTION_MAX_LENGTH = 512


class KosmosEnv(gymnasium.Env):
    """
    ## Description

    A robot manipulation episode inside a *world*: the embedded MuJoCo tabletop
    (``Kosmos-Tabletop-v1``, the ground truth), a small learned video world model of that
    tabletop (``Kosmos-TabletopLearned-v1``, for measuring the evaluator against a known truth),
    or an action-conditioned video world model (``Kosmos-Bridge-v1``: NVIDIA Cosmos 3). A policy sends end-effector actions; the world
    returns frames; an action-consistency gate can reject generations whose motion does not
    match the command; a judge scores the finished rollout. Every setting that can change a
    result lives in a versioned spec (``envs_registry/<id>.json``) whose content hash is
    ``env.unwrapped.spec_hash``.

    ## Action Space

    ``Box(low, high, (7,), float32)`` (``(k, 7)`` when the spec's ``action.chunk`` is ``k > 1``):
    ``[dx, dy, dz, droll, dpitch, dyaw, gripper]``. Translation in metres and roll/pitch/yaw
    differences in radians in the robot base frame (Bridge convention); gripper in [0, 1],
    1 = open, 0 = closed. Bounds come from the spec (tabletop: ±0.05 m, ±0.25 rad).
    Array-likes of real numbers are cast to float32: a float64 (or float16) array and a Python
    list or tuple are accepted, as Gymnasium's ``Box`` accepts them; an integer, boolean,
    complex, string or object array raises ``ValueError``. A wrong shape, a NaN or an
    out-of-bounds value (checked after the cast) raises ``ValueError`` naming the field; nothing
    is clipped unless the spec sets ``action.clip``. ``step`` or ``reset`` after ``close()``
    raises ``RuntimeError``.

    ## Observation Space

    ``Dict`` with
    - ``image``: ``Box(0, 255, (H, W, 3), uint8)``, the latest frame at the spec's ``image_size``;
    - ``instruction``: ``Text``, the task's instruction;
    - world extras. Tabletop: ``ee_pos`` (3,) end-effector position in metres (base frame),
      ``ee_euler`` (3,) its roll/pitch/yaw, ``gripper`` (1,) the *measured* opening in [0, 1]
      (fingers stop short of the command when something is held). The learned tabletop has the
      same extras (pose integrated from the actions, opening predicted). Bridge (Cosmos 3): none.

    Every frame generated during a step is in ``info["frames"]`` (n, H, W, 3); a reset generates
    none (its frame is ``obs["image"]``). Per-stage wall-clock seconds of the last step are in
    ``env.unwrapped.last_step_timings`` (kept out of ``info`` so that ``info`` is deterministic).

    ## Rewards

    Set by the spec's ``reward`` section (each setting is part of the spec hash; the default keeps
    every hash published before it existed).

    - ``reward.mode = "terminal"`` (default, evaluation): 0 on every step but the last. On the last
      step, the judge's score in [0, 1], with the full verdict in ``info["judgment"]`` (success
      True/False/None = abstained, score, rationale, votes).
    - ``"progress"`` (training): a step judge (``reward.step_judge``, e.g. ``{"type": "vision_frame"}``,
      the frame classifier, which both tabletop worlds use when none is named: the spec then names it,
      hash included) reads only the frame the world produced and gives P(success) =
      ``info["progress"]`` after every step (and in the reset's info). The reward is its change,
      ``progress_t - progress_{t-1}`` (potential-based shaping with gamma 1: an episode's return is
      its last progress minus its first). A gate discard takes back what the episode earned, so a
      discarded episode returns exactly 0. The spec's judge still gives ``info["judgment"]`` at the
      end; its score is not added to the reward.
      On ``Kosmos-Bridge-v1`` the step judge is a *progress judge*, named explicitly (the world has no
      default): ``reward={"mode": "progress", "step_judge": {"type": "vlm_progress"}}``, a Qwen-VL model
      (``nvidia/Cosmos-Reason1-7B`` at revision ``main``, the terminal judge's weights) that reads each
      step's 4-frame chunk with the episode's first frame and the instruction and answers task progress
      in [0, 1] and a success flag (greedy decoding, a pinned prompt). Its model, revision, prompt sha256
      and frame settings are written into the spec, so the hash covers them. The potential is its
      progress; at reset it is 0 (no model call: nothing has been done yet), so an episode's return is
      its last progress. An answer it cannot parse is an abstention: the potential stays, the step earns
      0, and ``info["progress_abstained"]`` / ``info["progress_abstentions"]`` (this episode's count so far)
      say so; ``info["progress_success"]`` is its success flag. Under ``make_vec`` with the vector entry
      point the judge is loaded once and all sub-envs' chunks are scored in one model call per step.
      Check a progress judge first: ``kosmos-env judge-check --progress`` (the real Bridge episode's
      progress must rise, a frozen copy's must not).
    - ``"oracle"``: the same shaping with the *simulator's* ground truth (``gt_success``, 0 or 1) as
      the potential; only on simulator worlds, and labelled oracle wherever it is reported.

    One success definition for training and evaluation: **success at the horizon**. Evaluation
    judges the last step; with shaping and no early end, a training episode's return is its step
    signal at the last step minus at the first, so training rewards exactly what evaluation counts
    (an object placed and knocked off again earns nothing in either). ``terminate_on_success``
    (off by default) ends an episode at its first success instead, which scores "succeeded at some
    step": a trained checkpoint succeeded at some step in 62 of 100 tuning episodes but at the
    horizon in 48 (``bench/reached_and_lost.py``), so the project's training command and
    experiments leave it off.

    Judges: the tabletop's default is the simulator state, the learned tabletop's the robot-log
    judge, Bridge's the VLM judge. On simulator worlds ``info["ground_truth"]`` holds the task's
    ``evaluate()`` at the last step. With ``defer_judging=True`` the last reward is 0.0 and
    ``info["judgment"]`` is marked pending: a campaign judges rollouts in its own stage.

    ## Starting State

    ``reset(seed=s)`` lays out the task's scene (tabletop: object and target positions and yaw
    drawn from ``np_random``; gripper open at a fixed home pose) or loads the task's
    hash-checked initial frame (Bridge). The learned tabletop starts from the simulator's frame
    for the same seed. Same seed, same start, same frames.

    ## Episode End

    - Truncation: after ``horizon`` steps (the env owns the horizon because it must judge the
      last step). A shorter episode is made with the spec override ``horizon=N``
      (``gymnasium.make(id, horizon=N)``), which judges step N. Gymnasium's ``max_episode_steps``
      (a ``TimeLimit`` wrapper) cuts an episode off outside the env, which cannot see it: such an
      episode ends unjudged (no ``info["judgment"]``, terminal reward 0). The env does not judge a
      cut-off episode on the next reset (the judgment would come after the episode's last step was
      returned); it warns once instead, when two episodes in a row are reset unjudged after the same
      number N > 1 of steps below the horizon (the pattern a ``TimeLimit`` leaves), naming
      ``horizon=N``.
    - Termination: the consistency gate rejected a generation; ``info["gate"]`` says why,
      ``info["terminated_by"] == "gate"`` and ``info["outcome"] == "discarded"``. A discarded
      episode is never a policy failure.
    - Termination on success (``reward.terminate_on_success``, with ``progress`` or ``oracle``): the
      step signal has been at or above ``reward.success_threshold`` (default 0.5) for
      ``reward.success_patience`` consecutive steps (default 1); with a progress judge, its own success
      flag has been true for that many consecutive steps (an abstention breaks the run);
      ``info["terminated_by"] == "success"``, and the episode is judged as at the horizon.
    - Vector envs (``gymnasium.make_vec``) reset an ended sub-env on the next step (Gymnasium's
      next-step autoreset): that step returns the new episode's first observation, reward 0.

    ## Arguments

    ``gymnasium.make(id, task=None, render_mode=None, judge=None, defer_judging=False,
    world_model=None, world_kwargs=None, threads=None, step_judge=None, **spec_overrides)``
    - ``task``: a task of the suite (``env.unwrapped.task_names``); switch with
      ``reset(options={"task": name})``.
    - ``render_mode``: ``"rgb_array"`` or None.
    - ``judge``: a judge name (``"state"``, ...), a spec mapping, or a Judge instance.
    - ``world_model``: a ready WorldModel (tests, warm workers); ``world_kwargs``: backend
      options that do not change results (e.g. a local weights path, a loaded pipeline).
    - ``threads``: torch's intra-op threads for the whole *process* (``torch.set_num_threads``,
      importing torch), set when the env is made; a runtime setting, never part of the spec or its
      hash. Left out (the default), the env does not touch torch's threads: the process is yours,
      and the setting is global to it (your training loop's networks use it too). Torch's default
      is one thread per core, which on a busy or shared machine makes the learned tabletop step many
      times slower (25-35x with 2 threads against 1, measured on a loaded 2-core machine); there,
      ``threads=1`` (or ``torch.set_num_threads(1)``, or ``OMP_NUM_THREADS=1`` in the environment)
      fixes it. Campaign workers set theirs by one rule (:mod:`kosmos_env.utils.threads`).
    - ``step_judge``: a ready step judge object for ``reward.mode = "progress"``, used instead of building
      ``reward.step_judge`` (runtime, not spec, like ``judge``; the vector entry point hands its sub-envs
      one loaded progress judge this way). Provenance names the progress judge that ran.
    - ``spec_overrides``: top-level spec fields (``image_size=(64, 64)``, ``horizon=30``,
      ``gate={"enabled": False}``, ``reward={"mode": "progress", "step_judge": {"type":
      "vision_frame"}, "terminate_on_success": True}``); the overridden spec has its own hash. A reward
      setting the env cannot honour (an unknown mode, a threshold outside [0, 1], termination without
      a step signal, a step judge that cannot read this world's frames or tasks, ``oracle`` on a world
      without ground truth) raises ``SpecError`` naming it.

    ## Kosmos-TabletopLearned-v1 (learned tabletop world)

    - World: small networks (weights ship with the package, bound by sha256 in the spec)
      trained only on recorded tabletop transitions (``kosmos-env train-world``); 64×64 only
      (another ``image_size`` raises ``ValueError``). A segmenter finds the object in the first
      frame; object dynamics step its state (held or not, position) and predict the measured
      gripper; a renderer draws each frame from that state over the first frame (never from its
      own output, so frames stay sharp) with the object's sprite composited where it now is,
      so a grasped object moves with the gripper and a placed one stays placed.
    - The first frame is the simulator's layout for the seed (same seed, same scene as
      ``Kosmos-Tabletop-v1``); every later frame is predicted. ``ee_pos``/``ee_euler`` are
      integrated from the actions with the simulator's workspace clipping; the measured
      ``gripper`` is predicted.
    - Cost against fidelity: ``world.actions_per_call`` (1–4; frames between renderer calls
      repeat the last generated one); ``world.sweep`` lists the values a study may sweep.
    - What is learned and what is fixed: *learned* are the segmenter (object and target in the
      first frame), the object dynamics (when a grasp starts and ends, how a free object moves,
      where the fingers stop), the slip predictor (a hold ending under closed fingers; its
      threshold 0.3) and the renderer. *Fixed rules* of scene geometry, imposed after the
      learned step: ``drop_released`` (a let-go object drops straight down), ``rest_on_supports``
      (a free object over the target rests on its top), ``keep_resting`` (a resting object no
      finger can reach stays put), ``push_closed_fingers`` (closed fingers push a free object
      ahead of them). *Integrated*: the pose. Each is a spec field: ``world.rules`` (a subset of
      the four, default all) and ``world.learned_dynamics``: ``"learned"`` (default),
      ``"rules"`` (dynamics and slip replaced by the hand-written rules-only kinematics: closed
      fingers near the object grasp it, it follows the tool point, opening drops it) or
      ``"none"`` (the object never moves: renderer only), e.g.
      ``gymnasium.make(id, world={"rules": []})``. Defaults are not written into the spec (the
      registered hash is unchanged); any other setting is a new hash; an unknown rule or value
      raises ``SpecError`` naming the field and the choices. What each part is worth (frame
      error, judge accuracy, Kendall vs the simulator, with intervals):
      ``bench/results/learned_world_ablation/README.md``; the runs that chose the slip threshold
      and the push rule: ``bench/results/learned_world_rules/README.md``.
    - No simulator state (``evaluate()`` is None): judged by the robot-log judge on the
      predicted gripper log (default) or ``judge="vision_frame"``, a frame classifier trained
      on simulator frames. The gate is off by default; ``kosmos-env study`` measures its effect.

    ## Kosmos-Bridge-v1 (Cosmos 3)

    - World: ``nvidia/Cosmos3-Nano`` through diffusers' ``Cosmos3OmniPipeline`` (forward dynamics,
      domain ``bridge_orig_lerobot``), revision pinned to ``"main"`` (no commit hash could be
      established; ``main`` has been rewritten before, e.g. to an FP8 transformer). Without the
      weights, ``make`` raises ``MissingWeightsError`` with the download command; point the env at
      a copy with ``world_kwargs={"weights_path": ...}`` or ``$KOSMOS_COSMOS3_NANO_PATH``. A folder
      holding another model is refused (``WrongArchitectureError``); a GPU with less free memory
      than one call needs is refused before loading (``InsufficientMemoryError``, the estimate and
      its basis in the message). ``device``/``dtype`` are ``"auto"``: CUDA + bfloat16 when a GPU is
      visible, else CPU + float32 (tiny test checkpoints); what ran is in the provenance.
    - Action space ``(4, 7)``: one model call per step, the 4 actions padded with hold actions to
      the model's 16-action chunk; 4 frames per step at 5 fps. Each action is converted to Cosmos'
      10-D Bridge action (end-effector pose delta in the previous end-effector frame, 6-D rotation,
      gripper 1 = open) as documented in :mod:`kosmos_env.actions`.
    - Action statistics (``world.bridge.normalization``): the Bridge ``q01``/``q99`` of NVIDIA's
      public cosmos-framework release of 2026-08-21 (commit 5eee9ed574255f017b192161bfbb5a10253d65cf,
      ``normalizer_stats/bridge_orig_lerobot_stats.json``, OpenMDW-1.1), normalised with that
      release's method ``"quantile"`` (``2 (x - q01) / max(q99 - q01, 1e-8) - 1`` on all ten
      dimensions); ``"quantile_rot"`` (rotation dimensions passed through) stays selectable as a spec
      override. Choices that could not be established stay spec fields (``world.bridge``): how
      (droll, dpitch, dyaw) compose (``rotation_delta``), the initial end-effector orientation the
      commanded pose is integrated from (``initial_ee_euler``; a video world has no robot state) and
      the gripper direction.
    - Tasks and frames: real Bridge photographs (Apache-2.0, origin in
      ``kosmos_env/tasks/bridge_real/NOTICE``), each bound by sha256 in the ``bridge`` suite:
      ``stack_green_block_on_yellow_block`` (first frame of a real stacking episode),
      ``move_can_to_left`` (first frame of the real episode ``bridge_real_can_to_left.mp4``, whose
      own task it is, so a real success exists; the default) and ``put_eggplant_in_pot`` (same
      scene). ``world_kwargs={"initial_frames": {task: path}}`` reads a frame from elsewhere and
      refuses it unless its sha256 matches. The 640x480 scene keeps its 4:3 shape: it is shrunk to
      240x320 and the pipeline pads it into resolution tier 256's 256x320 canvas (no crop, no
      squash); observations are 240x320.
    - Seeds: each model call's diffusion seed is drawn from ``np_random``; same seed, same frames.
      ``env.unwrapped.world.timings`` reports load seconds and per-call seconds separately.
    - Camera and gate: ``world.camera`` is SimplerEnv's Bridge-dataset camera relative to the
      WidowX ``base_link`` (C920 intrinsics, scaled to ``image_size``;
      :mod:`kosmos_env.worlds.bridge_camera`) and the start pose of the tool centre point
      (``start_ee_pos``, SimplerEnv's for the real can episode; a task may give
      ``initial_ee_pos``). The world exposes that ``calibration`` and logs ``ee_pos``: the pose
      *integrated from the commands*, not measured, clipped after every action to
      ``world.workspace``, whose floor is the table top: SimplerEnv's Bridge scene puts the robot
      base at height 0.870 on a table at 0.87 (simpler-env/ManiSkill2_real2sim @ ef7a4d4,
      ``mani_skill2_real2sim/envs/custom_scenes/base_env.py``), so z = 0 in ``base_link``; the
      other bounds box the arm's reach (its URDF), and the gate's ``workspace`` is the same. With
      them the gate runs calibrated: frozen frames near the projected gripper, camera pans (per
      step and over each 4-frame call; both frames blurred by ``pan_blur_px`` before measuring how
      much of the change a shift explains), the direction of the gripper's visible motion against
      the projected command, image collapse.
      Measured where ground truth exists (``bench/bridge_gate.py``: the tabletop rendered through
      this camera, calibration and integrated pose as the Bridge world has them) and on the real
      can episode (passes under commands derived from its video; frozen and panned copies
      rejected). Numbers in ``bench/results/bridge_gate.txt`` and the README.
    - Before a run: ``kosmos-env doctor`` (GPU, memory, weights and their hashes, packages,
      statistics, frames, a timed world and judge call) and ``kosmos-env judge-check`` (does the
      judge tell the real can episode from a frozen copy and a mismatched instruction; with
      ``--progress``, does a progress judge's reading rise along it and stay flat on the frozen copy).
    - Training reward: ``reward={"mode": "progress", "step_judge": {"type": "vlm_progress"}}`` (see
      Rewards): a per-step reward from the VLM progress judge, its own spec hash; ``make`` then also
      needs the judge's weights (the terminal judge's, ``$KOSMOS_VLM_JUDGE_PATH``).

    ## Provenance

    ``env.unwrapped.provenance`` holds the spec hash, the world that runs (type, code version,
    device, dtype, weights path and sha256, or "injected" with the injected model's tensor hash),
    the judge (its settings and the model that actually runs) and ``identity_sha256`` over all of
    them: a ``judge=`` argument or an injected world changes the identity even where the spec hash
    is the same. A world's code version (``kosmos_env.spec.WORLD_VERSIONS``) is part of the spec
    hash. Campaigns store the provenance on every episode row (``results.json``,
    ``episodes.parquet``: ``spec_hash``, ``identity_sha256``, ``provenance``).

    ## Version History

    An id names one spec hash for good, as a Gymnasium id does: ``envs_registry/spec_hashes.json``
    freezes the hash of every id, and a test fails when a spec's hash changes under its id. A
    change that moves a hash (the spec file, its task suite, its world's code version in
    ``kosmos_env.spec.WORLD_VERSIONS``) is released as the next version (``-v2`` beside ``-v1``, as
    Gymnasium keeps ``pusher_v4.py`` beside ``pusher_v5.py``); the old version stays registered and
    loadable with its old hash, its spec's ``deprecated`` naming what replaced it, and making it
    warns (``DeprecationWarning``), so a result published under an id can be rerun by that id.

    The rule holds from the hashes frozen on 2026-12-03. Before it, the three ``-v1`` ids were
    re-frozen under the same id six times (listed below). Those earlier specs are not registered:
    their weights and world code are gone from the package (only git history holds them), so they
    could not run as they ran. Every result carries its spec hash, so none made under an earlier
    hash is ranked with one under today's; such a result is rerun from the commit that made it.

    Kosmos-Tabletop-v1 (MuJoCo tabletop)

    - v1, spec hash ``b0f08ca61ab6``: the release (frozen unchanged since).

    Kosmos-Bridge-v1 (NVIDIA Cosmos 3)

    - v1, spec hash ``9e7cd6d03a1a``, as frozen. Re-frozen twice before the rule:
      (1) its first freeze never produced a result (null action statistics made the world refuse
      to run, and its frames were synthetic drawings); the spec gained NVIDIA's statistics with
      method ``"quantile"``, real 4:3 frames at 240x320, a new task suite, ``device``/``dtype``
      ``"auto"`` and world code version 2; (2) ``world.workspace`` (the table top as the floor of
      the integrated pose) with the same ``gate.workspace``, and the gate's ``pan_blur_px`` 1.0 with
      ``pan_explained`` 0.68.

    Kosmos-TabletopLearned-v1 (learned tabletop)

    - v1, spec hash ``f5b6ee921416``, as frozen: the weights (sha256 ``38fab496...``) of one full
      ``kosmos-env train-world`` run with a slip predictor, and world code version 2 (three fixed
      rules of scene geometry: an object let go of drops, a free object at rest stays put unless
      the fingers reach it, closed fingers push a free object). Re-frozen four times before the
      rule, each with new weights: (1) retrained with object state, so grasped objects no longer
      vanish (new ``world.actions_per_call`` and ``world.sweep``); (2) the renderer draws each frame
      from the world's state (frames no longer blur) and a held object's predicted opening stays
      where the fingers stopped; (3) weights format v4, the object's sprite keeps only the object
      and where it started is always redrawn; (4) the slip predictor and world code version 2.

    All versions: the optional spec field ``reward`` (modes ``terminal``, ``progress``, ``oracle``;
    ``terminate_on_success``; ``success_threshold``) left at its default is not written into the
    spec, so it changed no hash; any other setting is a different hash (an override, not an id).
    The progress judge (``step_judge`` type ``vlm_progress``, which makes ``reward.mode = "progress"``
    possible on Kosmos-Bridge-v1) added no id and moved no registered hash, nor the hash of any
    tabletop progress spec: a Bridge progress spec is an override with its own hash.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 5}

    def __init__(
        self,
        spec_id: str | None = None,
        *,
        env_spec: EnvSpec | None = None,
        task: str | None = None,
        render_mode: str | None = None,
        judge: "str | Mapping[str, Any] | Judge | None" = None,
        defer_judging: bool = False,
        world_model: Any = None,
        world_kwargs: Mapping[str, Any] | None = None,
        threads: int | None = None,
        step_judge: Any = None,
        **spec_overrides: Any,
    ):
        check_async_vector_settings()  # before anything heavy: refuse settings that corrupt or hang
        if threads is not None:  # asked for: a process-wide setting, before the world loads its networks
            problem = threads_problem(threads, "threads")
            if problem:
                raise ValueError(problem)
            set_torch_threads(threads)
        if env_spec is None:
            if spec_id is None:
                raise ValueError("KosmosEnv needs spec_id (a registered env id) or env_spec")
            env_spec = load_spec(spec_id)
        if env_spec.deprecated:
            # an old version stays loadable (a published result is rerun by the id it names), with
            # a warning as Gymnasium gives for an out-of-date version, saying what replaced it
            import warnings

            warnings.warn(f"{env_spec.id} is deprecated: {env_spec.deprecated}", DeprecationWarning, stacklevel=2)
        self.kosmos_spec = env_spec.with_overrides(**spec_overrides)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.render_mode = render_mode
        self.metadata = dict(self.metadata, render_fps=self.kosmos_spec.render_fps)

        self._suite = load_suite(self.kosmos_spec.tasks["suite"])
        self._task = self._resolve_task(task or self.kosmos_spec.tasks.get("default") or self._suite.names[0])

        # provenance: an injected world or pipeline, or a judge other than the spec's, is named in
        # env.unwrapped.provenance (recorded with every result beside the spec hash)
        self._world_injected = world_model is not None or "pipeline" in dict(world_kwargs or {})
        self._judge_arg = judge
        self._provenance: dict[str, Any] | None = None
        from kosmos_env.required_weights import require_ready

        # a missing extra, or every missing weight (world and judges) at once, before anything loads
        require_ready(self.kosmos_spec, world_kwargs, judge, check_world=world_model is None)
        if world_model is None:
            from kosmos_env.worlds import make_world

            world_model = make_world(self.kosmos_spec, **dict(world_kwargs or {}))
        self.world = world_model
        self._judge = self._build_judge(judge)
        self.defer_judging = bool(defer_judging)
        self._gate = self._build_gate()
        self._step_judge_arg = step_judge
        self._step_judge = self._build_step_judge(step_judge)
        # a step judge that scores task progress per chunk (ProgressJudge) and no single frames; a judge
        # with score_frames keeps the frame path, exactly as before progress judges existed
        self._uses_progress = self._step_judge is not None and not callable(
            getattr(self._step_judge, "score_frames", None)
        )
        #: set by a batching vector env (kosmos_env.batched_vector): scores this env's chunk together
        #: with the other sub-envs' in one call of the shared progress judge; None: the env calls it
        self.progress_batch: Any = None

        spec = self.kosmos_spec
        h, w = spec.image_size
        shape = (7,) if spec.action_chunk == 1 else (spec.action_chunk, 7)
        low, high = spec.action_low_array, spec.action_high_array
        self.action_space = spaces.Box(
            np.broadcast_to(low, shape).copy(), np.broadcast_to(high, shape).copy(), dtype=np.float32
        )
        obs_spaces: dict[str, spaces.Space] = {
            "image": spaces.Box(0, 255, (h, w, 3), dtype=np.uint8),
            "instruction": spaces.Text(max_length=INSTRUCTION_MAX_LENGTH, min_length=1, charset=INSTRUCTION_CHARSET),
        }
        obs_spaces.update(self.world.state_space())
        self.observation_space = spaces.Dict(obs_spaces)

        self._episode_over = True
        self._closed = False
        self._frames: list[np.ndarray] = []
        self._actions: list[np.ndarray] = []
        self._log: dict[str, list[np.ndarray]] = {}
        self._last_frame: np.ndarray | None = None
        self._t = 0
        self._ground_truth: Mapping[str, Any] | None = None
        self._judgment: Judgment | None = None
        self._outcome: str | None = None
        # the per-step reward's potential (progress: the step judge's P(success) on the latest frame;
        # oracle: the simulator's success, 0 or 1) now and at the episode's first frame
        self._potential = 0.0
        self._potential0 = 0.0
        self._over_threshold = 0  # consecutive steps with the step signal at or above the threshold
        self._abstentions = 0  # steps of this episode on which the progress judge abstained
        self.last_step_timings: dict[str, float] = {}
        # steps of the last episode reset before the env ended it (None: the last one ended here), and
        # whether the cut-off warning was given (once per env)
        self._unjudged_steps: int | None = None
        self._warned_cut_off = False

    # -- public properties ----------------------------------------------------------------
    @property
    def spec_hash(self) -> str:
        """sha256 of this env's frozen spec (overrides included)."""
        return self.kosmos_spec.hash

    @property
    def provenance(self) -> dict[str, Any]:
        """What runs besides the spec: ``{"spec_hash", "world", "judge", "identity_sha256"}``.

        ``world`` is the world's own ``identity()`` when it has one (Cosmos 3: code version,
        device, dtype, weights path and sha256) else its type, code version and class;
        ``judge`` names the judge and the model that actually runs. ``identity_sha256`` hashes
        all three, so a ``judge=`` argument, an injected world or other weights give a different
        identity even where the spec hash is the same. Computed once (hashing weights can take
        a while on a real checkpoint).
        """
        if self._provenance is None:
            from kosmos_env.judges.base import judge_identity
            from kosmos_env.hashing import canonical_json, sha256_hex
            from kosmos_env.worlds import WORLD_VERSIONS

            kind = str(self.kosmos_spec.world.get("type"))
            own = getattr(self.world, "identity", None)
            world = (
                dict(own())
                if callable(own)
                else {
                    "type": kind,
                    "version": WORLD_VERSIONS.get(kind, "1"),
                    "class": f"{type(self.world).__module__}.{type(self.world).__qualname__}",
                }
            )
            world["injected"] = bool(self._world_injected)
            arg = self._judge_arg
            # the settings the judge was built from; a judge object passed in describes itself
            judge_spec = (
                arg
                if isinstance(arg, Mapping)
                else {"type": arg}
                if isinstance(arg, str)
                else self.kosmos_spec.judge
                if arg is None
                else None
            )
            judge = None if self._judge is None else judge_identity(self._judge, judge_spec)
            if judge is not None:
                judge["spec_default"] = self._judge_arg is None
            core = {"spec_hash": self.spec_hash, "world": world, "judge": judge}
            if self._uses_progress:
                # the progress judge's model is what pays the reward (only progress judges: the
                # tabletop's frame judges keep their identity as it was)
                step = judge_identity(self._step_judge, self.kosmos_spec.reward["step_judge"])
                step["spec_default"] = self._step_judge_arg is None
                core["step_judge"] = step
            self._provenance = {**core, "identity_sha256": sha256_hex(canonical_json(_jsonable(core)))}
        return dict(self._provenance)

    @property
    def task_names(self) -> list[str]:
        return self._suite.names

    @property
    def task(self) -> TaskSpec:
        return self._task

    @property
    def judge(self) -> Judge | None:
        return self._judge

    @property
    def progress_judge(self) -> Any:
        """The step judge when it scores task progress per chunk (a ProgressJudge), else ``None``."""
        return self._step_judge if self._uses_progress else None

    # -- gymnasium API --------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self._closed:
            raise RuntimeError("reset() on a closed env: close() released its world; make a new env")
        super().reset(seed=seed)
        if not self._episode_over and self._t > 0:
            self._note_unjudged_end(self._t)
        options = dict(options or {})
        if "task" in options:
            self._task = self._resolve_task(options.pop("task"))
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; supported: 'task'")
        start = self.world.reset(self._task, self.np_random)
        frame = self._check_frame(start.frame)
        self._frames = [frame]
        self._actions, self._log = [], {}
        self._last_frame = frame
        self._t = 0
        self._episode_over = False
        self._ground_truth, self._judgment, self._outcome = None, None, None
        if self._gate is not None:
            self._gate.reset()
        obs = self._observation(frame, start.state)
        # no "frames" here: info["frames"] holds what a step generated, and a vector env merges
        # reset and step infos in one batch, where a reset's single frame would not line up
        info = {"task": self._task.name, "spec_hash": self.spec_hash}
        if self.kosmos_spec.reward["mode"] != "terminal":
            self._potential = self._potential0 = self._reset_potential(frame)
            self._over_threshold = 0
            info["progress"] = self._potential
            if self._uses_progress:
                self._abstentions = 0
                info["progress_abstentions"] = 0
        return obs, info

    def step(self, action):
        if self._closed:
            raise RuntimeError("step() on a closed env: close() released its world; make a new env")
        if self._episode_over:
            raise RuntimeError("the episode is over (or reset() was never called): call reset() first")
        spec = self.kosmos_spec
        rows = validate_action(
            action, spec.action_low_array, spec.action_high_array, spec.action_chunk, spec.clip_actions
        )
        timings: dict[str, float] = {}

        t0 = time.perf_counter()
        result = self.world.step(rows)
        timings["world"] = time.perf_counter() - t0
        frames = np.stack([self._check_frame(f) for f in result.frames])

        info: dict[str, Any] = {"task": self._task.name, "frames": frames}
        discarded = False
        if self._gate is not None:
            t0 = time.perf_counter()
            verdict = self._gate.check(self._last_frame, frames, rows, self.world.calibration, result.log)
            timings["gate"] = time.perf_counter() - t0
            info["gate"] = verdict.to_dict()
            discarded = not verdict.passed

        reward, succeeded = 0.0, False
        reward_spec = spec.reward
        if reward_spec["mode"] != "terminal":
            if discarded:
                # a discarded generation earns nothing: this step takes back what the episode was
                # paid so far, so a discarded episode's return is exactly 0
                reward = self._potential0 - self._potential
            else:
                t0 = time.perf_counter()
                if self._uses_progress:
                    potential, success_now = self._progress_potential(frames, info)
                else:
                    potential = self._step_potential(frames, result.log)
                    success_now = potential >= reward_spec["success_threshold"]
                timings["step_judge"] = time.perf_counter() - t0
                # potential-based shaping (gamma = 1): the return telescopes to the last potential
                # minus the first, so the policy is paid for reaching success, not for lingering
                reward = potential - self._potential
                self._potential = potential
                info["progress"] = potential
                self._over_threshold = self._over_threshold + 1 if success_now else 0
                succeeded = (
                    reward_spec["terminate_on_success"] and self._over_threshold >= reward_spec["success_patience"]
                )
        terminated = discarded or succeeded

        self._frames.extend(frames)
        self._actions.extend(rows)
        for key, value in result.log.items():
            self._log.setdefault(key, []).extend(np.asarray(value))
        self._last_frame = frames[-1]
        self._t += 1
        truncated = not terminated and self._t >= spec.horizon

        if terminated or truncated:
            self._episode_over = True
            self._unjudged_steps = None  # an episode the env ended breaks a run of cut-off ones
            self._ground_truth = self.world.evaluate()
            if self._ground_truth is not None:
                info["ground_truth"] = dict(self._ground_truth)
            if terminated:
                info["terminated_by"] = "gate" if discarded else "success"
            if discarded:
                self._outcome = "discarded"
                info["judgment"] = None
            elif self.defer_judging or self._judge is None:
                self._outcome = "pending"
                info["judgment"] = dict(PENDING)
            else:
                t0 = time.perf_counter()
                self._judgment = self._judge.judge(self.rollout())
                timings["judge"] = time.perf_counter() - t0
                if reward_spec["mode"] == "terminal":
                    reward = float(self._judgment.score)
                self._outcome = self._judgment.outcome
                info["judgment"] = self._judgment.to_dict()
            info["outcome"] = self._outcome
        # wall-clock seconds per stage of this step; kept out of info so that info is a
        # deterministic function of (seed, actions), as Gymnasium's checker requires
        self.last_step_timings = timings
        obs = self._observation(frames[-1], result.state)
        return obs, reward, terminated, truncated, info

    def render(self):
        if self.render_mode == "rgb_array":
            return None if self._last_frame is None else self._last_frame.copy()
        return None

    def close(self):
        if getattr(self, "_closed", True):  # closed already (a second close() is a no-op), or never built
            return
        self._closed = True
        self.world.close()

    # -- episode record -------------------------------------------------------------------
    def rollout(self) -> Rollout:
        """The current (or last) episode as a :class:`Rollout` for judges and logging."""
        frames = np.stack(self._frames) if self._frames else np.zeros((0, *self.kosmos_spec.image_size, 3), np.uint8)
        actions = np.stack(self._actions).astype(np.float32) if self._actions else np.zeros((0, 7), np.float32)
        return Rollout(
            frames=frames,
            instruction=self._task.instruction,
            actions=actions,
            fps=self.kosmos_spec.render_fps * self.world.frames_per_action,
            task=self._task.name,
            log={k: np.stack(v) for k, v in self._log.items()},
            ground_truth=self._ground_truth,
            meta={
                "env_id": self.kosmos_spec.id,
                "spec_hash": self.spec_hash,
                "outcome": self._outcome,
                "identity_sha256": self.provenance["identity_sha256"],
            },
        )

    @property
    def outcome(self) -> str | None:
        """success / failure / abstained / discarded / pending, once the episode is over."""
        return self._outcome

    # -- helpers --------------------------------------------------------------------------
    def _resolve_task(self, name: str) -> TaskSpec:
        try:
            return self._suite.tasks[name]
        except KeyError:
            raise ValueError(f"unknown task {name!r} for {self.kosmos_spec.id}; tasks: {self._suite.names}") from None

    def _note_unjudged_end(self, steps: int) -> None:
        """An episode was reset after ``steps`` steps, before the env ended it, so it was never judged.
        The second such episode in a row with the same length is a ``TimeLimit`` (gymnasium's
        ``max_episode_steps``) shorter than the horizon: warn once with the override that judges it."""
        # one step is what env checkers do between resets (gymnasium's check_env), never a time limit
        if not self._warned_cut_off and steps > 1 and self._unjudged_steps == steps:
            import warnings

            self._warned_cut_off = True
            horizon = self.kosmos_spec.horizon
            warnings.warn(
                f"{self.kosmos_spec.id}: episodes are being reset after {steps} of {horizon} steps, before the "
                f"env's horizon, so the judge never runs (no info['judgment'], terminal reward 0); a gymnasium "
                f"max_episode_steps={steps} (TimeLimit) does this: make the env with horizon={steps} instead "
                f"(gymnasium.make(id, horizon={steps}): a spec override, judged at step {steps})",
                UserWarning,
                stacklevel=3,
            )
        self._unjudged_steps = steps

    def _build_judge(self, judge):
        from kosmos_env.judges import make_judge

        return make_judge(judge if judge is not None else self.kosmos_spec.judge)

    def _build_gate(self):
        if not self.kosmos_spec.gate.get("enabled", False):
            return None
        from kosmos_env.gate import ConsistencyGate

        return ConsistencyGate.from_spec(self.kosmos_spec.gate)

    def _build_step_judge(self, given: Any = None):
        """The judge behind the ``progress`` reward, checked against this env (``None`` in other modes).

        ``given``: a ready step judge (``step_judge=``), used instead of building ``reward.step_judge``
        (a batching vector env hands its sub-envs one loaded progress judge). Every mismatch is a
        :class:`~kosmos_env.errors.SpecError` naming it: a judge that scores neither single frames nor
        task progress, frames of another size, tasks it does not know, or ``oracle`` on a world that
        has no ground truth to read.
        """
        from kosmos_env.errors import SpecError

        spec = self.kosmos_spec
        mode = spec.reward["mode"]
        if given is not None and mode != "progress":
            raise SpecError(
                f"step_judge= is the step judge of reward.mode 'progress'; {spec.id} has reward.mode {mode!r}"
            )
        if mode == "oracle":
            if not getattr(self.world, "step_ground_truth", False):
                raise SpecError(
                    f"reward.mode 'oracle' reads a simulator's ground truth after every step, and the "
                    f"{spec.world.get('type')!r} world of {spec.id} has none; use reward.mode 'progress' with a "
                    f"step judge (e.g. {{'type': 'vision_frame'}})"
                )
            return None
        if mode != "progress":
            return None
        from kosmos_env.judges import make_judge

        judge = given if given is not None else make_judge(spec.reward["step_judge"])
        name = getattr(judge, "name", type(judge).__name__)
        if not callable(getattr(judge, "score_frames", None)) and not callable(getattr(judge, "score_progress", None)):
            raise SpecError(
                f"reward.step_judge {name!r} cannot score single frames or task progress, so {spec.id} has no "
                f"step judge for reward.mode 'progress' (or terminate_on_success); a frame judge such as "
                f"'vision_frame' or a progress judge such as 'vlm_progress' can"
            )
        size = getattr(judge, "frame_size", None)
        if size is not None and tuple(size) != tuple(spec.image_size):
            raise SpecError(
                f"reward.step_judge {name!r} reads {size[0]}x{size[1]} frames but {spec.id} renders "
                f"{spec.image_size[0]}x{spec.image_size[1]}: make the env with image_size=({size[0]}, {size[1]})"
            )
        known = getattr(judge, "tasks", None)
        missing = [t for t in self.task_names if known is not None and t not in known]
        if missing:
            raise SpecError(
                f"reward.step_judge {name!r} knows tasks {list(known)}, not {missing} of {spec.id}: "
                f"there is no step judge for this world's tasks"
            )
        return judge

    def _reset_potential(self, frame: np.ndarray) -> float:
        if self._uses_progress:
            # task progress at the first frame is 0 by definition (nothing of the instruction has been
            # done yet), so a progress judge is not asked: an episode's return is its last progress,
            # and a reset costs no model call
            return 0.0
        if self._step_judge is not None:
            return float(self._step_judge.score_frames(frame[None], self._task.name)[0])
        truth = self.world.evaluate()  # oracle: the simulator's verdict on the laid-out scene
        return float(bool(truth and truth.get("success")))

    def _step_potential(self, frames: np.ndarray, log: Mapping[str, Any]) -> float:
        if self._step_judge is not None:  # reads only the frame the world produced
            return float(self._step_judge.score_frames(frames[-1:], self._task.name)[0])
        return float(bool(np.asarray(log["gt_success"])[-1]))  # oracle: the simulator's own state

    def _progress_potential(self, frames: np.ndarray, info: dict[str, Any]) -> tuple[float, bool]:
        """(potential, success this step) from the progress judge's reading of this step's chunk.

        Potential: the judge's progress; on an abstention (an answer it could not parse) the previous
        potential, so an abstention earns nothing and costs nothing. Success: the judge's own flag
        where it gives one, else progress at or above ``reward.success_threshold``; never on an
        abstention (``success_patience`` counts consecutive steps the judge said success).
        ``info`` gains ``progress_abstained``, ``progress_abstentions`` (this episode's so far) and
        ``progress_success``.
        """
        from kosmos_env.judges.base import ProgressScore

        args = (frames, self._task.instruction, self._task.name, self._frames[0])
        if self.progress_batch is not None:
            score = self.progress_batch(*args)
        else:
            scores = self._step_judge.score_progress([args[0]], [args[1]], [args[2]], first_frames=[args[3]])
            if len(scores) != 1:
                raise RuntimeError(f"progress judge returned {len(scores)} scores for 1 chunk")
            score = scores[0]
        if not isinstance(score, ProgressScore):
            raise RuntimeError(f"progress judge returned a {type(score).__name__}, not a ProgressScore")
        if score.progress is None:
            self._abstentions += 1
            potential, success = self._potential, False
        else:
            potential = float(score.progress)
            success = (
                bool(score.success)
                if score.success is not None
                else (potential >= self.kosmos_spec.reward["success_threshold"])
            )
        info["progress_abstained"] = score.progress is None
        info["progress_abstentions"] = self._abstentions
        info["progress_success"] = success
        return potential, success

    def _observation(self, frame: np.ndarray, state: Mapping[str, np.ndarray]) -> dict[str, Any]:
        obs: dict[str, Any] = {"image": frame, "instruction": self._task.instruction}
        obs.update(state)
        return obs

    def _check_frame(self, frame: np.ndarray) -> np.ndarray:
        h, w = self.kosmos_spec.image_size
        if frame.shape != (h, w, 3) or frame.dtype != np.uint8:
            raise RuntimeError(
                f"world returned a frame of shape {frame.shape} {frame.dtype}; expected ({h}, {w}, 3) uint8"
            )
        return frame


def _jsonable(value: Any) -> Any:
    """Plain JSON values (tuples to lists, numpy scalars to Python, anything else to its repr)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)
