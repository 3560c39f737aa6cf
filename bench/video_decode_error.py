"""Decode error of the stored MP4s, per writer, on real rollout frames: do the stated tolerances hold?

Two tolerances are stated for decoded video frames; both are checked here for both writers of
:func:`kosmos_env.utils.video.write_mp4` (``pyav``, in-process, the default; ``ffmpeg``, the
subprocess writer before it):

- ``kosmos-env verify --replay`` compares a stored video's decoded frames with the replay's
  lossless frames: every frame's luma within :data:`~kosmos_env.utils.video.MIN_LUMA_PSNR_DB`.
  The table gives each writer's worst frame (luma, and RGB for comparison) and, as what the check
  must tell apart from an honest video, the worst frame of *another* rollout's video of the same
  env against these frames (the highest over all pairs: a substituted video), and a decoded frame
  against the next, different original frame of its own rollout (one action apart; median).
- re-deriving a frame judge's verdict on an MP4-only campaign calls a recorded verdict wrong only
  when the re-derived probability lies more than :data:`~kosmos_env.campaign.rederive.LOSSY_MARGIN`
  past the threshold on the other side. Compression alone flips some frames' verdicts; the table
  gives how many, and how far past the threshold the decoded probability of a flipped frame lands
  (must stay below the margin, or verify would call an honest verdict wrong). The judge is the
  vision judge (``vision_frame``, 64x64 frames): on the learned world's frames and on the
  simulator's rendered at 64x64.

Rollouts: policies random, scripted:skill=0.6 and scripted:skill=1.0, on tuning seeds 200000+
(the tolerances are tuned numbers: no evaluation seed is read). Exit status 1 if a tolerance fails.

    python bench/video_decode_error.py [--episodes 8] [--out bench/results/video_decode_error.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from _report import load_average, save  # bench/_report.py: the script's folder is on sys.path

#: (label, env id, spec overrides): the simulator at the size campaigns store, and the 64x64 frames
#: the vision judge reads (learned world; simulator rendered at 64x64)
ENVS = (
    ("Tabletop-v1 128x128", "Kosmos-Tabletop-v1", {}),
    ("Tabletop-v1 64x64", "Kosmos-Tabletop-v1", {"image_size": [64, 64]}),
    ("TabletopLearned-v1 64x64", "Kosmos-TabletopLearned-v1", {}),
)
POLICIES = (("random", {}), ("scripted", {"skill": 0.6}), ("scripted", {"skill": 1.0}))
FIRST_SEED = 200000  # tuning range (kosmos_env/study/seed_ranges.json)


def rollouts(env_id: str, overrides: dict, episodes: int) -> list:
    import gymnasium

    import kosmos_env  # noqa: F401  (registers the env ids)
    from kosmos_env.policies import make_policy
    from kosmos_env.rollouts import run_episode

    env = gymnasium.make(env_id, **overrides)
    out = []
    try:
        for name, kwargs in POLICIES:
            policy = make_policy(name, **kwargs)
            out += [run_episode(env, policy, FIRST_SEED + i).rollout for i in range(episodes)]
            policy.close()
    finally:
        env.close()
    return out


def _rgb_psnr(decoded: np.ndarray, original: np.ndarray) -> np.ndarray:
    """PSNR over all three channels per frame (for comparison with the luma the tolerance reads)."""
    mse = ((decoded.astype(np.float64) - original) ** 2).reshape(len(original), -1).mean(axis=1)
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(255.0**2 / mse)


def measure(eps: list, encoder: str, tmp: str, judge) -> dict:
    """Decode error of ``encoder`` over the rollouts ``eps`` (see the module docstring)."""
    from kosmos_env.utils.video import luma_psnr, read_video, write_mp4

    decoded = []
    for k, rollout in enumerate(eps):
        path = os.path.join(tmp, f"{k}-{encoder}.mp4")
        write_mp4(path, rollout.frames, rollout.fps, encoder=encoder)
        decoded.append(read_video(path))
        assert decoded[-1].shape == rollout.frames.shape, (decoded[-1].shape, rollout.frames.shape)
    pairs = list(zip(decoded, eps, strict=True))
    own = np.concatenate([luma_psnr(d, r.frames) for d, r in pairs])
    rgb = min(_rgb_psnr(d, r.frames).min() for d, r in pairs)
    nxt = []
    for d, r in pairs:
        idx = np.nonzero(np.any(r.frames[1:] != r.frames[:-1], axis=(1, 2, 3)))[0]
        nxt.append(luma_psnr(d[idx], r.frames[idx + 1]))
    other = max(  # the best any other rollout's video does as a stand-in (its worst frame)
        float(luma_psnr(d[:n], r.frames[:n]).min())
        for i, d in enumerate(decoded)
        for j, r in enumerate(eps)
        if i != j and (n := min(len(d), len(r.frames)))
    )
    row = {
        "frames": len(own),
        "worst": float(own.min()),
        "p1": float(np.percentile(own, 1)),
        "rgb": float(rgb),
        "err": float(np.mean([np.abs(d.astype(np.int16) - r.frames).mean() for d, r in pairs])),
        "other": other,
        "next": float(np.median(np.concatenate(nxt))),
    }
    if eps[0].frames.shape[1:] == (64, 64, 3):
        past, flips = [], 0
        for d, r in zip(decoded, eps, strict=True):
            p_true, p_dec = judge.score_frames(r.frames, r.task), judge.score_frames(d, r.task)
            flip = (p_true >= judge.threshold) != (p_dec >= judge.threshold)
            flips += int(flip.sum())
            past += np.abs(p_dec[flip] - judge.threshold).tolist()
        row |= {"flips": flips, "past": max(past, default=0.0)}
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=8, help="episodes per env and policy")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "video_decode_error.txt"))
    args = ap.parse_args(argv)

    from kosmos_env.campaign.rederive import LOSSY_MARGIN
    from kosmos_env.judges import make_judge
    from kosmos_env.utils.video import ENCODERS, MIN_LUMA_PSNR_DB

    judge = make_judge({"type": "vision_frame"})
    lines = [
        f"decode error of stored MP4s on real rollout frames, {time.strftime('%Y-%m-%d %H:%M:%S')}",
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs (shared), "
        f"load average {load_average()}",
        f"stated tolerances: verify --replay: every decoded frame's luma >= {MIN_LUMA_PSNR_DB:g} dB PSNR; frame judge "
        f"re-derived from decoded frames: a verdict is called wrong only > {LOSSY_MARGIN:g} past the threshold",
        f"{args.episodes} episodes x {len(POLICIES)} policies per env, seeds {FIRST_SEED}+; PSNR in dB (luma, but the rgb column)",
        "",
        f"{'frames of':25s} {'writer':7s} {'frames':>6s} {'worst':>6s} {'p1':>6s} {'rgb':>6s} {'mean|err|':>9s} "
        f"{'other video':>11s} {'next frame':>10s} {'judge flips':>11s} {'past thr':>8s}",
    ]
    ok = True
    with tempfile.TemporaryDirectory(prefix="kosmos-decode-") as tmp:
        for label, env_id, overrides in ENVS:
            eps = rollouts(env_id, overrides, args.episodes)
            for encoder in ENCODERS:
                row = measure(eps, encoder, tmp, judge)
                ok &= row["worst"] >= MIN_LUMA_PSNR_DB > row["other"] and row.get("past", 0.0) < LOSSY_MARGIN
                judged = f"{row['flips']:11d} {row['past']:8.3f}" if "flips" in row else f"{'-':>11s} {'-':>8s}"
                lines.append(
                    f"{label:25s} {encoder:7s} {row['frames']:6d} {row['worst']:6.2f} {row['p1']:6.2f} "
                    f"{row['rgb']:6.2f} {row['err']:9.3f} {row['other']:11.2f} {row['next']:10.2f} {judged}"
                )
    lines += [
        "",
        "worst / p1: luma PSNR of the decoded frames against the frames encoded (worst must be >= the tolerance);",
        "rgb: the worst frame's PSNR over all three channels (yuv420p halves the chroma: not what the check reads);",
        "mean|err|: mean absolute error per channel value (0-255); other video: the highest worst-frame luma PSNR",
        "of another rollout's video against these frames (must be < the tolerance); next frame: median luma PSNR",
        "of a decoded frame against the next, different frame of its rollout (what a video shifted by one action",
        "shows; a shift also changes the frame count, checked first); judge flips: frames whose",
        "vision-judge verdict compression changes; past thr: how far past the threshold the decoded probability",
        "of a flipped frame lands (must be < the margin).",
        f"tolerances hold for both writers: {'yes' if ok else 'NO'}",
    ]
    text = "\n".join(lines)
    print(text)
    save(text, args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
