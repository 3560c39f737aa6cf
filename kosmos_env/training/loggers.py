"""Live logs of a training run besides its own files: Weights & Biases.

:func:`kosmos_env.training.ppo.finetune_ppo` takes ``loggers``: objects with

- ``start(config)``: the run's settings (hyper-parameters, env, reward, held-out design); a
  logger started already (by the command, before its first stage) adds them to its config;
- ``log(step, values)``: scalars at an env-step count (per PPO update: SB3's ``train/*`` losses,
  ``rollout/*`` reward and success; per held-out evaluation: ``heldout/*``);
- ``video(step, key, frames, caption)``: a rollout as (T, H, W, 3) uint8 frames;
- ``finish()``: close the run (also after an error).

:class:`WandbTrainingLog` is the W&B one (``kosmos-env train-policy --wandb``). Like
:class:`kosmos_env.publish.wandb_logger.WandbLogger` (evaluation campaigns) it honours
``WANDB_MODE=offline`` and ``WANDB_DIR`` and reads them when the run starts; its runs have job
type ``train``. ``wandb`` is imported only when a run starts (optional extra ``wandb``).
TensorBoard needs no object here: SB3 writes it (``tensorboard_log``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

WANDB_MODES = ("online", "offline", "disabled")


class WandbTrainingLog:
    """One W&B run for one training run (see the module docstring)."""

    wants_video = True

    def __init__(
        self,
        project: str = "kosmos-env",
        *,
        name: str | None = None,
        dir: str | os.PathLike | None = None,
        mode: str | None = None,
        fps: float = 5.0,
    ):
        if mode is not None and mode not in WANDB_MODES:
            raise ValueError(f"W&B mode must be one of {list(WANDB_MODES)}, got {mode!r}")
        self.project, self.name, self.mode, self.fps = project, name, mode, float(fps)
        self.dir = None if dir is None else str(dir)
        self.run = None
        self.run_dir: str | None = None  # the local folder of the run, once finished
        self._wandb = None
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._videos = 0

    def start(self, config: Mapping[str, Any]) -> Any:
        """Open the run with ``config``; on a run already open, add ``config`` to its config (a
        command opens the run before its first stage, so a W&B problem shows before any work)."""
        if self.run is not None:
            self.run.config.update(dict(config), allow_val_change=True)
            return self.run
        try:
            import wandb
        except ImportError as exc:
            raise RuntimeError("W&B logging needs the wandb package: pip install 'kosmos-env[wandb]'") from exc
        self._wandb = wandb
        # read WANDB_DIR / WANDB_MODE now and pass them: wandb caches its settings from the first init
        run_dir = self.dir or os.environ.get("WANDB_DIR") or None
        env_mode = os.environ.get("WANDB_MODE")
        mode = self.mode or (env_mode if env_mode in WANDB_MODES else None)
        if run_dir is not None:
            os.makedirs(run_dir, exist_ok=True)
        try:
            self.run = wandb.init(
                project=self.project,
                name=self.name,
                dir=run_dir,
                mode=mode,
                job_type="train",
                config=dict(config),
                reinit="create_new",
            )
        except Exception as exc:  # no credentials online, an unreachable server: one line, not wandb's traceback
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RuntimeError(f"the W&B run could not start ({first}); WANDB_MODE=offline logs locally") from None
        self._tmp = tempfile.TemporaryDirectory(prefix="kosmos-wandb-train-")
        return self.run

    def log(self, step: int, values: Mapping[str, Any]) -> None:
        if self.run is None:
            raise RuntimeError("call start(config) before log()")
        if values:
            self.run.log(dict(values), step=int(step))

    def video(self, step: int, key: str, frames: np.ndarray, caption: str = "") -> None:
        """Log frames as an MP4 (written with :func:`kosmos_env.utils.video.write_mp4`; no moviepy)."""
        if self.run is None:
            raise RuntimeError("call start(config) before video()")
        from kosmos_env.utils.video import write_mp4

        path = Path(self._tmp.name) / f"rollout-{self._videos}.mp4"
        write_mp4(path, np.asarray(frames, np.uint8), self.fps)
        self._videos += 1
        self.run.log({key: self._wandb.Video(str(path), caption=caption, format="mp4")}, step=int(step))

    def finish(self) -> str | None:
        """Close the run; returns its local directory (None if it never started)."""
        if self.run is None:
            return None
        self.run_dir = os.path.dirname(self.run.dir) if self.run.dir else None
        self.run.finish()
        self.run = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return self.run_dir
