"""The README's claims, checked against the code and the result files they quote.

- every `kosmos-env ...` command the README shows parses with the real CLI (a full example in a
  code block or an inline example with two or more options must parse as written, `--out` and all;
  a shorter inline mention must name a real command and real options);
- numbers quoted from `bench/results/` are recomputed from those files: the "Measuring the
  evaluator" section (validity study tables, repeatability, cost, horizon, drift, bars, the learned
  action-only judge's accuracy) and the judge-stage timings;
- the quick start's design and the Python floor, the dependency floors and the worlds table's
  default judges agree with pyproject.toml and the env registry;
- the Python block of the Bridge section runs as written (tiny models, so on a CPU).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RESULTS = ROOT / "bench" / "results"


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


# -- commands ------------------------------------------------------------------------------------
def _block_commands() -> list[str]:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        joined = block.replace("\\\n", " ")
        variables = dict(re.findall(r'^(\w+)="([^"]*)"', joined, re.M))
        for line in joined.splitlines():
            line = line.split(" #")[0].strip()
            for part in re.split(r"&&|;", line):
                part = part.strip().removeprefix("$ ")
                m = re.search(r"(?:^|\s)((?:\S*/)?kosmos-env\s.*)$", part)
                if m:
                    cmd = re.sub(r"\$(\w+)", lambda v: variables.get(v.group(1), v.group(0)), m.group(1))
                    out.append(re.sub(r"\s\[[^\]]*\]", "", cmd))  # [--optional | --forms] are usage notation
    return out


def _inline_commands() -> list[str]:
    return [span for span in re.findall(r"`([^`\n]*kosmos-env [^`\n]*)`", README) if "kosmos-env:" not in span]


def _argv(cmd: str) -> list[str]:
    words = shlex.split(cmd)
    start = next(i for i, w in enumerate(words) if w.endswith("kosmos-env"))
    return words[start + 1 :]


def _parse(argv: list[str]) -> str | None:
    from kosmos_env.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            return err.getvalue().strip().splitlines()[-1]
    return None


def test_the_readme_shows_commands():
    assert len(_block_commands()) >= 15 and len(_inline_commands()) >= 10


@pytest.mark.parametrize("cmd", _block_commands())
def test_every_command_in_a_code_block_parses(cmd):
    assert _parse(_argv(cmd)) is None, f"README: `{cmd}` does not parse: {_parse(_argv(cmd))}"


def test_inline_commands_parse_or_name_real_options():
    import argparse

    from kosmos_env.cli import build_parser

    parser = build_parser()
    commands = {
        name: sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    }
    for span in _inline_commands():
        argv = _argv(span)
        top = [a for a in argv if a in ("--allow-import", "--trust-remote-code")]
        argv = [a for a in argv if a not in top]
        options = [a for a in argv if a.startswith("--")]
        if len(options) >= 2:  # an example to copy: it must run as written
            assert _parse(top + argv) is None, f"README: `{span}`: {_parse(top + argv)}"
            continue
        if not argv or argv[0].startswith("-"):
            continue
        assert argv[0] in commands, f"README names an unknown command: `{span}`"
        known = {o for a in commands[argv[0]]._actions for o in a.option_strings}
        sub = commands[argv[0]]
        for action in sub._actions:  # a two-word command (leaderboard build)
            if isinstance(action, argparse._SubParsersAction) and len(argv) > 1 and argv[1] in action.choices:
                known |= {o for a in action.choices[argv[1]]._actions for o in a.option_strings}
        for option in options:
            assert option.split("=")[0] in known, f"README: `{span}`: {argv[0]} has no option {option}"


def test_the_plug_in_example_names_its_output_folder():
    span = next(s for s in _inline_commands() if "KosmosReplay-BridgeReal-v1" in s)
    assert "--out " in span


# -- quick start, floors, worlds table ---------------------------------------------------------------
def test_quick_start_design_and_python_floor():
    from kosmos_env.spec import load_spec
    from kosmos_env.tasks import load_suite

    quick = _section("Quick start")
    floor = PYPROJECT["requires-python"].removeprefix(">=")
    assert f"Python ≥ {floor}," in quick
    cmd = next(c for c in _block_commands() if "runs/tabletop-demo" in c)
    argv = _argv(cmd)
    n_policies = argv.count("--policy")
    seeds = int(argv[argv.index("--seeds") + 1])
    env_id = argv[argv.index("--env") + 1]
    n_tasks = len(load_suite(load_spec(env_id).tasks["suite"]).names)
    assert f"({n_policies} policies × {n_tasks} tasks × {seeds} seeds" in quick


def test_dependency_floors_quoted_in_the_readme_are_pyprojects():
    floors = {
        r.split(">=")[0]: r.split(">=")[1]
        for reqs in [PYPROJECT["dependencies"], *PYPROJECT["optional-dependencies"].values()]
        for r in reqs
        if ">=" in r
    }
    quoted = re.findall(r"\b(transformers|diffusers|torch)\s*(?:>=|≥)\s*([0-9][0-9.]*[0-9])", README)
    assert {pkg for pkg, _ in quoted} >= {"transformers", "diffusers"}
    for pkg, version in quoted:
        assert version == floors[pkg], f"README quotes {pkg} >= {version}; pyproject.toml says >= {floors[pkg]}"


def test_worlds_table_names_each_registered_default_judge():
    from kosmos_env.spec import frozen_spec_hashes, load_spec

    rows = re.findall(r"^\| `(Kosmos-[\w-]+)` \|[^|]*\| `(\w+)`", _section("Worlds and tasks"), re.M)
    assert sorted(env_id for env_id, _ in rows) == sorted(frozen_spec_hashes()), "one row per registered env id"
    for env_id, judge in rows:
        assert judge == load_spec(env_id).judge["type"], f"README: {env_id}'s default judge is {judge}"


# -- numbers from bench/results ---------------------------------------------------------------------------
def _f(x: float, digits: int = 2, sign: bool = False) -> str:
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return text.replace("-", "−") if sign else text


def _iv(iv, digits: int = 2, sign: bool = False) -> str:
    return f"[{_f(iv[0], digits, sign)}, {_f(iv[1], digits, sign)}]"


def _signed_cell(value: float, interval) -> str:
    """A signed estimate with its interval as the README prints it: "+0.07 [−0.19, +0.21]"."""
    return f"{_f(value, sign=True)} {_iv(interval, sign=True)}"


@pytest.fixture(scope="module")
def study():
    return json.loads((RESULTS / "validity_study" / "study.json").read_text())


def _history() -> str:
    """The 140000 study's page: its tables left the README when the v1-vs-v2 study superseded it."""
    return (RESULTS / "validity_study" / "README.md").read_text(encoding="utf-8")


