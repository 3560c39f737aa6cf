"""Re-derive recorded outcomes from an episode's stored artifacts, trusting no recorded verdict.

A consistent forgery edits an outcome together with everything stored beside it (score,
judgment, ground truth) and rebuilds the bundle; hashes then agree, and only recomputing the
verdict from the evidence the verdict was drawn from exposes it. Two levels:

- :func:`rederive_episode` re-runs the campaign's judge, when it is deterministic, on what the
  episode stored: the actions array, the robot log and (for frame judges) the frames. The state
  judge is re-run on the ground truth *as the stored log records it*: a simulator's log carries
  ``gt_success`` after every action, so its last row is the verdict the state judge gave, and a
  ground truth edited in the ledger disagrees with it. Every mismatch names the episode and the
  judge.
- :class:`Replayer` replays the stored actions from the episode's recorded environment seed on a
  simulator world (Kosmos-Tabletop-v1 is bit-deterministic) and compares the replayed actions,
  log and frames with the stored ones byte for byte, the stored video's decoded frames with the
  replayed frames within the stated tolerance (:data:`kosmos_env.utils.video.MIN_LUMA_PSNR_DB`:
  H.264 is lossy, and its bytes depend on the encoder build), the ground truth and gate verdict by
  value, and the campaign judge's verdict on the replayed rollout with the recorded outcome. A
  forged log, or artifacts moved from one episode to another, do not replay.

- :class:`Rerunner` re-runs a campaign policy in the recorded world from the episode's recorded
  seed and task, where a generation cannot be replayed: :func:`judge_reruns` holds it to the
  agreement the world allows (:data:`EXPECTED_AGREEMENT`: bit for bit, seeded, or sampled).

Which episodes are replayed or re-run is a sample drawn with a salt the verifier picks
(:func:`sample_rows`, :func:`new_salt`); :func:`escape_probability` is the chance that k forged
episodes all miss it, and :func:`flips_to_reorder` the fewest false outcomes behind a ranking place.

What cannot be re-derived is said, never passed silently: a judge that samples (a VLM) or that
needs frames the episode did not keep, and on generated worlds the generation itself (only its
stored frames and log are re-judged; :data:`ON_TRUST_GENERATED`).

Layering: campaign code, it reads judges and the env (as the campaign worker does).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kosmos_env.hashing import sha256_hex

#: judge types whose verdict is a pure function of the rollout (and of files bound by hash)
DETERMINISTIC_JUDGES = ("state", "robot_log", "action_only", "action_learned", "vision_frame", "optimistic")
#: world types that are simulators: their episodes replay bit for bit from the seed and actions
SIMULATOR_WORLDS = ("tabletop",)
#: frame judges on lossy (MP4) frames: a verdict is called wrong only when the re-derived
#: probability lies more than this past the threshold. yuv420p keeps a quarter of a 64x64 frame's
#: colour, and that alone flips 2-6 % of the vision judge's frame verdicts, the decoded probability
#: landing up to 0.45 past the threshold (bench/video_decode_error.py: 1,968 64x64 frames of the
#: simulator and the learned world, each MP4 writer; the 0.15 stated before held for neither
#: writer): only a verdict the decoded frames contradict outright (probability under 0.02 or
#: over 0.98 at threshold 0.5) is called wrong
LOSSY_MARGIN = 0.48
_OUTCOME_OF_VERDICT = {True: "success", False: "failure", None: "abstained"}
ON_TRUST_GENERATED = "the generation (frames and log a learned or generative world produced are not re-generated)"


def judge_is_deterministic(spec: Any) -> bool:
    """True when the judge ``spec`` gives the same verdict on the same stored rollout every time."""
    if isinstance(spec, str):
        spec = {"type": spec}
    if not isinstance(spec, Mapping):
        return False
    kind = spec.get("type")
    if kind in DETERMINISTIC_JUDGES:
        return True
    if kind == "veto":
        return judge_is_deterministic(spec.get("judge"))
    if kind == "fusion":
        inner = spec.get("judges")
        return isinstance(inner, (list, tuple)) and bool(inner) and all(judge_is_deterministic(j) for j in inner)
    return False


def judge_reads_frames(spec: Any) -> bool:
    if isinstance(spec, str):
        spec = {"type": spec}
    if not isinstance(spec, Mapping):
        return False
    kind = spec.get("type")
    if kind == "veto":
        return judge_reads_frames(spec.get("judge"))
    if kind == "fusion":
        return any(judge_reads_frames(j) for j in spec.get("judges") or ())
    return kind in ("vision_frame", "vlm", "vlm_video")


def world_is_simulator(spec: Mapping[str, Any]) -> bool:
    return str((spec.get("world") or {}).get("type")) in SIMULATOR_WORLDS


# ----------------------------------------------------------------------------- loading artifacts


def load_array(path: Path) -> np.ndarray:
    """A numeric ``.npy`` (never unpickled); ValueError when it is anything else."""
    arr = np.load(path, allow_pickle=False)
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biuf":
        raise ValueError(f"{path.name} is not a numeric array")
    return arr


def load_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` (never unpickled)."""
    with np.load(path, allow_pickle=False) as z:
        out = {k: z[k] for k in z.files}
    for k, v in out.items():
        if v.dtype.kind not in "biuf":
            raise ValueError(f"{path.name}: array {k!r} is not numeric")
    return out


