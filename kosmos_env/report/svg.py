"""Small inline-SVG charts (no dependency, no script): intervals and lines.

Used where a figure must live inside an HTML page as text: the analysis section of
report.html and the console's pages. Every label is escaped with :func:`html.escape`; numbers
are formatted by this module, never taken as markup.
"""

from __future__ import annotations

import html
import math
from typing import Mapping, Sequence

from kosmos_env.stats.numbers import plain_interval, signed, signed_estimate

PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd")
FONT = 'font-family="system-ui,-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif"'


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _f(x: float) -> str:
    return f"{x:.1f}"


def _short(label: str, n: int = 34) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def _ticks(lo: float, hi: float, integer: bool, n: int = 5) -> list[float]:
    """About ``n`` round tick values in [lo, hi] (whole numbers when the axis counts steps)."""
    span = hi - lo
    raw = span / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step) * step
    out, v = [], first
    while v <= hi + 1e-9 * max(1.0, abs(hi)):
        out.append(round(v, 10))
        v += step
    return out


def interval_chart(
    rows: Sequence[tuple],
    *,
    lo: float = 0.0,
    hi: float = 1.0,
    width: int = 800,
    label_width: int = 300,
    xlabel: str = "",
    zero: float | None = None,
    title: str = "",
    band_label: str = "",
    point_label: str = "",
) -> str:
    """One row per item: ``(label, estimate, lower, upper[, band_lo, band_hi])``.

    The point is the estimate, the whisker its interval, an optional grey band behind it a
    wider range (e.g. the worst case with undecided episodes). ``zero`` draws a reference line.
    Values outside [lo, hi] are clipped to the axis.
    """
    row_h, top, bottom = 26, 26 if (band_label or point_label) else 8, 34
    plot_w = width - label_width - 140
    height = top + bottom + row_h * max(1, len(rows))

    def x(v: float) -> float:
        v = min(max(v, lo), hi)
        return label_width + (v - lo) / (hi - lo) * plot_w

    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title or xlabel)}" {FONT} font-size="12">'
    ]
    if title:
        out.append(f"<title>{_e(title)}</title>")
    for i in range(5):  # grid
        v = lo + (hi - lo) * i / 4
        out.append(
            f'<line x1="{_f(x(v))}" y1="{top - 4}" x2="{_f(x(v))}" y2="{height - bottom + 4}" stroke="#e4e7ec"/>'
        )
        out.append(
            f'<text x="{_f(x(v))}" y="{height - bottom + 18}" text-anchor="middle" fill="#5b6475">{v:.2g}</text>'
        )
    if zero is not None and lo <= zero <= hi:
        out.append(
            f'<line x1="{_f(x(zero))}" y1="{top - 4}" x2="{_f(x(zero))}" y2="{height - bottom + 4}" '
            f'stroke="#1d2433" stroke-dasharray="4 3"/>'
        )
    if xlabel:
        out.append(
            f'<text x="{_f(label_width + plot_w / 2)}" y="{height - 4}" text-anchor="middle" fill="#1d2433">'
            f"{_e(xlabel)}</text>"
        )
    legend_x = 8
    if point_label:
        out.append(
            f'<circle cx="{legend_x + 8}" cy="11" r="4" fill="{PALETTE[0]}"/>'
            f'<line x1="{legend_x}" y1="11" x2="{legend_x + 16}" y2="11" stroke="#1d2433"/>'
            f'<text x="{legend_x + 22}" y="15" fill="#5b6475">{_e(point_label)}</text>'
        )
        legend_x += 40 + 6 * len(point_label)
    if band_label:
        out.append(
            f'<rect x="{legend_x}" y="6" width="18" height="10" fill="#dddddd"/>'
            f'<text x="{legend_x + 24}" y="15" fill="#5b6475">{_e(band_label)}</text>'
        )
    for i, row in enumerate(rows):
        label, est, low, up = row[:4]
        band = row[4:6] if len(row) >= 6 else None
        y = top + row_h * i + row_h / 2
        out.append(
            f'<text x="{label_width - 8}" y="{_f(y + 4)}" text-anchor="end" fill="#1d2433">'
            f"<title>{_e(label)}</title>{_e(_short(str(label), label_width // 7))}</text>"
        )
        if band and _finite(band[0]) and _finite(band[1]):
            out.append(
                f'<rect x="{_f(x(band[0]))}" y="{_f(y - 8)}" width="{_f(max(1.0, x(band[1]) - x(band[0])))}" '
                f'height="16" fill="#dddddd"/>'
            )
        if _finite(low) and _finite(up):
            out.append(
                f'<line x1="{_f(x(low))}" y1="{_f(y)}" x2="{_f(x(up))}" y2="{_f(y)}" stroke="#1d2433" '
                f'stroke-width="1.5"/><line x1="{_f(x(low))}" y1="{_f(y - 5)}" x2="{_f(x(low))}" '
                f'y2="{_f(y + 5)}" stroke="#1d2433"/><line x1="{_f(x(up))}" y1="{_f(y - 5)}" '
                f'x2="{_f(x(up))}" y2="{_f(y + 5)}" stroke="#1d2433"/>'
            )
        if _finite(est):
            out.append(f'<circle cx="{_f(x(est))}" cy="{_f(y)}" r="5" fill="{PALETTE[0]}"/>')
            # a chart with a zero line shows differences or correlations: signed, and a negative end
            # never reads "+0.00" (kosmos_env.stats.numbers); rates read unsigned
            if zero is not None:
                text = signed_estimate(est, low, up) if _finite(low) and _finite(up) else signed(est)
            else:
                text = f"{est:.2f}" + (f" {plain_interval(low, up)}" if _finite(low) and _finite(up) else "")
        else:
            text = "n/a"
        out.append(f'<text x="{label_width + plot_w + 8}" y="{_f(y + 4)}" fill="#1d2433">{_e(text)}</text>')
    out.append("</svg>")
    return "".join(out)


