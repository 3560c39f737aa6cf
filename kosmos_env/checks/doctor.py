"""``kosmos-env doctor``: will a real run of an env work on this machine, and if not, what to fix.

For an env with a Cosmos 3 world (``Kosmos-Bridge-v1``) the doctor checks, in order:

1. the installed diffusers / transformers / torch against what the pipeline and judge need;
2. CUDA: a GPU visible, its free memory against the world's estimated need (the estimate and
   its basis are printed: :func:`kosmos_env.worlds.cosmos3.memory_need`);
3. the action statistics in the spec (present, ten finite numbers each, q01 <= q99; source);
4. every initial frame of the task suite (file present, sha256 as bound, decodable);
5. the world's weights: folder, architecture, revision, every file's sha256;
6. one timed world call: load (cold), first call, second call (warm);
7. the judge: load (cold), one call, a second call (warm);
8. the judge readiness check (:mod:`kosmos_env.checks.judge_readiness`).

Each check ends ``ok``, ``FAIL`` (with the fix) or ``skip`` (with why: e.g. no weights to time).
A missing weight is listed once, under "weights on disk"; the checks that would load it are
skipped and point there. The doctor is offline by default: it checks what is on this disk, with
``HF_HUB_OFFLINE=1`` while it runs, so a missing model is reported at once instead of after the
Hugging Face Hub times out; ``online=True`` (``kosmos-env doctor --online``) lets the loaders reach
the Hub (a judge named by model id then checks its revision there).
The doctor fails (exit status 1) when any check fails. With ``tiny=True`` the world and judge
are the tiny random models of :mod:`kosmos_env.testing` and a CPU is enough: every step runs,
and the readiness check's expected "not ready" is reported, not counted as a failure.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np


@dataclass
class Check:
    name: str
    status: str  # ok / FAIL / skip / info
    detail: str = ""
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def format(self) -> str:
        out = f"[{self.status:<4}] {self.name}: {self.detail}"
        if self.fix:
            out += f"\n       fix: {self.fix}"
        return out


@dataclass
class DoctorReport:
    env_id: str
    tiny: bool
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(c.status == "FAIL" for c in self.checks)

    def format(self) -> str:
        head = f"kosmos-env doctor: {self.env_id}" + (" with tiny random models (--tiny)" if self.tiny else "")
        tail = (
            "RESULT: a run will work" + (" (tiny random models: the outputs mean nothing)" if self.tiny else "")
            if self.ok
            else f"RESULT: a real run would fail ({sum(c.status == 'FAIL' for c in self.checks)} "
            f"check(s) failed; fixes above)"
        )
        return "\n".join([head, *(c.format() for c in self.checks), tail])

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "tiny": self.tiny,
            "ok": self.ok,
            "checks": [
                {"name": c.name, "status": c.status, "detail": c.detail, "fix": c.fix, "data": c.data}
                for c in self.checks
            ],
        }


def _version_ok(installed: str, needed: str) -> bool:
    from kosmos_env.errors import version_at_least

    return version_at_least(installed, needed)


def check_versions() -> Check:
    """The installed diffusers / transformers / torch against the floors pyproject.toml declares (the
    one source the Cosmos 3 world and the VLM judge check against too)."""
    from importlib import metadata

    from kosmos_env.errors import dependency_floor, extra_for_module, install_hint
    from kosmos_env.worlds.cosmos3 import required_versions

    floors = {**required_versions(), "torch": dependency_floor("torch") or "2.4"}
    found, bad = {}, []
    for pkg, need in floors.items():
        try:
            found[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            found[pkg] = None
        if found[pkg] is None or not _version_ok(found[pkg], need):
            bad.append(f"{pkg}>={need}")
    unusable = None
    if not bad:
        try:
            from diffusers import Cosmos3OmniPipeline, CosmosActionCondition  # noqa: F401
        except ImportError as exc:
            unusable = (
                f"diffusers with Cosmos3OmniPipeline ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
            )
    detail = ", ".join(f"{k} {v or 'missing'}" for k, v in found.items())
    need_text = ", ".join(f"{k}>={v}" for k, v in floors.items() if k != "torch")
    if bad or unusable:
        extra = (extra_for_module("diffusers") or ("diffusers", "models"))[1] or "models"
        also = f" (or: pip install -U {' '.join(repr(b) for b in bad)})" if bad else ""
        return Check(
            "packages",
            "FAIL",
            detail + f"; need {', '.join(bad + ([unusable] if unusable else []))}",
            fix=f"{install_hint(extra, upgrade=True)}{also}",
            data=found,
        )
    return Check("packages", "ok", detail + f" (need {need_text}; diffusers with Cosmos3OmniPipeline)", data=found)


def check_weights_present(spec: Any, weights_path: str | None, judge_spec: dict[str, Any]) -> Check:
    """Every weight the env and its judge need, listed at once (the check ``make`` and ``eval`` run)."""
    from kosmos_env.required_weights import missing_weights

    problems = missing_weights(spec, {"weights_path": weights_path} if weights_path else None, judge_spec)
    if problems:
        return Check(
            "weights on disk",
            "FAIL",
            f"{len(problems)} missing: " + "; ".join(problems),
            fix="download each as listed (its hf download command) and point the env at it as shown",
        )
    return Check("weights on disk", "ok", "every weight the world and the judge need is on disk")


def check_device(
    world_cfg: dict[str, Any],
    weights_path: str | None,
    tiny: bool,
    free_bytes: Callable[[str], tuple[int, int]] | None = None,
) -> list[Check]:
    from kosmos_env.worlds import cosmos3

    device, dtype = cosmos3.resolve_device_dtype(world_cfg)
    need = cosmos3.memory_need(weights_path, dtype) if weights_path else None
    need_text = (
        f"need about {need['need_bytes'] / 2**30:.2f} GiB ({need['basis']})"
        if need
        else "need unknown until the weights are on disk"
    )
    if not device.startswith("cuda"):
        if tiny:
            return [
                Check("cuda", "info", f"no CUDA GPU: running on {device} with {dtype} (fine for --tiny); {need_text}")
            ]
        return [
            Check(
                "cuda",
                "FAIL",
                f"no CUDA GPU visible (torch.cuda.is_available() is False); {need_text}",
                fix="run on a machine with an NVIDIA GPU and a CUDA build of torch "
                "(pip install torch --index-url https://download.pytorch.org/whl/cu128); "
                "`kosmos-env doctor --tiny` checks everything else on CPU",
            )
        ]
    import torch

    name = torch.cuda.get_device_name(torch.device(device))
    free, total = (free_bytes or cosmos3.cuda_free_bytes)(device)
    data = {
        "device": device,
        "name": name,
        "free_bytes": free,
        "total_bytes": total,
        "need_bytes": need["need_bytes"] if need else None,
    }
    if need is None:
        return [
            Check(
                "cuda",
                "info",
                f"{name}: {free / 2**30:.2f} GiB free of {total / 2**30:.2f} GiB; {need_text}",
                data=data,
            )
        ]
    try:
        cosmos3.check_memory(need, (free, total), device)
    except cosmos3.InsufficientMemoryError as exc:
        return [
            Check(
                "cuda memory",
                "FAIL",
                f"{name}: {exc}".split(". Free the GPU")[0],
                fix="free the GPU (other processes: nvidia-smi), use a larger GPU (CUDA_VISIBLE_DEVICES) or fewer "
                "workers per GPU",
                data=data,
            )
        ]
    return [
        Check(
            "cuda memory",
            "ok",
            f"{name}: {free / 2**30:.2f} GiB free of {total / 2**30:.2f} GiB; {need_text}",
            data=data,
        )
    ]


def check_stats(spec: Any) -> Check:
    from kosmos_env.actions import ActionStatsError, require_action_stats

    norm = dict(spec.world.get("bridge", {}).get("normalization", {}))
    try:
        require_action_stats(norm, spec.id)
    except ActionStatsError as exc:
        return Check(
            "action statistics",
            "FAIL",
            str(exc).split(". ")[0],
            fix="use the registered spec (it carries NVIDIA's values) or pass q01/q99 as a spec override "
            "(kosmos_env.actions.read_action_stats reads a statistics file)",
        )
    return Check(
        "action statistics",
        "ok",
        f"method {norm.get('method')!r}, 10 q01/q99 values; source: {norm.get('source', 'not stated')}",
    )


def check_frames(spec: Any) -> Check:
    from importlib import resources

    import cv2

    from kosmos_env.hashing import sha256_hex
    from kosmos_env.tasks import load_suite

    suite = load_suite(spec.tasks["suite"])
    problems, seen = [], []
    for name, task in suite.tasks.items():
        entry = dict(task.params.get("frame") or {})
        if not entry.get("path") or not entry.get("sha256"):
            problems.append(f"{name}: no frame path/sha256 in the suite")
            continue
        path = resources.files("kosmos_env.tasks") / entry["path"]
        if not path.is_file():
            problems.append(f"{name}: {entry['path']} missing")
            continue
        data = path.read_bytes()
        digest = sha256_hex(data)
        if digest != entry["sha256"]:
            problems.append(
                f"{name}: {entry['path']} has sha256 {digest[:12]}..., the suite binds {entry['sha256'][:12]}..."
            )
            continue
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            problems.append(f"{name}: {entry['path']} is not a readable image")
            continue
        seen.append(f"{name} ({entry.get('kind', '?')}, {img.shape[1]}x{img.shape[0]})")
    if problems:
        return Check(
            "initial frames",
            "FAIL",
            "; ".join(problems),
            fix="reinstall kosmos-env (pip install --force-reinstall kosmos-env): shipped frames are bound by sha256",
        )
    return Check("initial frames", "ok", f"{len(seen)} task(s), sha256 as bound: " + ", ".join(seen))


def check_weights(world_cfg: dict[str, Any], weights_path: str | None) -> tuple[Check, str | None]:
    from pathlib import Path

    from kosmos_env.hashing import folder_digest
    from kosmos_env.worlds import cosmos3
    from kosmos_env.worlds.base import MissingWeightsError

    try:
        path = cosmos3.resolve_weights(world_cfg, weights_path)
        cosmos3.check_architecture(path)
    except (MissingWeightsError, cosmos3.WrongArchitectureError) as exc:
        msg = str(exc)
        detail, _, fix = msg.partition("Download it with")
        return Check(
            "world weights",
            "FAIL",
            detail.strip(),
            fix=("download it with " + " ".join(fix.split())) if fix else cosmos3.weights_help(world_cfg),
        ), None
    t0 = time.perf_counter()
    digest = folder_digest(path)
    resolved = Path(path).resolve()
    # a Hugging Face cache snapshot folder is named by the commit it holds
    snapshot = resolved.name if resolved.parent.name == "snapshots" else None
    rev = f"revision {world_cfg['revision']!r}" + (
        f" (snapshot {snapshot})" if snapshot else " (local folder: revision not recorded)"
    )
    big = sorted(digest["files"].items(), key=lambda kv: -((resolved / kv[0]).stat().st_size))[:4]
    files = ", ".join(f"{k} {v[:12]}" for k, v in big)
    return Check(
        "world weights",
        "ok",
        f"{resolved}, {rev}, {len(digest['files'])} files, {digest['bytes'] / 2**20:.1f} MiB, folder sha256 "
        f"{digest['sha256'][:16]}... (largest: {files}; hashed in {time.perf_counter() - t0:.1f} s)",
        data={"path": str(resolved), "sha256": digest["sha256"], "files": digest["files"]},
    ), path


def time_world(spec: Any, weights_path: str) -> Check:
    from kosmos_env.tasks import load_suite
    from kosmos_env.worlds import make_world

    world = make_world(spec, weights_path=weights_path)
    suite = load_suite(spec.tasks["suite"])
    task = suite.tasks[spec.tasks.get("default") or suite.names[0]]
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    world.reset(task, rng)
    reset_s = time.perf_counter() - t0
    hold = np.zeros((spec.action_chunk, 7), np.float32)
    hold[:, 6] = 1.0
    first = world.step(hold)
    world.step(hold)
    t = world.timings
    shape = tuple(first.frames.shape)
    world.close()
    load = t["load_seconds"] or 0.0
    return Check(
        "world call",
        "ok",
        f"load (cold) {load:.2f} s, reset {reset_s:.2f} s, first call {t['call_seconds'][0]:.2f} s, "
        f"second call (warm) {t['call_seconds'][1]:.2f} s on {world.config['device']}/{world.config['dtype']}; "
        f"frames {shape}",
        data={"load_seconds": load, "call_seconds": list(t["call_seconds"]), "frames_shape": list(shape)},
    )


def time_judge(judge_spec: dict[str, Any], image_size) -> tuple[Check, Any]:
    from kosmos_env.checks.judge_readiness import readiness_rollouts
    from kosmos_env.judges import make_judge

    t0 = time.perf_counter()
    judge = make_judge(dict(judge_spec))
    load = time.perf_counter() - t0
    _, rollout = readiness_rollouts(image_size)[0]
    t0 = time.perf_counter()
    judge.judge(rollout)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    verdict = judge.judge(rollout)
    second = time.perf_counter() - t0
    return Check(
        "judge call",
        "ok",
        f"{judge_spec.get('type')} judge: load (cold) {load:.2f} s, first call {first:.2f} s, "
        f"second call (warm) {second:.2f} s; verdict {verdict.outcome}",
        data={"load_seconds": load, "call_seconds": [first, second]},
    ), judge


@contextmanager
def _hub_access(online: bool) -> Iterator[None]:
    """Offline unless ``online``: ``HF_HUB_OFFLINE=1`` while the checks run (and huggingface_hub's
    own flag, which it reads once at import, when it is already imported); restored afterwards."""
    if online:
        yield
        return
    import os
    import sys

    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    constants = sys.modules.get("huggingface_hub.constants")
    saved_flag = getattr(constants, "HF_HUB_OFFLINE", None)
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if constants is not None:
            constants.HF_HUB_OFFLINE = saved_flag


def run_doctor(
    env_id: str = "Kosmos-Bridge-v1",
    tiny: bool = False,
    weights_path: str | None = None,
    judge_spec: dict[str, Any] | None = None,
    spec: Any = None,
    free_bytes: Callable[[str], tuple[int, int]] | None = None,
    online: bool = False,
) -> DoctorReport:
    """Run every check for ``env_id`` (or the given ``spec``); see the module docstring."""
    with _hub_access(online):
        return _run_checks(env_id, tiny, weights_path, judge_spec, spec, free_bytes)


def _run_checks(
    env_id: str,
    tiny: bool,
    weights_path: str | None,
    judge_spec: dict[str, Any] | None,
    spec: Any,
    free_bytes: Callable[[str], tuple[int, int]] | None,
) -> DoctorReport:
    from kosmos_env.spec import load_spec

    spec = spec if spec is not None else load_spec(env_id)
    report = DoctorReport(env_id=spec.id, tiny=tiny)
    if spec.world.get("type") != "cosmos3":
        report.checks.append(
            Check(
                "world",
                "info",
                f"{spec.id} runs a {spec.world.get('type')!r} world, which needs no GPU and no downloaded weights",
            )
        )
    judge_spec = dict(judge_spec) if judge_spec is not None else dict(spec.judge)
    if tiny:
        from kosmos_env.testing.tiny_run import tiny_cosmos3_dir, tiny_judge_dir, tiny_judge_spec

        if spec.world.get("type") == "cosmos3" and weights_path is None:
            weights_path = tiny_cosmos3_dir()
        if judge_spec.get("type") == "vlm" and not judge_spec.get("local_path"):
            judge_spec = tiny_judge_spec(judge_spec, tiny_judge_dir())

    from kosmos_env.required_weights import needs_models_extra

    versions = check_versions()
    if versions.status == "FAIL" and not needs_models_extra(spec, judge_spec):
        # a tabletop env on a core install: diffusers/transformers are not what a run of it needs
        versions = Check(
            "packages",
            "info",
            versions.detail + f" (not needed: {spec.id} with this judge needs no 'models' extra)",
            data=versions.data,
        )
    report.checks.append(versions)
    report.checks.append(check_weights_present(spec, weights_path, judge_spec))
    # each missing weight is listed once, in the check above; the checks that would load it point there
    from kosmos_env.required_weights import missing_weights

    world_kwargs = {"weights_path": weights_path} if weights_path else None
    world_missing = bool(missing_weights(spec, world_kwargs, judge={}))
    judge_missing = bool(missing_weights(spec, world_kwargs, judge_spec, check_world=False))
    listed = "not on disk (listed under 'weights on disk' above)"
    world_path = None
    if spec.world.get("type") == "cosmos3":
        from kosmos_env.worlds.cosmos3 import _validated_config

        cfg = _validated_config(spec)
        wcheck, world_path = (
            (Check("world weights", "skip", listed), None) if world_missing else check_weights(cfg, weights_path)
        )
        report.checks.extend(check_device(cfg, world_path, tiny, free_bytes))
        report.checks.append(check_stats(spec))
        report.checks.append(check_frames(spec))
        report.checks.append(wcheck)
        if world_path is not None and report.ok:
            report.checks.append(_guard("world call", lambda: time_world(spec, world_path)))
        else:
            report.checks.append(Check("world call", "skip", "not timed: an earlier check failed"))
    judge = None
    from kosmos_env.required_weights import reads_video

    if not reads_video(judge_spec):
        # the readiness cases are real Bridge video and its negatives: a judge of simulator state or the
        # robot log has nothing to read there, and failing it would fail every tabletop env's doctor
        report.checks.append(
            Check(
                "judge call",
                "skip",
                f"the {judge_spec.get('type')!r} judge does not read video: the readiness videos do not apply to it",
            )
        )
    elif judge_missing:
        report.checks.append(Check("judge call", "skip", f"not run: the judge's weights are {listed}"))
    elif report.checks[0].status != "FAIL":
        try:
            jcheck, judge = time_judge(judge_spec, spec.image_size)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a line with its fix
            jcheck = Check(
                "judge call",
                "FAIL",
                f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                fix=_judge_fix(judge_spec, exc),
            )
        report.checks.append(jcheck)
    if judge is not None:
        from kosmos_env.checks.judge_readiness import check_judge

        ready = check_judge(judge, spec.image_size, judge_spec)
        outcomes = ", ".join(f"{c.name}: {c.outcome}" for c in ready.cases)
        if ready.ready:
            report.checks.append(Check("judge readiness", "ok", f"READY ({outcomes})", data=ready.to_dict()))
        elif tiny:
            report.checks.append(
                Check(
                    "judge readiness",
                    "info",
                    f"NOT READY ({outcomes}), as expected of a random tiny judge: the check ran",
                    data=ready.to_dict(),
                )
            )
        else:
            report.checks.append(
                Check(
                    "judge readiness",
                    "FAIL",
                    f"NOT READY ({outcomes}): the judge does not tell the real episode from its negatives",
                    fix="use a capable judge (e.g. Cosmos-Reason1-7B weights) before trusting a campaign; "
                    "`kosmos-env judge-check` shows the cases",
                    data=ready.to_dict(),
                )
            )
    else:
        report.checks.append(Check("judge readiness", "skip", "no judge to check (the judge call above did not run)"))
    return report


def _guard(name: str, fn: Callable[[], Check]) -> Check:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a failed step is reported, not raised
        return Check(
            name,
            "FAIL",
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            fix="see the error above; `kosmos-env doctor --tiny` tells an install problem from a weights problem",
        )


def _judge_fix(judge_spec: dict[str, Any], exc: Exception) -> str:
    text = str(exc)
    if "hf download" in text:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("hf download")]
        return (
            f"download the judge weights ({lines[0] if lines else 'hf download ' + str(judge_spec.get('model_id'))}) "
            f'and point the judge at them: --judge \'{{"type": "vlm", "local_path": "/path"}}\' or '
            f"$KOSMOS_VLM_JUDGE_PATH"
        )
    from kosmos_env.errors import missing_module_message

    return missing_module_message(exc) or "check the judge spec (--judge) and its dependencies"
