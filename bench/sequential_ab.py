"""Type-I error and pairs-to-decision of the anytime-valid A/B test, both decision rules, against a
fixed-n paired z-test at the same alpha (seeded simulation, a look after every pair).

    python bench/sequential_ab.py [--experiments 4000] [--pairs 500] [--out bench/results/sequential_ab.txt]
"""

from __future__ import annotations

import argparse

from _report import save  # bench/_report.py: the script's folder is on sys.path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--experiments", type=int, default=4000)
    p.add_argument("--pairs", type=int, default=500)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--out", default=None, help="also write the report to this file")
    args = p.parse_args()

    from kosmos_env.stats.sequential import RULES, fixed_n_pairs, simulate_ab, simulate_type1

    lines = [
        f"anytime-valid paired A/B test, alpha = {args.alpha}, a look after every pair, up to {args.pairs} pairs",
        f"{'rule':<8} {'type-I (0.5 vs 0.5)':>20} {'(0.15 vs 0.15)':>15} {'(Beta, 0.5)':>12} "
        f"{'0.7 vs 0.5: decided':>20} {'median pairs':>13} {'80 % pairs':>11}",
    ]
    for rule in RULES:
        null = simulate_ab(0.5, 0.5, args.experiments, args.pairs, alpha=args.alpha, seed=1, rule=rule)
        low = simulate_type1(args.experiments, args.pairs, p=0.15, alpha=args.alpha, seed=11, rule=rule)
        cont = simulate_type1(args.experiments, args.pairs, p=0.5, alpha=args.alpha, seed=11, kind="beta", rule=rule)
        alt = simulate_ab(0.7, 0.5, args.experiments // 2, args.pairs, alpha=args.alpha, seed=2, rule=rule)
        lines.append(
            f"{rule:<8} {null['decided']:>20.4f} {low:>15.4f} {cont:>12.4f} {alt['decided']:>20.4f} "
            f"{alt['median_pairs']:>13.0f} {alt['q80_pairs']:>11.0f}"
        )
    lines.append(
        f"fixed-n paired z-test, 0.7 vs 0.5, alpha {args.alpha}, 80 % power: "
        f"{fixed_n_pairs(0.7, 0.5, args.alpha):.0f} pairs (one look only)"
    )
    text = "\n".join(lines)
    print(text)
    save(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