def line_chart(
    xs: Sequence[float],
    series: Mapping[str, Sequence[float | None]],
    *,
    width: int = 720,
    height: int = 260,
    xlabel: str = "",
    ylabel: str = "",
    ylim: tuple[float, float] | None = None,
    hline: float | None = None,
    title: str = "",
    step: bool = False,
) -> str:
    """Lines of ``series`` (name -> y per x; None leaves a gap) against ``xs``, with a legend."""
    left, right, top, bottom = 56, 12, 10, 40
    legend_h = 18 * ((len(series) + 2) // 3)
    plot_w, plot_h = width - left - right, height - top - bottom
    ys_all = [v for ys in series.values() for v in ys if _finite(v)]
    if ylim is None:
        y0, y1 = (min(ys_all), max(ys_all)) if ys_all else (0.0, 1.0)
        if y1 - y0 < 1e-9:
            y0, y1 = y0 - 0.5, y1 + 0.5
        pad = 0.05 * (y1 - y0)
        y0, y1 = y0 - pad, y1 + pad
    else:
        y0, y1 = ylim
    xs = [float(v) for v in xs]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x1 - x0 < 1e-12:
        x1 = x0 + 1.0

    def px(v: float) -> float:
        return left + (v - x0) / (x1 - x0) * plot_w

    def py(v: float) -> float:
        v = min(max(v, y0), y1)
        return top + (1 - (v - y0) / (y1 - y0)) * plot_h

    total_h = height + legend_h
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_h}" '
        f'viewBox="0 0 {width} {total_h}" role="img" aria-label="{_e(title or ylabel)}" {FONT} font-size="11">'
    ]
    if title:
        out.append(f"<title>{_e(title)}</title>")
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafbfc" stroke="#e4e7ec"/>')
    for i in range(5):
        v = y0 + (y1 - y0) * i / 4
        out.append(
            f'<line x1="{left}" y1="{_f(py(v))}" x2="{left + plot_w}" y2="{_f(py(v))}" stroke="#eef0f3"/>'
            f'<text x="{left - 6}" y="{_f(py(v) + 4)}" text-anchor="end" fill="#5b6475">{v:.3g}</text>'
        )
    for xv in _ticks(x0, x1, integer=all(float(v).is_integer() for v in xs)):
        out.append(
            f'<line x1="{_f(px(xv))}" y1="{top + plot_h}" x2="{_f(px(xv))}" y2="{top + plot_h + 4}" stroke="#8c8c8c"/>'
            f'<text x="{_f(px(xv))}" y="{top + plot_h + 15}" text-anchor="middle" fill="#5b6475">{xv:.4g}</text>'
        )
    if hline is not None and y0 <= hline <= y1:
        out.append(
            f'<line x1="{left}" y1="{_f(py(hline))}" x2="{left + plot_w}" y2="{_f(py(hline))}" '
            f'stroke="#1d2433" stroke-dasharray="4 3"/>'
        )
    if xlabel:
        out.append(
            f'<text x="{_f(left + plot_w / 2)}" y="{top + plot_h + 32}" text-anchor="middle" fill="#1d2433">'
            f"{_e(xlabel)}</text>"
        )
    if ylabel:
        out.append(
            f'<text transform="translate(12 {_f(top + plot_h / 2)}) rotate(-90)" text-anchor="middle" '
            f'fill="#1d2433">{_e(ylabel)}</text>'
        )
    for k, (name, ys) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        segs, cur = [], []
        for xv, yv in zip(xs, ys, strict=True):
            if _finite(yv):
                if step and cur:
                    cur.append(f"{_f(px(xv))},{cur[-1].split(',')[1]}")
                cur.append(f"{_f(px(xv))},{_f(py(yv))}")
            elif cur:
                segs.append(cur)
                cur = []
        if cur:
            segs.append(cur)
        for seg in segs:
            if len(seg) == 1:
                xx, yy = seg[0].split(",")
                out.append(f'<circle cx="{xx}" cy="{yy}" r="2.5" fill="{colour}"/>')
            else:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{" ".join(seg)}"/>')
        lx = left + (k % 3) * (plot_w / 3)
        ly = height + 4 + 18 * (k // 3)
        out.append(
            f'<rect x="{_f(lx)}" y="{ly}" width="14" height="4" fill="{colour}"/>'
            f'<text x="{_f(lx + 20)}" y="{ly + 6}" fill="#1d2433">{_e(_short(str(name), 40))}</text>'
        )
    out.append("</svg>")
    return "".join(out)
