"""Next-step autoreset of both tabletop worlds in all three vector modes, and the learned world's
batched vector env (``vector_entry_point``: one engine pass for all sub-envs) against single envs.

Each sub-env of a vector env must produce exactly the stream a single env produces when it is
stepped with the same actions and, after an episode ends, reset without a seed (Gymnasium 1.x
next-step autoreset: the step after the end returns the new episode's first observation, reward
0, terminated and truncated False, the action ignored). Sub-envs end at different steps (their own
``horizon``, or ``terminate_on_success`` with a threshold every frame reaches), so one resets while
the others step. Comparing every observation, reward and info entry with the single env's shows
that nothing of the old episode leaks into the new one: its first step equals a fresh env's, the
progress reward's potential restarts from the new first frame, and the reset step's info carries
no judgment or outcome.

The learned world's batched step runs its renderer as one batch (different summation order in
the convolutions), so its frames may differ from a single env's by one grey level on a few pixels
(:meth:`kosmos_env.worlds.tabletop_learned.engine.Engine.step_lanes`); state, rewards,
terminations and verdicts are compared exactly, and the progress reward and a frame judge's score
(a frame classifier on those frames) within 1e-4.
"""

from __future__ import annotations

import functools

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

import kosmos_env  # noqa: F401
from kosmos_env.batched_vector import BatchedWorldVectorEnv
from tests.support.vector import info_of, obs_of, seeded_actions

MODES = ["sync", "async", "vector_entry_point"]
#: the frame judge's potential every frame reaches: the episode ends by success on its first step
ALWAYS = {
    "mode": "progress",
    "step_judge": {"type": "vision_frame"},
    "terminate_on_success": True,
    "success_threshold": 0.0,
}
PROGRESS = {
    "mode": "progress",
    "step_judge": {"type": "vision_frame"},
    "terminate_on_success": True,
    "success_threshold": 0.5,
}
#: keys a reset's info may hold; a step's own keys (judgment, outcome, frames, gate, ...) must not leak in
RESET_KEYS = {"task", "spec_hash", "progress"}


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _vector(mode: str, fns):
    if mode == "sync":
        return SyncVectorEnv(fns)
    if mode == "async":
        return AsyncVectorEnv(fns, context="spawn", shared_memory=False)
    # what make_vec(..., vectorization_mode="vector_entry_point") builds (make_batched_vec), with
    # per-sub-env settings
    return BatchedWorldVectorEnv(fns)


def _reference(fn, seed: int, actions) -> list[tuple]:
    """A single env's stream under next-step autoreset: (obs, reward, terminated, truncated, info) per call."""
    env = fn()
    try:
        obs, info = env.reset(seed=seed)
        stream = [(obs, 0.0, False, False, info)]
        done = False
        for a in actions:
            if done:
                obs, info = env.reset()  # no seed: the env's RNG continues, as autoreset does
                stream.append((obs, 0.0, False, False, info))
                done = False
            else:
                obs, r, term, trunc, info = env.step(a)
                stream.append((obs, float(r), bool(term), bool(trunc), info))
                done = term or trunc
        return stream
    finally:
        env.close()


def _vector_streams(venv, seeds, actions) -> list[list[tuple]]:
    obs, info = venv.reset(seed=seeds)
    n = venv.num_envs
    streams = [[(obs_of(obs, i), 0.0, False, False, info_of(info, i))] for i in range(n)]
    for t in range(len(actions[0])):
        obs, r, term, trunc, info = venv.step(np.stack([actions[i][t] for i in range(n)]))
        for i in range(n):
            streams[i].append((obs_of(obs, i), float(r[i]), bool(term[i]), bool(trunc[i]), info_of(info, i)))
    return streams


