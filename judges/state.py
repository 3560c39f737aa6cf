"""The state judge: the simulator's own task evaluation. On the tabletop it is the ground truth."""

from __future__ import annotations

import time

from kosmos_env.judges.base import Judgment, Rollout


class StateJudge:
    """Reads ``rollout.ground_truth`` (the task's ``evaluate()`` at the last step).

    Worlds without a simulator state (generated video) have no ground truth; judging such a
    rollout raises, rather than inventing a verdict.
    """

    name = "state"

    def judge(self, rollout: Rollout) -> Judgment:
        start = time.perf_counter()
        truth = rollout.ground_truth
        if truth is None:
            raise ValueError(
                "the state judge needs a simulator's evaluate() result (rollout.ground_truth); "
                "this world has none: choose a judge that looks at frames or logs"
            )
        success = bool(truth["success"])
        return Judgment(
            success=success,
            score=1.0 if success else 0.0,
            rationale=str(truth.get("reason", "simulator state evaluation")),
            judge=self.name,
            model_id="simulator",
            seconds=time.perf_counter() - start,
            extras={k: _plain(v) for k, v in truth.items() if k != "success"},
        )


def _plain(value):
    try:
        return value.item()  # numpy scalar
    except AttributeError:
        return value
