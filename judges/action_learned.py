"""The learned action-only judge: a logistic regression on features of the command stream.

The strongest cheap baseline a world must beat. Like :mod:`.action_only` it sees no frame, no
world and no measured gripper, only ``rollout.actions`` (and which task was asked); unlike it, it
does not assume that every closed-gripper command holds the object: its weights were fitted on
simulator episodes, from the training seed range only, so it learns how often each command
pattern really succeeds (``bench/fit_action_learned_judge.py`` fits it with scikit-learn and
writes the coefficients; the regularisation strength was chosen on tuning seeds). Prediction is
a dot product in numpy, so judging needs no scikit-learn.

Features (:func:`action_features`), all from the end-effector path the commands imply
(:func:`.action_only.action_log`: integrated from home with the workspace clipping):
the share of steps commanded closed, the number of closed runs, when the first close comes,
the height of the first close above home (how far the arm went down), the largest rise and the
largest horizontal travel inside one closed run, whether a closed run ends before the episode
does (a release), the release point (x, y) and height, the final height, the whole path length,
the action-only rule's verdict and score, and a one-hot of the task.

The coefficients file is data (JSON: names, means, scales, weights, intercept, tasks and how
they were fitted), read with ``json``; its sha256 is what a study registration binds.
"""

from __future__ import annotations

import json
import time
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kosmos_env.hashing import sha256_hex
from kosmos_env.judges.action_only import DEFAULT_HOME, DEFAULT_WORKSPACE, action_log
from kosmos_env.judges.base import Judgment, Rollout
from kosmos_env.judges.robot_log import LogThresholds, _runs, analyse_log

COEFFICIENTS_FILE = "action_learned_coefficients.json"
BASE_FEATURES = (
    "closed_share",
    "n_closed_runs",
    "first_close_at",
    "close_height",
    "max_rise_closed",
    "max_travel_closed",
    "released",
    "release_x",
    "release_y",
    "release_height",
    "final_height",
    "path_length",
    "rule_success",
    "rule_score",
)


def shipped_coefficients_path() -> Path:
    return Path(str(resources.files("kosmos_env.judges") / COEFFICIENTS_FILE))


def action_features(
    actions: np.ndarray,
    task: str,
    tasks: Sequence[str],
    home: Sequence[float] = DEFAULT_HOME,
    workspace: Sequence[Sequence[float]] = DEFAULT_WORKSPACE,
) -> np.ndarray:
    """The feature vector of one command stream: :data:`BASE_FEATURES` then a one-hot of ``task``
    over ``tasks`` (all zeros for a task not in the list)."""
    log = action_log(actions, home, workspace)
    ee, cmd = log["ee_pos"], log["gripper_cmd"]
    n = len(ee)
    home_z = float(home[2])
    closed = cmd < 0.5
    runs = _runs(closed)
    rise = travel = 0.0
    for a, b in runs:
        seg = ee[a:b]
        rise = max(rise, float(seg[:, 2].max() - seg[0, 2]))
        travel = max(travel, float(np.linalg.norm(seg[:, :2] - seg[0, :2], axis=1).max()))
    released = [b for a, b in runs if b < n]
    rel = ee[released[-1] - 1] if released else ee[-1]
    first = runs[0][0] if runs else n
    rule = analyse_log(log, LogThresholds()) if n >= 2 else None
    base = [
        float(closed.mean()) if n else 0.0,
        float(len(runs)),
        first / max(n, 1),
        float(ee[first, 2] - home_z) if runs else 0.0,
        rise,
        travel,
        1.0 if released else 0.0,
        float(rel[0]),
        float(rel[1]),
        float(rel[2] - home_z),
        float(ee[-1, 2] - home_z) if n else 0.0,
        float(np.linalg.norm(np.diff(ee, axis=0), axis=1).sum()) if n > 1 else 0.0,
        1.0 if (rule is not None and rule.success) else 0.0,
        float(rule.score) if rule is not None else 0.0,
    ]
    onehot = [1.0 if task == t else 0.0 for t in tasks]
    return np.asarray(base + onehot, dtype=np.float64)


