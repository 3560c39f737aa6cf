"""What every bench script prints around its numbers: the load on the machine, and the saved copy."""

from __future__ import annotations

import os


def load_average() -> str:
    """The 1/5/15-minute load averages: a ratio measured on a busy 2-core machine needs this context."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def save(text: str, out: str | None) -> None:
    """Write the report to ``out`` (creating its folder) when one was asked for."""
    if not out:
        return
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text.rstrip("\n") + "\n")