@dataclass
class EpisodeEvidence:
    """What one episode stored, loaded (``frames_lossless``: False when the frames came from an MP4)."""

    actions: np.ndarray | None = None
    log: dict[str, np.ndarray] = field(default_factory=dict)
    frames: np.ndarray | None = None
    frames_lossless: bool = True
    problems: list[str] = field(default_factory=list)


def load_evidence(
    root: Path, row: Mapping[str, Any], frames_rel: str | None = None, want_frames: bool = False
) -> EpisodeEvidence:
    """Load an episode's stored actions, log and (``want_frames``) frames: from the lossless frames
    artifact ``frames_rel`` when there is one, else decoded from its MP4."""
    ev = EpisodeEvidence()
    arts = row.get("artifacts") if isinstance(row.get("artifacts"), Mapping) else row
    for kind in ("actions", "log"):
        rel = arts.get(kind)
        if not rel:
            continue
        path = root / rel
        if not path.is_file():
            ev.problems.append(f"its {kind} artifact {rel} is missing")
            continue
        try:
            if kind == "actions":
                ev.actions = load_array(path)
            else:
                ev.log = load_npz(path)
        except Exception as exc:  # noqa: BLE001 - an unreadable artifact is a finding
            ev.problems.append(f"its {kind} artifact {rel} cannot be read ({type(exc).__name__}: {exc})")
    if want_frames:
        if frames_rel and (root / frames_rel).is_file():
            try:
                ev.frames = load_npz(root / frames_rel)["frames"]
            except Exception as exc:  # noqa: BLE001
                ev.problems.append(f"its frames artifact {frames_rel} cannot be read ({exc})")
        elif arts.get("video") and (root / arts["video"]).is_file():
            from kosmos_env.utils.video import read_video

            try:
                ev.frames = read_video(root / arts["video"])
                ev.frames_lossless = False
            except Exception as exc:  # noqa: BLE001
                ev.problems.append(f"its video {arts['video']} cannot be decoded ({exc})")
    return ev


# ----------------------------------------------------------------------------- re-judging


def _truth_from_log(log: Mapping[str, np.ndarray]) -> bool | None:
    gt = log.get("gt_success")
    if gt is None or np.asarray(gt).size == 0:
        return None
    return bool(np.asarray(gt).reshape(len(gt), -1)[-1].all())