def test_validity_study_tables(study):
    text = _history()
    res = study["results"]
    agree = res["agreement"]
    rows = {
        "learned world, vision judge (frame classifier on its frames)": "learned/vision",
        "learned world, robot-log judge (on its predicted gripper)": "learned/robot_log",
        "simulator frames, vision judge (the judge's own error)": "reference/vision",
        "learned action-only judge, on the world's own rollouts": "baseline/same_rollout/action_learned",
        "learned action-only judge, no world": "baseline/action_learned",
        "action-only rule, no world": "baseline/action_only",
    }
    for label, key in rows.items():
        k = agree["evaluators"][key]["kendall"]
        acc = res["evaluators"][key]["episode_accuracy"]
        row = f"| {label} | {_f(k['value'])} {_iv(k['interval'])} | {acc:.3f} |"
        assert row in text, f"README row differs from study.json: want {row}"
    blank = {
        res["evaluators"][k]["episode_accuracy"]
        for k in res["evaluators"]
        if k.startswith(("baseline/copy_first_frame", "baseline/null_world"))
    }
    assert len(blank) == 1 and f"| undefined (never success) | {blank.pop():.3f} |" in text
    for key, judge in (("learned/vision", "vision judge"), ("learned/robot_log", "robot-log judge")):
        for metric, name in (("kendall", "Kendall"), ("accuracy", "episode accuracy")):
            cells = []
            for group in ("all", "honest", "deceptive", "closed_loop"):
                v = agree["vs_best_baseline"][key][group][metric]
                cells.append(f"{_f(v['estimate'], sign=True)} {_iv(v['interval'], sign=True)}")
            row = f"| {judge}, {name} | " + " | ".join(cells) + " |"
            assert row in text, f"README row differs from study.json: want {row}"
    n_units = res["n_units"]
    assert f"{len(res['policies'])} policies" in text and f"{n_units} units per policy" in text


