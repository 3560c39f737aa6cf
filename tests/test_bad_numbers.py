"""Bad numbers and settings get one clear line (or a 4xx page), never a traceback or an HTTP 500:
unknown judge settings, a NaN price, a run folder that does not exist, a zero physics step, a
negative field of view, URL integers beyond SQLite's 64 bits."""

from __future__ import annotations

import shutil

import gymnasium
import pytest

import kosmos_env  # noqa: F401
from kosmos_env.errors import SpecError
from kosmos_env.judges import make_judge
from tests.conftest import requires_extra


def test_unknown_judge_settings_are_named():
    with pytest.raises(
        ValueError, match=r"unknown setting\(s\) \['bogus'\] for judge type 'state'; it takes no settings"
    ):
        make_judge({"type": "state", "bogus": 1})
    with pytest.raises(ValueError, match="'colour'"):
        make_judge({"type": "vision_frame", "colour": "red"})
    make_judge({"type": "vision_frame", "threshold": 0.4})  # a real setting still goes through


def test_a_nan_price_is_refused():
    from kosmos_env.campaign.cost import PriceTable

    with pytest.raises(ValueError, match="finite number"):
        PriceTable.parse('{"accelerator_per_hour": {"cpu": NaN}}')
    with pytest.raises(ValueError, match="finite number"):
        PriceTable.parse('{"accelerator_per_hour": {"cpu": Infinity}}')


def test_serve_on_a_missing_folder_is_one_line(tmp_path, capsys):
    from kosmos_env.cli import main

    assert main(["serve", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run folder(s) not found" in err[0]


@pytest.mark.parametrize(
    "world, field",
    [
        ({"physics_dt": 0}, "physics_dt"),
        ({"physics_dt": -0.01}, "physics_dt"),
        ({"physics_dt": float("nan")}, "physics_dt"),
        ({"physics_dt": 0.5}, "must not exceed"),
        ({"camera": {"fovy": -5}}, "camera.fovy"),
    ],
)
def test_meaningless_tabletop_physics_and_camera_are_refused(world, field):
    with pytest.raises(SpecError, match=field):
        gymnasium.make("Kosmos-Tabletop-v1", world=world).reset(seed=0)


@requires_extra("console")
def test_console_url_integers_beyond_64_bits_are_4xx(tmp_path):
    from fastapi.testclient import TestClient

    from kosmos_env.console.app import create_app
    from kosmos_env.console.campaigns import folder_key
    from tests.support.campaign import planned_ledger

    root = tmp_path / "runs"
    planned_ledger(root / "a")
    key = folder_key(root / "a")
    c = TestClient(create_app([str(root)], "t" * 24), base_url="http://127.0.0.1")
    huge = str(10**30)
    assert c.get(f"/c/{key}/episodes", params={"seed": huge}).status_code == 400
    assert c.get(f"/c/{key}/episodes", params={"page": huge}).status_code == 400
    assert c.get(f"/c/{key}/episodes/{huge}").status_code == 404
    assert c.get(f"/c/{key}/episodes", params={"seed": "3"}).status_code == 200
    shutil.rmtree(root)


def test_nan_lease_is_refused_and_a_stored_null_lease_is_repaired(tmp_path, capsys):
    import sqlite3

    from kosmos_env.campaign.design import make_config
    from kosmos_env.campaign.ledger import Ledger
    from kosmos_env.cli import main

    assert (
        main(
            [
                "eval",
                "--env",
                "Kosmos-Tabletop-v1",
                "--policy",
                "random",
                "--tasks",
                "carrot_on_plate",
                "--seeds",
                "1",
                "--lease-seconds",
                "nan",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--lease-seconds must be a finite positive number" in err[0]
    # a ledger an older version wrote with a NULL expiry: the lease is taken over, not a TypeError forever
    config = make_config("Kosmos-Tabletop-v1", ["random"], tasks=["carrot_on_plate"], seeds=2)
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.initialise(config)
        first = ledger.claim("otherhost:1:w", 60.0, 3)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE episodes SET lease_expires = NULL WHERE status = 'leased'")
    with Ledger(path) as ledger:
        taken = ledger.claim("otherhost:2:w", 60.0, 3)
        assert taken is not None and taken.order == first.order  # the broken lease first, repaired
        with pytest.raises(ValueError, match="finite positive"):
            ledger.claim("otherhost:3:w", float("nan"), 3)


def test_env_ids_are_names_not_paths_and_sizes_are_bounded(tmp_path, capsys):
    from kosmos_env.campaign.design import MAX_EPISODES, make_config
    from kosmos_env.cli import main
    from kosmos_env.spec import load_spec

    with pytest.raises(SpecError, match="is not an env id"):
        load_spec("../envs_registry/Kosmos-Tabletop-v1")
    with pytest.raises(SpecError, match=r"horizon' must be in \[1, 100000\]"):
        gymnasium.make("Kosmos-Tabletop-v1", horizon=10**12)
    with pytest.raises(ValueError, match="more than a campaign can plan"):
        make_config("Kosmos-Tabletop-v1", ["random"], tasks=["carrot_on_plate"], seeds=10**9)
    with pytest.raises(ValueError, match=f"at most {MAX_EPISODES}"):
        make_config("Kosmos-Tabletop-v1", ["random", "scripted"], tasks=["all"], seeds=200_000)
    out = tmp_path / "r"
    assert (
        main(["eval", "--env", "Kosmos-Tabletop-v1", "--policy", "random", "--seeds", "1000000000", "--out", str(out)])
        == 2
    )
    assert len(capsys.readouterr().err.strip().splitlines()) == 1 and not out.exists()


def test_a_task_suite_is_a_name_not_a_path():
    from kosmos_env.tasks import load_suite

    with pytest.raises(SpecError, match="is not a suite name"):
        load_suite("../envs_registry/Kosmos-Tabletop-v1")
    with pytest.raises(SpecError, match="is not a suite name"):
        gymnasium.make("Kosmos-Tabletop-v1", tasks={"suite": "../../etc/x"})
    assert load_suite("tabletop").names


def test_corrupt_judge_weights_stop_the_campaign_before_any_episode_naming_the_judge(tmp_path, capsys):
    import json

    from kosmos_env.cli import main
    from kosmos_env.judges.vision_frame import FrameVisionJudge, shipped_classifier_path

    bad = tmp_path / "judge.safetensors"
    bad.write_bytes(b"\x00garbage" * 10)
    out = tmp_path / "r"
    rc = main(
        [
            "eval",
            "--env",
            "Kosmos-TabletopLearned-v1",
            "--policy",
            "random",
            "--tasks",
            "carrot_on_plate",
            "--seeds",
            "1",
            "--judge",
            json.dumps({"type": "vision_frame", "weights": str(bad)}),
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "judge 'vision_frame' is not usable" in err[0] and "cannot be read" in err[0]
    assert not (out / "ledger.sqlite").exists()  # nothing ran, nothing to blame on the policy
    judge = FrameVisionJudge(str(shipped_classifier_path()), weights_sha256="0" * 64)
    with pytest.raises(ValueError, match="bound to"):
        judge.preflight()


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, capsys):
    from kosmos_env.cli import main

    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    assert main(["register", str(bomb), "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "anchors or aliases" in err[0]
