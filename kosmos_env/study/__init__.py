"""The evaluator-validity study: rank the same policies in a learned world and in its simulator.

:func:`run_study` runs every (policy, task, seed) in both worlds with paired seeds (same seed,
same initial scene), judges each rollout with every applicable judge, and
:func:`analyze` turns the episodes into agreement, repeatability, detectability, horizon,
gate, judge and cost numbers; :func:`write_report` writes Markdown, PNG plots and JSON.

The names are loaded on first use: the CLI builds the study's argument parser
(:mod:`.arguments`) for every command, and the analysis imports scipy. Import the functions from
their modules (``from kosmos_env.study.analyze import analyze``): once the submodule
``kosmos_env.study.analyze`` is imported, the package attribute of that name is the module.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "analyze": "kosmos_env.study.analyze",
    "write_report": "kosmos_env.study.report",
    "StudyConfig": "kosmos_env.study.run",
    "run_study": "kosmos_env.study.run",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kosmos_env.study' has no attribute {name!r}")


__all__ = ["StudyConfig", "run_study", "analyze", "write_report"]
