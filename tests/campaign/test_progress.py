"""Campaign progress and summaries a researcher can add up: the bar's count, outcomes and queues
agree; a discard prints the gate's reason; a resumed run's summary says what this run did; every
file of a run folder gets the umask's mode (not mkstemp's owner-only 0600)."""

from __future__ import annotations

import os
import stat

import pytest

from kosmos_env.campaign.design import make_config
from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger
from kosmos_env.campaign.progress import ProgressMonitor, discard_reason, postfix_text, stage_postfix


def _config():
    return make_config(
        "Kosmos-Tabletop-v1", ["random"], tasks=["carrot_on_plate"], seeds=4, image_size=(64, 64), video=False
    )


def _finish(ledger: Ledger, outcome: str, gate=None) -> None:
    key = ledger.claim("h:1:t", 60, 3)
    ledger.complete(
        key.episode_id,
        "h:1:t",
        {"outcome": outcome, "success": outcome == "success", "score": 0.0, "gate": gate, "steps": 3},
    )


def _fields_add_up(monitor: ProgressMonitor) -> dict:
    counts = monitor.ledger.counts()
    fields = stage_postfix(counts)
    outcomes = sum(fields[k] for k in ("success", "failure", "discarded", "abstained", "errors"))
    assert outcomes == counts["done"] == monitor.bar.n
    queues = fields["pending"] + fields["rolling_out"] + fields.get("await_judge", 0) + fields.get("judging", 0)
    assert counts["done"] + queues == counts["planned"] == monitor.bar.total
    return fields


def test_progress_counts_add_up_and_a_discard_prints_its_reason(tmp_path, capsys):
    with Ledger(tmp_path / LEDGER_NAME) as ledger:
        ledger.initialise(_config())
        _finish(ledger, "success")
    monitor = ProgressMonitor(tmp_path, enabled=True, min_interval=0.0)
    assert monitor.done_before == 1
    with Ledger(tmp_path / LEDGER_NAME, create=False) as ledger:
        _finish(ledger, "failure")
        _finish(ledger, "discarded", gate={"passed": False, "reason": "image detail collapsed", "check": "collapse"})
        ledger.claim("h:1:t", 60, 3)  # one episode rolling out
    monitor.refresh(force=True)
    fields = _fields_add_up(monitor)
    # the clock restarted at this run's first finished episodes: warm-up is out of rate and ETA
    assert monitor.warm and monitor.bar.format_dict["initial"] == 3 and monitor.bar.format_dict["n"] == 3
    assert fields["failure"] == 1 and fields["discarded"] == 1 and fields["rolling_out"] == 1 and fields["pending"] == 0
    monitor.refresh(force=True)  # the same discard is not printed twice
    monitor.close()
    err = capsys.readouterr().err
    assert err.count("discarded: random on carrot_on_plate seed 2: image detail collapsed (collapse check)") == 1

    # a resumed run: old discards are not news, the bar starts where the campaign stands
    again = ProgressMonitor(tmp_path, enabled=True, min_interval=0.0)
    assert again.done_before == 3 and again.bar.n == 3
    again.close()
    assert "discarded:" not in capsys.readouterr().err


@pytest.mark.parametrize("columns", ["200", "60"])
def test_the_progress_line_fits_80_columns_and_the_terminal(tmp_path, capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)  # what shutil.get_terminal_size reads first
    with Ledger(tmp_path / LEDGER_NAME) as ledger:
        ledger.initialise(_config())
        _finish(ledger, "success")
        _finish(ledger, "failure")
        _finish(ledger, "error")
    monitor = ProgressMonitor(tmp_path, enabled=True, min_interval=0.0)
    monitor.refresh(force=True)
    line = str(monitor.bar)
    monitor.close()
    drawn = [part for part in capsys.readouterr().err.replace("\r", "\n").splitlines() if part.strip()]
    width = min(int(columns), 80)
    assert drawn and all(len(part) <= width for part in drawn), [len(p) for p in drawn]
    assert len(line) <= width and "3/4" in line
    if width == 80:  # a campaign of the README's size shows every field, nothing cut off
        assert line.rstrip().endswith("1 ok, 1 fail, 1 errors]"), line
    # a two-stage campaign adds the judge stage's queues; zero counts of rare outcomes stay out
    assert postfix_text(stage_postfix(_counts(), two_stage=True)) == "2 ok, 1 fail | 3 to judge, 1 judging"


def _counts() -> dict:
    zero = dict.fromkeys(("success", "failure", "discarded", "abstained", "error", "pending", "rolling_out"), 0)
    return {**zero, "success": 2, "failure": 1, "rolled_out": 3, "judging": 1}


