"""Run a campaign end to end: freeze or check the config, execute, rebuild the bundle.

Running the same campaign again on the same output folder is a *resume*: the ledger already
holds the finished episodes, so only the missing ones (never started, or leased by a process
that died) run. A different config on the same folder is refused before anything runs.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any, Callable, Sequence

from kosmos_env.campaign.bundle import write_bundle
from kosmos_env.campaign.control import clear_cancel
from kosmos_env.campaign.cost import PriceTable
from kosmos_env.campaign.design import CampaignConfig
from kosmos_env.campaign.executors import CampaignJob, Executor, InProcessExecutor
from kosmos_env.campaign.ledger import (
    LEDGER_NAME,
    CorruptLedgerError,
    Ledger,
    check_not_corrupt,
    corrupt_ledger_error,
    is_corruption,
    make_owner,
)
from kosmos_env.campaign.progress import ProgressMonitor
from kosmos_env.campaign.worker import WorkSettings
from kosmos_env.utils.fileio import writable_folder


def open_campaign(config: CampaignConfig, out_dir: str | os.PathLike, price_table: PriceTable | None = None) -> bool:
    """Create ``out_dir`` and its ledger for ``config``, or check the existing one matches.

    Returns True for a new campaign, False for a resume. Raises ConfigMismatchError (a
    ValueError) when the folder holds another campaign.
    """
    writable_folder(out_dir)
    path = os.path.join(os.fspath(out_dir), LEDGER_NAME)
    resuming = os.path.exists(path)
    try:
        with Ledger(path) as ledger:
            if resuming:
                check_not_corrupt(ledger)
            new = ledger.initialise(config)
            if price_table is not None:
                ledger.set_meta("price_table", json.dumps(price_table.to_dict(), sort_keys=True))
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc) and not isinstance(exc, CorruptLedgerError):
            raise corrupt_ledger_error(path, exc) from None
        raise
    return new


def recorded_config(out_dir: str | os.PathLike) -> CampaignConfig | None:
    """The config of the campaign ``out_dir`` already holds, or None (no folder, no ledger, no config).

    Read-only: nothing is created. ``kosmos-env eval`` uses it so that a folder made before its
    default seeds changed resumes on the seeds it recorded, instead of planning other seeds and
    being refused as a different campaign."""
    from kosmos_env.campaign.readonly import ReadOnlyLedger

    path = os.path.join(os.fspath(out_dir), LEDGER_NAME)
    if not os.path.isfile(path):
        return None
    try:
        with ReadOnlyLedger(path) as ledger:
            if "config" not in ledger.meta():
                return None
            return ledger.config()
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc):
            raise corrupt_ledger_error(path, exc) from None
        raise


def run_campaign(
    config: CampaignConfig,
    out_dir: str | os.PathLike,
    executor: Executor | None = None,
    settings: WorkSettings = WorkSettings(),
    price_table: PriceTable | None = None,
    argv: Sequence[str] | None = None,
    progress: bool = True,
    on_progress: Callable[[], None] | None = None,
    retry_errors: bool = False,
    run_stats: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run (or resume) ``config`` into ``out_dir``; returns the results.json content.

    ``on_progress()`` is called whenever the progress display refreshes (after each episode
    in process, a few times a second with a pool): e.g. logging finished episodes to W&B.
    Episodes an infrastructure failure left in ``error`` (older ledgers) are retried on every
    run; ``retry_errors`` retries the policy's own errors as well.

    The bundle is rewritten at the end even if the executor failed (then the error is raised
    after it), so what finished is always visible.

    ``run_stats``, when given, is filled with what *this* run did (results.json describes the whole
    campaign, every run of it): ``done_before`` (episodes earlier runs finished), ``done_now``
    (finished by this run), ``seconds`` (this run's wall clock) and ``discards`` (``(label,
    reason, check)`` of each episode this run discarded).
    """
    started = time.monotonic()
    out_dir = os.fspath(out_dir)
    executor = executor or InProcessExecutor()
    open_campaign(config, out_dir, price_table)
    with Ledger(os.path.join(out_dir, LEDGER_NAME), create=False) as ledger:
        owner = make_owner("main")
        clear_cancel(ledger, owner)  # rerunning a cancelled campaign resumes it
        ledger.reopen_errors(all_errors=retry_errors)
        run_id = ledger.start_run(owner, executor.name, executor.workers, argv)
    monitor = ProgressMonitor(
        out_dir,
        enabled=progress,
        two_stage=bool(getattr(executor, "judge_workers", 0)),
    )
    seen_discards = set(monitor.discards_seen)
    try:
        refresh = monitor.refresh if on_progress is None else lambda: (monitor.refresh(), on_progress())
        executor.run(CampaignJob(out_dir, config, settings), refresh)
        _judge_leftovers(config, out_dir, settings, refresh)
    finally:
        monitor.close()
        with Ledger(os.path.join(out_dir, LEDGER_NAME), create=False) as ledger:
            ledger.finish_run(run_id)
        results = write_bundle(out_dir, price_table)
        if run_stats is not None:
            run_stats.update(
                done_before=monitor.done_before,
                done_now=monitor.done - monitor.done_before,
                seconds=time.monotonic() - started,
                discards=_discards_since(out_dir, seen_discards),
            )
    return results


def _discards_since(out_dir: str, seen: set[str]) -> list[tuple[str, str]]:
    from kosmos_env.campaign.progress import discard_reason

    with Ledger(os.path.join(out_dir, LEDGER_NAME), create=False) as ledger:
        rows = [r for r in ledger.episodes("done") if r["outcome"] == "discarded" and r["episode_id"] not in seen]
    out = []
    for r in rows:
        gate = r.get("gate") if isinstance(r.get("gate"), dict) else {}
        out.append(
            (
                f"{r['policy']} on {r['task']} seed {r['seed']}",
                gate.get("reason") or discard_reason(gate),
                str(gate.get("check") or "gate"),
            )
        )
    return out


def _judge_leftovers(config: CampaignConfig, out_dir: str, settings: WorkSettings, refresh: Callable[[], None]) -> None:
    """Judge rolled-out episodes no judge worker is left to judge, here, with the campaign's judge.

    A two-stage run killed after some rollouts and resumed without ``--judge-workers`` (or an
    executor without judge workers) leaves them in the judge queue; their rollouts are kept and
    judged, never run again.
    """
    with Ledger(os.path.join(out_dir, LEDGER_NAME), create=False) as ledger:
        counts = ledger.counts()
    if counts["rolled_out"] + counts["judging"] == 0:
        return
    from kosmos_env.campaign.judge_stage import judge_work

    judge_work(out_dir, config, make_owner("judge-main"), settings, on_episode=lambda *_: refresh())
