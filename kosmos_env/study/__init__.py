"""The evaluator-validity study: rank the same policies in a learned world and in its simulator.

:func:`run_study` runs every (policy, task, seed) in both worlds with paired seeds (same seed,
same initial scene), judges each rollout with every applicable judge, and
:func:`analyze` turns the episodes into agreement, repeatability, detectability, horizon,
gate, judge and cost numbers; :func:`write_report` writes Markdown, PNG plots and JSON.
"""
from kosmos_env.study.analyze import analyze
from kosmos_env.study.report import write_report
from kosmos_env.study.run import StudyConfig, run_study

__all__ = ["StudyConfig", "run_study", "analyze", "write_report"]
