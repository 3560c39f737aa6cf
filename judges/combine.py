"""Judges built from judges: the robot-log veto, score fusion, and the optimistic baseline.

- :class:`VetoJudge` lets the robot's log overrule another judge: a "success" with no hold
  measured in the log (the fingers never stopped short of the command on an object) becomes a
  failure. A visual judge fooled by a plausible video cannot invent a grasp the gripper never felt.
- :class:`FusionJudge` combines several judges' scores by a weighted mean over the judges
  that did not abstain; it abstains itself when the abstaining weight is too large.
- :class:`OptimisticJudge` calls every rollout a success. It is the worst-case judge the
  evaluation uses to measure what the veto buys.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from kosmos_env.judges.base import Judge, Judgment, Rollout
from kosmos_env.judges.robot_log import RobotLogJudge, analyse_log


def _build(spec: Any) -> Judge:
    from kosmos_env.judges import make_judge

    return make_judge(spec)


class OptimisticJudge:
    """Says success with score 1 for every rollout (a deliberately bad baseline)."""

    name = "optimistic"

    def judge(self, rollout: Rollout) -> Judgment:
        return Judgment(
            success=True,
            score=1.0,
            rationale="optimistic baseline: always success",
            judge=self.name,
            model_id="optimistic",
        )


class VetoJudge:
    """Wrap ``judge`` so that the robot log vetoes its successes when no hold was measured.

    ``judge`` is a judge or a judge spec; the remaining keyword arguments are robot-log
    thresholds. Verdicts of failure and abstentions pass through unchanged (the log only
    vetoes, it never promotes). A vetoed judgment keeps the inner judge's votes and model id,
    scores ``min(inner score, log score)`` and says why in its rationale. A rollout without a
    robot log raises ``ValueError``: a veto that silently did nothing would be misleading.
    """

    name = "veto"

    def __init__(self, judge: Any, **thresholds: Any):
        self.inner = _build(judge)
        self.log_judge = RobotLogJudge(**thresholds)

    def judge(self, rollout: Rollout) -> Judgment:
        return self._apply(rollout, self.inner.judge(rollout))

    def judge_batch(self, rollouts: Sequence[Rollout]) -> list[Judgment]:
        from kosmos_env.judges.base import judge_many

        return [self._apply(r, j) for r, j in zip(rollouts, judge_many(self.inner, rollouts), strict=True)]

    def _apply(self, rollout: Rollout, inner: Judgment) -> Judgment:
        start = time.perf_counter()
        if not rollout.log:
            raise ValueError("the veto judge needs the robot's log (rollout.log); this rollout has none")
        events = analyse_log(rollout.log, self.log_judge.thresholds)
        extras = dict(inner.extras, inner_judge=inner.judge, inner_success=inner.success, log_events=events.to_dict())
        vetoed = inner.success is True and not events.held
        extras["vetoed"] = vetoed
        if vetoed:
            success, score = False, min(float(inner.score), events.score, 0.49)
            rationale = f"vetoed by the robot log (no hold measured): {inner.rationale}"
        else:
            success, score, rationale = inner.success, float(inner.score), inner.rationale
        return Judgment(
            success=success,
            score=score,
            rationale=rationale,
            votes=inner.votes,
            judge=f"{self.name}({inner.judge or getattr(self.inner, 'name', '?')})",
            model_id=inner.model_id,
            prompt_sha256=inner.prompt_sha256,
            seconds=inner.seconds + time.perf_counter() - start,
            extras=extras,
        )


class FusionJudge:
    """Weighted mean of several judges' scores; success iff the fused score >= ``threshold``.

    Abstaining judges are left out and the weights of the others renormalised. If the
    abstaining judges hold more than ``max_abstain_weight`` of the total weight (default 0.5:
    more than half of the evidence is missing), or all of it, the fusion abstains too. ``judges`` are judges or judge specs; ``weights`` default to equal.
    """

    name = "fusion"

    def __init__(
        self,
        judges: Sequence[Any],
        weights: Sequence[float] | None = None,
        threshold: float = 0.5,
        max_abstain_weight: float = 0.5,
    ):
        if not judges:
            raise ValueError("the fusion judge needs at least one judge")
        self.judges = [_build(j) for j in judges]
        weights = [1.0] * len(self.judges) if weights is None else [float(w) for w in weights]
        if len(weights) != len(self.judges):
            raise ValueError(f"{len(weights)} weights for {len(self.judges)} judges")
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"fusion weights must be >= 0 with a positive sum, got {weights}")
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"fusion threshold must be in (0, 1], got {threshold}")
        if not 0.0 <= max_abstain_weight < 1.0:
            raise ValueError(f"max_abstain_weight must be in [0, 1), got {max_abstain_weight}")
        total = sum(weights)
        self.weights = [w / total for w in weights]
        self.threshold = float(threshold)
        self.max_abstain_weight = float(max_abstain_weight)

    def judge(self, rollout: Rollout) -> Judgment:
        return self.fuse([j.judge(rollout) for j in self.judges])

    def judge_batch(self, rollouts: Sequence[Rollout]) -> list[Judgment]:
        from kosmos_env.judges.base import judge_many

        per_judge = [judge_many(j, rollouts) for j in self.judges]
        return [self.fuse([col[i] for col in per_judge]) for i in range(len(rollouts))]

    def fuse(self, parts: Sequence[Judgment]) -> Judgment:
        """Fuse one rollout's judgments (in the order of ``self.judges``)."""
        if len(parts) != len(self.judges):
            raise ValueError(f"{len(parts)} judgments for {len(self.judges)} judges")
        votes = tuple(
            {"judge": p.judge, "success": p.success, "score": float(p.score), "weight": w}
            for p, w in zip(parts, self.weights, strict=True)
        )
        seconds = sum(p.seconds for p in parts)
        abstain_w = sum(w for p, w in zip(parts, self.weights, strict=True) if p.abstained)
        if abstain_w > self.max_abstain_weight or abstain_w >= 1.0 - 1e-12:
            return Judgment(
                None,
                0.0,
                f"abstain: judges holding {abstain_w:.2f} of the weight abstained",
                votes,
                self.name,
                seconds=seconds,
            )
        live = [(p, w) for p, w in zip(parts, self.weights, strict=True) if not p.abstained]
        score = sum(p.score * w for p, w in live) / sum(w for _, w in live)
        success = score >= self.threshold
        return Judgment(
            success,
            float(min(max(score, 0.0), 1.0)),
            f"fused score {score:.3f} {'>=' if success else '<'} {self.threshold} over {len(live)} judge(s)",
            votes,
            self.name,
            seconds=seconds,
        )


def false_pass_rate(judgments: Sequence[Judgment], truth: Sequence[bool]) -> float:
    """Share of truly failed rollouts that the judge called a success (abstentions are not passes)."""
    failed = [j for j, t in zip(judgments, truth, strict=True) if not t]
    if not failed:
        return float("nan")
    return sum(j.success is True for j in failed) / len(failed)


def balanced_accuracy(judgments: Sequence[Judgment], truth: Sequence[bool]) -> float:
    """Mean of the true-positive and true-negative rates; an abstention counts as wrong."""
    pos = [j for j, t in zip(judgments, truth, strict=True) if t]
    neg = [j for j, t in zip(judgments, truth, strict=True) if not t]
    rates = []
    if pos:
        rates.append(sum(j.success is True for j in pos) / len(pos))
    if neg:
        rates.append(sum(j.success is False for j in neg) / len(neg))
    return sum(rates) / len(rates) if rates else float("nan")
