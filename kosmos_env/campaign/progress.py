"""Campaign progress on stderr: a tqdm bar fed from the ledger (so it counts every worker).

The bar's total is the planned episode count and it starts at the episodes already done
(a resumed campaign shows its true position); rate and ETA are tqdm's, over this run's
episodes. The postfix shows discards, abstentions and errors so far.
"""
from __future__ import annotations

import os
import sys
import time

from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger


class ProgressMonitor:
    """Reads the ledger's counts at most every ``min_interval`` seconds and moves the bar."""

    def __init__(self, out_dir: str | os.PathLike, desc: str = "campaign", enabled: bool = True,
                 min_interval: float = 0.2):
        self.ledger = Ledger(os.path.join(os.fspath(out_dir), LEDGER_NAME), create=False)
        counts = self.ledger.counts()
        self.done = counts["done"]
        self.min_interval = min_interval
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
        self.bar.set_postfix(success=counts["success"], discarded=counts["discarded"], abstained=counts["abstained"],
                             errors=counts["error"], running=counts["leased"], refresh=False)

    def close(self) -> None:
        self.refresh(force=True)
        if self.bar is not None:
            self.bar.close()
        self.ledger.close()
