"""Kosmos-Bridge-v1 with ``reward.mode = "progress"`` and the VLM progress judge as its step judge, end to end
on the tiny random Cosmos 3 world and tiny Qwen2.5-VL models: the spec (hashes apart, the judge pinned, the
tabletop's hashes unmoved), the reward mechanics (potential = progress, abstention keeps it, the judge's
success with patience ends the episode), the gate's discard, and one generate call per vector step."""

from __future__ import annotations

import dataclasses

import gymnasium
import numpy as np
import pytest

import kosmos_env  # noqa: F401  (registers the env ids)
from kosmos_env.errors import SpecError
from kosmos_env.spec import load_spec
from tests.conftest import requires_extra

pytestmark = requires_extra("models")

HOLD = np.zeros((4, 7), np.float32)
HOLD[:, 6] = 1.0  # four hold actions, gripper open: the gate demands no visible motion
BARE = {"mode": "progress", "step_judge": {"type": "vlm_progress"}}


def bridge(reward, horizon=4, gate=None, **kwargs):
    """The tiny Bridge env (48x64 frames, 2 denoising steps) with this reward (gate off unless given);
    terminal judging deferred."""
    from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline

    spec = tiny_bridge_spec(horizon=horizon, gate=gate or {"enabled": False})
    kwargs.setdefault("world_kwargs", {"pipeline": tiny_pipeline()})
    return gymnasium.make("Kosmos-Bridge-v1", env_spec=spec, judge="state", defer_judging=True, reward=reward, **kwargs)


def taught(**overrides):
    from tests.support.tiny_progress import taught_judge_spec

    return {"mode": "progress", "step_judge": taught_judge_spec(), **overrides}


# -- the spec --------------------------------------------------------------------------------------
def test_a_progress_spec_hashes_apart_and_pins_the_judge_while_no_tabletop_hash_moves():
    from kosmos_env.judges.vlm_progress_prompt import PROMPT_SHA256

    spec = load_spec("Kosmos-Bridge-v1")
    progress = spec.with_overrides(reward=BARE)
    judge = progress.reward["step_judge"]
    # the pinned model, revision and prompt are written out, so the hash covers them
    assert judge["model_id"] == "nvidia/Cosmos-Reason1-7B" and judge["revision"] == "main"
    assert judge["prompt_sha256"] == PROMPT_SHA256 and '"prompt_sha256"' in progress.canonical()
    assert progress.with_overrides(reward={"mode": "progress", "step_judge": dict(judge)}).hash == progress.hash
    hashes = {
        spec.hash,
        progress.hash,
        spec.with_overrides(reward=dict(BARE, terminate_on_success=True)).hash,
        spec.with_overrides(reward=dict(BARE, terminate_on_success=True, success_patience=2)).hash,
        spec.with_overrides(reward={"mode": "progress", "step_judge": dict(judge, prompt_sha256="0" * 64)}).hash,
        spec.with_overrides(reward={"mode": "progress", "step_judge": dict(judge, max_frames=4)}).hash,
    }
    assert len(hashes) == 6
    # the tabletop worlds' progress specs hash as before the progress judge existed (values taken then)
    frame = {"mode": "progress", "step_judge": {"type": "vision_frame"}}
    for env_id, frozen in [
        ("Kosmos-Tabletop-v1", "82ff75d72a407f622ef262d92b621782fbcf2db8e260e4e959b00e6b540ed8d4"),
        ("Kosmos-TabletopLearned-v1", "3a49c884ecebb7c1e5f8ea405338935470fbab16712a3470c7e70d7c51fdaa04"),
    ]:
        assert load_spec(env_id).with_overrides(reward=frame).hash == frozen
        assert load_spec(env_id).with_overrides(reward={"mode": "progress"}).hash == frozen


def test_a_step_judge_that_scores_neither_frames_nor_progress_is_one_clear_error():
    with pytest.raises(SpecError, match="cannot score single frames or task progress") as err:
        bridge({"mode": "progress", "step_judge": {"type": "state"}})
    assert "'vlm_progress'" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SpecError, match="step judge of reward.mode 'progress'"):
        bridge({"mode": "terminal"}, step_judge=object())


# -- one env ---------------------------------------------------------------------------------------
def test_make_with_a_random_judge_from_a_folder_runs_and_every_abstention_keeps_the_potential(tmp_path):
    from kosmos_env.testing.tiny_run import tiny_judge_dir

    judge = {"type": "vlm_progress", "local_path": tiny_judge_dir(tmp_path), "max_new_tokens": 6}
    judge.update(max_pixels=56 * 56, min_pixels=28 * 28, model_id="kosmos-env/tiny-random-qwen2.5-vl", revision=None)
    env = bridge({"mode": "progress", "step_judge": judge}, horizon=2)
    base = env.unwrapped
    assert base.spec_hash != load_spec("Kosmos-Bridge-v1").hash
    _, info = env.reset(seed=0)
    assert info["progress"] == 0.0 and info["progress_abstentions"] == 0  # progress at the start is 0
    for t in (1, 2):
        _, reward, terminated, truncated, info = env.step(HOLD)
        # a random model's answer never parses: the judge abstains, the potential stays, nothing is paid
        assert info["progress_abstained"] is True and info["progress_abstentions"] == t
        assert reward == 0.0 and info["progress"] == 0.0 and info["progress_success"] is False
    assert truncated and not terminated and info["outcome"] == "pending"
    assert base.progress_judge.calls == 2  # one call per step, none at reset
    step_judge = base.provenance["step_judge"]
    assert step_judge["name"] == "vlm_progress" and step_judge["model"]["source"] == "folder"
    assert len(step_judge["model"]["weights_sha256"]) == 64 and step_judge["spec_default"] is True


