"""A progress-judged Bridge step on a GPU: seconds per step (world + VLM progress judge), one env and a
batched vector env, and the real Bridge episode's progress curve.

Needs a CUDA GPU and the real weights: ``nvidia/Cosmos3-Nano`` (the world; ``$KOSMOS_COSMOS3_NANO_PATH``
or ``--world-weights``) and the progress judge's pinned ``nvidia/Cosmos-Reason1-7B`` (``$KOSMOS_VLM_JUDGE_PATH``
or ``--judge-weights``; the Hugging Face cache is read too). Without either it prints one line saying
what is missing and exits with status 2: nothing is measured, nothing is made up.

What it does, in order:

1. **The curve.** The VLM progress judge (``{"type": "vlm_progress"}``, its pinned model, revision and
   prompt) reads the real Bridge episode shipped with the package chunk by chunk (first frame, then 9
   chunks of 4 frames at 240x320, as the env feeds it) and a frozen copy, exactly as
   ``kosmos-env judge-check --progress`` does; the script prints both curves, the Spearman correlation of
   progress with the chunk index and READY / NOT READY (real rises, frozen does not).
2. **One env.** ``gymnasium.make("Kosmos-Bridge-v1", reward={"mode": "progress", "step_judge":
   {"type": "vlm_progress"}})`` (terminal judging deferred: only the per-step reward is timed), hold
   actions for ``--steps`` steps after a warm-up step: median seconds of the world call, of the step
   judge and of the whole step.
3. **A vector env.** ``gymnasium.make_vec(..., num_envs=N, vectorization_mode="vector_entry_point")``
   for each ``--num-envs`` value N > 1: the N sub-envs' world calls run as one batched call and their
   chunks as one ``score_progress`` call of one loaded judge; median seconds per vector step and per
   episode-step, and the judge's seconds per call.

The judge is loaded once and handed to every env (``step_judge=``), so the GPU holds one world and one
judge. Results go to stdout and, with ``--out``, to ``OUT.json``.

    python bench/gpu/progress_bridge.py --out bench/results/gpu_progress_bridge          # on a GPU machine
    python bench/gpu/progress_bridge.py --smoke                                            # anywhere (tiny random models, CPU)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

ENV_ID = "Kosmos-Bridge-v1"
REWARD = {"mode": "progress", "step_judge": {"type": "vlm_progress"}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world-weights", default=None, help="Cosmos3-Nano folder (default: $KOSMOS_COSMOS3_NANO_PATH)")
    p.add_argument("--judge-weights", default=None, help="Cosmos-Reason1-7B folder (default: $KOSMOS_VLM_JUDGE_PATH)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per env after one warm-up step (default 5)")
    p.add_argument("--num-envs", type=int, nargs="*", default=[4], help="vector env sizes to time (default 4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write OUT.json")
    p.add_argument("--smoke", action="store_true", help="tiny random models on CPU: checks the script runs")
    args = p.parse_args(argv)
    if args.steps < 1 or any(n < 2 for n in args.num_envs):
        p.error("--steps must be >= 1 and every --num-envs >= 2")
    return args


def fail(line: str) -> int:
    print(f"progress_bridge: {line}")
    return 2


def setup(args: argparse.Namespace) -> tuple[dict, dict, dict] | str:
    """(env kwargs, judge spec, device info), or the one line saying why nothing can run."""
    import torch

    from kosmos_env.spec import load_spec

    spec = load_spec(ENV_ID).with_overrides(reward=REWARD)
    judge = dict(spec.reward["step_judge"])
    if args.smoke:
        from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec
        from kosmos_env.testing.tiny_run import TINY_JUDGE_MODEL_ID, tiny_cosmos3_dir, tiny_judge_dir

        env_kwargs = {
            # random frames can look collapsed to the gate, which would end episodes before the judge runs
            "env_spec": tiny_bridge_spec(gate={"enabled": False}),
            "world_kwargs": {"weights_path": tiny_cosmos3_dir()},
        }
        judge.update(
            local_path=tiny_judge_dir(),
            model_id=TINY_JUDGE_MODEL_ID,
            revision=None,
            max_new_tokens=8,
            max_pixels=56 * 56,
        )
        return env_kwargs, judge, {"device": "cpu (smoke: tiny random models, numbers meaningless)"}
    if not torch.cuda.is_available():
        return "no CUDA GPU visible: this script times the real models on a GPU (--smoke checks it runs on CPU)"
    from kosmos_env.required_weights import missing_weights

    if args.judge_weights:
        judge["local_path"] = args.judge_weights
    world_kwargs = {"weights_path": args.world_weights} if args.world_weights else {}
    spec = spec.with_overrides(reward={"mode": "progress", "step_judge": judge})
    missing = missing_weights(spec, world_kwargs, judge={"type": "state"})
    if missing:
        return f"missing weights, nothing measured: {' | '.join(missing)}"
    props = torch.cuda.get_device_properties(0)
    info = {"device": props.name, "gpu_memory_gib": round(props.total_memory / 2**30, 1)}
    return {"world_kwargs": world_kwargs}, judge, info


def time_env(env, steps: int, hold, judge) -> dict:
    """Median seconds of the world call, the step judge and the whole step over ``steps`` judged steps
    (after a warm-up step). A step the gate discards calls no judge: it is counted, not timed."""
    env.reset(seed=0)
    world, step_judge, total = [], [], []
    discarded = tries = 0
    while len(total) < steps and tries < 3 * steps + 1:
        t0 = time.perf_counter()
        _, _, terminated, truncated, info = env.step(hold)
        dt = time.perf_counter() - t0
        timings = env.unwrapped.last_step_timings
        discarded += info.get("outcome") == "discarded"
        if tries > 0 and "step_judge" in timings:  # the first step warms the kernels up
            world.append(timings.get("world", 0.0))
            step_judge.append(timings["step_judge"])
            total.append(dt)
        tries += 1
        if terminated or truncated:
            env.reset(seed=tries)
    if not total:
        raise RuntimeError(f"no step reached the progress judge in {tries} steps ({discarded} discarded by the gate)")
    return {
        "world_s": statistics.median(world),
        "step_judge_s": statistics.median(step_judge),
        "step_s": statistics.median(total),
        "steps": len(total),
        "discarded": discarded,
    }


def time_vector(make_vec, n: int, steps: int, hold, judge) -> dict:
    """Median seconds per vector step in which the judge ran (one call for every sub-env stepping)."""
    import numpy as np

    vec = make_vec(n)
    try:
        vec.reset(seed=list(range(n)))
        per_step, per_call, rows = [], [], []
        actions = np.stack([hold] * n)
        tries = 0
        while len(per_step) < steps and tries < 3 * steps + 1:
            calls0, rows0 = judge.calls, judge.rows
            t0 = time.perf_counter()
            vec.step(actions)
            dt = time.perf_counter() - t0
            if judge.calls - calls0 > 1:
                raise RuntimeError(f"{judge.calls - calls0} judge calls in one vector step; expected one")
            if tries > 0 and judge.calls - calls0 == 1:  # not a warm-up or an autoreset step
                per_step.append(dt)
                per_call.append(max(e.unwrapped.last_step_timings.get("step_judge", 0.0) for e in vec.envs))
                rows.append(judge.rows - rows0)
            tries += 1
        if not per_step:
            raise RuntimeError(f"no vector step reached the progress judge in {tries} steps")
        return {
            "num_envs": n,
            "vector_step_s": statistics.median(per_step),
            "episode_step_s": statistics.median(per_step) / n,
            "step_judge_s": statistics.median(per_call),
            "chunks_per_judge_call": rows,
            "world_batches": vec.batcher.batches[-3:],
            "judge_batches": vec.progress_batcher.batches[-3:],
        }
    finally:
        vec.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        return fail(f"needs the models extra (pip install -e '.[models]'): {exc}")
    ready = setup(args)
    if isinstance(ready, str):
        return fail(ready)
    env_kwargs, judge_spec, device = ready
    import gymnasium
    import numpy as np

    import kosmos_env  # noqa: F401  (registers the env ids)
    from kosmos_env.checks.progress_readiness import check_progress_judge
    from kosmos_env.judges import make_judge

    reward = {"mode": "progress", "step_judge": judge_spec}
    t0 = time.perf_counter()
    judge = make_judge(dict(judge_spec))
    load_s = time.perf_counter() - t0
    print(
        f"device: {device['device']}; judge {judge.model_identity.get('path') or judge.model_id} loaded in {load_s:.1f}s"
    )

    # 1. the real episode's progress curve
    size = (240, 320) if not args.smoke else tuple(env_kwargs["env_spec"].image_size)
    report = check_progress_judge(judge, size, judge_spec)
    print(report.format())

    # 2. one env, 3. vector envs: the same loaded judge in every env
    common = {"judge": "state", "defer_judging": True, "reward": reward, "step_judge": judge, **env_kwargs}
    hold = np.zeros((4, 7), np.float32)
    hold[:, 6] = 1.0
    env = gymnasium.make(ENV_ID, **common)
    single = time_env(env, args.steps, hold, judge)
    world_identity = env.unwrapped.provenance["world"]
    env.close()
    print(
        f"one env: step {single['step_s']:.2f}s = world {single['world_s']:.2f}s + progress judge "
        f"{single['step_judge_s']:.2f}s (median of {single['steps']}; {single['discarded']} discarded by the gate)"
    )
    vectors = []
    for n in args.num_envs:

        def make_vec(k: int):
            return gymnasium.make_vec(ENV_ID, num_envs=k, vectorization_mode="vector_entry_point", **common)

        row = time_vector(make_vec, n, args.steps, hold, judge)
        vectors.append(row)
        print(
            f"vector env x{n}: {row['vector_step_s']:.2f}s per vector step ({row['episode_step_s']:.2f}s per "
            f"episode-step), progress judge {row['step_judge_s']:.2f}s for {max(row['chunks_per_judge_call'])} chunks "
            f"in one call"
        )
    result = {
        "env_id": ENV_ID,
        "smoke": args.smoke,
        "device": device,
        "host": platform.node(),
        "judge": judge.spec,
        "judge_model": judge.model_identity,
        "judge_load_s": load_s,
        "world": world_identity,
        "curve": report.to_dict(),
        "one_env": single,
        "vector": vectors,
    }
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
        with open(args.out + ".json", "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1, default=str)
        print(f"wrote {args.out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
