"""Campaign progress on stderr: a tqdm bar fed from the ledger (so it counts every worker).

The bar's total is the planned episode count and it starts at the episodes already done
(a resumed campaign shows its true position); rate and ETA are tqdm's, over this run's
episodes. The postfix shows every outcome so far (success, failure, discarded, abstained,
errors: they add up to the bar's count) and the queue depth of each stage: pending, rolling
out, rolled out and awaiting a judge (``await_judge``), being judged (the last two only in a
two-stage campaign, ``eval --judge-workers N``); the bar's count and the queues add up to its
total. Bar and postfix are set from one reading of the ledger each time, never accumulated, so
they cannot drift apart (an episode reopened by another process moves the bar back).

Each newly discarded episode's reason (the gate's) is printed above the bar as it happens.

The line fits 80 columns (a terminal's default width, and what a log file shows unwrapped): the
bar is at most 80 wide, the campaign is named on the line printed above it rather than in the bar,
and the postfix is :func:`postfix_text`, which leaves out outcomes that have not happened.

Rate and ETA leave the warm-up out: the bar's clock restarts when this run's first episode
finishes, so model loading (minutes for a real world model) is not read as the per-episode pace.
"""

from __future__ import annotations

import os
import sys
import time

from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger

#: the widest the progress line gets
MAX_COLUMNS = 80


class ProgressMonitor:
    """Reads the ledger's counts at most every ``min_interval`` seconds and moves the bar."""

    def __init__(
        self,
        out_dir: str | os.PathLike,
        desc: str = "",
        enabled: bool = True,
        min_interval: float = 0.2,
        two_stage: bool = False,
    ):
        self.ledger = Ledger(os.path.join(os.fspath(out_dir), LEDGER_NAME), create=False)
        counts = self.ledger.counts()
        self.done = counts["done"]
        self.done_before = counts["done"]  # finished by earlier runs of this campaign
        self.min_interval = min_interval
        self.two_stage = two_stage
        self._last = 0.0
        self.bar = None
        self.enabled = enabled
        self.warm = False  # set once this run has finished an episode (see refresh)
        # discards already in the ledger are old news; only this run's are printed
        self.discards_seen = {
            row["episode_id"] for row in self.ledger.episodes("done") if row["outcome"] == "discarded"
        }
        if enabled:
            import shutil

            from tqdm import tqdm

            self.bar = tqdm(
                total=counts["planned"],
                initial=self.done,
                desc=desc,
                unit="ep",
                file=sys.stderr,
                # never wider than 80 columns, nor than the terminal; tqdm shortens the bar to fit
                ncols=min(shutil.get_terminal_size((MAX_COLUMNS, 24)).columns, MAX_COLUMNS),
                smoothing=0.1,
            )
            self._postfix(counts)

    def refresh(self, force: bool = False) -> dict[str, int] | None:
        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return None
        self._last = now
        counts = self.ledger.counts()
        if counts["discarded"] > len(self.discards_seen):
            self._print_discards()
        if self.bar is not None:
            if not self.warm and counts["done"] > self.done_before:
                # this run's first episode is done: models are loaded, restart the clock (tqdm's rate is
                # (n - initial) / elapsed since then, its ETA the rest at that rate)
                self.warm = True
                self.bar.reset(total=counts["planned"])
                self.bar.initial = counts["done"]
            # total and count from the same reading as the postfix: they always add up
            self.bar.total = counts["planned"]
            self.bar.n = counts["done"]
            self._postfix(counts)
            self.bar.refresh()
        self.done = counts["done"]
        return counts

    def _print_discards(self) -> None:
        for row in self.ledger.episodes("done"):
            if row["outcome"] != "discarded" or row["episode_id"] in self.discards_seen:
                continue
            self.discards_seen.add(row["episode_id"])
            if not self.enabled:
                continue
            repeat = f" repeat {row['repeat']}" if row.get("repeat") else ""
            line = f"discarded: {row['policy']} on {row['task']} seed {row['seed']}{repeat}: {discard_reason(row.get('gate'))}"
            from tqdm import tqdm

            tqdm.write(line, file=sys.stderr)

    def _postfix(self, counts) -> None:
        self.bar.set_postfix_str(postfix_text(stage_postfix(counts, self.two_stage)), refresh=False)

    def close(self) -> None:
        self.refresh(force=True)
        if self.bar is not None:
            self.bar.close()
        self.ledger.close()


def postfix_text(fields: dict[str, int]) -> str:
    """The postfix of :func:`stage_postfix`'s fields, short enough for an 80-column line: ``3 ok,
    2 fail, 1 discarded``. Successes and failures always show; errored, discarded and abstained
    episodes once there are some (the run's closing table counts every outcome). The queue of pending and rolling-out episodes is the bar's own
    count (total minus done), so it is not repeated; a two-stage run adds the judge stage's queues,
    ``| 4 to judge, 2 judging``."""
    text = ", ".join(
        [f"{fields['success']} ok", f"{fields['failure']} fail"]
        # errors first: where a long line is cut at 80 columns, the rarest news is what goes
        + [f"{fields[key]} {key}" for key in ("errors", "discarded", "abstained") if fields[key]]
    )
    if "await_judge" in fields:
        text += f" | {fields['await_judge']} to judge, {fields['judging']} judging"
    return text


def discard_reason(gate: dict | None) -> str:
    """The gate's reason for a discard in words, with the check that failed (as the gate recorded it)."""
    if isinstance(gate, dict) and gate.get("reason"):
        check = f" ({gate['check']} check)" if gate.get("check") else ""
        return f"{gate['reason']}{check}"
    return "the gate rejected a generation (no reason recorded)"


def stage_postfix(counts, two_stage: bool = False) -> dict[str, int]:
    """The progress line's fields: outcomes so far (they add up to the episodes done), then the
    queue depth of each stage (the judge stage's two queues in a two-stage run, or while rolled-out
    episodes wait for a judge); done plus the queues is the planned total."""
    fields = {
        "success": counts["success"],
        "failure": counts.get("failure", 0),
        "discarded": counts["discarded"],
        "abstained": counts["abstained"],
        "errors": counts["error"],
        "pending": counts["pending"],
        "rolling_out": counts["rolling_out"],
    }
    if two_stage or counts["rolled_out"] or counts["judging"]:
        fields.update(await_judge=counts["rolled_out"], judging=counts["judging"])
    return fields
