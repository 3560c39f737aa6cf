"""Campaign workers run torch with the thread count of kosmos_env.utils.threads, and say so in
results.json (``campaign.worker_threads``): measured with ``torch.get_num_threads()`` inside each
real worker of the campaign's own executors."""

from __future__ import annotations

import os

import pytest

from kosmos_env.campaign import make_config, run_campaign
from kosmos_env.campaign.executors import InProcessExecutor, ProcessPoolExecutor
from kosmos_env.utils.threads import THREADS_ENV, threads_per_worker

# a policy whose first action imports torch in the worker; two steps keep each episode short
CKPT = "ckpt:shipped=bc_clone_2000"


def _config(seeds: int = 2):
    return make_config(
        "Kosmos-Tabletop-v1", [CKPT], tasks=["carrot_on_plate"], seeds=seeds, video=False, spec_overrides={"horizon": 2}
    )


def test_pool_workers_run_torch_with_the_rule_and_record_it(tmp_path, monkeypatch):
    # no OMP_NUM_THREADS (the suite sets 1): the spawned workers must get their count from the rule
    monkeypatch.delenv(THREADS_ENV, raising=False)
    results = run_campaign(_config(), tmp_path / "run", ProcessPoolExecutor(2), progress=False)
    records = results["campaign"]["worker_threads"]
    expected = threads_per_worker(2)  # 1 on two cores, where torch's own default would be 2 per worker
    assert len(records) == 2 and {r["role"] for r in records} == {"rollout"}
    assert len({r["worker"] for r in records}) == 2
    loaded = [r for r in records if r["torch_loaded"]]
    assert loaded, records  # the ckpt policy imported torch in at least one worker
    for r in records:
        assert (r["source"], r["threads_set"], r["workers"]) == ("rule", expected, 2)
        assert r["torch_threads"] == expected  # torch.get_num_threads() in the worker, at its end
        assert r["workers"] * r["threads_set"] <= max(r["cores"], r["workers"])
    assert len(results["per_episode"]) == 2


def test_in_process_executor_sets_threads_only_when_given_and_puts_them_back(tmp_path):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        given = run_campaign(_config(1), tmp_path / "given", InProcessExecutor(threads=3), progress=False)
        assert torch.get_num_threads() == 1  # the caller's count is back
        (record,) = given["campaign"]["worker_threads"]
        assert (record["torch_threads"], record["source"], record["torch_loaded"]) == (3, "threads=", True)

        left = run_campaign(_config(1), tmp_path / "left", InProcessExecutor(), progress=False)
        (record,) = left["campaign"]["worker_threads"]
        assert (record["torch_threads"], record["source"], record["threads_set"]) == (1, "process", None)
    finally:
        torch.set_num_threads(before)


def test_executors_refuse_a_bad_count_in_one_line():
    with pytest.raises(ValueError, match=r"^threads= must be >= 1, got 0$"):
        ProcessPoolExecutor(2, threads=0)
    with pytest.raises(ValueError, match=r"^threads= must be >= 1, got -1$"):
        InProcessExecutor(threads=-1)


def test_ray_actor_applies_the_count_it_is_given(monkeypatch):
    """The Ray actors' bodies (plain classes: no Ray needed) set torch's threads when they start."""
    torch = pytest.importorskip("torch")
    from kosmos_env.campaign.ray_actors import EpisodeActor, JudgeActor

    before = torch.get_num_threads()
    monkeypatch.setenv(THREADS_ENV, "1")  # restored by monkeypatch; the actors set it for a later torch import
    try:
        actor = EpisodeActor(_config(1).to_dict(), "test:1:ray-a0", threads=2)
        assert torch.get_num_threads() == 2
        actor.close()
        JudgeActor(_config(1).to_dict(), threads=3)
        assert torch.get_num_threads() == 3
        assert os.environ[THREADS_ENV] == "3"
    finally:
        torch.set_num_threads(before)