class Rejudger:
    """Re-runs one campaign judge (built once) on stored episodes."""

    def __init__(self, judge_spec: Mapping[str, Any], spec: Mapping[str, Any]):
        self.judge_spec = dict(judge_spec)
        self.spec = dict(spec)
        self.deterministic = judge_is_deterministic(self.judge_spec)
        self.reads_frames = judge_reads_frames(self.judge_spec)
        self.simulator = world_is_simulator(self.spec)
        self.name = str(self.judge_spec.get("type"))
        self._judge = None

    @property
    def judge(self):
        if self._judge is None:
            from kosmos_env.judges import make_judge

            self._judge = make_judge(dict(self.judge_spec))
        return self._judge

    def check(self, row: Mapping[str, Any], ev: EpisodeEvidence) -> tuple[list[str], bool]:
        """(problems, re-derived) for one stored episode; problems name the judge."""
        problems = list(ev.problems)
        outcome = row.get("outcome")
        if outcome in ("error", None):
            return problems, False
        if ev.actions is None and not problems:
            problems.append("no actions artifact: its outcome cannot be re-derived")
        truth_log = _truth_from_log(ev.log)
        stored_truth = row.get("ground_truth")
        if self.simulator and outcome != "discarded":
            if not ev.log and not ev.problems:
                problems.append("no robot log although the world is a simulator (its log is the evidence)")
            elif ev.log and truth_log is None:
                problems.append("its stored robot log has no gt_success although the world is a simulator")
        if (
            truth_log is not None
            and isinstance(stored_truth, Mapping)
            and "success" in stored_truth
            and bool(stored_truth["success"]) != truth_log
        ):
            problems.append(
                f"ground truth success = {stored_truth['success']!r}, but its own stored robot log "
                f"ends with gt_success = {truth_log} (judge state)"
            )
        if outcome == "discarded" or not self.deterministic or problems:
            return problems, False
        if self.reads_frames and (ev.frames is None or not len(ev.frames)):
            return problems, False  # the caller says what could not be re-derived
        from kosmos_env.judges.base import Rollout

        truth = dict(stored_truth) if isinstance(stored_truth, Mapping) else None
        if truth_log is not None:
            truth = {**(truth or {}), "success": truth_log}
        frames = ev.frames if ev.frames is not None else np.zeros((0, 1, 1, 3), np.uint8)
        rollout = Rollout(
            frames=frames,
            instruction="",
            actions=np.asarray(ev.actions),
            fps=1.0,
            task=str(row.get("task")),
            log=ev.log,
            ground_truth=truth,
        )
        try:
            verdict = self.judge.judge(rollout)
        except Exception as exc:  # noqa: BLE001 - evidence the judge cannot read is a finding
            return problems + [
                f"judge {self.name} cannot re-judge its stored artifacts ({type(exc).__name__}: {exc})"
            ], False
        want = _OUTCOME_OF_VERDICT[verdict.success]
        if want != outcome:
            lossy = not ev.frames_lossless and self.reads_frames
            threshold = float(getattr(self.judge, "threshold", 0.5))
            if lossy and abs(float(verdict.score) - threshold) <= LOSSY_MARGIN:
                return problems, True  # too close to call on compressed frames
            where = "on its stored " + (
                "decoded video frames" if lossy else "frames" if self.reads_frames else "log and actions"
            )
            problems.append(
                f"recorded {outcome}, but judge {self.name} re-run {where} says {want} "
                f"(score {float(verdict.score):.3f})"
            )
        elif not self.reads_frames or ev.frames_lossless:
            score = row.get("score")
            if (
                verdict.success is not None
                and isinstance(score, (int, float))
                and not math.isclose(float(score), float(verdict.score), rel_tol=1e-6, abs_tol=1e-6)
            ):
                problems.append(
                    f"recorded score {score}, but judge {self.name} re-run on its stored artifacts "
                    f"gives {float(verdict.score):.6f}"
                )
        return problems, True


# ----------------------------------------------------------------------------- replay


