"""Re-judging a finished campaign's stored rollouts: side by side verdicts, exactly once, clear refusals."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kosmos_env import cli
from kosmos_env.campaign import judgments as judgment_table
from kosmos_env.campaign.judge_compare import compare_judges
from kosmos_env.campaign.ledger import Ledger
from kosmos_env.campaign.rejudge import rejudge
from kosmos_env.campaign.verify import verify_campaign
from kosmos_env.judges.robot_log import RobotLogJudge
from tests.support.campaign import tabletop_eval_argv
from tests.support.paths import ROOT

pytestmark = pytest.mark.slow


class SlowRobotLog(RobotLogJudge):
    """The robot-log judge, slowed down so a kill lands while re-judging (spawned by the SIGKILL test)."""

    def judge(self, rollout):
        time.sleep(0.3)
        return super().judge(rollout)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("campaign") / "run"
    argv = tabletop_eval_argv(out, ["scripted:skill=1.0", "random"], seeds=3, video=True)
    assert cli.main(argv) == 0
    return out


@pytest.fixture
def run(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def _episodes(out):
    con = sqlite3.connect(Path(out) / "ledger.sqlite")
    try:
        return con.execute("SELECT * FROM episodes ORDER BY episode_id").fetchall()
    finally:
        con.close()


def _judgment_rows(out, judge_id):
    con = sqlite3.connect(Path(out) / "ledger.sqlite")
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'judgments'").fetchone():
            return []
        return con.execute(
            "SELECT episode_id, owner, created FROM judgments WHERE judge_id = ? ORDER BY episode_id", (judge_id,)
        ).fetchall()
    finally:
        con.close()


def test_rejudging_files_a_second_judge_beside_the_first_and_regenerates_nothing(run):
    episodes_before = _episodes(run)
    files_before = sorted(p.name for p in (run / "artifacts").rglob("*") if p.is_file())
    report = rejudge(run, {"type": "robot_log"})
    assert report.eligible == 6 and report.judged_now == 6 and report.already_judged == 0
    assert report.rollouts_generated == 0 and report.artifacts_added == 0
    assert _episodes(run) == episodes_before  # the campaign's own judgments are untouched
    assert sorted(p.name for p in (run / "artifacts").rglob("*") if p.is_file()) == files_before
    assert verify_campaign(run).ok
    again = rejudge(run, {"type": "robot_log"})
    assert again.judged_now == 0 and again.already_judged == 6
    # a judge with another setting is another identity, judged separately
    assert judgment_table.judge_identity({"type": "robot_log"}) != judgment_table.judge_identity(
        {"type": "robot_log", "lift_height": 0.03}
    )
    res = compare_judges(run, "campaign", "robot_log", n_boot=200)
    assert res["episodes"] == 6
    assert sum(sum(row.values()) for row in res["confusion"].values()) == 6
    # on the tabletop both judges see the scripted policy succeed and random fail
    assert res["confusion"]["success"]["success"] == 3 and res["confusion"]["failure"]["failure"] == 3
    assert res["kappa"] == pytest.approx(1.0)


def test_cli_refuses_a_judge_that_cannot_load_and_a_corrupt_campaign(run, tmp_path, capsys):
    before = _episodes(run)
    empty = tmp_path / "no-model"
    empty.mkdir()
    code = cli.main(["judge", str(run), "--judge", f'{{"type": "vlm", "local_path": "{empty}"}}'])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "could not be loaded" in err[0] and "nothing was judged" in err[0]
    with Ledger(run / "ledger.sqlite", create=False) as ledger:
        assert not judgment_table.has_table(ledger)
    npy = next((run / "artifacts").rglob("*.npy"))
    npy.write_bytes(npy.read_bytes() + b"tampered")
    code = cli.main(["judge", str(run), "--judge", "robot_log"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "fails verification" in err[0]
    with Ledger(run / "ledger.sqlite", create=False) as ledger:
        assert not judgment_table.has_table(ledger)
    assert _episodes(run) == before


def test_sigkill_while_rejudging_then_rerun_judges_each_episode_exactly_once(run):
    judge_id = judgment_table.judge_identity({"type": "robot_log", "variant": "slow"})
    code = (
        "import sys; from kosmos_env.campaign.rejudge import rejudge; from tests.campaign.test_rejudge import SlowRobotLog; "
        "rejudge(sys.argv[1], {'type': 'robot_log', 'variant': 'slow'}, batch_size=1, judge=SlowRobotLog())"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUJOCO_GL="egl")
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(run)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while len(_judgment_rows(run, judge_id)) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    kept = _judgment_rows(run, judge_id)
    assert 2 <= len(kept) < 6
    report = rejudge(run, {"type": "robot_log", "variant": "slow"}, batch_size=2, judge=SlowRobotLog())
    assert report.already_judged == len(kept) and report.judged_now == 6 - len(kept)
    rows = _judgment_rows(run, judge_id)
    assert len(rows) == len({r[0] for r in rows}) == 6
    assert [r for r in rows if r[0] in {k[0] for k in kept}] == kept  # the first run's verdicts were kept as filed
    assert verify_campaign(run).ok


def test_verify_checks_judgments_against_their_judge_identity(run):
    rejudge(run, {"type": "robot_log"})
    con = sqlite3.connect(run / "ledger.sqlite")
    con.execute("UPDATE judgments SET judge_spec = ? WHERE rowid = 1", ('{"type":"state"}',))
    con.commit()
    con.close()
    report = verify_campaign(run)
    assert not report.ok and any("not its spec's identity" in p for p in report.problems)
