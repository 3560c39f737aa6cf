"""Registered metrics on synthetic episode rows: checking and canonicalising expressions, values
that agree with kosmos_env.stats, intervals, and the PASS/FAIL of bars."""

from __future__ import annotations

import numpy as np
import pytest

from kosmos_env.registration.expr import format_call, parse_expr
from kosmos_env.registration.metrics import Cube, evaluate_metric, metric_values, normalize_metric
from kosmos_env.stats import clopper_pearson, mmrv, random_floor, spearman, wilson

POLS = ["scripted:skill=1.0", "scripted:skill=0.5", "random"]
TASKS = ["t1", "t2"]


def make_rows(k_by_cell: dict, n_seeds: int = 10, discarded: dict | None = None) -> list[dict]:
    """k_by_cell[(policy, task)] successes among the first seeds; the rest failures (or discarded)."""
    rows = []
    for (p, t), k in k_by_cell.items():
        d = (discarded or {}).get((p, t), 0)
        for s in range(n_seeds):
            outcome = "success" if s < k else ("discarded" if s >= n_seeds - d else "failure")
            rows.append(
                {"policy": p, "task": t, "seed": s, "repeat": 0, "outcome": outcome, "episode_id": f"{p}|{t}|{s}|0"}
            )
    return rows


def metric(name, expr, op=">=", value=0.5, bound="lower", interval=None, level=0.95, has_ref=False):
    call, mdef = normalize_metric(expr, POLS, TASKS, has_ref)
    return {
        "name": name,
        "expr": format_call(call),
        "bar": {"op": op, "value": value, "bound": bound, "interval": interval or mdef.intervals[0], "level": level},
    }


def test_normalize_fills_every_argument_and_normalises_labels():
    call, _ = normalize_metric("mmrv", POLS, TASKS, True)
    assert format_call(call) == 'mmrv(scope="task_mean", ties="greater", weight="reference")'
    call, _ = normalize_metric('success_rate("scripted:skill=1.0")', POLS, TASKS, False)
    assert call.kwargs == {"policy": "scripted:skill=1.0", "task": None}
    call, _ = normalize_metric('rank_order(["scripted:skill=1.0", "random"], task="t2")', POLS, TASKS, False)
    assert call.kwargs == {"order": ["scripted:skill=1.0", "random"], "task": "t2"}


@pytest.mark.parametrize(
    "expr, has_ref, needle",
    [
        ("accuracy", False, "unknown metric"),
        ('success_rate(policy="scripted:skill=1.0", foo=1)', False, "unknown argument"),
        ('success_rate(policy="octo")', False, "not a registered policy"),
        ("success_rate()", False, "is required"),
        ('success_rate(policy="random", task="t9")', False, "not a registered task"),
        ("spearman", False, "reference"),
        ('mmrv(ties="sometimes")', True, "must be one of"),
        ('success_diff(a="random", b="random")', False, "two different"),
        ('rank_order(["random"])', False, "at least 2"),
        ("success_rate(policy=3)", False, "policy label string"),
        ("exec('x')", False, "unknown metric"),
    ],
)
def test_normalize_refuses(expr, has_ref, needle):
    with pytest.raises(ValueError, match=needle):
        normalize_metric(expr, POLS, TASKS, has_ref)


def test_success_rate_matches_wilson_and_clopper_pearson_and_checks_lower_bound():
    rows = make_rows({(p, t): k for p, k in zip(POLS, (9, 5, 1), strict=True) for t in TASKS})
    cube = Cube.from_rows(rows, POLS, TASKS)
    m = metric("s", 'success_rate(policy="scripted:skill=1.0")', value=0.65)
    r = evaluate_metric(m, cube, None, None)
    ref = wilson(18, 20)
    assert r.estimate == pytest.approx(0.9)
    assert (r.interval["lower"], r.interval["upper"]) == pytest.approx((ref.lower, ref.upper))
    assert r.checked == pytest.approx(ref.lower) and ref.lower > 0.65 and r.verdict == "PASS"
    # the same data with a bar the lower bound does not reach fails, although the estimate does reach it
    r = evaluate_metric(metric("s", 'success_rate(policy="scripted:skill=1.0")', value=0.85), cube, None, None)
    assert r.estimate > 0.85 and r.checked < 0.85 and r.verdict == "FAIL"
    r = evaluate_metric(
        metric(
            "s",
            'success_rate(policy="scripted:skill=1.0", task="t1")',
            value=0.85,
            bound="estimate",
            interval="clopper_pearson",
        ),
        cube,
        None,
        None,
    )
    cp = clopper_pearson(9, 10)
    assert (
        r.verdict == "PASS"
        and r.interval["lower"] == pytest.approx(cp.lower)
        and r.extra["counts"] == {"k": 9, "n": 10}
    )


def test_discard_rate_and_undefined_rate_fails_with_reason():
    rows = make_rows({("scripted:skill=1.0", "t1"): 5, ("random", "t1"): 0}, discarded={("random", "t1"): 10})
    cube = Cube.from_rows(rows, POLS, ["t1"])
    r = evaluate_metric(metric("d", "discard_rate()", op="<=", value=0.2, bound="upper"), cube, None, None)
    assert r.estimate == pytest.approx(0.5) and r.verdict == "FAIL"
    r = evaluate_metric(metric("u", 'success_rate(policy="random")', value=0.0, bound="estimate"), cube, None, None)
    assert r.estimate is None and r.verdict == "FAIL" and "undefined" in r.reason


