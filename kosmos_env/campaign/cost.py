"""Where a campaign's time and money go: per-stage seconds, throughput, and a price table.

Every episode records the seconds it spent in each stage: ``policy`` (inference), ``world``
(simulation or generation), ``gate`` (consistency check), ``judge`` (scoring), ``io`` (video
encoding and artifact writes) and ``total`` (claim to record); ``overhead`` is what ``total``
leaves after the named stages (env reset, bookkeeping). These are *warm* seconds: building a
model (loading weights) is not part of them. A worker records each build once, on the first
episode it finishes after the build, as ``load_policy``, ``load_world`` and ``load_judge``
seconds in that episode's timings (:func:`load_seconds`); summaries report load seconds apart
from the per-rollout warm seconds and price them the same way (the stage's device).

Price table (``--price-table FILE`` or inline JSON)::

    {
      "currency": "USD",                                    # optional, default "USD"
      "accelerator_per_hour": {"cpu": 0.0, "h100": 2.5},    # price of one device for one hour
      "world": "h100", "policy": "h100", "judge": "h100",   # the device each stage occupies
      "gate": "cpu", "io": "cpu", "overhead": "h100"        # optional
    }

A stage's money is its accelerator-seconds / 3600 × that device's hourly price. Stages the
table does not map use ``"cpu"`` when the table prices it and cost nothing otherwise, except
``overhead``, which defaults to the world's device (the device is held while the env resets).
The judge's share is reported on its own because a VLM judge can cost more than the rollout.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

STAGES = ("policy", "world", "gate", "judge", "io", "overhead")
#: stages that build a model once per worker; their build seconds are ``load_<stage>`` timings
LOAD_STAGES = ("policy", "world", "judge")
LOAD_PREFIX = "load_"


@dataclass(frozen=True)
class PriceTable:
    """Hourly device prices and which device each stage occupies."""

    accelerator_per_hour: Mapping[str, float]
    stages: Mapping[str, str] = field(default_factory=dict)
    currency: str = "USD"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PriceTable":
        if not isinstance(data, Mapping):
            raise ValueError("a price table must be a JSON object")
        unknown = set(data) - {"currency", "accelerator_per_hour", *STAGES}
        if unknown:
            raise ValueError(
                f"unknown price table field(s) {sorted(unknown)}; known: currency, accelerator_per_hour, "
                f"{', '.join(STAGES)}"
            )
        prices = data.get("accelerator_per_hour")
        if not isinstance(prices, Mapping) or not prices:
            raise ValueError('a price table needs "accelerator_per_hour": {"device": price per hour, ...}')
        for name, price in prices.items():
            if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price) or price < 0:
                raise ValueError(f"accelerator_per_hour[{name!r}] must be a finite number >= 0, got {price!r}")
        stages = {}
        for stage in STAGES:
            if stage in data:
                device = data[stage]
                if device not in prices:
                    raise ValueError(
                        f"price table maps stage {stage!r} to {device!r}, which accelerator_per_hour "
                        f"does not price (priced: {sorted(prices)})"
                    )
                stages[stage] = device
        currency = data.get("currency", "USD")
        if not isinstance(currency, str) or not currency:
            raise ValueError(f"price table currency must be a non-empty string, got {currency!r}")
        return cls({k: float(v) for k, v in prices.items()}, stages, currency)

    @classmethod
    def parse(cls, arg: str) -> "PriceTable":
        """``--price-table``: a path to a JSON file, or the JSON itself (starts with ``{``)."""
        text = arg.strip()
        if not text.startswith("{"):
            if not os.path.isfile(text):
                raise FileNotFoundError(f"--price-table {arg!r} is neither inline JSON nor an existing file")
            with open(text, encoding="utf-8") as fh:
                text = fh.read()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--price-table is not valid JSON: {exc}") from None
        return cls.from_dict(data)

    def device(self, stage: str) -> str | None:
        if stage in self.stages:
            return self.stages[stage]
        if stage == "overhead" and "world" in self.stages:
            return self.stages["world"]
        return "cpu" if "cpu" in self.accelerator_per_hour else None

    def price_per_second(self, stage: str) -> float:
        device = self.device(stage)
        return 0.0 if device is None else self.accelerator_per_hour[device] / 3600.0

    def to_dict(self) -> dict[str, Any]:
        return {"currency": self.currency, "accelerator_per_hour": dict(self.accelerator_per_hour), **self.stages}


def stage_seconds(timings: Mapping[str, float] | None) -> dict[str, float]:
    """One episode's seconds per stage, with ``overhead`` and ``total`` filled in."""
    t = {k: float((timings or {}).get(k, 0.0)) for k in ("policy", "world", "gate", "judge", "io")}
    total = float((timings or {}).get("total", sum(t.values())))
    t["overhead"] = max(0.0, total - sum(t.values()))
    t["total"] = total
    return t


def load_seconds(timings: Mapping[str, float] | None) -> dict[str, float]:
    """Model-build seconds a worker filed with this episode, per stage (all zero for most episodes)."""
    return {k: float((timings or {}).get(LOAD_PREFIX + k, 0.0)) for k in LOAD_STAGES}


def file_loads(timings: dict[str, float], loads: Mapping[str, float]) -> None:
    """Add a worker's model builds (seconds per stage, since its last filed episode) to an
    episode's timings as ``load_<stage>`` keys (summed with any already there)."""
    for stage, seconds in loads.items():
        if stage not in LOAD_STAGES:
            raise ValueError(f"unknown load stage {stage!r}; stages that load models: {', '.join(LOAD_STAGES)}")
        key = LOAD_PREFIX + stage
        timings[key] = float(timings.get(key, 0.0)) + float(seconds)


def judge_shares(warm: Mapping[str, float], load: Mapping[str, float]) -> dict[str, float | None]:
    """The judge's share of warm inference and of warm plus model loads, from per-stage amounts
    (seconds or money) whose warm ``total`` is the sum of :data:`STAGES`."""
    warm_total = sum(warm[k] for k in STAGES)
    load_total = sum(load.values())
    return {
        "warm": warm["judge"] / warm_total if warm_total > 0 else None,
        "with_loads": (warm["judge"] + load.get("judge", 0.0)) / (warm_total + load_total)
        if warm_total + load_total > 0
        else None,
    }


def busy_wall_seconds(runs: Iterable[Mapping[str, Any]], finished_times: Iterable[float]) -> float:
    """Wall-clock seconds covered by eval runs (overlapping runs counted once).

    A run that was killed has no end time; it ends at the last episode finished during it.
    """
    finished = sorted(t for t in finished_times if t is not None)
    intervals = []
    for run in runs:
        start = run.get("started")
        if start is None:
            continue
        end = run.get("finished")
        if end is None:
            later = [t for t in finished if t >= start]
            end = later[-1] if later else start
        intervals.append((float(start), float(end)))
    intervals.sort()
    total, cur_start, cur_end = 0.0, None, None
    for start, end in intervals:
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def cost_summary(
    episodes: Iterable[Mapping[str, Any]], runs: Iterable[Mapping[str, Any]] = (), price_table: PriceTable | None = None
) -> dict[str, Any]:
    """Warm seconds per stage (sums and per rollout), model-load seconds apart, the judge's share,
    rollouts per hour, and money split the same way if priced."""
    rows = list(episodes)
    n = len(rows)
    sums = {k: 0.0 for k in (*STAGES, "total")}
    loads = {k: 0.0 for k in LOAD_STAGES}
    builds = 0
    for row in rows:
        for k, v in stage_seconds(row.get("timings")).items():
            sums[k] += v
        filed = load_seconds(row.get("timings"))
        builds += any(v > 0 for v in filed.values())
        for k, v in filed.items():
            loads[k] += v
    wall = busy_wall_seconds(runs, [r.get("finished") for r in rows])
    out: dict[str, Any] = {
        "rollouts": n,
        "seconds_per_stage": {k: round(v, 6) for k, v in sums.items()},
        "seconds_per_stage_per_rollout": {k: (round(v / n, 6) if n else None) for k, v in sums.items()},
        "wall_seconds": round(wall, 3),
        "rollouts_per_hour": (n / wall * 3600.0) if wall > 0 and n else None,
        "seconds_per_rollout": (sums["total"] / n) if n else None,
        # model builds, apart from the warm seconds above: summed over workers, and spread over the rollouts
        "load_seconds": {k: round(v, 6) for k, v in loads.items()},
        "load_seconds_per_rollout": {k: (round(v / n, 6) if n else None) for k, v in loads.items()},
        "episodes_with_loads": builds,
        "judge_share_of_time": judge_shares(sums, loads),
        "money": None,
    }
    if price_table is not None:
        per_stage = {k: sums[k] * price_table.price_per_second(k) for k in STAGES}
        load_money = {k: loads[k] * price_table.price_per_second(k) for k in LOAD_STAGES}
        campaign = sum(per_stage.values())
        judge = per_stage["judge"]
        shares = judge_shares(per_stage, load_money)
        out["money"] = {
            "currency": price_table.currency,
            "per_stage": {k: round(v, 6) for k, v in per_stage.items()},
            "devices": {k: price_table.device(k) for k in STAGES},
            "campaign": round(campaign, 6),
            "per_rollout": round(campaign / n, 6) if n else None,
            "judge": {
                "campaign": round(judge, 6),
                "per_rollout": round(judge / n, 6) if n else None,
                "share": shares["warm"],
                "share_with_loads": shares["with_loads"],
            },
            "without_judge": {
                "campaign": round(campaign - judge, 6),
                "per_rollout": round((campaign - judge) / n, 6) if n else None,
            },
            "load_per_stage": {k: round(v, 6) for k, v in load_money.items()},
            "load": round(sum(load_money.values()), 6),
            "campaign_with_loads": round(campaign + sum(load_money.values()), 6),
        }
    return out


def format_cost(cost: Mapping[str, Any]) -> str:
    """A few human lines: seconds per stage, throughput, money."""
    n = cost["rollouts"]
    per = cost["seconds_per_stage_per_rollout"]
    lines = []
    if n:
        stages = ", ".join(f"{k} {per[k]:.3f}" for k in (*STAGES, "total"))
        lines.append(f"warm seconds per rollout by stage: {stages}")
        loads = cost.get("load_seconds") or {}
        if any(loads.values()):
            lines.append(
                "model load seconds (once per worker, not in the per-rollout seconds): "
                + ", ".join(f"{k} {v:.3f}" for k, v in loads.items())
            )
        share = cost.get("judge_share_of_time") or {}
        if share.get("warm") is not None:
            lines.append(
                f"judge's share of the time: {share['warm']:.1%} of warm inference"
                + (f", {share['with_loads']:.1%} with model loads" if any(loads.values()) else "")
            )
    rate = cost.get("rollouts_per_hour")
    lines.append(
        f"{n} rollouts in {cost['wall_seconds']:.1f} s of wall clock" + (f" = {rate:.0f} rollouts/hour" if rate else "")
    )
    money = cost.get("money")
    if money:
        cur = money["currency"]
        share = money["judge"]["share"]
        lines.append(
            f"cost: {money['campaign']:.4g} {cur} of warm inference for the campaign, "
            f"{money['per_rollout'] or 0:.4g} {cur} per rollout; judge {money['judge']['campaign']:.4g} {cur}"
            + (f" ({share:.1%} of it)" if share is not None else "")
        )
        if money.get("load"):
            with_loads = money["judge"].get("share_with_loads")
            lines.append(
                f"model loads: {money['load']:.4g} {cur} more ("
                + ", ".join(f"{k} {v:.4g}" for k, v in money["load_per_stage"].items())
                + ")"
                + (f"; judge's share with loads {with_loads:.1%}" if with_loads is not None else "")
            )
    return "\n".join(lines)
