"""The gate computes |b - a| and its change mask once per segment and runs its view test and
workspace clipping on Python floats: every verdict, with every reported number, must equal the
one the gate gives when each measurement computes its own (its code before the sharing). The
previous call's last frame, handed back as a view of the same buffer (as the env does), is
recognised by its memory; a copy is compared by value."""
from __future__ import annotations

import json
import math

import gymnasium
import numpy as np
import pytest

from kosmos_env.gate import ConsistencyGate, _same_memory
from kosmos_env.policies.scripted import ScriptedPolicy


class RecomputingGate(ConsistencyGate):
    """The gate as before: nothing shared between measurements, numpy for the clipping and the view test."""

    def _camera_motion(self, seg, a, b, box, absdiff=None, changed=None, *, window_changed=None):
        return super()._camera_motion(seg, a, b, box)

    def _measure_calibrated(self, seg, a, b, geo, commanded, rotation, changed_mask=None, *, window_changed=None):
        return super()._measure_calibrated(seg, a, b, geo, commanded, rotation)

    def _segment_uncalibrated(self, seg, a, b, cmd_m, demanded_m, absdiff=None):
        return super()._segment_uncalibrated(seg, a, b, cmd_m, demanded_m)

    def _clipped_move(self, start, acts):
        ws = np.asarray(self.thresholds.workspace)
        target = start.copy()
        for a in acts:
            target = np.clip(target + a[:3], ws[:, 0], ws[:, 1])
        return target - start

    def _geometry(self, commanded, start, calibration, scale, shape):
        th = self.thresholds
        lift = np.array([0.0, 0.0, th.hand_height_m])
        end = start + commanded
        uv = np.asarray(calibration.project(np.stack([start, end, start + lift, end + lift])), dtype=np.float64) * scale
        h, w = shape
        finite = bool(np.isfinite(uv).all())
        margin = th.view_margin_px
        in_view = finite and bool(uv[:, 0].min() >= margin and uv[:, 0].max() <= w - margin
                                  and uv[:, 1].min() >= margin and uv[:, 1].max() <= h - margin)
        if not finite:
            return {"in_view": False, "expected": np.zeros(2), "expected_px": 0.0, "box": None}
        expected = uv[1] - uv[0]
        c = th.crop_px
        cx, cy = (uv[0, 0] + uv[1, 0]) / 2, (uv[0, 1] + uv[1, 1]) / 2
        x0 = min(max(int(round(cx)) - c // 2, 0), max(w - c, 0))
        y0 = min(max(int(round(cy)) - c // 2, 0), max(h - c, 0))
        return {"in_view": in_view, "expected": expected, "expected_px": math.hypot(expected[0], expected[1]),
                "box": (x0, y0, c)}


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
        _, _, terminated, truncated, _ = env.step(rng.uniform(env.action_space.low, env.action_space.high).astype(np.float32))
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


@pytest.mark.parametrize("size", [64, 128])
def test_shared_masks_give_the_same_verdicts(size):
    calls, calibration, thresholds = recorded_calls(size)
    checks: dict[str, int] = {}
    demanded = 0
    for name, cs in variants(calls):
        for cal in (calibration, None):  # calibrated (the tabletop) and calibration-free (Bridge-like)
            got = replay(ConsistencyGate(thresholds), cs, cal, hand_back=True)
            want = replay(RecomputingGate(thresholds), cs, cal)
            assert json.dumps(got) == json.dumps(want), (name, cal is not None)
            for verdict in got:
                checks[verdict["check"]] = checks.get(verdict["check"], 0) + 1
                demanded += sum(bool(s.get("demanded")) for s in verdict["segments"])
    # the comparison covered the branches that read the shared arrays
    assert checks.get("camera_motion", 0) >= 5 and checks.get("frozen", 0) >= 5 and checks.get("ok", 0) >= 20, checks
    assert demanded >= 20


def test_same_memory_only_for_views_of_the_same_pixels():
    frames = np.arange(2 * 4 * 5 * 3, dtype=np.uint8).reshape(2, 4, 5, 3)
    assert _same_memory(frames[-1], frames[-1])  # two view objects, one buffer
    assert not _same_memory(frames[-1], frames[-1].copy())  # equal pixels, other memory: compared by value
    assert not _same_memory(frames[0], frames[1])  # same buffer, other offset
    assert not _same_memory(frames[-1], frames[-1][:, ::-1])  # same start, other layout
    assert not _same_memory(frames[-1], frames[-1].view(np.int8))  # same bytes, other dtype
