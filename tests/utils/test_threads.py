"""The torch thread rule (kosmos_env.utils.threads): its arithmetic, who overrides it, the shared
``--threads`` check, and that applying a count for a block puts the process back as it was."""

from __future__ import annotations

import os

import pytest

from kosmos_env.utils.threads import (
    MAX_THREADS_PER_CPU,
    THREADS_ENV,
    _cgroup_cpu_quota,
    available_cores,
    busy_note,
    choose_threads,
    threads_applied,
    threads_per_worker,
    threads_problem,
)


@pytest.mark.parametrize(
    "cores, workers, expected",
    [(2, 1, 2), (2, 2, 1), (2, 3, 1), (16, 3, 5), (16, 4, 4), (1, 4, 1), (8, 8, 1), (64, 1, 64)],
)
def test_rule_divides_the_cores_among_the_workers(cores, workers, expected):
    threads = threads_per_worker(workers, cores)
    assert threads == expected
    if workers <= cores:  # never more threads than cores, unless there are more workers than cores
        assert workers * threads <= cores
    else:
        assert threads == 1


def test_rule_refuses_no_workers():
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        threads_per_worker(0, 4)


def test_given_count_beats_the_environment_which_beats_the_rule():
    env = {THREADS_ENV: "3"}
    given = choose_threads(2, given=1, environ=env, cores=8)
    assert given.to_dict() == {"threads": 1, "source": "--threads", "cores": 8, "workers": 2}
    from_env = choose_threads(2, environ=env, cores=8)
    assert (from_env.threads, from_env.source) == (3, THREADS_ENV)
    rule = choose_threads(2, environ={}, cores=8)
    assert (rule.threads, rule.source) == (4, "rule")


@pytest.mark.parametrize("value, expected", [("4,2", 4), (" 2 ", 2), ("0", 3), ("-1", 3), ("abc", 3), ("", 3)])
def test_environment_value_read_as_openmp_reads_it(value, expected):
    """OpenMP's nested list gives its first level; a value OpenMP would ignore leaves the rule (6 // 2)."""
    assert choose_threads(2, environ={THREADS_ENV: value}, cores=6).threads == expected


@pytest.mark.parametrize(
    "value, line",
    [
        (0, "--threads must be >= 1, got 0"),
        (-3, "--threads must be >= 1, got -3"),
        (10**6, f"--threads 1000000 is far more than this machine's {os.cpu_count()} CPUs; at most"),
        (True, "--threads must be a whole number >= 1, got True"),
        ("2", "--threads must be a whole number >= 1, got '2'"),
    ],
)
def test_threads_problem_is_one_line(value, line):
    problem = threads_problem(value)
    assert problem is not None and problem.startswith(line) and "\n" not in problem
    with pytest.raises(ValueError, match="^--threads"):
        choose_threads(1, given=value, environ={}, cores=2)


def test_threads_problem_accepts_the_range():
    assert threads_problem(1) is None
    assert threads_problem(MAX_THREADS_PER_CPU * (os.cpu_count() or 1)) is None
    assert threads_problem(0, "threads") == "threads must be >= 1, got 0"


@pytest.mark.parametrize(
    "text, expected",
    [("200000 100000", 2), ("150000 100000", 2), ("50000 100000", 1), ("max 100000", None), ("garbage", None)],
)
def test_cgroup_quota_in_whole_cpus(tmp_path, text, expected):
    path = tmp_path / "cpu.max"
    path.write_text(text + "\n")
    assert _cgroup_cpu_quota(str(path)) == expected
    assert _cgroup_cpu_quota(str(tmp_path / "absent")) is None


def test_available_cores_is_at_most_the_cpus_this_process_may_use():
    cores = available_cores()
    assert 1 <= cores <= len(os.sched_getaffinity(0))


def test_threads_applied_puts_the_process_back(monkeypatch):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    monkeypatch.setenv(THREADS_ENV, "1")
    torch.set_num_threads(1)
    try:
        with threads_applied(2):
            assert torch.get_num_threads() == 2
            assert os.environ[THREADS_ENV] == "2"  # a torch imported or a process started here gets it too
        assert torch.get_num_threads() == 1
        assert os.environ[THREADS_ENV] == "1"
        monkeypatch.delenv(THREADS_ENV)
        with threads_applied(3):
            assert os.environ[THREADS_ENV] == "3"
        assert THREADS_ENV not in os.environ
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    "threads, load, says",
    [(2, 5.3, True), (2, 1.9, False), (1, 9.0, False), (4, 2.5, False)],
)
def test_busy_note_only_when_several_threads_meet_a_load_above_the_cores(threads, load, says):
    cores = 2 if threads < 4 else 4
    note = busy_note(threads, cores=cores, load=load)
    assert (note is not None) == says
    if says:
        assert note.startswith(f"this machine is busy (load {load:.1f} on {cores} core(s))") and "--threads 1" in note