def test_agreement_metrics_match_stats_and_report_the_floor():
    rows = make_rows({("scripted:skill=1.0", "t1"): 9, ("scripted:skill=0.5", "t1"): 2, ("random", "t1"): 4})
    cube = Cube.from_rows(rows, POLS, ["t1"])
    ref = {("t1", "scripted:skill=1.0"): 0.9, ("t1", "scripted:skill=0.5"): 0.5, ("t1", "random"): 0.0}
    e, r_ = [0.9, 0.2, 0.4], [0.9, 0.5, 0.0]
    call = parse_expr(
        normalize_metric("mmrv", POLS, ["t1"], True)[0] and format_call(normalize_metric("mmrv", POLS, ["t1"], True)[0])
    )
    assert metric_values(cube, cube.total(), call, ref)[0] == pytest.approx(mmrv(e, r_, floor=False).value)
    m = {
        "name": "a",
        "expr": format_call(call),
        "bar": {"op": "<=", "value": 0.1, "bound": "estimate", "interval": "bootstrap", "level": 0.95},
    }
    res = evaluate_metric(m, cube, cube.bootstrap(300, 0), ref)
    assert (
        res.estimate == pytest.approx(mmrv(e, r_, floor=False).value) and res.estimate > 0.1 and res.verdict == "FAIL"
    )
    assert res.extra["random_floor"] == pytest.approx(random_floor(e, r_, "mmrv")[0])
    assert res.interval["lower"] <= res.estimate <= res.interval["upper"]
    call = parse_expr(format_call(normalize_metric("spearman", POLS, ["t1"], True)[0]))
    assert metric_values(cube, cube.total(), call, ref)[0] == pytest.approx(spearman(e, r_, floor=False).value)


def test_rank_order_bootstrap_lower_bound_means_the_order_is_robust():
    clear = Cube.from_rows(
        make_rows({(p, t): k for p, k in zip(POLS, (10, 5, 0), strict=True) for t in TASKS}), POLS, TASKS
    )
    close = Cube.from_rows(
        make_rows({(p, t): k for p, k in zip(POLS, (6, 5, 4), strict=True) for t in TASKS}), POLS, TASKS
    )
    m = metric("o", f"rank_order({POLS!r})".replace("'", '"'), value=1.0, interval="bootstrap")
    r = evaluate_metric(m, clear, clear.bootstrap(500, 0), None)
    assert r.estimate == 1.0 and r.interval["lower"] == 1.0 and r.verdict == "PASS"
    assert r.extra["bootstrap"]["share_order_holds"] > 0.975
    r = evaluate_metric(m, close, close.bootstrap(500, 0), None)
    assert r.estimate == 1.0 and r.interval["lower"] == 0.0 and r.verdict == "FAIL"  # observed, but not robust
    assert 0.2 < r.extra["bootstrap"]["share_order_holds"] < 0.9


def test_bootstrap_is_stratified_by_task_and_seeded():
    rows = make_rows({(p, t): 3 for p in POLS for t in TASKS}, n_seeds=4)[:-2]  # an uneven design is fine too
    cube = Cube.from_rows(rows, POLS, TASKS)
    b1, b2 = cube.bootstrap(200, 7), cube.bootstrap(200, 7)
    assert np.array_equal(b1, b2) and not np.array_equal(b1, cube.bootstrap(200, 8))
    per_task_units = b1.sum(axis=(1, 2))  # episodes per task in each resample (all policies)
    tot = cube.total().sum(axis=(1, 2))[0]
    # every resample keeps 4 units of each task; episode totals vary only through the uneven unit
    assert np.all(per_task_units[:, 0] == tot[0]) and np.all(per_task_units[:, 1] >= tot[1] - 2)
    diff = metric("d", 'success_diff(a="scripted:skill=1.0", b="random")', value=0.0, interval="bootstrap")
    r = evaluate_metric(diff, cube, b1, None)
    assert r.estimate == pytest.approx(6 / 8 - 5 / 6)  # random lost seeds 2 (a success) and 3 (a failure) of t2
    assert r.interval["lower"] <= r.estimate <= r.interval["upper"]


def test_study_verdict_pass_fail_incomplete():
    from kosmos_env.registration.protocol import protocol_hash, validate_protocol
    from kosmos_env.registration.registry import Registration
    from kosmos_env.registration.report import evaluate_registration, registered_text
    from tests.support.registration import TASK, base_protocol

    def reg_for(bar_value):
        p = base_protocol()
        p["metrics"][1]["bar"]["value"] = bar_value
        c = validate_protocol(p)
        return Registration(protocol_hash(c), "2026-01-01T00:00:00Z", c, None)

    rows = make_rows({("scripted:skill=1.0", TASK): 3, ("random", TASK): 0}, n_seeds=3)
    passing = evaluate_registration(reg_for(0.0), rows)  # random's Wilson lower bound 0.0 >= 0.0
    assert passing["verdict"] == "PASS" and passing["bars_passed"] == 2
    failing = evaluate_registration(reg_for(0.8), rows)
    assert failing["verdict"] == "FAIL" and [m["verdict"] for m in failing["metrics"]] == ["PASS", "FAIL"]
    assert "STUDY VERDICT: FAIL (1/2 registered bars passed)" in registered_text(failing)
    partial = evaluate_registration(reg_for(0.0), rows[:4], complete=False)
    assert partial["verdict"] == "INCOMPLETE" and "provisional" in registered_text(partial)