def test_validity_study_bullets(study):
    text = " ".join(_history().split())
    res = study["results"]
    ev = res["evaluators"]
    passed = [b for b in study["bars"] if b["verdict"] == "PASS"]
    words = {1: "One", 2: "Two", 3: "Three", 4: "Four"}
    assert (
        f"{words[len(passed)]} of {['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten'][len(study['bars'])]} registered bars pass"
        in text
    )
    q05 = {k: ev[k]["split_half"]["corrected_q05"] for k in ("learned/vision", "learned/robot_log", "reference/state")}
    assert (
        f"Spearman–Brown 5 % quantile: {q05['learned/vision']:.2f} (vision), {q05['learned/robot_log']:.2f} "
        f"(robot log), {q05['reference/state']:.2f} for the simulator's own truth"
    ) in text
    assert f"paired MDD is {ev['learned/vision']['detectable']['paired_mdd_median']:.2f}" in text
    fe = res["frame_error"]
    assert f"frame error at H = 20 is {fe['ratio']['20']:.2f} {_iv(fe['ratio_interval']['20'])}" in text
    settings = {s["setting"]: s for s in res["sweep"]["settings"]}
    four, default = settings["sweep:actions_per_call=4"], settings["sweep:default"]
    cost = res["cost_seconds_per_rollout"]["learned"]["episode"]
    assert f"cuts a rollout from {cost:.2f} s to {four['cost_seconds']:.2f} s" in text
    assert f"Kendall {four['kendall']['value']:.2f} {_iv(four['kendall']['interval'])}" in text
    assert (
        f"{default['kendall']['value']:.2f} {_iv(default['kendall']['interval'])} on the sweep's "
        f"{res['sweep']['units']} units"
    ) in text
    hz = res["horizon"]["agreement"]
    vision = ", ".join(f"{hz[h]['evaluators']['learned/vision']['value']:.2f}" for h in ("20", "30", "40"))
    robot = ", ".join(f"{hz[h]['evaluators']['learned/robot_log']['value']:.2f}" for h in ("20", "30", "40"))
    assert f"Kendall is {vision}, the robot-log judge's {robot}" in text
    assert res["gate"]["discard_rate"] == 0.0 and "The gate discarded no episode" in text
    shuffled = sum(ev["control:shuffled/vision"]["rates"]) / len(ev["control:shuffled/vision"]["rates"])
    learned = sum(ev["learned/vision"]["rates"]) / len(ev["learned/vision"]["rates"])
    assert f"drops success from {learned:.0%} to {shuffled:.0%}".replace("%", " %") in text


def test_learned_action_only_judge_accuracy():
    fit = json.loads((RESULTS / "action_learned_judge" / "fit.json").read_text())
    text = " ".join(_section("Measuring the evaluator").split())
    assert (
        f"{fit['n_training_episodes']} simulator episodes" in text
        and f"tuning accuracy {fit['tuning_accuracy']:.3f} {_iv(fit['tuning_accuracy_wilson95'], 3)} against the "
        f"rule's {fit['rule_action_only_tuning_accuracy']:.3f}"
        in text
    )


def test_judge_stage_timings():
    bench = (RESULTS / "judge_stage.txt").read_text()
    text = " ".join(README.split())
    runs = re.findall(
        r"\(b\) wall, two stages vs in-line judging \(1 rollout worker each\): ([\d.]+) / ([\d.]+) s = "
        r"([\d.]+)x.*?two stages vs in-line with 2 workers: ([\d.]+)x",
        bench,
    )
    assert len(runs) >= 3
    two, inline, ratio, two_workers = runs[0]  # the latest run heads the file
    assert f"64 episodes in {ratio}× the wall time of one in-line worker on a quiet machine" in text
    assert f"{two} / {inline} s; {runs[1][2]}× in the run before it" in text
    earlier = [float(r[2]) for r in runs[2:]]
    assert f"{min(earlier):.2f}–{max(earlier):.2f}× in the earlier runs" in text
    workers = [float(r[3]) for r in runs[1:]]
    assert f"two in-line workers take {two_workers}× in the latest run ({min(workers):.2f}–{max(workers):.2f}×" in text
    pooled = re.search(
        r"pooled over all \d+ \(round, batch\) pairs, wall: .*? = ([\d.]+)x \[([\d.]+), ([\d.]+)\]", bench
    )
    assert f"batches of 8 judge {pooled.group(1)}× [{pooled.group(2)}, {pooled.group(3)}]" in text


