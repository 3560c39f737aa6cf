"""Protocol validation, the canonical form and its hash, registration files and tamper checks."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from kosmos_env import cli
from kosmos_env.registration import (
    ProtocolError,
    RegistrationError,
    build_registration,
    load_registration,
    protocol_hash,
    validate_protocol,
)
from kosmos_env.registration.protocol import canonical_json
from kosmos_env.spec import load_spec
from tests.support.registration import ENV, base_protocol, write_protocol, write_reference

ZERO = "0" * 64


def test_canonical_form_makes_every_default_explicit():
    c = validate_protocol(base_protocol())
    # a count is that many evaluation seeds (kosmos_env/study/seed_ranges.json), never training scenes
    assert c["seeds"] == [100000, 100001, 100002] and c["repeats"] == 1 and c["judge"] == {"type": "state"}
    assert c["env"] == {
        "id": ENV,
        "overrides": {"image_size": [64, 64]},
        "spec_hash": load_spec(ENV).with_overrides(image_size=[64, 64]).hash,
    }
    assert c["env"]["spec_hash"] != load_spec(ENV).hash  # the image size override changes the spec hash
    assert c["metrics"][0] == {
        "name": "scripted_succeeds",
        "expr": 'success_rate(policy="scripted:skill=1.0", task=null)',
        "bar": {"op": ">=", "value": 0.3, "bound": "lower", "interval": "wilson", "level": 0.95},
    }
    assert protocol_hash(c) == hashlib.sha256(canonical_json(c).encode()).hexdigest()
    # validating the canonical form again changes nothing
    assert validate_protocol(copy.deepcopy(c)) == c


def test_equivalent_spellings_hash_the_same():
    a = base_protocol()
    b = base_protocol(seeds=[100000, 100001, 100002], repeats=1, judge={"type": "state"})
    b["metrics"][0]["expr"] = "success_rate( 'scripted:skill=1.0' , task=None )"
    b["metrics"][1]["bar"] = dict(reversed(list(b["metrics"][1]["bar"].items())))
    assert protocol_hash(validate_protocol(a)) == protocol_hash(validate_protocol(b))


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda p: p.update(colour="red"), r"unknown field\(s\) \['colour'\] in protocol"),
        (lambda p: p["env"].update(revision="x"), r"unknown field\(s\) \['revision'\] in protocol.env"),
        (lambda p: p["metrics"][0]["bar"].update(alpha=0.05), r"protocol.metrics\[0\].bar"),
        (lambda p: p.pop("metrics"), "missing required field 'metrics'"),
        (lambda p: p.update(metrics=[]), "at least one metric"),
        (lambda p: p.update(seeds="3"), "protocol.seeds must be"),
        (lambda p: p.update(seeds=[0, 0]), "seed twice"),
        (lambda p: p.update(seeds=[0, 1, 2]), r"3 in the training range .* write `seeds: 3`"),
        (lambda p: p.update(seeds=[100000, 250000]), "1 in the tuning range"),
        (lambda p: p.update(repeats=1.5), "protocol.repeats"),
        (lambda p: p.update(tasks=["fly_to_moon"]), "unknown task"),
        (lambda p: p.update(judge={"type": "oracle9"}), "unknown judge type"),
        (lambda p: p.update(name="my study!"), "protocol.name"),
        (lambda p: p["metrics"][0]["bar"].update(value="high"), "bar.value must be a finite number"),
        (lambda p: p["metrics"][0]["bar"].update(op="=="), "bar.op must be one of"),
        (lambda p: p["metrics"][0]["bar"].pop("bound"), "missing required field 'bound'"),
        (lambda p: p["metrics"][0]["bar"].update(level=1.5), "bar.level"),
        (lambda p: p["metrics"][0].update(expr="success_rate(policy='octo')"), "not a registered policy"),
        (lambda p: p["metrics"][0].update(expr="__import__('os')"), r"metrics\[0\].expr"),
        (lambda p: p["metrics"][1].update(name="scripted_succeeds"), "more than once"),
        (
            lambda p: p["metrics"].append(
                {"name": "m", "expr": "mmrv", "bar": {"op": "<=", "value": 0.1, "bound": "estimate"}}
            ),
            "reference",
        ),
        (lambda p: p["policies"][0].update(content_hash="abc"), "content_hash must be a sha256"),
        (lambda p: p["policies"].append(dict(p["policies"][0])), "more than once"),
        (lambda p: p.update(analysis={"n_boot": 10}), "n_boot"),
    ],
)
def test_structure_errors_name_the_field(edit, needle):
    p = base_protocol()
    edit(p)
    with pytest.raises(ProtocolError, match=needle):
        validate_protocol(p)


def test_interval_must_exist_for_the_metric():
    p = base_protocol()
    p["metrics"].append(
        {
            "name": "d",
            "expr": 'success_diff(a="scripted:skill=1.0", b="random")',
            "bar": {"op": ">", "value": 0, "bound": "lower", "interval": "wilson"},
        }
    )
    with pytest.raises(ProtocolError, match="not available for success_diff"):
        validate_protocol(p)


def test_spec_hash_must_match_the_overridden_spec():
    p = base_protocol()
    p["env"]["spec_hash"] = load_spec(ENV).hash  # the default spec's hash, but the protocol overrides image_size
    with pytest.raises(ProtocolError, match=r"does not match the current spec .* with overrides"):
        validate_protocol(p)
    p = base_protocol()
    p["env"].pop("overrides")  # hash of the 64x64 spec, but no override declared
    with pytest.raises(ProtocolError, match="no overrides declared"):
        validate_protocol(p)
    p = base_protocol()
    p["env"]["spec_hash"] = ZERO
    validate_protocol(p, check_hashes=False)  # structure alone is fine


def test_policy_hash_must_match_make_policy():
    p = base_protocol()
    p["policies"][0]["content_hash"] = p["policies"][1]["content_hash"]  # random's hash on the scripted policy
    with pytest.raises(ProtocolError, match=r"policies\[0\] \(scripted:skill=1.0\): content_hash .* does not match"):
        validate_protocol(p)


def test_reference_sha256_is_checked(tmp_path):
    ref, sha = write_reference(
        tmp_path, [("carrot_on_plate", "scripted:skill=1.0", 0.9), ("carrot_on_plate", "random", 0.1)]
    )
    p = base_protocol(reference={"path": "ref.csv", "sha256": sha})
    validate_protocol(p, tmp_path)
    ref.write_text(ref.read_text() + "carrot_on_plate,scripted:skill=0.5,0.5\n")
    with pytest.raises(ProtocolError, match="reference.sha256 .* does not match"):
        validate_protocol(p, tmp_path)
    with pytest.raises(FileNotFoundError, match="reference file not found"):
        validate_protocol(base_protocol(reference={"path": "nope.csv", "sha256": sha}), tmp_path)


def test_yaml_is_read_with_safe_load(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("!!python/object/apply:os.system ['echo hacked']\n")
    assert cli.main(["register", str(path), "--out", str(tmp_path / "r.json")]) == 2
    assert not (tmp_path / "r.json").exists()


def test_register_writes_once_and_refuses_to_overwrite(tmp_path, capsys):
    proto = write_protocol(tmp_path, base_protocol())
    out = tmp_path / "reg.json"
    assert cli.main(["register", str(proto), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    c = validate_protocol(base_protocol())
    assert data["sha256"] == protocol_hash(c) and data["protocol"] == c
    assert data["registered_utc"].endswith("Z") and data["sha256"] in capsys.readouterr().out
    before = out.read_bytes()
    assert cli.main(["register", str(proto), "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and out.read_bytes() == before
    # default output name beside the protocol
    assert cli.main(["register", str(proto)]) == 0 and (tmp_path / "study.registration.json").is_file()


def test_register_refuses_a_bad_protocol_and_writes_nothing(tmp_path, capsys):
    p = base_protocol()
    p["env"]["spec_hash"] = ZERO
    proto = write_protocol(tmp_path, p)
    assert cli.main(["register", str(proto), "--out", str(tmp_path / "r.json")]) == 2
    assert "does not match the current spec" in capsys.readouterr().err and not (tmp_path / "r.json").exists()
    assert cli.main(["register", str(proto), "--hashes"]) == 0  # tells the user the hashes to declare
    shown = json.loads(capsys.readouterr().out)
    assert shown["env"]["spec_hash"] == base_protocol()["env"]["spec_hash"]


EDITS = {
    "seeds": lambda p: p.update(seeds=[0, 1, 3]),
    "tasks": lambda p: p.update(tasks=["spoon_on_towel"]),
    "repeats": lambda p: p.update(repeats=2),
    "judge": lambda p: p.update(judge={"type": "robot_log"}),
    "bar value": lambda p: p["metrics"][1]["bar"].update(value=0.0),
    "bar bound": lambda p: p["metrics"][1]["bar"].update(bound="estimate"),
    "metric expr": lambda p: p["metrics"][1].update(expr='success_rate(policy="random", task="carrot_on_plate")'),
    "spec hash": lambda p: p["env"].update(spec_hash=ZERO),
    "overrides": lambda p: p["env"].update(overrides={"image_size": [32, 32]}),
    "policy hash": lambda p: p["policies"][1].update(content_hash=ZERO),
    "bootstrap": lambda p: p["analysis"].update(n_boot=501),
    "hypothesis": lambda p: p.update(hypothesis="anything goes"),
}


@pytest.mark.parametrize("field", sorted(EDITS))
def test_editing_any_registered_field_changes_the_hash_and_is_refused(tmp_path, field):
    out = tmp_path / "reg.json"
    assert cli.main(["register", str(write_protocol(tmp_path, base_protocol())), "--out", str(out)]) == 0
    reg = load_registration(out)
    data = json.loads(out.read_text())
    EDITS[field](data["protocol"])
    assert protocol_hash(data["protocol"]) != reg.sha256
    out.chmod(0o644)
    out.write_text(json.dumps(data))
    with pytest.raises(RegistrationError, match="edited after registration"):
        load_registration(out)


def test_a_rehashed_but_non_canonical_protocol_is_refused(tmp_path):
    reg = build_registration(write_protocol(tmp_path, base_protocol()))
    data = reg.to_dict()
    data["protocol"]["seeds"] = 3  # valid YAML shorthand, but not what register writes
    data["sha256"] = protocol_hash(data["protocol"])
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(RegistrationError, match="not in canonical form"):
        load_registration(tmp_path / "r.json")


def test_embedded_reference_data_is_sealed(tmp_path):
    _, sha = write_reference(
        tmp_path, [("carrot_on_plate", "scripted:skill=1.0", 0.9), ("carrot_on_plate", "random", 0.1)]
    )
    reg = build_registration(write_protocol(tmp_path, base_protocol(reference={"path": "ref.csv", "sha256": sha})))
    assert reg.reference_data["sha256"] == sha
    assert [r["reference"] for r in reg.reference_rows()] == [0.9, 0.1]
    data = reg.to_dict()
    data["reference_data"]["text"] = data["reference_data"]["text"].replace("0.1", "0.95")
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(RegistrationError, match="reference data hashes"):
        load_registration(tmp_path / "r.json")


def test_the_example_protocol_registers(tmp_path):
    """examples/protocol_example.yaml is valid and its hashes are those of the code as it is now
    (if the tabletop spec or a policy changes, update them: `kosmos-env register FILE --hashes`)."""

    from kosmos_env.registration.protocol import load_protocol_file
    from tests.support.paths import ROOT

    path = ROOT / "examples" / "protocol_example.yaml"
    c = validate_protocol(load_protocol_file(path), path.parent, check_hashes=False)
    assert c["env"]["overrides"] == {"image_size": [64, 64]} and len(c["metrics"]) == 4
    try:
        reg = build_registration(path)
    except ProtocolError as exc:
        pytest.fail(
            f"{path} no longer registers against the current code; refresh its hashes with "
            f"`kosmos-env register {path} --hashes`: {exc}"
        )
    assert reg.sha256 == protocol_hash(c) and reg.reference_data is not None
