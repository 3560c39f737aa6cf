"""Nothing named in data is imported-and-called before it is checked to be a class of the right kind.

Each refusal is checked for one clear line AND for the side effect that must not have happened
(a file a called object would have written, a module that would have been imported)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kosmos_env.errors import PluginError
from kosmos_env.judges import make_judge
from kosmos_env.plugins import ALLOW_IMPORT_ENV
from kosmos_env.policies import make_policy
from kosmos_env.spec import load_spec
from kosmos_env.worlds import make_world

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_opt_in(monkeypatch):
    monkeypatch.delenv(ALLOW_IMPORT_ENV, raising=False)


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text
    return text


def test_os_system_policy_is_refused_without_opt_in_and_never_run(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(PluginError) as err:
        make_policy("os:system", command=f"touch {marker}")
    assert "not a registered policy" in _one_line(err.value) and "--allow-import" in str(err.value)
    assert not marker.exists()


def test_os_system_policy_is_refused_with_opt_in_because_it_is_not_a_class(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(PluginError) as err:
        make_policy("os:system", allow_import=True, command=f"touch {marker}")
    line = _one_line(err.value)
    assert "built-in function, not a class" in line and "nothing was called" in line
    assert not marker.exists()


def test_wrong_kind_class_is_refused_before_it_is_built(tmp_path, monkeypatch):
    # a class whose constructor would leave a trace: it must never be called
    module = tmp_path / "evil_plugin_mod.py"
    marker = tmp_path / "constructed"
    module.write_text(
        "from pathlib import Path\n"
        f"MARKER = Path({str(marker)!r})\n"
        "class NotAPolicy:\n"
        "    def __init__(self, **kw):\n"
        "        MARKER.write_text('built')\n"
        "    def act(self, obs):\n"
        "        return None\n"
        "def factory(**kw):\n"
        "    MARKER.write_text('called')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as err:
        make_policy("evil_plugin_mod:NotAPolicy", allow_import=True)
    assert "not a subclass of kosmos_env.policies.base.Policy" in _one_line(err.value)
    with pytest.raises(PluginError) as err:
        make_policy("evil_plugin_mod:factory", allow_import=True)
    assert "is a function, not a class" in _one_line(err.value)
    assert not marker.exists()


def test_module_attr_is_not_even_imported_without_opt_in(tmp_path, monkeypatch):
    module = tmp_path / "import_side_effect_mod.py"
    marker = tmp_path / "imported"
    module.write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError):
        make_policy("import_side_effect_mod:Anything")
    assert not marker.exists() and "import_side_effect_mod" not in sys.modules


def test_opt_in_by_environment_builds_a_real_policy_class(monkeypatch):
    monkeypatch.setenv(ALLOW_IMPORT_ENV, "1")
    policy = make_policy("kosmos_env.policies.random_policy:RandomPolicy", seed=0)
    assert type(policy).__name__ == "RandomPolicy"


def test_judges_and_worlds_are_checked_by_protocol(monkeypatch):
    import kosmos_env.judges as judges
    import kosmos_env.worlds as worlds

    # a registered name pointing at something of the wrong kind (as a broken plug-in would)
    # os.getcwd: a builtin no other test replaces (sys.exit is, by some libraries, for the session)
    monkeypatch.setitem(judges.JUDGES, "getcwd", "os:getcwd")
    with pytest.raises(PluginError) as err:
        make_judge({"type": "getcwd"})
    assert "built-in function, not a class" in _one_line(err.value)
    monkeypatch.setitem(judges.JUDGES, "not_a_judge", "kosmos_env.policies.random_policy:RandomPolicy")
    with pytest.raises(PluginError) as err:
        make_judge("not_a_judge")
    assert "does not implement kosmos_env.judges.base.Judge (missing method judge)" in _one_line(err.value)
    # a spec's judge or world type is a name only: a module:attr is refused, whatever the opt-in
    monkeypatch.setenv(ALLOW_IMPORT_ENV, "1")
    with pytest.raises(PluginError, match="never .module:attr.; registered: .*state"):
        make_judge({"type": "os:system", "command": "true"})

    spec = load_spec("Kosmos-Tabletop-v1")
    monkeypatch.setitem(worlds.WORLD_BACKENDS, "bad_world", "kosmos_env.judges.state:StateJudge")
    with pytest.raises(PluginError) as err:
        make_world(spec.with_overrides(world={"type": "bad_world"}))
    line = _one_line(err.value)
    assert "does not implement kosmos_env.worlds.base.WorldModel" in line and "(world.type of spec" in line
    with pytest.raises(PluginError, match="never .module:attr.; registered: .*tabletop"):
        make_world(spec.with_overrides(world={"type": "os:system"}))


def test_builtins_still_resolve():
    from kosmos_env.judges import resolve_judge
    from kosmos_env.worlds import resolve_world

    assert resolve_world("tabletop").__name__ == "TabletopWorld"
    assert resolve_judge("state").__name__ == "StateJudge"
    assert type(make_policy("scripted", skill=0.5)).__name__ == "ScriptedPolicy"


def test_cli_refuses_os_system_policy_with_one_line_and_no_side_effect(tmp_path, monkeypatch, capsys):
    from kosmos_env import cli

    monkeypatch.setenv(ALLOW_IMPORT_ENV, "0")  # restored after the test: --allow-import sets it to 1
    marker = tmp_path / "pwned"
    for extra in ([], ["--allow-import"]):
        code = cli.main(
            [
                *extra,
                "eval",
                "--env",
                "Kosmos-Tabletop-v1",
                "--seeds",
                "1",
                "--tasks",
                "carrot_on_plate",
                "--no-progress",
                "--no-video",
                "--out",
                str(tmp_path / "out"),
                "--policy",
                f"os:system:command=touch {marker}",
            ]
        )
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and "os:system" in lines[0] and "error" in lines[0], err
        assert not marker.exists()
    # refused before any episode: no ledger was started
    assert not (tmp_path / "out" / "ledger.sqlite").exists()


def test_register_refuses_a_protocol_naming_os_system(tmp_path, monkeypatch, capsys):
    """A protocol YAML received from someone else cannot run code through its policy list."""
    from kosmos_env import cli

    marker = tmp_path / "pwned"
    text = (ROOT / "examples" / "protocol_example.yaml").read_text()
    evil = text.replace(
        "{policy: random, content_hash:", f'{{policy: "os:system:command=touch {marker}", content_hash:'
    )
    assert evil != text
    (tmp_path / "p.yaml").write_text(evil)
    code = cli.main(["register", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "reg.json")])
    err = capsys.readouterr().err
    assert code == 2 and len([ln for ln in err.splitlines() if ln.strip()]) == 1 and "os:system" in err, err
    assert not marker.exists() and not (tmp_path / "reg.json").exists()
