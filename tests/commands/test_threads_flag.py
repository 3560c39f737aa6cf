"""Every command's ``--threads`` is checked by one shared check (kosmos_env.utils.threads.threads_problem):
0, a negative count and an absurd one each get one line naming the flag and a non-zero exit,
before any work."""

from __future__ import annotations

import os

import pytest

from kosmos_env import cli

CPUS = os.cpu_count() or 1


def _argv(command: str, tmp_path) -> list[str]:
    out = str(tmp_path / "out")
    return {
        "eval": ["eval", "--policy", "random", "--seeds", "1", "--out", out],
        "rollout": ["rollout", "--seeds", "1", "--out", out],
        "serve-policy": ["serve-policy", "random", "--port", "0"],
        "judge": ["judge", out, "--judge", "robot_log"],
        "train-policy": ["train-policy", "--out", out],
        "trust": ["trust", "--env", "Kosmos-TabletopLearned-v1"],
    }[command]


@pytest.mark.parametrize(
    "command, value, line",
    [
        ("eval", "0", "--threads must be >= 1, got 0"),
        ("eval", "-2", "--threads must be >= 1, got -2"),
        ("eval", "100000", f"--threads 100000 is far more than this machine's {CPUS} CPUs; at most {4 * CPUS}"),
        ("rollout", "0", "--threads must be >= 1, got 0"),
        ("rollout", "100000", "--threads 100000 is far more than this machine's"),
        ("serve-policy", "-1", "--threads must be >= 1, got -1"),
        ("judge", "0", "--threads must be >= 1, got 0"),
        ("train-policy", "0", "--threads must be >= 1, got 0"),
        ("train-policy", "100000", "--threads 100000 is far more than this machine's"),
        ("trust", "0", "--threads must be >= 1, got 0"),
    ],
)
def test_bad_threads_get_one_line_and_no_work(command, value, line, tmp_path, capsys):
    rc = cli.main([*_argv(command, tmp_path), "--threads", value])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0
    assert len(err) == 1 and err[0].startswith(f"kosmos-env {command}: error: {line}"), err
    assert not (tmp_path / "out").exists()  # refused before anything was written
