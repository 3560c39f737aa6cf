"""Campaigns: policies × tasks × seeds × repeats, run crash-safely into a ledger and a bundle.

- :mod:`design`: the frozen, paired design and its content hash;
- :mod:`ledger`: the SQLite (WAL) ledger with leases, the source of truth;
- :mod:`artifacts`: content-addressed, write-once artifact store;
- :mod:`worker` and :mod:`executors`: warm workers taking episodes by lease, in process or in a pool;
  :mod:`lockstep`: a worker running several episodes side by side through one vector env;
- :mod:`cost`, :mod:`progress`: where time and money go, and a progress bar;
- :mod:`bundle`: results.json, episodes.parquet, manifest.json; :mod:`verify`: recheck a folder;
- :mod:`runner`: run or resume a campaign end to end;
- :mod:`control`: a cooperative cancel recorded in the ledger; :mod:`readonly`: read a live ledger
  without writing to it (the console).
"""

from __future__ import annotations

from kosmos_env.campaign.design import CampaignConfig, EpisodeKey, PolicyRef, env_seed, make_config
from kosmos_env.campaign.ledger import LEDGER_NAME, ConfigMismatchError, Ledger

__all__ = [
    "CampaignConfig",
    "EpisodeKey",
    "PolicyRef",
    "env_seed",
    "make_config",
    "LEDGER_NAME",
    "ConfigMismatchError",
    "Ledger",
    "run_campaign",
    "verify_campaign",
]


def run_campaign(*args, **kwargs):
    """See :func:`kosmos_env.campaign.runner.run_campaign` (imported lazily)."""
    from kosmos_env.campaign.runner import run_campaign as _run

    return _run(*args, **kwargs)


def verify_campaign(*args, **kwargs):
    """See :func:`kosmos_env.campaign.verify.verify_campaign` (imported lazily)."""
    from kosmos_env.campaign.verify import verify_campaign as _verify

    return _verify(*args, **kwargs)
