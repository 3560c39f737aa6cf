"""The robot-log judge's events and Z formula on hand-built logs, and LeRobot parquet reading."""

import numpy as np
import pytest

from kosmos_env.judges import make_judge
from kosmos_env.judges.base import Rollout
from kosmos_env.judges.robot_log import LogThresholds, RobotLogJudge, analyse_log, log_from_lerobot, normalise_gripper
from tests.support.robot_logs import OBJ, LogBuilder, approach, pick_and_place


def test_full_pick_and_place_is_success_with_z_4():
    ev = analyse_log(pick_and_place())
    assert (ev.held, ev.lifted, ev.carried, ev.released) == (True, True, True, True)
    assert ev.empty_grasps == 0 and not ev.idle
    assert ev.z == pytest.approx(4.0) and ev.score == pytest.approx(1.0) and ev.success


def test_hold_only():
    b = approach(LogBuilder()).close_on(OBJ).step(n=3)
    ev = analyse_log(b.log())
    assert ev.held and not (ev.lifted or ev.carried or ev.released)
    assert ev.z == pytest.approx(1.0) and not ev.success


def test_hold_needs_the_fingers_to_settle():
    b = approach(LogBuilder())
    # fingers still moving at every closed step: never settled, no hold
    b.step(cmd=0.0, meas=0.8).step(meas=0.6).step(meas=0.45).step(cmd=1.0, meas=1.0)
    assert not analyse_log(b.log()).held


def test_hold_margin_boundary():
    # the command asks for 0.0 and the fingers stop at 0.04: short by 0.04 < 0.05 -> no hold
    b = approach(LogBuilder()).close_on(0.04).step(n=2)
    assert not analyse_log(b.log()).held
    b = approach(LogBuilder()).close_on(0.06).step(n=2)
    assert analyse_log(b.log()).held


def test_partial_command_hold_is_relative_to_the_command():
    # command 0.3 (half closed), fingers stop at 0.32: short by only 0.02 -> not a hold
    b = approach(LogBuilder()).step(cmd=0.3, meas=0.6).step(n=3, meas=0.32)
    assert not analyse_log(b.log()).held
    b = approach(LogBuilder()).step(cmd=0.3, meas=0.6).step(n=3, meas=0.45)
    assert analyse_log(b.log()).held


def test_empty_grasp_penalty_and_cap():
    b = approach(LogBuilder())
    for _ in range(6):
        b.close_on(0.0).open()
    ev = analyse_log(b.log())
    assert ev.empty_grasps == 6 and not ev.held
    assert ev.z == pytest.approx(-0.25 * 4)  # capped at 4 empty grasps
    b = approach(LogBuilder()).close_on(0.02).open()
    ev = analyse_log(b.log())
    assert ev.empty_grasps == 1 and ev.z == pytest.approx(-0.25)


def test_empty_grasp_then_successful_regrasp():
    b = approach(LogBuilder()).close_on(0.0).open().close_on(OBJ)
    b.step(n=3, d=(0, 0, 0.02)).step(n=4, d=(0.03, 0, 0)).open()
    ev = analyse_log(b.log())
    assert ev.success and ev.empty_grasps == 1 and ev.z == pytest.approx(3.75)


def test_lift_threshold_is_3cm_while_holding():
    b = approach(LogBuilder()).close_on(OBJ).step(n=2, d=(0, 0, 0.014))  # 2.8 cm
    assert not analyse_log(b.log()).lifted
    b = approach(LogBuilder()).close_on(OBJ).step(n=2, d=(0, 0, 0.016))  # 3.2 cm
    ev = analyse_log(b.log())
    assert ev.lifted and ev.z == pytest.approx(2.0)


def test_lift_after_slip_does_not_count():
    # the object slips out (fingers close fully) before the arm rises
    b = approach(LogBuilder()).close_on(OBJ).step(meas=0.0).step(n=3, d=(0, 0, 0.02))
    ev = analyse_log(b.log())
    assert ev.held and not ev.lifted


def test_carry_is_horizontal_5cm():
    b = approach(LogBuilder()).close_on(OBJ).step(n=2, d=(0.0, 0.0, 0.04))  # vertical only
    assert not analyse_log(b.log()).carried
    b = approach(LogBuilder()).close_on(OBJ).step(n=2, d=(0.018, 0.018, 0.0))  # 5.09 cm diagonal
    ev = analyse_log(b.log())
    assert ev.carried and not ev.lifted and ev.z == pytest.approx(2.0)


def test_release_needs_an_opening_while_still_holding():
    b = approach(LogBuilder()).close_on(OBJ).open()
    ev = analyse_log(b.log())
    assert ev.held and ev.released and ev.z == pytest.approx(2.0) and not ev.success
    # dropped: the fingers closed fully (object slipped) before the command opened
    b = approach(LogBuilder()).close_on(OBJ).step(meas=0.0).open()
    assert not analyse_log(b.log()).released
    # never opened before the end of the log
    b = approach(LogBuilder()).close_on(OBJ).step(n=2)
    assert not analyse_log(b.log()).released


def test_release_without_hold_is_not_counted():
    b = approach(LogBuilder()).close_on(0.0).open()
    assert not analyse_log(b.log()).released


def test_success_needs_one_grasp_with_all_events():
    # grasp 1: lifted and carried but dropped; grasp 2: held and released in place
    b = approach(LogBuilder()).close_on(OBJ).step(n=3, d=(0, 0, 0.02)).step(n=4, d=(0.03, 0, 0))
    b.step(meas=0.0).open().step(n=3, d=(0, 0, -0.02)).close_on(OBJ).open()
    ev = analyse_log(b.log())
    assert (ev.held, ev.lifted, ev.carried, ev.released) == (True, True, True, True)
    assert not ev.success


