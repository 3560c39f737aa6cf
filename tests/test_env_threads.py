"""``gymnasium.make(id, threads=N)``: a runtime option that sets torch's threads and never the spec
(its hash is the registered one); without it the env leaves the process's torch setting alone."""

from __future__ import annotations

import gymnasium
import pytest

import kosmos_env  # noqa: F401  (registers the ids)

torch = pytest.importorskip("torch")


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_option_sets_torch_and_keeps_the_spec_hash(torch_threads):
    torch.set_num_threads(3)
    plain = gymnasium.make("Kosmos-Tabletop-v1")
    assert torch.get_num_threads() == 3  # not asked: the user's setting stays
    asked = gymnasium.make("Kosmos-Tabletop-v1", threads=1)
    assert torch.get_num_threads() == 1
    assert asked.unwrapped.spec_hash == plain.unwrapped.spec_hash
    assert "threads" not in asked.unwrapped.kosmos_spec.to_dict()
    plain.close()
    asked.close()


@pytest.mark.parametrize("value", [0, -1, 10**6])
def test_bad_threads_option_is_refused_in_one_line(value):
    with pytest.raises(ValueError, match=r"^threads (must be >= 1|\d+ is far more)") as info:
        gymnasium.make("Kosmos-Tabletop-v1", threads=value)
    assert "\n" not in str(info.value)
