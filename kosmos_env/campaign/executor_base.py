"""What every executor shares: the job it runs and its interface (no executor is imported here).

:mod:`kosmos_env.campaign.executors` (in-process, process pool) and
:mod:`kosmos_env.campaign.ray_executor` both build on this module, so neither imports the other's
module at import time and the executor modules have no import cycle.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

from kosmos_env.campaign.design import CampaignConfig
from kosmos_env.campaign.worker import WorkSettings


@dataclass(frozen=True)
class CampaignJob:
    """What every worker needs: where the ledger is, the frozen config, how to take work."""

    out_dir: str
    config: CampaignConfig
    settings: WorkSettings = WorkSettings()


class Executor(ABC):
    """Runs a campaign's workers until the ledger has nothing left to claim."""

    name: str = "executor"
    workers: int = 1

    @abstractmethod
    def run(self, job: CampaignJob, refresh: Callable[[], None]) -> None:
        """Run workers for ``job``; call ``refresh()`` now and then (progress display)."""


class WorkerFailed(RuntimeError):
    """A pool worker raised (not an episode error: those are recorded and the campaign goes on).

    The message is one line; the worker's traceback is in ``worker_traceback``."""

    def __init__(self, message: str, worker_traceback: str = ""):
        super().__init__(message)
        self.worker_traceback = worker_traceback
