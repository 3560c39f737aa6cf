"""Resuming a campaign whose ledger is corrupt is one line naming the file and what to do, never a
``sqlite3.DatabaseError`` traceback (issue 43 item 4)."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from kosmos_env import cli
from kosmos_env.campaign.ledger import Ledger
from tests.support.campaign import planned_ledger, tabletop_eval_argv
from tests.support.publish_bundles import CAMPAIGNS, campaign


def _one_line(capsys, rc) -> str:
    """The one error line (eval's notes on the seeds and the machine may come before it)."""
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("kosmos-env eval: error:")]
    assert rc == 2 and len(errors) == 1 and "Traceback" not in err, (rc, err[-3000:])
    assert err.strip().splitlines()[-1] == errors[0]
    return errors[0]


def _argv(out, seed_offset: bool) -> list[str]:
    argv = tabletop_eval_argv(out, ["scripted:skill=1.0", "random"], seeds=3)
    if not seed_offset:  # eval then reads the folder's recorded seeds first (a read-only open of the ledger)
        i = argv.index("--seed-offset")
        del argv[i : i + 2]
    return argv


@pytest.mark.parametrize("seed_offset", [True, False])
def test_a_file_that_is_not_a_database_is_one_line(tmp_path, capsys, seed_offset):
    out = tmp_path / "run"
    planned_ledger(out)
    ledger = out / "ledger.sqlite"
    ledger.write_bytes(b"this is not a database" * 200)
    line = _one_line(capsys, cli.main(_argv(out, seed_offset)))
    assert line.startswith("kosmos-env eval: error: the campaign ledger") and str(ledger) in line, line
    assert "is corrupt (SQLite: file is not a database)" in line and "cannot be resumed" in line, line
    assert f"kosmos-env verify {out}" in line and "new --out folder" in line, line


def test_a_damaged_page_past_the_header_is_one_line(tmp_path_factory, tmp_path, capsys):
    """A finished campaign rerun with its own command (a resume): the header and the config read fine,
    the episodes table's root page is garbage. SQLite's quick_check finds it before the resume's
    first query of that table would raise a DatabaseError traceback."""
    out = tmp_path / "run"
    shutil.copytree(campaign(tmp_path_factory, "a"), out)
    ledger = out / "ledger.sqlite"
    con = sqlite3.connect(ledger)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'episodes'").fetchone()[0]
    con.close()
    data = bytearray(ledger.read_bytes())
    data[(root - 1) * page_size : root * page_size] = b"\xa5" * page_size
    ledger.write_bytes(bytes(data))
    with Ledger(ledger, create=False) as opened:  # what resuming reads first still works
        assert "config" in opened.meta()
    capsys.readouterr()
    argv = ["eval", "--env", "Kosmos-Tabletop-v1", "--tasks", "carrot_on_plate", "--out", str(out), "--no-progress"]
    line = _one_line(capsys, cli.main(argv + CAMPAIGNS["a"]))  # the command that made it (publish_bundles.run_eval)
    assert str(ledger) in line and "is corrupt (SQLite: " in line and "cannot be resumed" in line, line


def test_only_corruption_is_called_corruption():
    """A busy or locked database is not a corrupt one (those errors keep their own words)."""
    from kosmos_env.campaign.ledger import CorruptLedgerError, is_corruption

    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = 5  # SQLITE_BUSY
    assert not is_corruption(locked) and not is_corruption(ValueError("x"))
    err = CorruptLedgerError("the campaign ledger x is corrupt")
    assert isinstance(err, ValueError) and isinstance(err, sqlite3.DatabaseError)
