"""How one number, interval or spread is written in a table cell: the same in the terminal text,
the HTML analysis and the console's downloads. A value that is not an interval (a zero-width
bootstrap, bounds that coincide, every split alike) is said in words rather than printed as "[x, x]".
"""

from __future__ import annotations

from kosmos_env.stats.numbers import signed_interval


def num(x, digits: int = 3) -> str:
    """A number for a table cell; ``n/a`` for None/NaN."""
    if x is None or (isinstance(x, float) and x != x):
        return "n/a"
    return f"{x:.{digits}f}"


def pct(x, digits: int = 1) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def iv(pair, digits: int = 3) -> str:
    return "n/a" if not pair else f"[{num(pair[0], digits)}, {num(pair[1], digits)}]"


def bounds(pair, digits: int = 3) -> str:
    """The worst-case bounds of a rate (undecided episodes as failures .. as successes): with no
    undecided episode they coincide, which is a fact about the count, not an interval, so it is
    said in words rather than printed as a zero-width "[x, x]"."""
    if pair and pair[0] is not None and pair[1] is not None and abs(pair[1] - pair[0]) < 1e-12:
        return "none undecided"
    return iv(pair, digits)


def spread(d: dict | None, digits: int = 3) -> str:
    """The 5-95% range of a distribution over splits; when every split gave the same value it is
    said so ("every split 1.000") rather than printed as a zero-width interval."""
    if not d:
        return "n/a"
    lo, hi = d.get("q05"), d.get("q95")
    if lo is not None and hi is not None and abs(hi - lo) < 1e-12:
        return f"every split {num(lo, digits)}"
    return iv((lo, hi), digits)


def diff_interval(d: dict, digits: int = 3) -> str:
    """A bootstrap interval of a difference, signed (:func:`kosmos_env.stats.numbers.signed_interval`),
    or why there is none: a zero-width bootstrap interval (every resample alike) claims a certainty
    a handful of pairs cannot give."""
    lo, hi = d.get("lower"), d.get("upper")
    if lo is None or hi is None or abs(hi - lo) < 1e-12:
        return f"interval not estimable from {d.get('n_pairs', '?')} pairs"
    return signed_interval(lo, hi, digits)