@pytest.mark.slow  # teaches the tiny model its answer (once per process)
def test_progress_is_paid_as_it_rises_and_the_judges_success_ends_the_episode_after_patience():
    env = bridge(taught(terminate_on_success=True, success_patience=2), horizon=6)
    judge = env.unwrapped.progress_judge
    _, info = env.reset(seed=0)
    assert info["progress"] == 0.0
    _, r1, term, _, info = env.step(HOLD)
    # the taught model reads 0.75 and success: paid the rise, one success in a row
    assert r1 == pytest.approx(0.75) and info["progress"] == pytest.approx(0.75) and info["progress_success"]
    assert not term and not info["progress_abstained"]
    judge.max_new_tokens = 6  # the answer is cut off: unparseable, an abstention
    _, r2, term, _, info = env.step(HOLD)
    assert info["progress_abstained"] and info["progress_abstentions"] == 1
    assert r2 == 0.0 and info["progress"] == pytest.approx(0.75) and not term  # potential kept, the run broken
    judge.max_new_tokens = 40
    _, r3, term, _, info = env.step(HOLD)
    assert r3 == pytest.approx(0.0) and not term  # success again, but only one in a row
    _, r4, term, trunc, info = env.step(HOLD)
    assert term and not trunc and info["terminated_by"] == "success" and info["outcome"] == "pending"
    assert r1 + r2 + r3 + r4 == pytest.approx(0.75) and info["progress_abstentions"] == 1


class _BlankFrom:
    """The tiny Cosmos 3 world, run as usual, whose frames turn into a uniform grey image from step
    ``blank_from`` on (image collapse: the gate discards the step)."""

    def __init__(self, world, blank_from):
        self.world, self.blank_from, self.t = world, blank_from, 0

    def __getattr__(self, name):
        return getattr(self.world, name)

    def reset(self, task, rng):
        self.t = 0
        return self.world.reset(task, rng)

    def step(self, actions):
        out = self.world.step(actions)
        self.t += 1
        if self.t < self.blank_from:
            return out
        return dataclasses.replace(out, frames=np.full_like(np.asarray(out.frames), 128))


@pytest.mark.slow
def test_a_gate_discard_takes_back_what_the_episode_was_paid():
    from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline
    from kosmos_env.worlds import make_world

    world = _BlankFrom(make_world(tiny_bridge_spec(), pipeline=tiny_pipeline()), blank_from=2)
    # the gate as registered, but for a collapse threshold no random tiny frame comes near (a grey one does)
    env = bridge(taught(), horizon=4, gate={"enabled": True, "collapse_ratio": 0.05}, world_model=world)
    env.reset(seed=0)
    _, r1, term, _, info = env.step(HOLD)
    assert info["gate"]["passed"] and not term and r1 == pytest.approx(0.75)
    _, r2, term, _, info = env.step(HOLD)
    assert term and info["terminated_by"] == "gate" and info["outcome"] == "discarded"
    assert info["gate"]["check"] == "collapse" and "progress" not in info
    assert r1 + r2 == pytest.approx(0.0, abs=1e-9)  # a discarded episode returns exactly 0
    _, info = env.reset(seed=1)
    assert info["progress"] == 0.0 and info["progress_abstentions"] == 0


# -- a vector env ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_vector_step_scores_every_sub_env_in_one_generate_call_of_one_loaded_judge():
    from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline

    vec = gymnasium.make_vec(
        "Kosmos-Bridge-v1",
        num_envs=2,
        vectorization_mode="vector_entry_point",
        env_spec=tiny_bridge_spec(horizon=2, gate={"enabled": False}),
        world_kwargs={"pipeline": tiny_pipeline()},
        judge="state",
        defer_judging=True,
        reward=taught(),
    )
    judge = vec.envs[0].unwrapped.progress_judge
    assert vec.envs[1].unwrapped.progress_judge is judge  # loaded once, shared
    model = judge.model
    real, rows = model.generate, []

    def counting_generate(*args, **kwargs):  # the real generate runs; the call is only counted
        rows.append(int(kwargs["input_ids"].shape[0]))
        return real(*args, **kwargs)

    model.generate = counting_generate
    try:
        _, info = vec.reset(seed=[0, 1])
        assert rows == [] and list(info["progress"]) == [0.0, 0.0]
        _, rewards, _, _, info = vec.step(np.stack([HOLD] * 2))
        assert rows == [2]  # both sub-envs' chunks, one generate call
        np.testing.assert_allclose(rewards, 0.75)
        _, rewards, _, truncated, info = vec.step(np.stack([HOLD] * 2))
        assert rows == [2, 2] and truncated.all()
        np.testing.assert_allclose(rewards, 0.0)
        assert vec.progress_batcher.batches == [(2, True), (2, True)]
        assert vec.batcher.batches == [(2, True), (2, True)]  # the world calls: batched as before
    finally:
        model.generate = real
        vec.close()
