"""``--tiny``: run an env, a campaign, the doctor and the judge check with tiny random models.

:func:`tiny_cosmos3_dir` and :func:`tiny_judge_dir` build (once, then reuse) a tiny random
Cosmos 3 checkpoint and a tiny random Qwen2.5-VL judge in a folder (``$KOSMOS_TINY_DIR``, default
``~/.cache/kosmos-env/tiny-v1``), saved exactly as real downloads are laid out. :func:`apply_tiny`
points a registered spec's world at the tiny checkpoint (through the world's weights-path
environment variable, so worker processes inherit it) and returns the judge spec for the tiny
judge. The env spec itself is unchanged: the same spec hash, while every result's provenance
names the tiny weights (path and sha256) that ran.

Random weights produce random frames and random verdicts: a ``--tiny`` run checks that
everything runs, never what a policy or judge is worth.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

TINY_DIR_ENV = "KOSMOS_TINY_DIR"
TINY_JUDGE_MODEL_ID = "kosmos-env/tiny-random-qwen2.5-vl"
_LAYOUT_VERSION = "tiny-v1"
TINY_MAX_NEW_TOKENS = 32
TINY_MAX_PIXELS = 28 * 28 * 16


def tiny_root() -> Path:
    given = os.environ.get(TINY_DIR_ENV)
    return Path(given) if given else Path.home() / ".cache" / "kosmos-env" / _LAYOUT_VERSION


def _build_once(target: Path, build) -> str:
    """Build into a temporary sibling folder, then rename: concurrent builders never see half a folder."""
    done = target / ".complete"
    if done.is_file():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        build(tmp)
        (tmp / ".complete").write_text("built by kosmos_env.testing.tiny_run\n")
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first (target exists and is not empty)
            if not done.is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def tiny_cosmos3_dir(root: str | os.PathLike | None = None) -> str:
    """Folder of the saved tiny Cosmos 3 checkpoint under ``root`` (built on first use)."""
    from kosmos_env.testing.cosmos_tiny import save_tiny_pipeline

    base = Path(root) if root is not None else tiny_root()
    return _build_once(base / "cosmos3", lambda p: save_tiny_pipeline(p))


def tiny_judge_dir(root: str | os.PathLike | None = None) -> str:
    """Folder of the saved tiny Qwen2.5-VL judge model under ``root`` (built on first use)."""
    from kosmos_env.testing.qwen_tiny import save_tiny_qwen

    base = Path(root) if root is not None else tiny_root()
    return _build_once(base / "qwen2_5_vl", lambda p: save_tiny_qwen(p, "qwen2_5_vl"))


def tiny_judge_spec(base: Mapping[str, Any] | None, judge_dir: str) -> dict[str, Any]:
    """A VLM judge spec that keeps ``base``'s sampling settings (k, quorum, temperature, frame rate) but loads
    the tiny random model in ``judge_dir``, with at most 32 new tokens and 112x112-pixel frames. A VLM
    progress judge (``vlm_progress``) is shrunk the same way."""
    spec = dict(base) if base and base.get("type") in ("vlm", "vlm_progress") else {"type": "vlm"}
    spec.update(model_id=TINY_JUDGE_MODEL_ID, revision=None, local_path=judge_dir)
    # a plumbing check, not a judge: small frames and short answers keep a CPU call to seconds
    spec["max_new_tokens"] = min(int(spec.get("max_new_tokens", TINY_MAX_NEW_TOKENS)), TINY_MAX_NEW_TOKENS)
    spec.setdefault("max_pixels", TINY_MAX_PIXELS)
    return spec


def apply_tiny(env_id: str, root: str | os.PathLike | None = None) -> dict[str, Any]:
    """Point ``env_id``'s model world at the tiny checkpoint (in ``os.environ``); return the tiny judge spec.

    Raises ``ValueError`` for an env with neither a Cosmos 3 world nor a VLM judge (nothing to shrink).
    """
    from kosmos_env.spec import load_spec

    spec = load_spec(env_id)
    world, judge = spec.world, spec.judge
    if world.get("type") != "cosmos3" and judge.get("type") != "vlm":
        raise ValueError(
            f"--tiny replaces a Cosmos 3 world or a VLM judge; {env_id} has neither "
            f"(world {world.get('type')!r}, judge {judge.get('type')!r}) and runs on CPU as it is"
        )
    if world.get("type") == "cosmos3":
        os.environ[str(world["local_path_env"])] = tiny_cosmos3_dir(root)
    return tiny_judge_spec(judge, tiny_judge_dir(root))
