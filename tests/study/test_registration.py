"""Study registration: made only by `kosmos-env register --study`, bound by content, checked field
by field and for time before a study runs; without one a study is exploratory on every page."""

from __future__ import annotations

import json

import pytest

from kosmos_env.study.registration import (
    RegistrationError,
    check_registration,
    first_difference,
    load_registration_file,
    write_registration,
)
from tests.conftest import requires_extra

DESIGN = [
    "--policies",
    "scripted:skill=1.0",
    "random",
    "--tasks",
    "carrot_on_plate",
    "--seeds",
    "2",
    "--horizons",
    "40",
    "--frame-error-seeds",
    "0",
    "--n-boot",
    "100",
    "--no-null-world",
]


def _error(argv, capsys):
    from kosmos_env.cli import main

    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    return err[0]


def test_a_registration_is_sealed_and_never_overwritten(tmp_path):
    path = tmp_path / "r.json"
    rec = write_registration({"kind": "kosmos-env validity study registration", "x": [1, 2]}, path)
    assert load_registration_file(path)["sha256"] == rec["sha256"]
    with pytest.raises(RegistrationError, match="never overwritten"):
        write_registration({"kind": "kosmos-env validity study registration"}, path)
    edited = json.loads(path.read_text())
    edited["x"] = [1, 3]
    path.write_text(json.dumps(edited))
    with pytest.raises(RegistrationError, match="does not match its content"):
        load_registration_file(path)


def test_first_difference_names_the_nested_field():
    a = {"world": {"weights": {"sha256": "aa"}}, "seeds": [1, 2], "sha256": "x", "registered_utc": "t"}
    b = {"world": {"weights": {"sha256": "bb"}}, "seeds": [1, 2]}
    assert first_difference(a, b) == ("world.weights.sha256", "aa", "bb")
    assert first_difference({"s": [1, 2]}, {"s": [1, 5]}) == ("s[1]", 2, 5)
    assert first_difference({"s": 1}, {"s": 1, "t": 2}) == ("t", "<absent>", 2)
    assert first_difference(b, dict(b)) is None


def test_a_registration_made_after_the_run_started_is_refused():
    rec = {"registered_utc": "2026-01-02T00:00:00.000000Z", "sha256": "x", "a": 1}
    with pytest.raises(RegistrationError, match="not before this run"):
        check_registration(rec, {"a": 1}, "2026-01-01T00:00:00.000000Z", "r.json")
    check_registration(rec, {"a": 1}, "2026-01-03T00:00:00.000000Z", "r.json")  # made before: accepted


def test_register_binds_weights_code_judges_policies_and_seeds(tmp_path, capsys):
    from kosmos_env.cli import main

    reg = tmp_path / "reg.json"
    assert main(["register", "--study", *DESIGN, "--out", str(reg)]) == 0
    capsys.readouterr()
    r = json.loads(reg.read_text())
    assert len(r["world"]["weights"]["sha256"]) == 64 and len(r["world"]["code"]["sha256"]) == 64
    assert r["world"]["world_version"] and r["reference"]["spec_hash"]
    assert len(r["judges"]["vision"]["weights"]["sha256"]) == 64
    assert len(r["judges"]["action_learned"]["coefficients_sha256"]) == 64
    assert [p["policy"] for p in r["policies"]] == ["scripted:skill=1.0", "random"]
    assert all(len(p["content_hash"]) == 64 for p in r["policies"])
    assert r["evaluation_seeds"] == {"carrot_on_plate": [100000, 100001]}
    assert {b["id"] for b in r["bars"]} >= {
        "world_adds_information:learned/vision:all",
        "world_adds_information:learned/vision:honest",
        "world_adds_information:learned/robot_log:all",
    }
    # a second registration to the same file is refused; seeds outside the evaluation range too
    msg = _error(["register", "--study", *DESIGN, "--out", str(reg)], capsys)
    assert "never overwritten" in msg
    msg = _error(
        ["register", "--study", *DESIGN, "--seed-offset", "250000", "--out", str(tmp_path / "r2.json")], capsys
    )
    assert "evaluation seed range" in msg and "tuning" in msg
    msg = _error(["register", "--out", str(tmp_path / "r3.json")], capsys)
    assert "nothing to register" in msg


def test_study_refuses_a_mismatched_or_foreign_registration(tmp_path, capsys):
    from kosmos_env.cli import main

    reg = tmp_path / "reg.json"
    assert main(["register", "--study", *DESIGN, "--out", str(reg)]) == 0
    capsys.readouterr()
    out = str(tmp_path / "s")
    changed = [a if a != "2" else "3" for a in DESIGN]  # --seeds 3
    msg = _error(["study", *changed, "--registration", str(reg), "--out", out, "--quiet"], capsys)
    assert "config.seeds is 2 in the registration, 3 now" in msg
    msg = _error(
        [
            "study",
            *DESIGN,
            "--vision-weights",
            str(tmp_path / "none.safetensors"),
            "--registration",
            str(reg),
            "--out",
            out,
            "--quiet",
        ],
        capsys,
    )
    assert "vision-judge weights" in msg or "config.vision_weights" in msg
    other = tmp_path / "protocol.json"
    other.write_text(json.dumps({"name": "campaign"}))
    msg = _error(["study", *DESIGN, "--registration", str(other), "--out", out, "--quiet"], capsys)
    assert "is not a study registration" in msg


@pytest.mark.slow
@requires_extra("results")  # the study writes plots
def test_an_unregistered_study_is_exploratory_on_every_page(tmp_path, capsys):
    from PIL import Image

    from kosmos_env.cli import main

    out = tmp_path / "s"
    assert main(["study", *DESIGN, "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr()
    assert "EXPLORATORY" in printed.out and "[PASS]" not in printed.out and "[FAIL]" not in printed.out
    report = (out / "report.md").read_text()
    assert report.splitlines()[0].startswith("# EXPLORATORY") and "Bars (not judged: exploratory)" in report
    assert "Registered bars" not in report
    data = json.loads((out / "study.json").read_text())
    assert data["status"] == "exploratory" and data["registration_sha256"] is None
    assert not (out / "registration.json").exists()
    # re-analysing the saved episodes stays exploratory
    assert main(["study", "--from-episodes", str(out), "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "study.json").read_text())["status"] == "exploratory"
    assert Image.open(out / "agreement_intervals.png").size[0] > 100