def _compare(vec: list[tuple], ref: list[tuple], frame_tol: int = 0, reward_tol: float = 0.0) -> int:
    """Asserts the streams agree; returns how many episode ends (and so autoresets) they hold."""
    assert len(vec) == len(ref)
    ends = 0
    for t, ((vo, vr, vte, vtr, vi), (ro, rr, rte, rtr, ri)) in enumerate(zip(vec, ref, strict=True)):
        where = f"call {t}"
        assert vo.keys() == ro.keys(), where
        for k in ro:
            if k == "image":
                diff = np.abs(vo[k].astype(int) - ro[k].astype(int))
                assert diff.max() <= frame_tol, (where, int(diff.max()))
            elif isinstance(ro[k], str):
                assert vo[k] == ro[k], (where, k)
            else:
                np.testing.assert_array_equal(vo[k], ro[k], err_msg=f"{where} {k}")
        assert (vte, vtr) == (rte, rtr), where
        assert vr == pytest.approx(rr, abs=reward_tol, rel=0), where
        assert vi.keys() == {k for k in ri if not k.startswith("_")}, (where, sorted(vi), sorted(ri))
        if "progress" in ri:
            assert float(vi["progress"]) == pytest.approx(float(ri["progress"]), abs=reward_tol, rel=0), where
        if "outcome" in ri:
            assert vi["outcome"] == ri["outcome"], where
        if isinstance(ri.get("judgment"), dict):
            for key in ("success", "abstained"):
                got = vi["judgment"][key]
                assert (got.item() if hasattr(got, "item") else got) == ri["judgment"][key], (where, key)
            # a frame judge's score moves with the frames' last grey level (batched learned world)
            assert float(vi["judgment"]["score"]) == pytest.approx(ri["judgment"]["score"], abs=reward_tol, rel=0), (
                where
            )
        if "terminated_by" in ri:
            assert vi["terminated_by"] == ri["terminated_by"], where
        if t and (ref[t - 1][2] or ref[t - 1][3]):
            # the step after an end: the new episode's first observation, reward 0, a reset's info only
            ends += 1
            assert not vte and not vtr and vr == 0.0, where
            assert set(vi) <= RESET_KEYS, (where, sorted(vi))
    return ends


def _check(
    env_id: str,
    mode: str,
    settings: list[dict],
    n_calls: int,
    frame_tol: int = 0,
    reward_tol: float = 0.0,
    min_ends: tuple[int, ...] = (),
):
    # "kosmos_env:<id>": a spawned async worker imports kosmos_env (registering the ids) before making it
    fns = [functools.partial(gymnasium.make, f"kosmos_env:{env_id}", **kw) for kw in settings]
    seeds = [5 + 7 * i for i in range(len(fns))]
    probe = fns[0]()
    actions = [seeded_actions(probe.action_space, n_calls, seed) for seed in seeds]
    probe.close()
    venv = _vector(mode, fns)
    try:
        streams = _vector_streams(venv, seeds, actions)
    finally:
        venv.close()
    for i, fn in enumerate(fns):
        ends = _compare(streams[i], _reference(fn, seeds[i], actions[i]), frame_tol, reward_tol)
        if i < len(min_ends):
            assert ends >= min_ends[i], (i, ends)
    return streams


# -- the MuJoCo tabletop ----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_tabletop_autoreset_with_episodes_ending_at_different_steps(mode):
    """Horizons 2 and 3: the two sub-envs end and reset at different steps; in the batched mode
    the MuJoCo sub-envs step one after another in the calling thread (EGL), so all is exact."""
    settings = [dict(image_size=(48, 48), horizon=2), dict(image_size=(48, 48), horizon=3)]
    _check("Kosmos-Tabletop-v1", mode, settings, n_calls=7, min_ends=(2, 1))


@pytest.mark.slow
def test_tabletop_progress_reward_and_success_termination_restart_with_the_new_episode():
    """Progress reward on the simulator: one sub-env ends by success on every first step
    (threshold 0), the other runs to its horizon; every new episode's potential starts from its own
    first frame (the first step's reward equals a fresh env's)."""
    settings = [
        dict(image_size=(64, 64), horizon=4, reward=ALWAYS),
        dict(image_size=(64, 64), horizon=3, reward=PROGRESS),
    ]
    streams = _check("Kosmos-Tabletop-v1", "vector_entry_point", settings, n_calls=7, min_ends=(3, 1))
    ended = [t for t in range(1, len(streams[0])) if streams[0][t][2]]
    assert ended and all(streams[0][t][4]["terminated_by"] == "success" for t in ended)


