"""Every command's help: a description, no reStructuredText markup, no traceback; flag spellings
shared between commands (old spellings kept as aliases)."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from kosmos_env.cli import build_parser, main


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, (*path, name))


COMMANDS = [path for path, _ in _walk(build_parser()) if path]


def test_every_command_is_walked():
    names = {p[0] for p in COMMANDS}
    assert {"eval", "rollout", "gate-check", "verify", "doctor", "report", "serve-policy"} <= names
    assert ("leaderboard", "build") in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_has_a_description_and_no_markup(path):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    text = out.getvalue()
    assert exit_.value.code == 0 and "Traceback" not in text + err.getvalue()
    parser = dict(_walk(build_parser()))[path]
    assert parser.description and len(parser.description.strip()) > 20, f"{' '.join(path)} has no description"
    assert "``" not in text, f"{' '.join(path)} --help shows rst markup"
    assert ":class:`" not in text and ":func:`" not in text and ":mod:`" not in text


def test_top_level_help_has_no_markup():
    text = build_parser().format_help()
    assert "``" not in text


def test_rollout_takes_evals_spellings_and_keeps_the_old_ones():
    parser = build_parser()
    new = parser.parse_args(
        ["rollout", "--tasks", "carrot_on_plate", "--seeds", "3", "--seed-offset", "7", "--out", "x"]
    )
    old = parser.parse_args(["rollout", "--task", "carrot_on_plate", "--episodes", "3", "--seed", "7", "--out", "x"])
    assert (new.task, new.episodes, new.seed) == (old.task, old.episodes, old.seed) == ("carrot_on_plate", 3, 7)


def test_rollout_refuses_several_tasks_in_one_line(tmp_path, capsys):
    rc = main(["rollout", "--tasks", "carrot_on_plate,spoon_on_towel", "--seeds", "1", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "one task" in err


def test_gate_check_json_is_a_switch_and_the_old_form_still_writes_a_file():
    from kosmos_env.commands.gate_check import json_targets

    parser = build_parser()
    assert json_targets(parser.parse_args(["gate-check", "--json"])) == (True, None)
    assert json_targets(parser.parse_args(["gate-check", "--json", "--strict"])) == (True, None)
    assert json_targets(parser.parse_args(["gate-check", "--json", "out.json"])) == (False, "out.json")
    assert json_targets(parser.parse_args(["gate-check", "--json-out", "o.json"])) == (False, "o.json")
    assert json_targets(parser.parse_args(["gate-check", "--json", "--json-out", "o.json"])) == (True, "o.json")
    assert json_targets(parser.parse_args(["gate-check"])) == (False, None)


def test_json_is_a_switch_on_every_command_that_has_it():
    for path, parser in _walk(build_parser()):
        for action in parser._actions:
            if "--json" in action.option_strings:
                assert action.nargs in (0, "?"), f"{' '.join(path)} --json takes a value"
