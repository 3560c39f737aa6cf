"""How a statistic is written: signed differences, their intervals, and p-values.

One set of helpers for every page (the terminal, report.md and report.html, the console), so a
number reads the same everywhere and never says something its value does not:

* a signed difference always shows its sign, and a non-zero value never prints as a zero of the
  other sign: -0.0036 at two decimals is "-0.004" (decimals are added until its first
  significant digit shows, at most :data:`EXTRA_DECIMALS` of them, and past that Python's own
  "-0.00000" keeps the sign). An interval [-0.23, -0.0036] excludes 0; printed
  "[-0.23, +0.00]" it would seem to touch 0 from the wrong side. Only an exact zero prints
  "+0.00";
* an interval whose ends differ never prints as "[x, x]": both ends get up to
  :data:`EXTRA_DECIMALS` more decimals until they read apart ("[-0.394, -0.390]", not
  "[-0.39, -0.39]"). Ends that are truly equal print equal; saying in words why that is no
  interval is the caller's business (:mod:`kosmos_env.report.cells`);
* a p-value below the smallest one the digits can show reads "p < 0.0001", never "p 0.0000".

ASCII minus throughout, so a line greps and pastes the same everywhere.
"""

from __future__ import annotations

import math

EXTRA_DECIMALS = 3  # at most this many decimals beyond the requested ones, to show a sign or a width
P_FLOOR = 1e-4  # the smallest p-value printed as a number by default ("p < 0.0001" below it)


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _reads_zero(x: float, decimals: int) -> bool:
    # the formatted text, not round(), decides: that is what the reader sees
    return float(f"{abs(x):.{decimals}f}") == 0.0


def _decimals_for_sign(x: float, digits: int) -> int:
    """The fewest decimals >= ``digits`` (at most ``digits + EXTRA_DECIMALS``) at which ``x`` does
    not read as zero; ``digits`` for an exact zero."""
    d = digits
    while x != 0 and _reads_zero(x, d) and d < digits + EXTRA_DECIMALS:
        d += 1
    return d


def signed(x, digits: int = 2) -> str:
    """``x`` with its sign always shown, to ``digits`` decimals, or more where a non-zero value would
    otherwise read as zero: ``signed(-0.0036) == "-0.004"``, ``signed(0.25) == "+0.25"``,
    ``signed(0) == "+0.00"`` (negative zero too). None and NaN read "n/a"."""
    if _missing(x):
        return "n/a"
    x = float(x)
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    if x == 0:
        return f"{0.0:+.{digits}f}"  # -0.0 included: a zero has no side
    # the format keeps the sign of a value too small even for the extra decimals ("-0.00000")
    return f"{x:+.{_decimals_for_sign(x, digits)}f}"


def _apart(lo: float, hi: float, digits: int, fmt) -> int:
    """Decimals (>= ``digits``, at most ``digits + EXTRA_DECIMALS``) at which two different ends
    no longer print the same; ``digits`` when they are equal or not finite."""
    d = digits
    if _missing(lo) or _missing(hi) or lo == hi or not (math.isfinite(lo) and math.isfinite(hi)):
        return d
    while fmt(lo, d) == fmt(hi, d) and d < digits + EXTRA_DECIMALS:
        d += 1
    return d


def signed_interval(lo, hi, digits: int = 2) -> str:
    """ "[lo, hi]" of a signed quantity (a difference, a correlation): each end by :func:`signed`,
    with more decimals where two different ends would print alike."""
    d = _apart(lo, hi, digits, signed)
    return f"[{signed(lo, d)}, {signed(hi, d)}]"


def signed_estimate(estimate, lo, hi, digits: int = 2) -> str:
    """ "est [lo, hi]": the estimate at the decimals its interval needed (:func:`signed_interval`)."""
    d = _apart(lo, hi, digits, signed)
    return f"{signed(estimate, d)} [{signed(lo, d)}, {signed(hi, d)}]"


def _plain(x, digits: int) -> str:
    return "n/a" if _missing(x) else f"{float(x):.{digits}f}"


def plain_interval(lo, hi, digits: int = 2) -> str:
    """ "[lo, hi]" of an unsigned quantity (a rate, a ratio) with more decimals where two different
    ends would print alike."""
    d = _apart(lo, hi, digits, _plain)
    return f"[{_plain(lo, d)}, {_plain(hi, d)}]"


def p_value(p, floor: float = P_FLOOR) -> str:
    """A p-value for a table cell: "0.0312" at the decimals of ``floor``, "< 0.0001" below it
    (a t-test on differences with no spread gives exactly 0, which no data can), "n/a" for
    None or NaN."""
    if _missing(p):
        return "n/a"
    if not 0 < floor < 1:
        raise ValueError(f"floor must be in (0, 1), got {floor}")
    decimals = max(0, -math.floor(math.log10(floor) + 1e-12))
    p = float(p)
    if p < floor:
        return f"< {floor:.{decimals}f}"
    return f"{p:.{decimals}f}"


def p_text(p, floor: float = P_FLOOR) -> str:
    """A p-value in a sentence: "p = 0.0312", "p < 0.0001", "p n/a"."""
    cell = p_value(p, floor)
    return f"p {cell}" if cell.startswith("<") or cell == "n/a" else f"p = {cell}"


__all__ = [
    "EXTRA_DECIMALS",
    "P_FLOOR",
    "signed",
    "signed_interval",
    "signed_estimate",
    "plain_interval",
    "p_value",
    "p_text",
]
