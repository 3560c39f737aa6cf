"""Shared test settings: headless MuJoCo, no hub access, and how to build each registered env."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# one torch (and OpenMP) thread: the suite runs on a loaded 2-core machine, where a second thread per
# process makes small networks many times slower. Commands and campaign workers the tests run in
# this process or spawn honour it as the user's choice (kosmos_env.utils.threads); tests of the
# thread rule itself remove it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium
import pytest

import kosmos_env  # noqa: F401


def missing_from_extra(extra: str) -> list[str]:
    """The distributions of pyproject's optional-dependency group ``extra`` that are not importable
    here (``[]``: the extra is installed). Read from pyproject through kosmos_env.errors, the table
    the CLI's one-line "install the X extra" messages come from, so tests and CLI name the same extra."""
    import importlib.util

    from kosmos_env.errors import _IMPORT_TO_DIST, requirement_table

    dists = [dist for dist, entry in requirement_table().items() if extra in entry["extras"]]
    if not dists:
        raise ValueError(f"pyproject.toml declares no optional-dependency group {extra!r}")
    import_name = {dist: module for module, dist in _IMPORT_TO_DIST.items()}
    # find_spec only looks the module up: nothing heavy is imported at collection time
    return [d for d in dists if importlib.util.find_spec(import_name.get(d, d.replace("-", "_"))) is None]


def requires_extra(*extras: str) -> pytest.MarkDecorator:
    """Skip (with the install command in the reason) unless every package of each named extra is
    importable: a core-install run then skips, by name, what needs an extra instead of failing.
    Use as a decorator, in ``pytestmark`` or in ``pytest.param(..., marks=...)``."""
    missing = {extra: missing_from_extra(extra) for extra in extras}
    reasons = [
        f"needs the {extra} extra (pip install -e '.[{extra}]'): {', '.join(dists)} not installed"
        for extra, dists in missing.items()
        if dists
    ]
    return pytest.mark.skipif(bool(reasons), reason="; ".join(reasons) or f"the {', '.join(extras)} extra is installed")


def kosmos_env_ids() -> list[str]:
    """Every env id this package registers (read from Gymnasium's registry, not hard-coded)."""
    return sorted(
        env_id
        for env_id, spec in gymnasium.registry.items()
        if isinstance(spec.entry_point, str) and spec.entry_point.startswith("kosmos_env.")
    )


def make_test_env(env_id: str, **kwargs):
    """Make a registered env runnable on CPU in tests: real-model worlds get a tiny random model."""
    from kosmos_env.spec import load_spec

    if load_spec(env_id).world["type"] == "cosmos3":
        # a tiny random Cosmos 3 pipeline on CPU; judging deferred (the VLM judge has its own tests)
        from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline

        size = kwargs.pop("image_size", (64, 64))
        kwargs = {
            "env_spec": tiny_bridge_spec(size=size[0]),
            "world_kwargs": {"pipeline": tiny_pipeline()},
            "judge": "state",
            "defer_judging": True,
            **kwargs,
        }
    return gymnasium.make(env_id, **kwargs)


@pytest.fixture
def tabletop_env():
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64))
    yield env
    env.close()


@pytest.fixture(scope="module")
def allow_test_policy_import():
    """Test-only ``module:Class`` policies (``tests.support.campaign:SlowScripted``) need the explicit
    opt-in; set for the module, inherited by the eval processes and workers its tests start.
    Modules ask for it with ``pytestmark = pytest.mark.usefixtures("allow_test_policy_import")``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KOSMOS_ENV_ALLOW_IMPORT", "1")
        yield


@pytest.fixture(scope="session")
def tiny_campaign(tmp_path_factory):
    """A finished tiny tabletop campaign (scripted skill 1.0 for successes, random for failures, 2 seeds,
    64x64, no video), run once per session through the real CLI; tests copy it before changing it."""
    from kosmos_env import cli
    from tests.support.faults import TWO_POLICIES, eval_argv

    out = tmp_path_factory.mktemp("faults-campaign") / "camp"
    assert cli.main(eval_argv(out, policies=TWO_POLICIES, seeds=2)) == 0
    return out