class Replayer:
    """Replays stored actions on the campaign's simulator world (one env, built once)."""

    def __init__(
        self,
        env_id: str,
        spec_overrides: Mapping[str, Any],
        judge_spec: Mapping[str, Any],
        spec_hash: str | None = None,
    ):
        import gymnasium

        import kosmos_env  # noqa: F401  (registers the env ids)
        from kosmos_env.campaign.worker import StagedJudge

        # judging is deferred (the rollout comes back unjudged); the campaign judge re-judges below
        self.env = gymnasium.make(env_id, defer_judging=True, judge=StagedJudge(judge_spec), **dict(spec_overrides))
        base = self.env.unwrapped
        if spec_hash is not None and base.spec_hash != spec_hash:
            self.close()
            raise ValueError(
                f"{env_id} with the recorded overrides has spec hash {base.spec_hash[:12]}, the campaign "
                f"recorded {spec_hash[:12]}: it cannot be replayed with this kosmos-env"
            )
        self.chunk = base.kosmos_spec.action_chunk
        self.fps = float(base.kosmos_spec.render_fps * base.world.frames_per_action)
        self.rejudger = Rejudger(judge_spec, base.kosmos_spec.to_dict())

    def close(self) -> None:
        self.env.close()

    def rerun_policy(self, policy: Any, row: Mapping[str, Any], actions_rel: str) -> list[str]:
        """Run ``policy`` on the episode's seed and task: its actions must be the stored ones, bit for
        bit (a (policy, task, seed) triple gives one episode). Evidence moved from another episode, or
        from another policy on the same seed, replays in the world but was not this policy's."""
        from kosmos_env.campaign.artifacts import npy_bytes
        from kosmos_env.rollouts import run_episode

        try:
            result = run_episode(self.env, policy, int(row["env_seed"]), row["task"])
        except Exception as exc:  # noqa: BLE001 - a policy that fails here is reported, not raised
            return [f"its policy failed when re-run ({type(exc).__name__}: {exc})"]
        if sha256_hex(npy_bytes(result.rollout.actions)) != Path(actions_rel).name.split(".")[0]:
            return [
                f"its stored actions are not what policy {row.get('policy')!r} takes on seed {row['env_seed']} "
                "(the evidence is another episode's)"
            ]
        return []

    def replay(
        self, root: Path, row: Mapping[str, Any], frames_rel: str | None = None, policy: Any = None
    ) -> list[str]:
        """Problems found replaying one episode (empty: it replays bit for bit); with ``policy``, the
        policy is re-run too and must take the stored actions."""
        from kosmos_env.campaign.artifacts import npy_bytes, npz_bytes

        arts = row.get("artifacts") if isinstance(row.get("artifacts"), Mapping) else row
        rel = arts.get("actions")
        if not rel or not (root / rel).is_file():
            return ["cannot be replayed: its actions artifact is missing"]
        try:
            actions = load_array(root / rel)
        except Exception as exc:  # noqa: BLE001
            return [f"cannot be replayed: {exc}"]
        if actions.ndim != 2 or actions.shape[1] != 7 or len(actions) % self.chunk:
            return [f"cannot be replayed: its actions have shape {actions.shape}"]
        env = self.env
        try:
            env.reset(seed=int(row["env_seed"]), options={"task": row["task"]})
            done = False
            n = 0
            steps = len(actions) // self.chunk
            info: dict[str, Any] = {}
            while not done and n < steps:
                a = actions[n * self.chunk : (n + 1) * self.chunk]
                _, _, terminated, truncated, info = env.step(a[0] if self.chunk == 1 else a)
                done = bool(terminated or truncated)
                n += 1
        except Exception as exc:  # noqa: BLE001 - a replay that fails is a finding
            return [f"replay failed ({type(exc).__name__}: {exc})"]
        problems = []
        if not done or n != steps:
            problems.append(
                f"replay of its {steps} stored steps ended {'after ' + str(n) if done else 'not at all'} "
                "(the episode did not end where the stored actions end)"
            )
        rollout = env.unwrapped.rollout()
        if sha256_hex(npy_bytes(rollout.actions)) != Path(rel).name.split(".")[0]:
            problems.append("replayed actions differ from its stored actions artifact")
        log_rel = arts.get("log")
        if rollout.log:
            got = sha256_hex(npz_bytes(rollout.log))
            if not log_rel:
                problems.append("the replay writes a robot log, but the episode stored none")
            elif got != Path(log_rel).name.split(".")[0]:
                problems.append(
                    "its stored robot log is not what replaying its actions from seed "
                    f"{row['env_seed']} gives (log sha256 {got[:12]}, stored {Path(log_rel).name[:12]})"
                )
        if frames_rel:
            if sha256_hex(npz_bytes({"frames": rollout.frames})) != Path(frames_rel).name.split(".")[0]:
                problems.append("its stored frames are not what the replay renders")
        video = arts.get("video")
        if video and len(rollout.frames):
            problems.extend(self._video_problems(root, video, rollout.frames))
        truth = rollout.ground_truth
        stored = row.get("ground_truth")
        from kosmos_env.campaign.worker import _plain

        if not _same_json(_plain(truth), stored):
            problems.append("its stored ground truth is not the replay's")
        gate = info.get("gate")
        stored_gate = row.get("gate")
        if (
            isinstance(gate, Mapping)
            and isinstance(stored_gate, Mapping)
            and bool(gate.get("passed")) != bool(stored_gate.get("passed"))
        ):
            problems.append(
                f"gate verdict passed = {stored_gate.get('passed')!r} stored, the replay's is {gate.get('passed')!r}"
            )
        want = row.get("outcome")
        replayed = info.get("outcome")
        if (replayed == "discarded" or want == "discarded") and replayed != want:
            problems.append(f"recorded {want}, the replay is {replayed}")
        if want != "discarded" or replayed != "discarded":
            ev = EpisodeEvidence(actions=rollout.actions, log=dict(rollout.log), frames=rollout.frames)
            judged, _ = self.rejudger.check({**row, "ground_truth": _plain(truth)}, ev)
            problems += [f"on replay: {p}" for p in judged]
        if policy is not None:
            problems += self.rerun_policy(policy, row, rel)
        return problems

    def _video_problems(self, root: Path, video: str, frames: np.ndarray) -> list[str]:
        """Decode the stored MP4 and compare it with the replayed (lossless) frames: the same frame
        count and size, every frame within the stated tolerance
        (:data:`kosmos_env.utils.video.MIN_LUMA_PSNR_DB`). H.264 is lossy and its bytes depend on
        the encoder's build (and, for the ffmpeg writer of older campaigns, on the machine's core
        count), so re-encoding and comparing bytes would fail honest videos written elsewhere."""
        from kosmos_env.utils.video import decode_problems, read_video

        try:
            decoded = read_video(root / video)
        except Exception as exc:  # noqa: BLE001 - an undecodable video is a finding
            return [f"its stored video {video} cannot be decoded ({type(exc).__name__}: {exc})"]
        return [f"its stored video is not the replay's frames: {p}" for p in decode_problems(decoded, frames)]


