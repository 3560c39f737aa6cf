"""What a ``kosmos-env train-policy`` run writes in its ``--out`` folder, by name.

``--overwrite`` removes exactly these (and nothing else the folder holds); ``--resume`` keeps them
and continues. Demonstrations are never among them: ``--demos`` names an input file the run reads
when it exists, wherever it lies.
"""

from __future__ import annotations

import shutil
from pathlib import Path

#: files of a run, as glob patterns in the run folder (``.tmp``: a write a kill interrupted)
RUN_FILES = (
    "bc.safetensors",
    "bc.safetensors.tmp",
    "ppo_update_*.safetensors",
    "ppo_update_*.safetensors.tmp",
    "curve.csv",
    "curve.json",
    "curve.png",
    "curve.csv.tmp",
    "curve.json.tmp",
    "curve.png.tmp",
    "sb3_last.zip",
    "sb3_last.zip.tmp",
)
#: log folders a run makes in its folder by default (``--tensorboard`` without a folder; W&B's
#: local files when ``WANDB_DIR`` is unset)
RUN_LOG_DIRS = ("tensorboard", "wandb")

SB3_ARCHIVE = "sb3_last.zip"
CHECKPOINT_GLOB = "ppo_update_*.safetensors"


def checkpoint_update(path: str | Path) -> int | None:
    """The update number of ``ppo_update_NNNN.safetensors`` (None for any other name)."""
    stem = Path(path).name.removesuffix(".safetensors")
    prefix, _, number = stem.rpartition("_")
    return int(number) if prefix == "ppo_update" and number.isdigit() else None


def run_outputs(out: str | Path) -> list[Path]:
    """The files and log folders of an earlier run in ``out`` (sorted; empty if none)."""
    out = Path(out)
    if not out.is_dir():
        return []
    found: set[Path] = set()
    for pattern in RUN_FILES:
        found.update(p for p in out.glob(pattern) if p.is_file() and not p.is_symlink())
    found.update(out / d for d in RUN_LOG_DIRS if (out / d).is_dir() and not (out / d).is_symlink())
    return sorted(found)


def remove_run_outputs(out: str | Path) -> list[Path]:
    """Delete :func:`run_outputs` (files, and the log folders with what they hold); returns them."""
    gone = run_outputs(out)
    for path in gone:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return gone