# -- the Bridge section's Python block --------------------------------------------------------------------
@pytest.mark.slow
def test_the_bridge_python_block_runs_as_written(tmp_path, monkeypatch):
    pytest.importorskip("diffusers", reason="needs the models extra (pip install -e '.[models]')")
    pytest.importorskip("transformers", reason="needs the models extra (pip install -e '.[models]')")
    block = next(b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "apply_tiny(" in b)
    monkeypatch.setenv("KOSMOS_TINY_DIR", str(tmp_path / "tiny"))
    monkeypatch.setenv("KOSMOS_COSMOS3_NANO_PATH", "")  # restored afterwards: apply_tiny sets it
    monkeypatch.delenv("KOSMOS_VLM_JUDGE_PATH", raising=False)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)  # the README's own example, as written
    env, obs = scope["env"], scope["obs"]
    try:
        assert obs["image"].shape == (*env.unwrapped.kosmos_spec.image_size, 3)
        prov = env.unwrapped.provenance
        assert str(tmp_path / "tiny") in json.dumps(prov)  # the tiny weights are named, not passed off as real
    finally:
        env.close()


def _r2(text: str) -> str:
    """A number the bench printed with 3 decimals, as the README rounds it (half up, as written)."""
    from decimal import ROUND_HALF_UP, Decimal

    return str(Decimal(text).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def test_gate_numbers_are_bridge_gate_txts():
    from scipy.stats import beta

    bench = (RESULTS / "bridge_gate.txt").read_text()
    sections = dict(re.findall(r"^\[(.*?)\] \d+ episodes\n((?:  .*\n)+)", bench, re.M))
    main = next(v for k, v in sections.items() if k.startswith("tabletop, Bridge camera"))
    free = next(v for k, v in sections.items() if k.startswith("baseline: same episodes"))
    learned = next(v for k, v in sections.items() if k.startswith("learned tabletop"))
    text = " ".join(_section("Judges and the gate").split())

    def auroc(block: str, kind: str) -> tuple[str, str, str, str]:
        m = re.search(
            rf"AUROC true vs {kind}\s*: checkable steps ([\d.]+) \[([\d.]+), ([\d.]+)\]; episodes ([\d.]+)", block
        )
        return m.groups()

    p, s = auroc(main, "permuted"), auroc(main, "swapped")
    assert (
        f"AUROC true vs shuffled commands {_r2(p[0])} [{_r2(p[1])}, {_r2(p[2])}] (permuted in time) and "
        f"{_r2(s[0])} [{_r2(s[1])}, {_r2(s[2])}] (swapped between episodes) on checkable steps, "
        f"{_r2(p[3])} / {_r2(s[3])} per episode"
    ) in text
    steps = re.search(r"frozen rejected: 100\.0% of (\d+) steps whose command demands motion", main).group(1)
    assert re.search(r"pan\s+rejected: 100\.0% of " + steps, main)
    assert f"frozen and panned frames rejected on 100% of the {steps} steps" in text
    n = int(re.search(r"\] (\d+) episodes", bench).group(1))
    assert re.search(r"true\s+steps pass\s+100\.0%.*episodes pass\s+100\.0%", main)
    lower = beta.ppf(0.025, n, 1)  # Clopper-Pearson lower bound for n of n
    assert f"true commands pass 100% of steps and of the {n} episodes" in text
    assert f"episode pass rate {lower:.1%}-100%, Clopper-Pearson".replace("%-", "-") in text
    fp, fs = auroc(free, "permuted"), auroc(free, "swapped")
    assert f"The calibration-free mode it replaces: AUROC {_r2(fp[0])} / {_r2(fs[0])}" in text
    lp, ls = auroc(learned, "permuted"), auroc(learned, "swapped")
    passed = float(re.search(r"true\s+steps pass.*episodes pass\s+([\d.]+)%", learned).group(1))
    assert f"AUROC {_r2(lp[0])} / {_r2(ls[0])}, {round(passed * n / 100)} of {n} true episodes pass" in text


def test_learned_world_ablation_paragraph():
    abl = json.loads((RESULTS / "learned_world_ablation" / "results.json").read_text())
    text = " ".join(_section("Measuring the evaluator").split())
    vision, robot = abl["judges"]["vision"], abl["judges"]["robot_log"]

    def diff(entry, key="accuracy", sign=1.0, digits=3):
        v, iv = entry[f"{key}_minus_full"] * sign, sorted(x * sign for x in entry[f"{key}_minus_full_interval"])
        return f"{_f(v, digits, sign=True)} {_iv(iv, digits, sign=True)}"

    assert f"{len(abl['policies'])} policies, {abl['n_units']} evaluation units" in text
    assert f"switching the rules off costs the frame judge {diff(vision['rules_off'])} episode accuracy" in text
    assert (
        f"changes the frame judge's accuracy by {diff(vision['rules_dynamics'])} and its Kendall by "
        f"{diff(vision['rules_dynamics'], 'kendall', digits=2)}"
    ) in text
    # "the learned dynamics add robot-log accuracy": full minus rules-only, so the sign flips
    added = robot["rules_dynamics"]
    v, iv = -added["accuracy_minus_full"], sorted(-x for x in added["accuracy_minus_full_interval"])
    assert f"they add robot-log accuracy ({_f(v, 3, sign=True)} {_iv(iv, 3)})" in text
    assert f"Renderer only: {diff(vision['renderer_only'])} and no ranking at all" in text
    assert vision["renderer_only"]["kendall"] is None
    ratios = [fe["ratio"] for fe in abl["frame_error"].values()]
    assert (
        f"Frame error at H = {abl['frame_error_h']} is {min(ratios):.2f}–{max(ratios):.2f} of copy-first-frame" in text
    )
    rules = json.loads((RESULTS / "learned_world_rules" / "results.json").read_text())
    tie = rules["chosen_minus_current"]["vision"]
    assert f"{rules['n_units']} units" in text and rules["current_would_be_chosen"] is False
    assert f"ties with no slip predictor at all ({_f(tie['estimate'], 3, sign=True)} {_iv(tie['interval'], 3)})" in text


def test_fidelity_ladder_paragraph():
    """The README's ladder numbers are the registered ladder v2's (bench/results/fidelity_ladder_v2)."""
    ladder = json.loads((RESULTS / "fidelity_ladder_v2" / "ladder.json").read_text())
    text = " ".join(_section("Measuring the evaluator").split())
    words = {9: "nine", 10: "ten", 12: "twelve"}
    assert f"fidelity ladder** of {words[len(ladder['rungs'])]} tabletop worlds" in text
    assert f"{len(ladder['units'])} evaluation units × {len(ladder['policies'])} policies" in text
    up = ladder["prediction_upper"]["vision"]
    live = [r for r in ladder["rungs"] if not r["kendall"]["vision"]["constant"]]
    assert (
        up["shuffled_gap"]["rungs"] == len(live)
        and f"Among the {words[len(live)]} worlds whose frame judge ranks" in text
    )

    def cell(e):
        return _signed_cell(e["value"], e["interval"])

    gap, gate, drift = up["shuffled_gap"], up["gate_discard"], up["drift_ratio"]
    assert f"Spearman with Kendall {cell(gap)}, permutation p = {gap['p_value']:.3f}" in text
    assert gap["p_value"] < 0.05 and gap["interval"][0] > 0  # "predicts" by the registered rule
    assert f"The gate discard does too ({cell(gate)}, p = {gate['p_value']:.2f})" in text
    learned = ("rules_only", "learned_full", "v2_25", "v2_50", "learned_v2")
    assert all(r["diagnostics"]["gate_discard"]["value"] == 0 for r in ladder["rungs"] if r["name"] in learned)
    assert f"Drift does not (p = {drift['p_value']:.2f})" in text and drift["p_value"] >= 0.05
    rob = ladder["prediction_upper"]["robot_log"]
    ps = [rob[k]["p_value"] for k in ("gate_discard", "shuffled_gap", "drift_ratio", "combined")]
    assert f"no diagnostic predicts anything (p ≥ {min(ps):.2f})" in text
    v = ladder["v2_minus_v1"]["shuffled_gap_robot_log"]
    assert f"(v2 − v1 {cell(v)})" in text and v["interval"][1] < 0
    trust = {
        w: json.loads((RESULTS / "fidelity_ladder_v2" / "trust" / f"{w}_robot_log_ladder_policies.json").read_text())
        for w in ("v1", "v2")
    }
    g1, g2 = (trust[w]["shuffled_gap"] for w in ("v1", "v2"))
    assert f"(robot-log gap {cell(g1)} for v1, {cell(g2)} for v2, with the ladder's policies)" in text
    assert g2["interval"][1] < g1["interval"][0]  # apart, as the sentence says


def test_sequential_ab_and_frame_error_numbers():
    text = " ".join(_section("Measuring the evaluator").split())
    seq = (RESULTS / "sequential_ab.txt").read_text()
    betting = re.search(r"^betting\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)", seq, re.M)
    eb = re.search(r"^eb\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)", seq, re.M)
    fixed = re.search(r"fixed-n paired z-test.*?: (\d+) pairs", seq)
    # the pages decide by the confidence sequence (eb); the betting rule is quoted beside it
    assert (
        f"type-I error {float(eb.group(1)):.3f} at α = 0.05 with a look after every pair, median "
        f"{eb.group(2)} pairs for 0.7 vs 0.5"
    ) in text
    assert (
        f'(`SequentialABTest(rule="betting")`, type-I {float(betting.group(1)):.3f}, median {betting.group(2)} pairs)'
    ) in text
    assert f"a fixed-n test that may look once needs {fixed.group(1)}" in text
    err = (RESULTS / "learned_world_error.txt").read_text()
    table = err[err.index("horizon  model_mse") :].split("\n\n")[0]
    ratios = [float(m) for m in re.findall(r"^\s+\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s", table, re.M)]
    assert len(ratios) == 20
    assert f"held-out frame error {min(ratios):.2f}–{max(ratios):.2f} × copy-last-frame at steps 1–20" in text


def test_validity_study_population(study):
    text = " ".join(_history().split())
    res = study["results"]
    kinds = {"scripted": 0, "random": 0, "deceptive": 0, "ckpt": 0}
    for p in res["policies"]:
        kinds[p.split(":")[0]] += 1
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    assert kinds["random"] == 1
    assert (
        f"{len(res['policies'])} policies: the scripted controller at {words[kinds['scripted']]} skills, random, "
        f"{words[kinds['deceptive']]} *deceptive* policies"
    ) in text
    assert f"and {words[kinds['ckpt']]} **closed-loop, image-conditioned checkpoints**" in text
    ckpt = [t for p, t in zip(res["policies"], res["truth"]["rates"], strict=True) if p.startswith("ckpt:")]
    assert f"true success {min(ckpt):.2f}–{max(ckpt):.2f})" in text
    assert f"Their true success lies between {min(ckpt):.2f} and {max(ckpt):.2f}" in text


def _kendall_cell(e) -> str:
    return f"{_f(e['value'])} {_iv(e['interval'])}"


def test_the_current_registered_study_table():
    """The README's v1-vs-v2 table is the registered studies' study.json, cell by cell."""
    text = _section("Measuring the evaluator")
    res = {
        v: json.loads((RESULTS / "world_v2" / f"study_{v}" / "study.json").read_text())["results"] for v in ("v1", "v2")
    }
    cells = {
        "frame judge on the world's frames, all 22 policies": [
            _kendall_cell(res[v]["agreement"]["evaluators"]["learned/vision"]["kendall"]) for v in ("v1", "v2")
        ],
        "world − best cheap baseline, closed-loop, frame judge": [
            _signed_cell(b["estimate"], b["interval"])
            for b in (
                res[v]["agreement"]["vs_best_baseline"]["learned/vision"]["closed_loop"]["kendall"]
                for v in ("v1", "v2")
            )
        ],
    }
    for label, (a, b) in cells.items():
        assert f"| {label} | {a} | {b} |" in text, f"want | {label} | {a} | {b} |"
    for judge, label in (("vision", "frame judge, 14 closed-loop"), ("robot_log", "robot-log judge, 14 closed-loop")):
        w = [res[v]["world_vs_simulator"][f"learned/{judge}"]["closed_loop"] for v in ("v1", "v2")]
        sim = _kendall_cell(w[0]["simulator"])
        assert sim == _kendall_cell(w[1]["simulator"])  # one simulator run, shared by both studies
        row = f"| {label} ("
        line = next(x for x in text.splitlines() if x.startswith(row))
        assert sim in line and line.endswith(f"| {_kendall_cell(w[0]['world'])} | {_kendall_cell(w[1]['world'])} |"), (
            line
        )
    dec = [
        res[v]["agreement"]["vs_best_baseline"]["learned/vision"]["deceptive"]["kendall"]["evaluator"]
        for v in ("v1", "v2")
    ]
    assert f"| frame judge, 3 deceptive | {dec[0]:.2f} | {dec[1]:.2f} |" in text
    truth = res["v2"]["truth"]["rates"]
    ckpt = [t for p, t in zip(res["v2"]["policies"], truth, strict=True) if p.startswith("ckpt:")]
    assert len(ckpt) == 14 and f"true success {min(ckpt):.2f}–{max(ckpt):.2f} on the study's units" in " ".join(
        text.split()
    )


def _study_rows(folder: str) -> tuple[dict, list]:
    """The replication table rows of a registered v1-vs-v2 study in bench/results/world_v2/<folder>."""
    res = {
        v: json.loads((RESULTS / "world_v2" / folder / v / "study.json").read_text())["results"] for v in ("v1", "v2")
    }

    closed = [res[v]["world_vs_simulator"]["learned/vision"]["closed_loop"] for v in ("v1", "v2")]
    n_closed = sum(p.startswith("ckpt:") for p in res["v1"]["policies"])
    rows = {
        f"frame judge on the world's frames, all {len(res['v1']['policies'])} policies": [
            _kendall_cell(res[v]["agreement"]["evaluators"]["learned/vision"]["kendall"]) for v in ("v1", "v2")
        ],
        f"frame judge, {n_closed} closed-loop (same judge on simulator frames: {_kendall_cell(closed[0]['simulator'])})": [
            _kendall_cell(c["world"]) for c in closed
        ],
        "world − best cheap baseline, closed-loop, frame judge": [
            _signed_cell(b["estimate"], b["interval"])
            for b in (
                res[v]["agreement"]["vs_best_baseline"]["learned/vision"]["closed_loop"]["kendall"]
                for v in ("v1", "v2")
            )
        ],
    }
    return rows, closed


@pytest.mark.parametrize("folder", ["study2", "study3"])
def test_the_replication_tables(folder):
    """The README's later registered studies, cell by cell against their study.json."""
    text = _section("Measuring the evaluator")
    rows, closed = _study_rows(folder)
    for label, (a, b) in rows.items():
        assert f"| {label} | {a} | {b} |" in text, f"want | {label} | {a} | {b} |"
    flat = " ".join(text.split())
    v1, v2 = (c["world"]["value"] for c in closed)
    if folder == "study2":
        assert f"does not replicate** ({v2:.2f} against v1's {v1:.2f} here)" in flat and v2 < v1
    else:  # the third study's goal sentence
        res = json.loads((RESULTS / "world_v2" / folder / "v2" / "study.json").read_text())["results"]
        b = res["agreement"]["vs_best_baseline"]["learned/vision"]["closed_loop"]["kendall"]
        cell = _signed_cell(b["estimate"], b["interval"])
        assert f"subgroup is {cell}: above 0 in point estimate, not with its interval" in flat
        assert b["estimate"] > 0 and b["interval"][0] < 0


def test_the_opening_python_block_runs_as_written():
    block = re.findall(r"```python\n(.*?)```", README, re.S)[0]
    assert 'gymnasium.make("Kosmos-Tabletop-v1"' in block
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)  # the README's own example, as written
    env = scope["env"]
    try:
        assert scope["obs"]["image"].dtype.name == "uint8" and isinstance(scope["obs"]["instruction"], str)
        assert scope["truncated"] in (True, False) and scope["reward"] == 0.0  # terminal reward: 0 before the end
    finally:
        env.close()
