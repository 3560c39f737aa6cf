"""Campaign progress on stderr: a tqdm bar fed from the ledger (so it counts every worker).

The bar's total is the planned episode count and it starts at the episodes already done
(a resumed campaign shows its true position); rate and ETA are tqdm's, over this run's
episodes. The postfix shows discards, abstentions and errors so far and the queue depth of
each stage: episodes rolling out, rolled out and awaiting a judge (``await_judge``), being
judged (the last two only in a two-stage campaign, ``eval --judge-workers N``).
"""
from __future__ import annotations

import os
import sys
import time

from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger


class ProgressMonitor:
    """Reads the ledger's counts at most every ``min_interval`` seconds and moves the bar."""

    def __init__(self, out_dir: str | os.PathLike, desc: str = "campaign", enabled: bool = True,
                 min_interval: float = 0.2, two_stage: bool = False):
        self.ledger = Ledger(os.path.join(os.fspath(out_dir), LEDGER_NAME), create=False)
        counts = self.ledger.counts()
        self.done = counts["done"]
        self.min_interval = min_interval
        self.two_stage = two_stage
        self._last = 0.0
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=counts["planned"], initial=self.done, desc=desc, unit="ep", file=sys.stderr,
                            dynamic_ncols=True, smoothing=0.1)
            self._postfix(counts)

    def refresh(self, force: bool = False) -> dict[str, int] | None:
        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return None
        self._last = now
        counts = self.ledger.counts()
        if self.bar is not None:
            if counts["done"] > self.done:
                self.bar.update(counts["done"] - self.done)
            self._postfix(counts)
        self.done = counts["done"]
        return counts

    def _postfix(self, counts) -> None:
        self.bar.set_postfix(stage_postfix(counts, self.two_stage), refresh=False)

    def close(self) -> None:
        self.refresh(force=True)
        if self.bar is not None:
            self.bar.close()
        self.ledger.close()


def stage_postfix(counts, two_stage: bool = False) -> dict[str, int]:
    """The progress line's fields: outcomes so far, then the queue depth of each stage (the judge
    stage's two queues in a two-stage run, or while rolled-out episodes wait for a judge)."""
    fields = {"success": counts["success"], "discarded": counts["discarded"], "abstained": counts["abstained"],
              "errors": counts["error"], "pending": counts["pending"], "rolling_out": counts["rolling_out"]}
    if two_stage or counts["rolled_out"] or counts["judging"]:
        fields.update(await_judge=counts["rolled_out"], judging=counts["judging"])
    return fields
