"""Report figures (matplotlib, Agg backend), each returned as PNG bytes.

* :func:`ranking_plot`: success rate per policy, best on top, with Wilson intervals and the
  worst-case range (undecided episodes as failures .. as successes) behind each bar;
* :func:`task_heatmap`: policy × task success with the interval written in each cell;
* :func:`outcome_plot`: share of successes, failures, discards, abstentions and errors;
* :func:`time_plot`: seconds per rollout by stage (policy, world, gate, judge, io, overhead).

matplotlib is imported inside each function (it is an optional dependency, the ``results``
extra) and a fresh Figure is built without pyplot, so nothing global changes.
"""

from __future__ import annotations

import io
from typing import Mapping, Sequence

OUTCOME_COLOURS = {
    "success": "#2e9e4f",
    "failure": "#d1495b",
    "discarded": "#8d99ae",
    "abstained": "#edae49",
    "error": "#3d3d3d",
}
STAGE_COLOURS = {
    "policy": "#4c72b0",
    "world": "#55a868",
    "gate": "#8172b2",
    "judge": "#c44e52",
    "io": "#ccb974",
    "overhead": "#bbbbbb",
}
DPI = 100
#: PNGs are saved at SCALE × DPI and shown at 1/SCALE size, so they stay sharp on high-density screens
SCALE = 1.5


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    return fig


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI * SCALE)
    return buf.getvalue()


def _short(label: str, n: int = 34) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


def ranking_plot(order: Sequence[str], rates: Mapping, conf: str = "95%") -> bytes:
    """Horizontal bars of the raw success rate (best on top) with Wilson error bars; a grey band
    shows the worst-case range over all episodes."""
    fig = _figure(8.0, 0.9 + 0.45 * len(order))
    ax = fig.add_subplot()
    ys = list(range(len(order)))[::-1]
    for y, p in zip(ys, order, strict=True):
        r = rates[p]
        s = r.summary
        if s.worst_case:
            ax.barh(
                y,
                s.worst_case[1] - s.worst_case[0],
                left=s.worst_case[0],
                height=0.8,
                color="#dddddd",
                zorder=1,
                label="worst case (undecided as failure .. success)" if y == ys[0] else None,
            )
        if r.rate is not None:
            ax.barh(y, r.rate, height=0.5, color="#4c72b0", zorder=2, label="success rate" if y == ys[0] else None)
            ax.errorbar(
                r.rate,
                y,
                xerr=[[max(0.0, r.rate - r.wilson[0])], [max(0.0, r.wilson[1] - r.rate)]],
                fmt="none",
                ecolor="black",
                capsize=4,
                lw=1.2,
                zorder=3,
                label=f"Wilson {conf}" if y == ys[0] else None,
            )
            text = f"{r.rate:.2f} [{r.wilson[0]:.2f}, {r.wilson[1]:.2f}]  n={r.decided}"
        else:
            text = "no decided episode"
        ax.text(1.02, y, text, va="center", fontsize=9, transform=ax.get_yaxis_transform())
    ax.set_yticks(ys, [f"{i + 1}. {_short(p)}" for i, p in enumerate(order)])
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.7, len(order) - 0.3)
    ax.set_xlabel("success rate (successes / decided episodes)")
    ax.grid(axis="x", alpha=0.3, zorder=0)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return _png(fig)


def task_heatmap(order: Sequence[str], tasks: Sequence[str], cells: Mapping) -> bytes:
    """Policy × task success rate as a colour map, rate and Wilson interval in each cell."""
    import numpy as np

    vals = np.full((len(order), len(tasks)), np.nan)
    for i, p in enumerate(order):
        for j, t in enumerate(tasks):
            c = cells[p].get(t)
            if c is not None and c.rate is not None:
                vals[i, j] = c.rate
    fig = _figure(min(max(5.0, 2.5 + 1.7 * len(tasks)), 12.0), 0.9 + 0.55 * len(order))
    ax = fig.add_subplot()
    im = ax.imshow(np.ma.masked_invalid(vals), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for i, p in enumerate(order):
        for j, t in enumerate(tasks):
            c = cells[p].get(t)
            if c is None:
                txt, dark = "not run", False
            elif c.rate is None:
                txt, dark = f"no decided\n(n={c.n})", False
            else:
                txt, dark = f"{c.rate:.2f}\n[{c.wilson[0]:.2f}, {c.wilson[1]:.2f}]", c.rate > 0.6
            ax.text(j, i, txt, ha="center", va="center", fontsize=8, color="black" if dark else "white")
    ax.set_xticks(
        range(len(tasks)),
        [_short(t, 22) for t in tasks],
        rotation=20 if len(tasks) > 3 else 0,
        ha="right" if len(tasks) > 3 else "center",
    )
    ax.set_yticks(range(len(order)), [_short(p) for p in order])
    fig.colorbar(im, ax=ax, label="success rate", fraction=0.05)
    return _png(fig)


def outcome_plot(order: Sequence[str], rates: Mapping) -> bytes:
    """Stacked shares of each outcome per policy (discards and abstentions made visible)."""
    from kosmos_env.report.bundle import OUTCOMES

    fig = _figure(8.0, 0.9 + 0.4 * len(order))
    ax = fig.add_subplot()
    ys = list(range(len(order)))[::-1]
    for y, p in zip(ys, order, strict=True):
        counts = rates[p].counts
        n = max(1, sum(counts.values()))
        left = 0.0
        for o in OUTCOMES:
            w = counts[o] / n
            if w:
                ax.barh(
                    y,
                    w,
                    left=left,
                    color=OUTCOME_COLOURS[o],
                    height=0.6,
                    label=o if o not in ax.get_legend_handles_labels()[1] else None,
                )
                if w >= 0.06:
                    ax.text(left + w / 2, y, f"{counts[o]}", ha="center", va="center", fontsize=8, color="white")
            left += w
    ax.set_yticks(ys, [_short(p) for p in order])
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of episodes (numbers in bars are counts)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=5, fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return _png(fig)


def time_plot(cost: Mapping, order: Sequence[str]) -> bytes:
    """Stacked seconds per rollout by stage, for all episodes and per policy."""
    stages = ["policy", "world", "gate", "judge", "io", "overhead"]
    by_policy = cost["seconds_per_rollout_by_policy"]
    keep = [p for p in order if by_policy.get(p)]
    labels = ["all episodes"] + keep
    rows = [cost["seconds_per_rollout"]] + [by_policy[p] for p in keep]
    fig = _figure(8.0, 1.0 + 0.4 * len(labels))
    ax = fig.add_subplot()
    ys = list(range(len(labels)))[::-1]
    for y, row in zip(ys, rows, strict=True):
        left = 0.0
        for s in stages:
            w = row.get(s, 0.0)
            if w > 0:
                ax.barh(
                    y,
                    w,
                    left=left,
                    color=STAGE_COLOURS[s],
                    height=0.6,
                    label=s if s not in ax.get_legend_handles_labels()[1] else None,
                )
            left += w
        ax.text(left, y, f"  {row['total']:.3g} s", va="center", fontsize=8)
    ax.set_yticks(ys, [_short(p) for p in labels])
    ax.set_xlabel("seconds per rollout")
    ax.margins(x=0.12)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=6, fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return _png(fig)


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's IHDR chunk."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
