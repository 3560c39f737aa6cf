"""Episodes to export, read from a campaign folder or a ``train-policy`` demonstrations file.

Each source gives a :class:`~kosmos_env.export.lerobot.DatasetSpec` and the episodes as rows
(row ``t``: the frame and state the action was chosen on, and the action), read one at a time.

**A campaign** (``kosmos-env eval --out``): its finished episodes, in the ledger's order, from the
stored artifacts (every file checked against its content hash; the lossless frames of a two-stage
campaign where they were kept, else the MP4). The instruction of the episode's task is the task
string. The state is the robot log the world recorded: the end-effector position and, where the
world measures it, the gripper opening, ``[ee_x, ee_y, ee_z, gripper]``, measured *after* each
action. The state before the first action is not stored, so row ``t`` pairs the frame and the
log's measurement after action ``t - 1`` with action ``t``, and an episode of N actions gives
N - 1 rows (its first action is left out). A world without a robot log gives no state and all N
rows. Frames come one per action at the spec's ``render_fps``; a world that renders several
frames per action gives the frame each action was chosen on.

**Demonstrations** (:class:`~kosmos_env.training.demos.Demos`): every step already holds the
observation the action was chosen on (image at the network's size, the 7-D state ``[ee_pos,
ee_euler, gripper]``), so an episode of N steps gives N rows; the actions, stored in [-1, 1] as
the RL wrapper sees them, are mapped back to the env contract with the bounds the file records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from kosmos_env.export.lerobot import DatasetSpec, Episode, ExportReport, write_dataset

#: the video feature is observation.images.<camera>; "image" is the env observation's key
DEFAULT_CAMERA = "image"
#: a campaign's finished outcomes that have a rollout (errors have none)
OUTCOMES = ("success", "failure", "abstained", "discarded")
CAMPAIGN_STATE = ("ee_x", "ee_y", "ee_z", "gripper")
#: why a campaign episode of one action gives no row when there is a state
ONE_ACTION = "one action (no stored state before it)"
DEMO_STATE = ("ee_x", "ee_y", "ee_z", "ee_roll", "ee_pitch", "ee_yaw", "gripper")


@dataclass
class Source:
    """A dataset to write: what its episodes share, the episodes (a one-pass iterator), and the
    episodes left out, by reason (filled in as the iterator runs)."""

    spec: DatasetSpec
    episodes: Iterator[Episode]
    skipped: dict[str, int] = field(default_factory=dict)


def export_lerobot(source: Source, out: str | Path, **limits: float) -> ExportReport:
    """Write ``source`` as a LeRobot dataset at ``out`` (``limits``: ``data_file_mb``,
    ``video_file_mb``); the report counts the episodes left out, by reason."""
    report = write_dataset(out, source.spec, source.episodes, **limits)
    report.skipped = dict(source.skipped)
    return report


def _check_outcomes(outcomes: Sequence[str] | None) -> tuple[str, ...] | None:
    if not outcomes:
        return None
    unknown = sorted(set(outcomes) - set(OUTCOMES))
    if unknown:
        raise ValueError(f"unknown outcome(s) {unknown}; choose from {list(OUTCOMES)}")
    return tuple(outcomes)


def _whole_fps(fps: float, where: str) -> int:
    if not float(fps).is_integer() or fps < 1:
        raise ValueError(f"{where} runs at {fps} frames per second; LeRobot datasets need a whole number")
    return int(fps)


# -- campaigns -------------------------------------------------------------------------------------
def campaign_source(
    run: str | Path,
    *,
    camera: str = DEFAULT_CAMERA,
    policies: Sequence[str] | None = None,
    outcomes: Sequence[str] | None = None,
) -> Source:
    """The finished episodes of the campaign in ``run`` (optionally only ``policies``' and only
    those with ``outcomes``)."""
    from kosmos_env.campaign.ledger import LEDGER_NAME
    from kosmos_env.campaign.readonly import ReadOnlyLedger

    run = Path(run)
    if not (run / LEDGER_NAME).is_file():
        raise ValueError(
            f"{run} is not a campaign folder (no {LEDGER_NAME}): give the folder kosmos-env eval --out wrote"
        )
    wanted_outcomes = _check_outcomes(outcomes)
    with ReadOnlyLedger(run / LEDGER_NAME) as ledger:
        config = ledger.config()
        done = ledger.episodes("done")
        # a two-stage campaign keeps the env's exact frames: better than decoding the MP4
        staged = {q["episode_id"]: q for q in ledger.judge_queue() if q.get("frames")}
    labels = [p.label for p in config.policies]
    if policies:
        unknown = [p for p in policies if p not in labels]
        if unknown:
            raise ValueError(f"campaign {run} has no policy {unknown[0]!r}; its policies: {labels}")
    skipped: dict[str, int] = {}
    rows = []
    for row in done:
        if policies and row["policy"] not in policies:
            continue
        if row["outcome"] not in OUTCOMES:  # an error: no rollout was stored
            skipped["error (no rollout)"] = skipped.get("error (no rollout)", 0) + 1
        elif wanted_outcomes is None or row["outcome"] in wanted_outcomes:
            rows.append(row)
    with_frames = [r for r in rows if r.get("video") or r["episode_id"] in staged]
    if not rows:
        which = f" with outcome {'/'.join(wanted_outcomes)}" if wanted_outcomes else ""
        raise ValueError(f"campaign {run} has no finished episode{which} to export ({len(done)} done)")
    if not with_frames:
        raise ValueError(
            f"campaign {run} stored no video of its episodes (it ran with --no-video): "
            "run it again without --no-video to export it"
        )
    if len(with_frames) < len(rows):
        skipped["no video"] = len(rows) - len(with_frames)

    spec_fields = config.spec
    fps = _whole_fps(float(spec_fields["render_fps"]), f"{config.env_id}")
    height, width = (int(v) for v in spec_fields["image_size"])
    log_keys = _log_keys(run, with_frames[0])
    state_names = None
    if "ee_pos" in log_keys:
        state_names = CAMPAIGN_STATE if "gripper_measured" in log_keys else CAMPAIGN_STATE[:3]
    spec = DatasetSpec(
        fps=fps,
        image_size=(height, width),
        camera=camera,
        state_names=state_names,
        robot_type=config.env_id,
        provenance={
            "source": "campaign",
            "campaign_id": config.campaign_id,
            "config_hash": config.config_hash,
            "env_id": config.env_id,
            "spec_hash": config.spec_hash,
            "policies": sorted({r["policy"] for r in with_frames}),
            "outcomes": list(wanted_outcomes) if wanted_outcomes else "all",
            "action": "the env contract's 7-D action as the campaign stored it",
            "observation.state": (
                "the robot log measured after the previous action: " + ", ".join(state_names)
                if state_names
                else "none: the world keeps no robot log"
            ),
            "rows": (
                "row t = the frame and state after action t-1, and action t (the first action of each "
                "episode, whose start state is not stored, is left out)"
                if state_names
                else "row t = the frame action t was chosen on, and action t"
            ),
        },
    )
    source = Source(spec=spec, episodes=iter(()), skipped=skipped)
    source.episodes = _campaign_episodes(run, config, with_frames, staged, spec, source.skipped)
    return source


def _log_keys(run: Path, row: Mapping[str, Any]) -> set[str]:
    if not row.get("log"):
        return set()
    with np.load(run / row["log"], allow_pickle=False) as z:
        return set(z.files)


def _check_hash(run: Path, relpath: str, episode_id: str) -> None:
    from kosmos_env.hashing import sha256_file

    path = run / relpath
    if not path.is_file():
        raise ValueError(f"episode {episode_id}: artifact {relpath} is missing (kosmos-env verify {run} lists all)")
    if sha256_file(path) != Path(relpath).name.split(".")[0].lower():
        raise ValueError(f"episode {episode_id}: artifact {relpath} does not match its hash (kosmos-env verify {run})")


def _campaign_episodes(
    run: Path,
    config: Any,
    rows: Sequence[Mapping[str, Any]],
    staged: Mapping[str, Mapping[str, Any]],
    spec: DatasetSpec,
    skipped: dict[str, int],
) -> Iterator[Episode]:
    from kosmos_env.campaign.rejudge import StoredRollouts

    reader = StoredRollouts(run, config)
    for row in rows:
        episode_id = row["episode_id"]
        stored = dict(row)
        if episode_id in staged:
            stored["frames"], stored["fps"] = staged[episode_id]["frames"], staged[episode_id]["fps"]
        for kind in ("actions", "log"):
            if stored.get(kind):
                _check_hash(run, stored[kind], episode_id)
        rollout = reader.rollout(stored)  # checks the frames' or the video's hash
        episode = campaign_rows(rollout.frames, rollout.actions, rollout.log, rollout.instruction, spec, episode_id)
        if episode is None:
            skipped[ONE_ACTION] = skipped.get(ONE_ACTION, 0) + 1
            continue
        episode.columns = {
            "kosmos/episode_id": episode_id,
            "kosmos/policy": row["policy"],
            "kosmos/task": row["task"],
            "kosmos/seed": int(row["seed"]),
            "kosmos/outcome": row["outcome"],
        }
        yield episode


def campaign_rows(
    frames: np.ndarray,
    actions: np.ndarray,
    log: Mapping[str, np.ndarray],
    instruction: str,
    spec: DatasetSpec,
    episode_id: str = "",
) -> Episode | None:
    """One stored campaign episode as rows (see the module docstring); None when it has no row
    (one action, with a state: the start state is not stored)."""
    actions = np.asarray(actions, np.float32).reshape(-1, 7)
    n = len(actions)
    if n == 0:
        raise ValueError(f"episode {episode_id} stored no action")
    if len(frames) < 1 + n or (len(frames) - 1) % n:
        raise ValueError(f"episode {episode_id}: {len(frames)} frames for {n} actions (expected 1 + k x {n})")
    per_action = (len(frames) - 1) // n
    chosen_on = np.ascontiguousarray(frames[0 : n * per_action : per_action])
    if spec.state_names is None:
        return Episode(frames=chosen_on, action=actions, state=None, task=instruction)
    keys = ["ee_pos", "gripper_measured"][: 1 if len(spec.state_names) == 3 else 2]
    missing = [k for k in keys if k not in log]
    if missing:
        raise ValueError(f"episode {episode_id}: its robot log lacks {missing}, which the first episode's has")
    parts = [np.asarray(log["ee_pos"], np.float32).reshape(-1, 3)]
    if "gripper_measured" in keys:
        parts.append(np.asarray(log["gripper_measured"], np.float32).reshape(-1, 1))
    if any(len(p) != n for p in parts):
        raise ValueError(f"episode {episode_id}: its robot log has {[len(p) for p in parts]} rows for {n} actions")
    after = np.concatenate(parts, axis=1)
    if n < 2:
        return None
    return Episode(frames=chosen_on[1:], action=actions[1:], state=after[:-1], task=instruction)


# -- demonstrations ------------------------------------------------------------------------------
def demos_source(
    path: str | Path,
    *,
    camera: str = DEFAULT_CAMERA,
    outcomes: Sequence[str] | None = None,
) -> Source:
    """The episodes of a ``train-policy`` demonstrations file (optionally only those with ``outcomes``)."""
    from kosmos_env.policies.checkpoint import unscale_action
    from kosmos_env.spec import load_spec
    from kosmos_env.training.demos import Demos

    wanted_outcomes = _check_outcomes(outcomes)
    demos = Demos.load(path)  # one clear ValueError for a file that is not one
    meta = demos.meta
    missing = [k for k in ("env_id", "instructions", "action_low", "action_high") if k not in meta]
    if missing:
        raise ValueError(f"demonstrations {path}: its metadata lacks {missing}; record them again with train-policy")
    env_id = meta["env_id"]
    fps = _whole_fps(load_spec(env_id).render_fps, env_id)
    low, high = np.asarray(meta["action_low"], np.float32), np.asarray(meta["action_high"], np.float32)
    instructions = list(meta["instructions"])
    recorded = list(meta.get("episodes") or [])
    height, width = (int(v) for v in demos.image.shape[1:3])
    spec = DatasetSpec(
        fps=fps,
        image_size=(height, width),
        camera=camera,
        state_names=DEMO_STATE,
        robot_type=env_id,
        provenance={
            "source": "demonstrations",
            "env_id": env_id,
            "spec_hash": meta.get("spec_hash"),
            "policy": meta.get("policy"),
            "outcomes": list(wanted_outcomes) if wanted_outcomes else "all",
            "action": "the env contract's 7-D action (the file's [-1, 1] actions mapped back with its bounds)",
            "observation.state": "the observation the action was chosen on: " + ", ".join(DEMO_STATE),
            "rows": "row t = step t of the episode: its observation and its action",
        },
    )
    skipped: dict[str, int] = {}

    def episodes() -> Iterator[Episode]:
        for e in range(demos.n_episodes):
            rows = np.flatnonzero(demos.episode == e)
            if len(rows) == 0:
                skipped["no steps"] = skipped.get("no steps", 0) + 1
                continue
            rows = rows[np.argsort(demos.step[rows], kind="stable")]
            if not np.array_equal(demos.step[rows], np.arange(len(rows))):
                raise ValueError(f"demonstrations {path}: episode {e}'s steps are not 0..{len(rows) - 1}")
            about = recorded[e] if e < len(recorded) else {}
            outcome = demo_outcome(int(demos.success[e]), about.get("outcome"))
            if wanted_outcomes is not None and outcome not in wanted_outcomes:
                continue
            yield Episode(
                frames=demos.image[rows],
                action=unscale_action(demos.action[rows], low, high),
                state=demos.state[rows],
                task=instructions[int(demos.task[rows[0]])],
                columns={
                    "kosmos/episode_id": f"demo-{e}",
                    "kosmos/policy": str(meta.get("policy", "")),
                    "kosmos/task": str(about.get("task", "")),
                    "kosmos/seed": int(about.get("seed", -1)),
                    "kosmos/outcome": outcome,
                },
            )

    return Source(spec=spec, episodes=episodes(), skipped=skipped)


def demo_outcome(success: int, recorded: str | None) -> str:
    """A demonstration episode's outcome: its verdict, else the outcome it recorded (discarded,
    abstained), else "no verdict"."""
    if success == 1:
        return "success"
    if success == 0:
        return "failure"
    return recorded if recorded in OUTCOMES else "no verdict"