# -- the learned tabletop ---------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_learned_autoreset_with_progress_reward_and_success_termination(mode):
    """Three sub-envs: ends by success on its first step (progress reward, threshold 0), horizon 2,
    horizon 3 (terminal reward, robot-log judge). In the batched mode the lanes step in one engine
    pass while another lane resets."""
    # the first sub-env's episodes last one step, which the robot-log judge refuses to score (it
    # needs two): its terminal verdict comes from the frame judge
    settings = [dict(horizon=3, reward=ALWAYS, judge="vision_frame"), dict(horizon=2), dict(horizon=3)]
    batched = mode == "vector_entry_point"
    _check(
        "Kosmos-TabletopLearned-v1",
        mode,
        settings,
        n_calls=7,
        frame_tol=1 if batched else 0,
        reward_tol=1e-4 if batched else 0.0,
        min_ends=(3, 2, 1),
    )


@pytest.mark.slow
def test_learned_batched_lanes_out_of_phase_render_only_the_due_lanes():
    """Two actions per renderer call and horizons 3 and 4: the lanes' renderer calls fall on
    different steps (and every last step is forced), so a batch renders only some lanes; each
    lane still equals its single env."""
    settings = [dict(horizon=3, world={"actions_per_call": 2}), dict(horizon=4, world={"actions_per_call": 2})]
    _check("Kosmos-TabletopLearned-v1", "vector_entry_point", settings, n_calls=9, frame_tol=1, min_ends=(2, 1))


@pytest.mark.slow
def test_learned_make_vec_vector_entry_point_is_one_batched_engine_pass():
    """``make_vec(..., "vector_entry_point")`` builds the batched env: every step of the three
    sub-envs is one batch of three, and a rollout equals three single rollouts (frames within
    one grey level, the rest exact)."""
    n, horizon = 3, 3
    kwargs = dict(horizon=horizon)
    venv = gymnasium.make_vec(
        "Kosmos-TabletopLearned-v1", num_envs=n, vectorization_mode="vector_entry_point", **kwargs
    )
    fn = functools.partial(gymnasium.make, "Kosmos-TabletopLearned-v1", **kwargs)
    seeds = [2, 9, 4]
    probe = fn()
    actions = [seeded_actions(probe.action_space, horizon + 2, s) for s in seeds]
    probe.close()
    try:
        assert isinstance(venv, BatchedWorldVectorEnv) and all(venv.batched)
        streams = _vector_streams(venv, seeds, actions)
        batches = list(venv.batcher.batches)
    finally:
        venv.close()
    # horizon steps, the autoreset step (no world step), one more step: all as batches of n
    assert batches == [(n, True)] * (horizon + 1)
    for i in range(n):
        assert _compare(streams[i], _reference(fn, seeds[i], actions[i]), frame_tol=1) == 1


def test_engine_step_lanes_equals_each_engine_stepped_alone():
    """The batched engine pass on its own: three one-episode engines stepped together end in the
    same state as copies stepped alone (bit for bit), with frames within one grey level."""
    import copy

    env = gymnasium.make("Kosmos-TabletopLearned-v1")
    world = env.unwrapped.world
    from kosmos_env.worlds.tabletop_learned.engine import Engine

    engines = []
    for seed in (1, 2, 3):
        env.reset(seed=seed)
        engines.append(copy.deepcopy(world._engine))
    alone = copy.deepcopy(engines)
    rng = np.random.default_rng(0)
    cache: dict = {}
    for t in range(4):
        acts = rng.uniform(-0.03, 0.03, size=(3, 7))
        acts[:, 6] = rng.integers(0, 2, size=3)
        frames, grip, due = Engine.step_lanes(engines, acts, [None, True, None], cache=cache)
        for i, e in enumerate(alone):
            f, g, d = e.step(acts[i][None], render=[None, True, None][i])
            assert np.abs(f[0].astype(int) - frames[i].astype(int)).max() <= 1
            assert g[0] == grip[i] and d == due[i]
            for name in ("obj", "held", "gripper", "command"):
                assert torch.equal(getattr(e, name), getattr(engines[i], name)), name
            np.testing.assert_array_equal(e.ee_pos(), engines[i].ee_pos())
    env.close()