def test_discard_reason_in_words():
    assert (
        discard_reason({"reason": "frozen frames near the gripper", "check": "frozen"})
        == "frozen frames near the gripper (frozen check)"
    )
    assert "no reason recorded" in discard_reason(None)


def test_resumed_summary_counts_only_this_run(tmp_path, capsys):
    from kosmos_env.cli import main

    args = [
        "eval",
        "--policy",
        "random",
        "--tasks",
        "carrot_on_plate",
        "--seeds",
        "1",
        "--no-video",
        "--no-progress",
        "--out",
        str(tmp_path / "c"),
    ]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert "this run: 1 episode(s) in " in first and "already done" not in first
    assert main(args) == 0
    second = capsys.readouterr().out
    assert "this run: 0 episode(s) in " in second
    assert "1 of the 1 were already done by earlier runs of this campaign" in second
    # every file of the run folder has the umask's mode: results are not owner-only beside a readable ledger
    umask = os.umask(0o022)
    os.umask(umask)
    modes = {
        os.path.relpath(os.path.join(d, f), tmp_path / "c"): stat.S_IMODE(os.stat(os.path.join(d, f)).st_mode)
        for d, _, files in os.walk(tmp_path / "c")
        for f in files
    }
    for name in ("results.json", "episodes.parquet", "manifest.json"):
        assert modes[name] == 0o666 & ~umask, (name, oct(modes[name]))
    # and no file is more private than the umask asks (sqlite caps its own files at 0644)
    readable = not umask & 0o004
    assert all(bool(mode & 0o004) == readable for mode in modes.values()), {k: oct(v) for k, v in modes.items()}


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_atomic_writes_and_artifacts_follow_the_umask(tmp_path, mask):
    from kosmos_env.campaign.artifacts import ArtifactStore
    from kosmos_env.utils.fileio import atomic_write, current_umask

    old = os.umask(mask)
    try:
        assert current_umask() == mask
        atomic_write(tmp_path / "results.json", "{}")
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
        _, rel, _ = ArtifactStore(tmp_path).put_bytes(b"abc", "bin")
    finally:
        os.umask(old)
    want = stat.S_IMODE(plain.stat().st_mode)
    assert want == 0o666 & ~mask
    assert stat.S_IMODE((tmp_path / "results.json").stat().st_mode) == want
    assert stat.S_IMODE((tmp_path / rel).stat().st_mode) == want


def test_eval_summary_names_this_runs_discards_by_check(capsys):
    from kosmos_env.commands.eval import _say_discards

    _say_discards(
        {
            "discards": [
                ("random on a seed 0", "image detail collapsed to 0.17", "collapse"),
                ("random on a seed 1", "image detail collapsed to 0.18", "collapse"),
                ("random on b seed 0", "frozen frames near the gripper", "frozen"),
            ]
        }
    )
    err = capsys.readouterr().err.strip()
    assert err == (
        "discarded by the gate in this run: 3 episode(s) (not counted as failures): collapse check x2 "
        "(e.g. random on a seed 0: image detail collapsed to 0.17); frozen check x1 "
        "(e.g. random on b seed 0: frozen frames near the gripper)"
    )
    _say_discards({"discards": []})
    assert capsys.readouterr().err == ""


def test_a_campaign_reports_each_discard_with_the_gates_reason(tmp_path, capsys):
    """A gate that calls every frame collapsed (collapse_ratio 1.0) discards every episode: the
    progress line prints each with its reason, and run_stats hands them to eval's summary."""
    from kosmos_env.campaign import make_config, run_campaign

    cfg = make_config(
        "Kosmos-Tabletop-v1",
        ["random"],
        tasks=["carrot_on_plate"],
        seeds=2,
        image_size=(64, 64),
        video=False,
        spec_overrides={"gate": {"collapse_ratio": 1.0}},
    )
    stats: dict = {}
    run_campaign(cfg, tmp_path / "c", progress=True, run_stats=stats)
    err = capsys.readouterr().err
    assert stats["done_before"] == 0 and stats["done_now"] == 2 and stats["seconds"] > 0
    assert [(label, check) for label, _, check in stats["discards"]] == [
        ("random on carrot_on_plate seed 0", "collapse"),
        ("random on carrot_on_plate seed 1", "collapse"),
    ]
    for seed in (0, 1):
        assert err.count(f"discarded: random on carrot_on_plate seed {seed}: image detail collapsed") == 1