def sample_rows(rows: Sequence[Mapping[str, Any]], n: int | str, seed: int, salt: str = "") -> list[Mapping[str, Any]]:
    """A seeded sample of ``n`` rows (``"all"`` or n >= len: every row), in their order. ``salt`` mixes
    in what the party drawing the sample chose (``kosmos-env verify``: a fresh random salt of its own,
    :func:`new_salt`), so the sample is not known to whoever wrote the rows before it is drawn."""
    rows = list(rows)
    if n == "all" or (isinstance(n, int) and n >= len(rows)):
        return rows
    n = int(n)
    if n <= 0:
        return []
    digest = hashlib.sha256(f"{seed}:{salt}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    pick = sorted(rng.choice(len(rows), size=n, replace=False).tolist())
    return [rows[i] for i in pick]


#: episodes ``kosmos-env verify`` replays (and re-runs the policies of) when not told otherwise;
#: a smaller campaign is replayed whole. 50 leaves a forgery of 10 % of a large campaign's episodes
#: a 0.5 % chance of escaping (0.9^50), of 5 % a 7.7 % chance. Its cost on the tabletop (128x128,
#: video kept, 40 steps): replay and policy re-run add 0.57-0.65 s an episode on 2 cores at load 7-8
#: (`verify --replay all` against `--replay 0` on a 20-episode scripted/random campaign), so about
#: 30 s for the sample, besides the re-derivation every episode gets.
DEFAULT_REPLAY_SAMPLE = 50


def new_salt() -> str:
    """A fresh random salt for a verifier's sample (64 bits from the OS): nobody who wrote the
    campaign can know it, so nobody can place forged episodes outside the sample."""
    import secrets

    return secrets.token_hex(8)


def escape_probability(total: int, sample: int, forged: int) -> float:
    """The chance that a uniform sample of ``sample`` of ``total`` episodes, drawn without
    replacement, holds none of ``forged`` forged ones: the hypergeometric P(X = 0) =
    C(total - forged, sample) / C(total, sample) = prod_{i < sample} (total - forged - i) / (total - i)."""
    total, sample, forged = int(total), max(0, min(int(sample), int(total))), max(0, int(forged))
    if forged == 0:
        return 1.0
    if forged > total - sample:
        return 0.0
    p = 1.0
    for i in range(sample):
        p *= (total - forged - i) / (total - i)
    return p


def flips_to_reorder(
    per_policy: Mapping[str, Mapping[str, Any]], ranking: Sequence[str]
) -> tuple[int, str, str] | None:
    """(k, higher, lower): the fewest recorded outcomes that must be false for two neighbours of the
    ranking to tie or swap on success rate: successes of ``higher`` that were failures, plus
    failures of ``lower`` that were successes. A forger who bought that ranking place forged at
    least k episodes. Neighbours already tied on rate (their order is not a claim) and policies
    without a decided episode are passed over; None when no pair is left."""
    best: tuple[int, str, str] | None = None
    for higher, lower in zip(ranking, ranking[1:], strict=False):
        hi, lo = per_policy.get(higher) or {}, per_policy.get(lower) or {}
        s_h, s_l = int(hi.get("successes", 0)), int(lo.get("successes", 0))
        d_h, d_l = s_h + int(hi.get("failures", 0)), s_l + int(lo.get("failures", 0))
        if not d_h or not d_l or s_h * d_l <= s_l * d_h:
            continue
        k = None
        for a in range(s_h + 1):  # a successes of the higher undone, b failures of the lower undone
            need = (s_h - a) * d_l - s_l * d_h  # the rates tie or swap once b * d_h >= need
            b = max(0, -(-need // d_h))
            if b <= d_l - s_l and (k is None or a + b < k):
                k = a + b
        if k is not None and (best is None or k < best[0]):
            best = (k, higher, lower)
    return best


def sign_test_p(b: int, c: int) -> float:
    """Two-sided exact sign (McNemar) test: the chance, when each of b + c discordant pairs goes
    either way with probability 1/2, of a split at least as lopsided as b against c."""
    n = int(b) + int(c)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def replay_count(value: str, flag: str = "--replay") -> int | str:
    """Parse ``--replay N|all`` (or ``--rerun``; one clear error for anything else)."""
    if value == "all":
        return "all"
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"{flag} takes a number of episodes or 'all', got {value!r}") from None
    if n < 0 or n > 10_000_000:
        raise ValueError(f"{flag} takes a number of episodes >= 0 or 'all', got {value!r}")
    return n


# ----------------------------------------------------------------------------- re-running policies

#: how a policy re-run in the recorded world, from the recorded seed, should agree with the stored
#: episode: bit for bit (a simulator); seeded (the same seed gives the same generation up to
#: floating-point rounding, which a torch thread count or CPU moves); sampled (a generator whose
#: output is not reproducible, e.g. diffusion on a GPU, or a judge that samples)
RERUN_EXACT, RERUN_SEEDED, RERUN_SAMPLED = "exact", "seeded", "sampled"
#: generated worlds whose generation is a function of the seed and the actions (up to rounding)
SEEDED_WORLDS = ("tabletop_learned",)
#: worlds whose first observation is not generated (the simulator's layout of the seed's scene, or
#: the task's starting photograph), so a policy's first action depends on the seed alone
UNGENERATED_FIRST_FRAME = ("tabletop", "tabletop_learned", "cosmos3")
#: a re-run's first action differs from the stored one when some dimension is further apart than
#: this fraction of its bound's range (high - low): rounding (thread counts, a GPU kernel, a VLA's
#: action-token bin of 1/256) stays far below it, another policy's action does not
FIRST_ACTION_TOLERANCE = 0.02
#: a sampled world's re-runs fail a policy when its disagreements lean one way at this level
SIGN_TEST_ALPHA = 0.01


def rerun_expectation(spec: Mapping[str, Any], judge_spec: Mapping[str, Any]) -> str:
    """:data:`RERUN_EXACT`, :data:`RERUN_SEEDED` or :data:`RERUN_SAMPLED` for the campaign's world and judge."""
    if not judge_is_deterministic(judge_spec):
        return RERUN_SAMPLED
    if world_is_simulator(spec):
        return RERUN_EXACT
    return RERUN_SEEDED if str((spec.get("world") or {}).get("type")) in SEEDED_WORLDS else RERUN_SAMPLED


EXPECTED_AGREEMENT = {
    RERUN_EXACT: "the simulator is bit-deterministic: every re-run must take the stored actions bit for bit",
    RERUN_SEEDED: (
        "the same seed gives the same generation up to floating-point rounding (a torch thread count or CPU "
        "moves its last bits): every re-run must begin with the stored first action (within "
        f"{FIRST_ACTION_TOLERANCE:.0%} of each action bound's range) and end with the stored outcome; later "
        "actions that differ are rounding and are listed, not failed"
    ),
    RERUN_SAMPLED: (
        "the generation (or the judge) is not reproducible: an honest episode's re-run agrees with it with "
        "chance p^2 + (1-p)^2 (p: the policy's success chance on that seed), and its disagreements go either "
        f"way alike; a policy whose disagreements lean one way (two-sided exact sign test p < {SIGN_TEST_ALPHA:g}) "
        "fails, as does a re-run whose first action differs where the world does not generate the first frame"
    ),
}


@dataclass
class RerunOutcome:
    """One episode's policy re-run in the recorded world: its outcome, whether it took the stored
    actions bit for bit, and the first stored action row it departs from (None: none)."""

    episode_id: str
    policy: str
    recorded: str | None
    outcome: str | None = None
    reproduced: bool = False
    diverged_at: int | None = None
    first_action_differs: bool = False
    error: str | None = None


class Rerunner:
    """Re-runs campaign policies in the campaign's recorded world (one env and judge, built once),
    from each episode's recorded seed and task, as the campaign worker ran them."""

    def __init__(
        self,
        env_id: str,
        spec_overrides: Mapping[str, Any],
        judge_spec: Mapping[str, Any],
        spec_hash: str | None = None,
    ):
        import gymnasium

        import kosmos_env  # noqa: F401  (registers the env ids)
        from kosmos_env.judges import make_judge

        self.judge = make_judge(dict(judge_spec))
        self.env = gymnasium.make(env_id, defer_judging=True, judge=self.judge, **dict(spec_overrides))
        base = self.env.unwrapped
        if spec_hash is not None and base.spec_hash != spec_hash:
            self.close()
            raise ValueError(
                f"{env_id} with the recorded overrides has spec hash {base.spec_hash[:12]}, the campaign "
                f"recorded {spec_hash[:12]}: its policies cannot be re-run in the same world with this kosmos-env"
            )
        spec = base.kosmos_spec
        self.first_frame_ungenerated = str(spec.world.get("type")) in UNGENERATED_FIRST_FRAME
        self.tolerance = FIRST_ACTION_TOLERANCE * (
            np.asarray(spec.action_high, dtype=np.float64) - np.asarray(spec.action_low, dtype=np.float64)
        )

    def close(self) -> None:
        self.env.close()

    def rerun(self, root: Path, row: Mapping[str, Any], policy: Any) -> RerunOutcome:
        from kosmos_env.campaign.artifacts import npy_bytes
        from kosmos_env.rollouts import run_episode

        found = RerunOutcome(str(row.get("episode_id")), str(row.get("policy")), row.get("outcome"))
        arts = row.get("artifacts") if isinstance(row.get("artifacts"), Mapping) else row
        try:
            stored = load_array(root / arts["actions"]) if arts.get("actions") else None
        except Exception as exc:  # noqa: BLE001 - an unreadable artifact is reported by the other checks
            found.error = f"its stored actions cannot be read ({exc})"
            return found
        try:
            result = run_episode(self.env, policy, int(row["env_seed"]), row["task"])
            outcome = result.outcome
            if outcome == "pending":
                outcome = self.judge.judge(result.rollout).outcome
        except Exception as exc:  # noqa: BLE001 - a policy or world that fails here is reported, not raised
            found.error = f"the re-run failed ({type(exc).__name__}: {exc})"
            return found
        found.outcome = outcome
        actions = np.asarray(result.rollout.actions)
        if stored is None:
            return found
        found.reproduced = sha256_hex(npy_bytes(actions)) == Path(arts["actions"]).name.split(".")[0]
        if not found.reproduced:
            n = min(len(actions), len(stored))
            same = [bool(np.array_equal(actions[i], stored[i])) for i in range(n)]
            found.diverged_at = same.index(False) if False in same else n
            if n and stored.ndim == 2 and stored.shape[1] == len(self.tolerance):
                gap = np.abs(actions[0].astype(np.float64) - stored[0].astype(np.float64))
                found.first_action_differs = bool(np.any(gap > self.tolerance))
            else:
                found.first_action_differs = True
        return found


def judge_reruns(
    found: Sequence[RerunOutcome], expectation: str, first_frame_ungenerated: bool
) -> tuple[list[str], list[str]]:
    """(problems, notes) for re-runs under ``expectation`` (see :data:`EXPECTED_AGREEMENT`)."""
    problems: list[str] = []
    notes: list[str] = []
    for f in found:
        if f.error:
            problems.append(f"{f.episode_id}: re-run: {f.error}")
            continue
        if f.reproduced:
            continue
        where = f"from stored action row {f.diverged_at}" if f.diverged_at is not None else ""
        if expectation == RERUN_EXACT:
            problems.append(
                f"{f.episode_id}: re-run: policy {f.policy!r} does not take its stored actions ({where}); "
                "the simulator is bit-deterministic, so the evidence is not this policy's"
            )
            continue
        if first_frame_ungenerated and f.first_action_differs:
            problems.append(
                f"{f.episode_id}: re-run: its stored first action is not what policy {f.policy!r} takes on the "
                "seed's first observation (which the world does not generate): the evidence is not this policy's"
            )
            continue
        if f.outcome != f.recorded:
            line = f"{f.episode_id}: re-run: policy {f.policy!r} gives {f.outcome}, {f.recorded} recorded"
            if expectation == RERUN_SEEDED:
                problems.append(
                    f"{line} (the same seed gives the same generation: the stored outcome is not this policy's)"
                )
            else:
                notes.append(line)
        elif f.diverged_at is not None:
            notes.append(f"{f.episode_id}: re-run: same outcome, actions depart {where} (rounding in the generation)")
    if expectation == RERUN_SAMPLED:
        for label in dict.fromkeys(f.policy for f in found):
            mine = [f for f in found if f.policy == label and not f.error and f.outcome is not None]
            b = sum(1 for f in mine if f.recorded == "success" and f.outcome != "success")
            c = sum(1 for f in mine if f.recorded != "success" and f.outcome == "success")
            p = sign_test_p(b, c)
            if p < SIGN_TEST_ALPHA:
                problems.append(
                    f"policy {label!r}: re-run in the recorded world, {b} recorded successes failed and {c} recorded "
                    f"failures succeeded (two-sided exact sign test p = {p:.2g} < {SIGN_TEST_ALPHA:g}): its "
                    "recorded outcomes are not what it does"
                )
    return problems, notes


def rederive_rows(
    root: Path,
    rows: Sequence[Mapping[str, Any]],
    judge_spec: Mapping[str, Any],
    spec: Mapping[str, Any],
    frames_of: Callable[[str], str | None] = lambda eid: None,
) -> tuple[list[str], list[str], int]:
    """(problems, warnings, episodes re-derived) for every finished episode of ``rows``."""
    rejudger = Rejudger(judge_spec, spec)
    problems: list[str] = []
    skipped: list[str] = []
    n = 0
    for row in rows:
        if row.get("outcome") in ("error", None):
            continue
        eid = row.get("episode_id")
        ev = load_evidence(root, row, frames_of(eid), want_frames=rejudger.reads_frames and rejudger.deterministic)
        found, done = rejudger.check(row, ev)
        problems += [f"{eid}: {p}" for p in found]
        n += int(done)
        if not done and not found and row.get("outcome") != "discarded":
            skipped.append(str(eid))
    warnings = []
    if skipped:
        why = (
            f"judge {rejudger.name} is not deterministic (its verdicts are taken as recorded)"
            if not rejudger.deterministic
            else f"judge {rejudger.name} reads frames the episodes did not keep"
        )
        warnings.append(f"{len(skipped)} episodes' outcomes not re-derived: {why}")
    return problems, warnings, n


def _same_json(a: Any, b: Any, tol: float = 1e-9) -> bool:
    """Equal as JSON values, floats within ``tol`` (a JSON round trip may change the last bits)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= tol * max(1.0, abs(a))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_same_json(a[k], b[k], tol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_json(x, y, tol) for x, y in zip(a, b, strict=True))
    return a == b
