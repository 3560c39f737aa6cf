"""Is a world model a trustworthy evaluator? A walkthrough of the evaluator-validity study.

Run it as a script (``python examples/validity_study.py``) or cell by cell (``# %%`` cells work
in VS Code / Jupyter). It takes a few minutes on 2 CPU cores with the small settings below;
``kosmos-env study`` runs the full default study.

The idea: ``Kosmos-TabletopLearned-v1`` is a *learned* video world model of the MuJoCo tabletop
(trained with ``kosmos-env train-world``). Because its training world is a simulator, we know
the truth for every episode it imagines, so we can measure how far policy rankings made inside
the world model agree with the real ones — the question every world-model evaluator has to answer.
"""

# %% 1. Two worlds, one seed: the same first frame, then the simulator vs the model's imagination
import os

import gymnasium
import numpy as np

import kosmos_env  # noqa: F401  (registers the env ids)
from kosmos_env.policies import make_policy
from kosmos_env.rollouts import run_episode

OUT = os.environ.get("KOSMOS_STUDY_OUT", "validity_study_out")
sim = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64))
learned = gymnasium.make("Kosmos-TabletopLearned-v1")
policy = make_policy("scripted", skill=1.0)
a = run_episode(sim, policy, seed=100000, task="carrot_on_plate")
b = run_episode(learned, policy, seed=100000, task="carrot_on_plate")
print("simulator outcome (state judge, ground truth):", a.outcome)
print("learned world outcome (robot-log judge on the predicted gripper log):", b.outcome)
print("first frames identical:", bool(np.array_equal(a.rollout.frames[0], b.rollout.frames[0])))
err = ((a.rollout.frames.astype(float) - b.rollout.frames.astype(float)) / 255.0) ** 2
print("per-step MSE between the two videos:", np.round(err.mean(axis=(1, 2, 3))[[1, 5, 10, 20, 40]], 4))
print("seconds per rollout: simulator", round(a.timings["world"], 2), "learned", round(b.timings["world"], 2))

# %% 2. Judges for a world without state. The learned world has no simulator to ask, so it is
# judged from what it produces: the robot-log judge reads the predicted gripper/end-effector log,
# the vision judge (a frame classifier trained on simulator frames) reads the generated last frame.
from kosmos_env.judges import make_judge  # noqa: E402
from kosmos_env.judges.vision_frame import FrameVisionJudge  # noqa: E402

vision = FrameVisionJudge()
for name, result in (("simulator", a), ("learned", b)):
    print(
        name,
        "| robot_log:",
        make_judge("robot_log").judge(result.rollout).outcome,
        "| vision:",
        vision.judge(result.rollout).outcome,
    )

# %% 3. The study: policies of known order (and deceptive ones), paired seeds, every judge, the
# world, the simulator and the baselines that model nothing: the copy-first-frame world, the null
# world (grey frames) and two judges that read only the commands (a rule, and a logistic
# regression fitted on simulator episodes from training seeds).
from kosmos_env.study.analyze import analyze  # noqa: E402
from kosmos_env.study.report import write_report  # noqa: E402
from kosmos_env.study.run import StudyConfig, run_study  # noqa: E402

cfg = StudyConfig(
    policies=(
        "scripted:skill=1.0",
        "scripted:skill=0.6",
        "scripted:skill=0.3",
        "random",
        "deceptive:mode=grasp_miss,rate=1.0",
    ),
    seeds=int(os.environ.get("KOSMOS_STUDY_SEEDS", "4")),
    horizons=(10, 20, 30, 40),
)
study = run_study(cfg)
results = analyze(study)

# %% 4. Headline: does the world rank the policies like the simulator does, and better than a
# judge that reads only the commands? Every number has a bootstrap interval over (task, seed)
# units and a permutation p-value against a random ranking.
from kosmos_env.stats.uncertainty import format_difference, format_metric  # noqa: E402

print("truth (simulator success rates):", dict(zip(results["policies"], results["truth"]["rates"], strict=True)))
agr = results["agreement"]
for name, ev in agr["evaluators"].items():
    print(f"{name:32s} Kendall {format_metric(ev['kendall'])}")
# against the *best* baseline, chosen inside each bootstrap resample, for honest and deceptive
# policies apart: the deceptive ones are built to fool any judge that reads only the commands
for name, groups in agr["vs_best_baseline"].items():
    for group, d in groups.items():
        print(
            f"{name:20s} {group:10s} Kendall minus best baseline: {format_difference(d['kendall'])} "
            f"(best: {d['kendall']['best_baseline']})"
        )

# %% 5. Where does it drift? Each episode cut at H, judged at H, against the simulator's state at H.
for h, a in results["horizon"]["agreement"].items():
    print(h, {n: format_metric(e) for n, e in a["evaluators"].items()})
print("open-loop frame error vs copy-last-frame:", results["frame_error"].get("ratio"))

# %% 6. The full report: Markdown, PNG plots and every number as JSON. Without a registration made
# before the run (``kosmos-env register --study ...``) it is labelled exploratory on every page.
files = write_report(results, study, OUT, status="exploratory")
print("open", files["report"], "— plots:", sorted(str(p) for k, p in files.items() if k.endswith(".png")))
sim.close()
learned.close()