def load_coefficients(path: str | Path | None = None) -> dict[str, Any]:
    """Read and check a coefficients file; one ValueError line if it is not one."""
    path = Path(path) if path else shipped_coefficients_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"no learned action-only judge coefficients at {path}; fit them with "
            f"`python bench/fit_action_learned_judge.py`"
        )
    text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    need = ("features", "tasks", "mean", "scale", "coef", "intercept", "threshold")
    if not isinstance(data, dict) or any(k not in data for k in need):
        raise ValueError(f"{path} is not a learned action-only judge file: it needs keys {list(need)}")
    k = len(data["features"])
    if (
        list(data["features"][: len(BASE_FEATURES)]) != list(BASE_FEATURES)
        or k != len(BASE_FEATURES) + len(data["tasks"])
        or any(len(data[f]) != k for f in ("mean", "scale", "coef"))
    ):
        raise ValueError(
            f"{path}: features, mean, scale and coef must list {len(BASE_FEATURES)} base features "
            f"plus one per task, in this module's order"
        )
    arrays = [np.asarray(data[f], dtype=np.float64) for f in ("mean", "scale", "coef")]
    if not all(np.isfinite(a).all() for a in arrays) or (arrays[1] <= 0).any():
        raise ValueError(f"{path}: mean, scale and coef must be finite and scale > 0")
    data["sha256"] = sha256_hex(text)
    return data


class LearnedActionJudge:
    """Judge a rollout from its commands with fitted logistic weights (see the module docstring).

    ``coefficients``: a coefficients file (default: the shipped one). ``home``/``workspace``: the
    tabletop's, as for :class:`.action_only.ActionOnlyJudge`.
    """

    name = "action_learned"

    def __init__(
        self,
        coefficients: str | None = None,
        home: Sequence[float] = DEFAULT_HOME,
        workspace: Sequence[Sequence[float]] = DEFAULT_WORKSPACE,
    ):
        self.coefficients = load_coefficients(coefficients)
        self.home = tuple(float(x) for x in home)
        self.workspace = tuple(tuple(float(x) for x in pair) for pair in workspace)
        c = self.coefficients
        self._mean = np.asarray(c["mean"], dtype=np.float64)
        self._scale = np.asarray(c["scale"], dtype=np.float64)
        self._coef = np.asarray(c["coef"], dtype=np.float64)
        self._intercept = float(c["intercept"])
        self.threshold = float(c["threshold"])
        self.model_id = f"action-learned-{c['sha256'][:12]}"

    @classmethod
    def from_world(cls, world: Mapping[str, Any], coefficients: str | None = None) -> "LearnedActionJudge":
        return cls(coefficients, world.get("home_tcp", DEFAULT_HOME), world.get("workspace", DEFAULT_WORKSPACE))

    def probability(self, actions: np.ndarray, task: str) -> float:
        x = action_features(actions, task, self.coefficients["tasks"], self.home, self.workspace)
        z = float(((x - self._mean) / self._scale) @ self._coef + self._intercept)
        return float(1.0 / (1.0 + np.exp(-np.clip(z, -60.0, 60.0))))

    def judge(self, rollout: Rollout) -> Judgment:
        start = time.perf_counter()
        if len(rollout.actions) < 2:
            raise ValueError("the learned action-only judge needs at least 2 actions")
        p = self.probability(rollout.actions, rollout.task)
        ok = p >= self.threshold
        return Judgment(
            success=ok,
            score=p,
            rationale=f"{'success' if ok else 'failure'} from the commands alone: fitted P(success) "
            f"{p:.2f} (threshold {self.threshold:.2f})",
            judge=self.name,
            model_id=self.model_id,
            seconds=time.perf_counter() - start,
            extras={"probability": p},
        )
