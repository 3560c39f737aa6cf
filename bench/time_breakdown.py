"""Where the time goes per rollout (policy, world, gate, judge, I/O, overhead): a table and a PNG,
read from a finished campaign's results.json (per-episode timings recorded by the workers).

    python bench/time_breakdown.py CAMPAIGN_DIR [--out bench/results/time_breakdown] [--title TEXT]

Writes OUT.txt (table per policy and overall, seconds per rollout and share of the total) and
OUT.png (stacked bars per policy). "overhead" is total minus the named stages: claiming,
lease bookkeeping, env reset, the policy's reset, and, for the Ray executor, dispatch and
result transfer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from _report import load_average  # bench/_report.py: the script's folder is on sys.path

STAGES = ("policy", "world", "gate", "judge", "io", "overhead")


def breakdown(results: dict) -> dict[str, dict[str, float]]:
    """Mean seconds per rollout and stage, per policy and for "all"."""
    groups: dict[str, list[dict]] = {}
    for ep in results["per_episode"]:
        groups.setdefault(ep["policy"], []).append(ep["timings"])
        groups.setdefault("all", []).append(ep["timings"])
    table = {}
    for label, rows in groups.items():
        sums = {s: 0.0 for s in (*STAGES, "total")}
        for t in rows:
            named = sum(float(t.get(s, 0.0)) for s in STAGES if s != "overhead")
            for s in STAGES:
                sums[s] += float(t.get(s, 0.0)) if s != "overhead" else max(0.0, float(t["total"]) - named)
            sums["total"] += float(t["total"])
        table[label] = {k: v / len(rows) for k, v in sums.items()} | {"n": len(rows)}
    return table


def format_table(table: dict) -> str:
    head = f"{'policy':24s} {'n':>4s} " + " ".join(f"{s:>14s}" for s in STAGES) + f" {'total':>9s}"
    lines = [head, "-" * len(head)]
    for label, row in sorted(table.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        cells = " ".join(f"{row[s] * 1e3:8.1f} ({row[s] / row['total'] * 100:3.0f}%)" for s in STAGES)
        lines.append(f"{label[:24]:24s} {row['n']:4d} {cells} {row['total'] * 1e3:7.1f}ms")
    return "\n".join(lines)


def plot(table: dict, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [k for k in sorted(table) if k != "all"] + ["all"]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(labels) + 1.8))
    left = [0.0] * len(labels)
    for stage in STAGES:
        vals = [table[k][stage] * 1e3 for k in labels]
        ax.barh(labels, vals, left=left, label=stage)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_xlabel("milliseconds per rollout (mean)")
    ax.set_title(title, fontsize=9)
    ax.legend(ncol=len(STAGES), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("campaign", help="a campaign folder with results.json")
    ap.add_argument(
        "--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "time_breakdown")
    )
    ap.add_argument("--title", default=None)
    args = ap.parse_args(argv)
    with open(os.path.join(args.campaign, "results.json")) as fh:
        results = json.load(fh)
    camp = results["campaign"]
    table = breakdown(results)
    runs_executor = None
    try:
        import sqlite3

        con = sqlite3.connect(f"file:{os.path.join(args.campaign, 'ledger.sqlite')}?mode=ro", uri=True)
        runs_executor = sorted({r[0] for r in con.execute("SELECT executor FROM runs")})
        con.close()
    except Exception:
        pass
    title = args.title or (
        f"{camp['env_id']} campaign {camp['id']}: {len(results['per_episode'])} rollouts, "
        f"executor {','.join(runs_executor or ['?'])}"
    )
    text = "\n".join(
        [
            f"time per rollout by stage, {time.strftime('%Y-%m-%d %H:%M:%S')}",
            f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs (shared), "
            f"load average {load_average()} (when this table was made; the campaign ran earlier)",
            title,
            "mean milliseconds per rollout (share of the rollout's total)",
            format_table(table),
            f"rollouts/hour over the campaign's wall clock: {results['aggregated']['cost'].get('rollouts_per_hour')}",
        ]
    )
    print(text)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".txt", "w") as fh:
        fh.write(text + "\n")
    plot(table, args.out + ".png", title)
    print(f"wrote {args.out}.txt and {args.out}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
