"""The judge stage: judge workers take rolled-out episodes in batches and record their verdicts.

In a two-stage campaign (``kosmos-env eval --judge-workers N``) rollout workers (policy, world,
gate; :mod:`kosmos_env.campaign.worker`) file each rolled-out episode in the ledger's judge
queue with its artifacts, including the exact frames the env produced. A judge worker here
loads the campaign's judge once, leases up to a batch of rolled-out episodes at a time
(:meth:`~kosmos_env.campaign.ledger.Ledger.claim_judging`), rebuilds their rollouts from the
stored artifacts (:class:`~kosmos_env.campaign.rejudge.StoredRollouts`, the path re-judging
uses: every file hash-checked, each read once per batch), judges them in one
:func:`~kosmos_env.judges.judge_many` call and closes each episode with its verdict.

What an episode records does not depend on the stage layout: the judge sees the same frames,
actions, log and ground truth as in-line judging, and the provenance is built by the same
function (:func:`~kosmos_env.campaign.worker.campaign_provenance`). The per-rollout judge time
is the batch's judge time shared out over its rollouts (what a batched judge costs per rollout).

Leases work per stage as for rollouts: a judge worker that dies (SIGKILL, OOM) leaves its
batch leased by a dead process, the next judge worker takes it over, and a verdict already
recorded is never recorded again (first finisher wins). A rollout is never regenerated
because its judge died.
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kosmos_env.campaign.control import cancel_requested
from kosmos_env.campaign.cost import file_loads
from kosmos_env.campaign.design import CampaignConfig
from kosmos_env.campaign.failures import is_infrastructure_failure
from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger
from kosmos_env.campaign.worker import Heartbeat, WorkSettings, pause_after_infrastructure_failure


def default_batch(judge: Any) -> int:
    """Rollouts a judge worker claims at a time when ``--judge-batch`` is not given.

    A judge with ``judge_batch`` takes its own ``batch_size`` (the VLM judge then splits the
    claim further by its ``memory_budget_mb``); any other judge takes one rollout at a time.
    """
    if callable(getattr(judge, "judge_batch", None)):
        return max(1, int(getattr(judge, "batch_size", 1) or 1))
    return 1


class JudgeHeartbeat(Heartbeat):
    """Renews the judge leases of one batch while it is judged."""

    def __init__(self, ledger_path: str, episode_ids: Sequence[str], owner: str, lease_seconds: float):
        super().__init__(ledger_path, f"judge:{episode_ids[0]}+{len(episode_ids) - 1}", owner, lease_seconds)
        self.episode_ids = list(episode_ids)

    def _renew(self, ledger: Ledger) -> bool:
        _, _, owner, ttl = self.args
        return ledger.renew_judging(self.episode_ids, owner, ttl)


class JudgeRunner:
    """The campaign's judge, loaded once, turning judge-queue rows into finished episode records.

    ``out_dir`` is where the rolled-out episodes' artifacts are read from; a Ray judge actor,
    which is sent the rollouts themselves, has none and uses :meth:`judge_rollouts` only.
    """

    def __init__(self, config: CampaignConfig, out_dir: str | os.PathLike | None, judge: Any = None, batch: int = 0):
        from kosmos_env.judges import make_judge
        from kosmos_env.judges.base import judge_identity

        self.config = config
        t0 = time.perf_counter()
        self.judge = judge if judge is not None else make_judge(dict(config.judge))
        # the judge's build, filed as load_judge with this worker's first judged episode (as in-line workers do)
        self._loads = {} if judge is not None else {"judge": time.perf_counter() - t0}
        self.identity = judge_identity(self.judge, config.judge)
        self.name = str(getattr(self.judge, "name", config.judge.get("type")))
        self.reader = None
        if out_dir is not None:
            from kosmos_env.campaign.rejudge import StoredRollouts

            self.reader = StoredRollouts(Path(out_dir), config)
        self.batch = int(batch) if batch else default_batch(self.judge)

    def read(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list[Any], float]:
        return read_rollouts(self.reader, rows)

    def judge_rollouts(self, rollouts: Sequence[Any]) -> tuple[list[Any], float]:
        """A verdict (or the exception raised) per rollout, and the judge seconds per rollout.

        Rollouts are judged in one batch; if the batch raises, each is judged alone so one bad
        rollout does not fail its batch mates. Exceptions given in place of rollouts pass through.
        """
        from kosmos_env.judges import judge_many

        index = [i for i, r in enumerate(rollouts) if not isinstance(r, BaseException)]
        out: list[Any] = list(rollouts)
        if not index:
            return out, 0.0
        todo = [rollouts[i] for i in index]
        t0 = time.perf_counter()
        try:
            verdicts: list[Any] = list(judge_many(self.judge, todo))
            if len(verdicts) != len(todo):
                raise RuntimeError(f"the judge returned {len(verdicts)} verdicts for {len(todo)} rollouts")
        except Exception as exc:
            if len(todo) == 1 or is_infrastructure_failure(exc):
                verdicts = [exc] * len(todo)
            else:
                verdicts = []
                for r in todo:
                    try:
                        verdicts.append(self.judge.judge(r))
                    except Exception as one:  # noqa: BLE001 - recorded for this rollout only
                        verdicts.append(one)
        seconds = (time.perf_counter() - t0) / len(todo)
        for i, verdict in zip(index, verdicts, strict=True):
            out[i] = verdict
        return out, seconds

    def judge_rows(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[dict[str, Any] | None, BaseException | None]]:
        """(record, None) or (None, error) per judge-queue row, in order."""
        rollouts, read_s = self.read(rows)
        verdicts, judge_s = self.judge_rollouts(rollouts)
        out: list[tuple[dict[str, Any] | None, BaseException | None]] = []
        for row, v in zip(rows, verdicts, strict=True):
            if isinstance(v, BaseException):
                out.append((None, v))
                continue
            record = finish_record(self.config, row["record"], v.to_dict(), self.identity, self.name, judge_s, read_s)
            file_loads(record["timings"], self.take_loads())
            out.append((record, None))
        return out

    def take_loads(self) -> dict[str, float]:
        """The judge's build seconds not yet filed with an episode (then none are left to file)."""
        loads, self._loads = self._loads, {}
        return loads

    def close(self) -> None:
        close = getattr(self.judge, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # closing must not hide the campaign's result
                pass


def read_rollouts(reader: Any, rows: Sequence[Mapping[str, Any]]) -> tuple[list[Any], float]:
    """The rollouts of judge-queue rows read by ``reader`` (a
    :class:`~kosmos_env.campaign.rejudge.StoredRollouts`), an exception in place of one that
    cannot be read, and the seconds spent reading per rollout."""
    t0 = time.perf_counter()
    out: list[Any] = []
    for row in rows:
        stored = {k: row["record"].get(k) for k in ("video", "actions", "log", "ground_truth")}
        try:
            out.append(reader.rollout({**row, **stored}))
        except Exception as exc:  # a missing or damaged artifact: this episode's judging fails
            out.append(exc)
    return out, (time.perf_counter() - t0) / max(1, len(rows))


def finish_record(
    config: CampaignConfig,
    staged: Mapping[str, Any],
    judgment: Mapping[str, Any],
    judge_identity: Mapping[str, Any],
    judge_name: str,
    judge_seconds: float,
    read_seconds: float,
) -> dict[str, Any]:
    """A rolled-out episode's record completed with its judgment, as in-line judging writes it.

    The judge's and the reading's seconds per rollout are added to the rollout's timings
    (``judge`` and ``io``) and to its ``total``.
    """
    from kosmos_env.campaign.worker import campaign_provenance

    judgment = dict(judgment)
    success = judgment.get("success")
    outcome = "abstained" if success is None else ("success" if success else "failure")
    timings = dict(staged.get("timings") or {})
    timings["judge"] = float(timings.get("judge", 0.0)) + judge_seconds
    timings["io"] = float(timings.get("io", 0.0)) + read_seconds
    timings["total"] = float(timings.get("total", 0.0)) + judge_seconds + read_seconds
    world = (staged.get("provenance") or {}).get("world") or {}
    return {
        **staged,
        "outcome": outcome,
        "success": success,
        "score": None if success is None else float(judgment.get("score", 0.0)),
        "judge": judgment.get("judge") or judge_name,
        "judgment": judgment,
        "timings": timings,
        "provenance": campaign_provenance(config, world, judge_identity),
    }


def judge_work(
    out_dir: str | os.PathLike,
    config: CampaignConfig,
    owner: str,
    settings: WorkSettings = WorkSettings(),
    on_episode: Callable[[str, str], None] | None = None,
    stop: Any = None,
    judge: Any = None,
) -> int:
    """Judge rolled-out episodes until every episode of the campaign is done; returns how many.

    The judge is loaded as soon as the campaign has work left, so loading it overlaps the first
    rollouts (and a judge that cannot load stops the campaign before it has rolled out much);
    then, while rollout workers still run, an idle judge worker waits for their rollouts.
    ``judge`` is a ready judge object for the campaign's judge spec (tests, warm processes). A
    cancel recorded in the ledger stops the loop between batches.
    """
    path = os.path.join(os.fspath(out_dir), LEDGER_NAME)
    ledger = Ledger(path, create=False)
    runner: JudgeRunner | None = None
    finished = 0
    infra_in_a_row = 0
    try:
        while stop is None or not stop.is_set():
            if cancel_requested(ledger):
                break
            counts = ledger.counts()
            if counts["pending"] + counts["leased"] == 0:
                break  # every episode is done
            if runner is None:
                runner = JudgeRunner(config, out_dir, judge, settings.judge_batch)
            if counts["rolled_out"] + counts["judging"] == 0:
                if counts["pending"] + counts["rolling_out"] == 0 or not settings.wait_for_others:
                    break  # nothing will arrive (or we were told not to wait for it)
                time.sleep(settings.poll_seconds)
                continue
            rows = ledger.claim_judging(owner, settings.lease_seconds, runner.batch)
            if not rows:  # all of it is being judged by live workers: wait, take over if they die
                time.sleep(settings.poll_seconds)
                continue
            ids = [r["episode_id"] for r in rows]
            with JudgeHeartbeat(path, ids, owner, settings.lease_seconds):
                try:
                    results = runner.judge_rows(rows)
                except BaseException:
                    ledger.release_judging(ids, owner)
                    raise
            infra = None
            for row, (record, error) in zip(rows, results, strict=True):
                eid = row["episode_id"]
                if error is not None:
                    is_infra = is_infrastructure_failure(error)
                    infra = error if is_infra else infra
                    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
                    if (
                        ledger.fail_judging(eid, owner, text, settings.max_attempts, infrastructure=is_infra) == "done"
                        and on_episode
                    ):
                        on_episode(eid, "error")
                    continue
                if ledger.complete_judging(eid, owner, record):
                    finished += 1
                    if on_episode:
                        on_episode(eid, record["outcome"])
            if infra is None:
                infra_in_a_row = 0
                continue
            infra_in_a_row += 1
            pause_after_infrastructure_failure(
                infra_in_a_row, infra, settings, stop, failed="judge batches", kept="their rollouts are kept"
            )
    finally:
        if runner is not None:
            runner.close()
        ledger.close()
    return finished
