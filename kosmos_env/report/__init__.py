"""Campaign reports and analyses built from a results bundle (DIR/results.json + artifacts).

* :func:`load_bundle`: read and validate results.json (artifact paths must stay inside DIR);
* :func:`write_report`: DIR/report.md and a self-contained DIR/report.html with figures and
  animated rollout thumbnails (``kosmos-env report``);
* :func:`analyze_bundle`: every statistic of :mod:`kosmos_env.stats` that applies to a
  campaign, as a JSON-ready dict (``kosmos-env analyze``), and :func:`analysis_text` to print it.

Numbers are always recomputed from the per-episode rows. matplotlib and Pillow (the
``results`` extra) are imported only when a report is drawn.
"""

from __future__ import annotations

from kosmos_env.report.analysis import analyze_bundle, paired_diffs, read_reference_csv, seed_matrix
from kosmos_env.report.bundle import Bundle, load_bundle, safe_relpath
from kosmos_env.report.render import write_report
from kosmos_env.report.text import analysis_text

__all__ = [
    "Bundle",
    "load_bundle",
    "safe_relpath",
    "write_report",
    "analyze_bundle",
    "analysis_text",
    "paired_diffs",
    "read_reference_csv",
    "seed_matrix",
]
