"""The gate computes |b - a| and its change mask once per segment and hands them to the
measurements, and runs its view test and workspace clipping on Python floats: every measurement
given the shared arrays must return exactly what it computes from the frames alone, the clipping
and view test must equal their numpy formulation, on the inputs the gate really passes over
recorded tabletop episodes (as recorded, panned and frozen; calibrated and calibration-free).
The previous call's last frame, handed back as a view of the same buffer (as the env does), is
recognised by its memory; a copy is compared by value, with the same verdicts."""

from __future__ import annotations

import copy
import json
import math

import gymnasium
import numpy as np
import pytest

from kosmos_env.gate import ConsistencyGate, consistency
from kosmos_env.gate.measurements import same_memory
from kosmos_env.policies.scripted import ScriptedPolicy


def numpy_clipped_move(workspace, start, acts):
    """The world's clipping as a numpy loop (what ``clipped_move`` must reproduce bit for bit)."""
    ws = np.asarray(workspace)
    target = start.copy()
    for a in acts:
        target = np.clip(target + a[:3], ws[:, 0], ws[:, 1])
    return target - start


def numpy_geometry(th, commanded, start, calibration, scale, shape):
    """The projected gripper's window and view test in numpy (what ``geometry`` must reproduce)."""
    lift = np.array([0.0, 0.0, th.hand_height_m])
    end = start + commanded
    uv = np.asarray(calibration.project(np.stack([start, end, start + lift, end + lift])), dtype=np.float64) * scale
    h, w = shape
    finite = bool(np.isfinite(uv).all())
    margin = th.view_margin_px
    in_view = finite and bool(
        uv[:, 0].min() >= margin
        and uv[:, 0].max() <= w - margin
        and uv[:, 1].min() >= margin
        and uv[:, 1].max() <= h - margin
    )
    if not finite:
        return False, np.zeros(2), 0.0, None
    expected = uv[1] - uv[0]
    c = th.crop_px
    cx, cy = (uv[0, 0] + uv[1, 0]) / 2, (uv[0, 1] + uv[1, 1]) / 2
    x0 = min(max(int(round(cx)) - c // 2, 0), max(w - c, 0))
    y0 = min(max(int(round(cy)) - c // 2, 0), max(h - c, 0))
    return in_view, expected, math.hypot(expected[0], expected[1]), (x0, y0, c)


def recorded_calls(size: int):
    """Gate calls of one scripted and one random-action tabletop episode (None = episode start)."""
    env = gymnasium.make("Kosmos-Tabletop-v1", task="carrot_on_plate", image_size=(size, size))
    base = env.unwrapped
    calls = []
    check = base._gate.check

    def recording(prev, frames, actions, calibration, log):
        calls.append((prev.copy(), frames.copy(), np.array(actions), {k: np.asarray(v).copy() for k, v in log.items()}))
        return check(prev, frames, actions, calibration, log)

    base._gate.check = recording
    obs, _ = env.reset(seed=3)
    calls.append(None)
    policy = ScriptedPolicy(skill=1.0)
    policy.reset(obs["instruction"], seed=3)
    for _ in range(20):
        obs, _, terminated, truncated, _ = env.step(np.asarray(policy.act(obs), np.float32).reshape(-1, 7)[0])
        if terminated or truncated:
            break
    env.reset(seed=4)
    calls.append(None)
    rng = np.random.default_rng(4)
    for _ in range(20):
        _, _, terminated, truncated, _ = env.step(
            rng.uniform(env.action_space.low, env.action_space.high).astype(np.float32)
        )
        if terminated or truncated:
            break
    calibration, thresholds = base.world.calibration, base._gate.thresholds
    env.close()
    return calls, calibration, thresholds


def variants(calls):
    """The calls as recorded, with every generated frame panned by 3 px (camera motion), and frozen."""
    yield "recorded", calls
    yield "panned", [c if c is None else (c[0], np.roll(c[1], 3, axis=2), c[2], c[3]) for c in calls]
    yield "frozen", [c if c is None else (c[0], np.repeat(c[0][None], len(c[1]), 0), c[2], c[3]) for c in calls]


def replay(gate, calls, calibration, hand_back=False):
    """Verdicts of the calls; ``hand_back``: pass the previous call's last frame (a view of its
    frames) as ``prev`` where it equals the recorded one, as the env does."""
    out = []
    last = None
    for call in calls:
        if call is None:
            gate.reset()
            last = None
            continue
        prev, frames, actions, log = call
        if hand_back and last is not None and np.array_equal(last, prev):
            prev = last
        out.append(gate.check(prev, frames, actions, calibration, log).to_dict())
        last = frames[-1]
    return out


class Recorder:
    """Wraps the measurement functions the gate calls: keeps each call's inputs (the segment record
    as it was before the call) and what it returned and wrote."""

    NAMES = ("camera_motion", "measure_calibrated", "measure_uncalibrated", "clipped_move", "geometry")

    def __init__(self, monkeypatch):
        self.calls = {name: [] for name in self.NAMES}
        for name in self.NAMES:
            monkeypatch.setattr(consistency, name, self._wrap(name, getattr(consistency, name)))

    def _wrap(self, name, fn):
        def wrapped(*args, **kwargs):
            before = [copy.deepcopy(a) if type(a).__name__ == "Segment" else a for a in args]
            out = fn(*args, **kwargs)
            after = [a.to_dict() if type(a).__name__ == "Segment" else None for a in args]
            self.calls[name].append((before, kwargs, out, after))
            return out

        return wrapped


def _same(x, y) -> bool:
    return json.dumps(x, default=repr) == json.dumps(y, default=repr)  # values and key order


@pytest.mark.parametrize("size", [64, 128])
def test_shared_arrays_change_no_measurement(size, monkeypatch):
    calls, calibration, thresholds = recorded_calls(size)
    recorder = Recorder(monkeypatch)
    checks: dict[str, int] = {}
    for _, cs in variants(calls):
        for cal in (calibration, None):  # calibrated (the tabletop) and calibration-free (Bridge-like)
            for verdict in replay(ConsistencyGate(thresholds), cs, cal, hand_back=True):
                checks[verdict["check"]] = checks.get(verdict["check"], 0) + 1
    monkeypatch.undo()  # the reference calls below run the plain functions
    from kosmos_env.gate import measurements as m

    shared = 0
    for (th, hann, seg, a, b, box, *rest), kwargs, out, after in recorder.calls["camera_motion"]:
        shared += bool(rest)
        alone = copy.deepcopy(seg)
        got = m.camera_motion(th, hann, alone, a, b, box)  # everything computed from the frames
        assert np.array_equal(got[0], out[0]) and got[1:] == out[1:]
        assert _same(alone.to_dict(), after[2]), json.dumps([alone.to_dict(), after[2]], default=repr)
    for (th, seg, a, b, geo, commanded, rotation, *rest), kwargs, _, after in recorder.calls["measure_calibrated"]:
        alone = copy.deepcopy(seg)
        m.measure_calibrated(th, alone, a, b, geo, commanded, rotation)
        assert _same(alone.to_dict(), after[1])
    for (th, seg, a, b, cmd_m, demanded_m, *rest), kwargs, out, after in recorder.calls["measure_uncalibrated"]:
        alone = copy.deepcopy(seg)
        assert m.measure_uncalibrated(th, alone, a, b, cmd_m, demanded_m) == out
        assert _same(alone.to_dict(), after[1])
    for (rows, start, acts), _, out, _ in recorder.calls["clipped_move"]:
        assert np.array_equal(out, numpy_clipped_move(rows, start, acts))  # bit for bit
    for (th, _, commanded, start, cal, scale, shape), _, geo, _ in recorder.calls["geometry"]:
        in_view, expected, expected_px, box = numpy_geometry(th, commanded, start, cal, scale, shape)
        assert (geo.in_view, geo.expected_px, geo.box) == (in_view, expected_px, box)
        assert np.array_equal(geo.expected, expected)
    # the comparison covered the branches that read the shared arrays
    assert shared >= 20 and len(recorder.calls["measure_calibrated"]) >= 20
    assert len(recorder.calls["measure_uncalibrated"]) >= 20 and len(recorder.calls["clipped_move"]) >= 20
    assert checks.get("camera_motion", 0) >= 5 and checks.get("frozen", 0) >= 5 and checks.get("ok", 0) >= 20, checks


def test_a_handed_back_frame_gives_the_verdicts_of_a_copy():
    calls, calibration, thresholds = recorded_calls(64)
    for _, cs in variants(calls):
        for cal in (calibration, None):
            got = replay(ConsistencyGate(thresholds), cs, cal, hand_back=True)
            assert json.dumps(got) == json.dumps(replay(ConsistencyGate(thresholds), cs, cal))


def test_same_memory_only_for_views_of_the_same_pixels():
    frames = np.arange(2 * 4 * 5 * 3, dtype=np.uint8).reshape(2, 4, 5, 3)
    assert same_memory(frames[-1], frames[-1])  # two view objects, one buffer
    assert not same_memory(frames[-1], frames[-1].copy())  # equal pixels, other memory: compared by value
    assert not same_memory(frames[0], frames[1])  # same buffer, other offset
    assert not same_memory(frames[-1], frames[-1][:, ::-1])  # same start, other layout
    assert not same_memory(frames[-1], frames[-1].view(np.int8))  # same bytes, other dtype