def test_idle_definition_and_penalty():
    b = LogBuilder().step(n=20)
    ev = analyse_log(b.log())
    assert ev.idle_fraction == pytest.approx(1.0) and ev.idle and ev.z == pytest.approx(-1.0)
    assert ev.score == pytest.approx(1 / 6)
    # 1.5 mm per step is negligible motion; 3 mm is not
    assert analyse_log(LogBuilder().step(n=20, d=(0.0015, 0, 0)).log()).idle
    assert not analyse_log(LogBuilder().step(n=20, d=(0.003, 0, 0)).log()).idle
    # 2 moving transitions out of 20: idle fraction 0.9, not above 0.9
    b = LogBuilder().step(n=18).step(n=2, d=(0.01, 0, 0))
    ev = analyse_log(b.log())
    assert ev.idle_fraction == pytest.approx(0.9) and not ev.idle


def test_judge_wraps_events_in_a_judgment():
    r = Rollout(
        frames=np.zeros((1, 8, 8, 3), np.uint8),
        instruction="put it",
        actions=np.zeros((0, 7)),
        fps=5,
        log=pick_and_place(),
    )
    j = make_judge("robot_log").judge(r)
    assert j.success is True and j.score == pytest.approx(1.0) and j.judge == "robot_log"
    assert j.extras["held"] and j.extras["z"] == pytest.approx(4.0)
    assert "Z = 4.00" in j.rationale


def test_thresholds_are_spec_fields():
    j = make_judge({"type": "robot_log", "lift_height": 0.1})
    assert j.spec["lift_height"] == 0.1 and j.spec["hold_margin"] == 0.05
    b = approach(LogBuilder()).close_on(OBJ).step(n=2, d=(0, 0, 0.02))
    assert not analyse_log(b.log(), LogThresholds(lift_height=0.1)).lifted
    with pytest.raises(ValueError, match="unknown robot-log"):
        RobotLogJudge(lift=0.1)
    with pytest.raises(ValueError, match="finite number"):
        RobotLogJudge(hold_margin=-1)


@pytest.mark.parametrize(
    "log, message",
    [
        ({}, "missing"),
        ({"ee_pos": np.zeros((5, 2)), "gripper_cmd": np.ones(5), "gripper_measured": np.ones(5)}, r"\(N, 3\)"),
        ({"ee_pos": np.zeros((5, 3)), "gripper_cmd": np.ones(4), "gripper_measured": np.ones(5)}, "lengths differ"),
        ({"ee_pos": np.zeros((5, 3)), "gripper_cmd": np.full(5, 255.0), "gripper_measured": np.ones(5)}, "normalised"),
        ({"ee_pos": np.full((5, 3), np.nan), "gripper_cmd": np.ones(5), "gripper_measured": np.ones(5)}, "NaN"),
        ({"ee_pos": np.zeros((1, 3)), "gripper_cmd": np.ones(1), "gripper_measured": np.ones(1)}, "at least 2"),
    ],
)
def test_bad_logs_raise(log, message):
    with pytest.raises(ValueError, match=message):
        analyse_log(log)


def test_lerobot_parquet_episode(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    log = pick_and_place()
    n = len(log["ee_pos"])
    # a dataset in millimetres whose gripper is 0 = open, 800 = closed; two episodes, shuffled rows
    state = [list(log["ee_pos"][i] * 1000) + [0.0, 0.0, 0.0, 800 * (1 - log["gripper_measured"][i])] for i in range(n)]
    action = [[0.0] * 6 + [800 * (1 - log["gripper_cmd"][i])] for i in range(n)]
    other_state = [[0.0] * 7 for _ in range(3)]
    rows = list(range(n))[::-1]
    table = pa.table(
        {
            "observation.state": [state[i] for i in rows] + other_state,
            "action": [action[i] for i in rows] + [[0.0] * 7] * 3,
            "episode_index": [4] * n + [5] * 3,
            "frame_index": rows + [0, 1, 2],
        }
    )
    path = tmp_path / "episode.parquet"
    pq.write_table(table, path)
    got = log_from_lerobot(
        str(path),
        {"ee_pos": "observation.state[0:3]", "gripper_cmd": "action[6]", "gripper_measured": "observation.state[6]"},
        gripper_cmd_range=(800, 0),
        gripper_measured_range=(800, 0),
        episode_index=4,
        position_scale=0.001,
    )
    np.testing.assert_allclose(got["ee_pos"], log["ee_pos"], atol=1e-9)
    np.testing.assert_allclose(got["gripper_measured"], log["gripper_measured"], atol=1e-9)
    ev = analyse_log(got)
    assert ev.success and ev.z == pytest.approx(4.0)
    with pytest.raises(ValueError, match="not in the episode"):
        log_from_lerobot(
            str(path),
            {"ee_pos": "state[0:3]", "gripper_cmd": "action[6]", "gripper_measured": "action[6]"},
            (0, 1),
            (0, 1),
        )
    with pytest.raises(ValueError, match="episode 9"):
        log_from_lerobot(
            str(path),
            {"ee_pos": "observation.state[0:3]", "gripper_cmd": "action[6]", "gripper_measured": "action[6]"},
            (0, 1),
            (0, 1),
            episode_index=9,
        )


def test_normalise_gripper():
    np.testing.assert_allclose(normalise_gripper(np.array([0.0, 0.04, 0.08]), 0.0, 0.08), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(normalise_gripper(np.array([1.0, 0.0]), 1.0, 0.0), [0.0, 1.0])
    with pytest.raises(ValueError):
        normalise_gripper(np.zeros(2), 1.0, 1.0)
