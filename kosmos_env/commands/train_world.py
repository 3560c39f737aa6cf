"""``kosmos-env train-world``: record tabletop episodes, train the learned tabletop, measure it.

One command trains the whole world on CPU (defaults: 7 policies × 4 tasks × 16 seeds recorded,
5–20 minutes; 400 segmenter, 1500 object-dynamics and 2000 renderer steps (batch 16); measured
per stage on a shared 2-core machine: about 8, 4 and 12 minutes)::

    kosmos-env train-world --data /tmp/kosmos_tabletop_episodes.npz \\
        --out-dir kosmos_env/worlds/tabletop_learned/weights --error-report bench/results/learned_world_error.txt

The world's last stage is a slip predictor (a small MLP: the per-step hazard that a held object
leaves fingers still commanded closed; what then happens is a fixed rule; see
``kosmos_env.worlds.tabletop_learned.slip``). It has its own seeded generator, so the other
networks come out the same with or without it. ``--parts slip --objects-from FILE`` keeps every
network of FILE bit for bit and trains only a new slip predictor (seconds; the data are read or
recorded as usual); ``--slip-steps 0`` trains a world without one.

``--objects-from FILE`` keeps the segmenter and object dynamics of an existing weights file and
trains only the renderer (the file's sha256 goes into the weights' metadata,
``objects_from_sha256``). The shipped weights are the output of the full command above, with
``--data`` pointing at its own recording; a second run reproduces every tensor bit for bit (only
the metadata's command line and training time differ).

Closed-loop data (issue 41): ``--pieces DIR`` records the mix one resumable piece per policy (any
policy spec, ``ckpt:path=FILE`` included; pieces already in DIR are kept), merges them into
``--data`` with each episode's policy label and trains on the merge; ``--policies-from MANIFEST``
takes the mix from a policy-pool manifest's world pool (checked disjoint from its held-out pools,
file by file); ``--record-only`` stops once the data are written. Recorded seeds stay in the
training range. The weights' metadata lists the mix (``policies``), episodes per policy and, for
merged pieces, each policy's content hash::

    kosmos-env train-world --policies-from bench/results/world_v2/policy_pools.json \
        --pieces /data/world_v2/pieces --data /data/world_v2/episodes.npz --record-only --record-workers 2

It writes ``world.safetensors`` (segmenter, object dynamics and renderer in one file),
``vision_judge.safetensors`` (the frame classifier that judges generated rollouts) and a
held-out error table against the copy-last-frame baseline at steps 1..20 from the first frame.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train-world",
        help="train the learned tabletop world model (and its vision judge) on CPU",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--data", default=None, help="episodes .npz: read if it exists, else recorded and written there")
    p.add_argument("--seeds-per-task", type=int, default=16, help="recorded seeds per (policy, task) (default 16)")
    mix = p.add_mutually_exclusive_group()
    mix.add_argument(
        "--policies", nargs="+", default=None, help="policy mix to record (default: scripted at 6 skills + random)"
    )
    mix.add_argument(
        "--policies-from",
        default=None,
        metavar="MANIFEST",
        help="record the world-training pool of this policy-pool manifest (JSON; its held-out pools are refused "
        "as training data by construction)",
    )
    p.add_argument(
        "--pieces",
        default=None,
        metavar="DIR",
        help="record one resumable piece per policy under DIR (pieces already there are kept), merge them in "
        "the mix's order (into --data when given) and train on the merge",
    )
    p.add_argument(
        "--seed-offset",
        type=int,
        default=0,
        help="recorded seeds are OFFSET + 1000*task + [0, seeds per task), in the training range (default 0)",
    )
    p.add_argument("--record-workers", type=int, default=1, help="processes recording pieces side by side (default 1)")
    p.add_argument("--record-only", action="store_true", help="record (and merge) the data, train nothing")
    p.add_argument(
        "--holdout", type=float, default=0.15, help="fraction of each task's seeds held out whole (default 0.15)"
    )
    p.add_argument("--steps", type=int, default=2000, help="renderer training steps (default 2000)")
    p.add_argument("--segmenter-steps", type=int, default=400, help="segmenter training steps (default 400)")
    p.add_argument("--dynamics-steps", type=int, default=1500, help="object-dynamics training steps (default 1500)")
    p.add_argument("--batch", type=int, default=16, help="frames per renderer training step (default 16)")
    p.add_argument("--judge-steps", type=int, default=600, help="vision-judge training steps (default 600)")
    p.add_argument(
        "--parts",
        nargs="+",
        choices=["world", "judge", "slip"],
        default=["world", "judge"],
        help="what to train (default: world and judge; the world's last stage is its slip predictor). "
        "'slip' without 'world': only a new slip predictor over --objects-from's networks",
    )
    p.add_argument(
        "--objects-from",
        default=None,
        metavar="WEIGHTS",
        help="reuse this world.safetensors' segmenter and object dynamics; train only the renderer "
        "(with --parts slip: keep all its networks; train only the slip predictor)",
    )
    p.add_argument(
        "--slip-steps",
        type=int,
        default=500,
        help="slip-predictor full-batch steps, the world's last stage (default 500; 0: no slip predictor)",
    )
    p.add_argument(
        "--slip-threshold",
        type=float,
        default=0.3,
        help="hazard threshold stored with the slip predictor (default 0.3, chosen on validation seeds)",
    )
    p.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    p.add_argument(
        "--channels", type=int, nargs=4, default=[12, 24, 32, 48], help="renderer U-Net widths (default 12 24 32 48)"
    )
    p.add_argument("--error-horizon", type=int, default=20, help="steps of the held-out error table (default 20)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        choices=[1, 2],
        help="torch CPU threads (default 1: on shared cores one thread wastes no time spinning)",
    )
    p.add_argument("--out-dir", default="learned_tabletop", help="where the .safetensors files go")
    p.add_argument("--error-report", default=None, help="also write the held-out error table here")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args) -> int:
    import numpy as np

    from kosmos_env.spec import load_spec
    from kosmos_env.training.world_data import MERGED_FORMAT
    from kosmos_env.worlds.tabletop_learned import dataset as ds
    from kosmos_env.worlds.tabletop_learned import train as tr
    from kosmos_env.worlds.tabletop_learned.model import save_weights

    for flag in ("steps", "segmenter_steps", "dynamics_steps", "error_horizon"):
        if getattr(args, flag) < 1:
            print(f"error: --{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}", file=sys.stderr)
            return 2
    if args.slip_steps < 0 or not 0.0 < args.slip_threshold < 1.0:
        print(
            f"error: --slip-steps must be >= 0 and --slip-threshold in (0, 1), got {args.slip_steps} and "
            f"{args.slip_threshold}",
            file=sys.stderr,
        )
        return 2
    slip_only = "slip" in args.parts and "world" not in args.parts
    if slip_only and (not args.objects_from or args.slip_steps < 1):
        print(
            "error: --parts slip trains a slip predictor over an existing world: it needs --objects-from WEIGHTS "
            "and --slip-steps >= 1",
            file=sys.stderr,
        )
        return 2
    if args.objects_from:
        problem = tr.object_networks_problem(args.objects_from)
        if problem:
            print(f"error: --objects-from {args.objects_from}: {problem}", file=sys.stderr)
            return 2
    if args.record_only and not (args.data or args.pieces):
        print("error: --record-only keeps nothing without --data FILE or --pieces DIR", file=sys.stderr)
        return 2
    if args.record_workers < 1:
        print(f"error: --record-workers must be >= 1, got {args.record_workers}", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    try:
        episodes, data_meta = _episodes(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.record_only:
        counts = np.bincount(episodes.policy, minlength=len(episodes.policy_names))
        print(f"{len(episodes)} episodes of {len(episodes.policy_names)} policies; trained nothing (--record-only)")
        for name, n in zip(episodes.policy_names, counts, strict=True):
            print(f"  {n:5d}  {name}")
        return 0
    world = load_spec(ds.REFERENCE_ENV).world
    train_eps, held_eps = ds.split_by_seed(episodes, args.holdout)
    print(
        f"{len(train_eps)} training episodes, {len(held_eps)} held-out episodes "
        f"(held-out seeds: {sorted(set(held_eps.seed.tolist()))})",
        file=sys.stderr,
    )
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    command = "kosmos-env train-world " + _args_text(args)
    text = ""
    if "world" in args.parts:
        cfg = tr.TrainConfig(
            steps=args.steps,
            batch=args.batch,
            seed=args.seed,
            segmenter_steps=args.segmenter_steps,
            dynamics_steps=args.dynamics_steps,
            threads=args.threads,
            model={"channels": list(args.channels)},
            objects_from=args.objects_from,
            slip_steps=args.slip_steps,
            slip_threshold=args.slip_threshold,
        )
        train_data, held_data = tr.prepare(train_eps, world), tr.prepare(held_eps, world)
        t0 = time.perf_counter()
        object_text = []

        def report_dynamics(stage, partial_model):
            res = tr.object_error(partial_model, held_data, world, threads=args.threads)
            object_text.append(tr.format_object_table(res))
            print(
                f"held-out object state after the {stage} stage (from the first frame, no rendering):\n"
                f"{object_text[-1]}\n",
                file=sys.stderr,
                flush=True,
            )

        model, history = tr.train(train_data, cfg, progress=not args.quiet, after_stage=report_dynamics)
        train_seconds = time.perf_counter() - t0
        result = tr.multistep_error(model, held_data, world, horizon=args.error_horizon, threads=args.threads)
        provenance = {
            "command": command,
            "train_seconds": round(train_seconds, 1),
            "steps": cfg.steps,
            "batch": cfg.batch,
            "seed": cfg.seed,
            "policies": list(episodes.policy_names),
            "policy_episodes": dict(
                zip(
                    episodes.policy_names,
                    np.bincount(episodes.policy, minlength=len(episodes.policy_names)).tolist(),
                    strict=True,
                )
            ),
            "tasks": list(episodes.task_names),
            "train_episodes": len(train_eps),
            "heldout_episodes": len(held_eps),
            "heldout_seeds": sorted(set(int(s) for s in held_eps.seed)),
            "heldout_error": result,
            "history": [h for h in history if h[1] == max(x[1] for x in history if x[0] == h[0])],
        }
        if data_meta and data_meta.get("format") == MERGED_FORMAT:
            # what each policy label stands for: a ckpt: path names a file, its content hash the weights
            provenance["policy_hashes"] = {k: v["policy_hash"] for k, v in data_meta["policies"].items()}
            provenance["data_settings"] = data_meta["settings"]
        if cfg.objects_from:
            provenance["objects_from_sha256"] = history[0][2]
        save_weights(model, out / "world.safetensors", provenance)
        table = tr.format_error_table(result)
        stages = (
            f"segmenter and dynamics reused from sha256 {history[0][2][:12]}..., "
            if cfg.objects_from
            else f"{cfg.segmenter_steps} segmenter, {cfg.dynamics_steps} dynamics, "
        )
        text = (
            f"Held-out prediction error of the learned tabletop (Kosmos-TabletopLearned-v1) vs copying the last\n"
            f"true frame the world saw (its first frame). The whole world runs open loop from each episode's\n"
            f"first frame, as the env does (1 action per model call): per-pixel MSE in [0, 1] units, the\n"
            f"object's centre error (cm) against the simulator, and the predicted measured gripper's error.\n"
            f"command: {command}\n"
            f"{result['n_episodes']} held-out episodes (whole seeds held out per task); training "
            f"{train_seconds:.0f} s ({stages}{cfg.steps} renderer steps x batch {cfg.batch})\n\n{table}\n"
            f"\nobject state over whole held-out episodes (40 steps, from the first frame):\n{object_text[0]}\n"
        )
        beats = all(m < c for m, c in zip(result["model_mse"], result["copy_mse"], strict=True))
        text += f"\nbelow copy-last-frame at every horizon 1..{len(result['horizons'])}: {'yes' if beats else 'NO'}\n"
        print(text)
        if args.error_report:
            Path(args.error_report).parent.mkdir(parents=True, exist_ok=True)
            Path(args.error_report).write_text(text)
    if slip_only:
        cfg = tr.TrainConfig(
            seed=args.seed, threads=args.threads, slip_steps=args.slip_steps, slip_threshold=args.slip_threshold
        )
        train_data, held_data = tr.prepare(train_eps, world), tr.prepare(held_eps, world)
        model, history, base_sha, info = tr.train_slip_only(args.objects_from, train_data, cfg)
        held = tr.slip_error(model, held_data)
        info.pop("config", None)
        info.update(
            {"slip_command": command, "slip_from_sha256": base_sha, "slip_history": history, "slip_heldout": held}
        )
        save_weights(model, out / "world.safetensors", info)
        print(
            f"slip predictor over {args.objects_from} (sha256 {base_sha[:12]}...): trained on "
            f"{history[0][3]} held steps ({history[0][4]} slips); held out: {json.dumps(held)}"
        )
    if "judge" in args.parts:
        from kosmos_env.judges import vision_frame as vj

        judge_model, judge_eval = vj.train_classifier(
            train_eps, held_eps, steps=args.judge_steps, seed=args.seed, progress=not args.quiet
        )
        vj.save_classifier(judge_model, out / "vision_judge.safetensors", {"command": command, "heldout": judge_eval})
        line = f"\nvision judge (frame classifier) on held-out simulator frames: {json.dumps(judge_eval)}\n"
        print(line)
        if args.error_report and "world" in args.parts:
            with open(args.error_report, "a") as fh:
                fh.write(line)
    print(f"wrote {out}/ in {time.perf_counter() - t_start:.0f} s", file=sys.stderr)
    return 0


def _episodes(args):
    """(episodes, their meta or None): merged from --pieces, read from an existing --data, or recorded
    (and written to --data when given). ValueError with one line when the request cannot be met."""
    from kosmos_env.training import world_data as wd
    from kosmos_env.worlds.tabletop_learned import dataset as ds

    if args.policies_from:
        specs = [entry["spec"] for entry in wd.world_pool(args.policies_from)]
    else:
        specs = list(args.policies) if args.policies else list(ds.DEFAULT_POLICIES)
    settings = wd.RecordSettings(seeds_per_task=args.seeds_per_task, seed_offset=args.seed_offset)
    if args.pieces:
        pieces = wd.collect(
            specs,
            args.pieces,
            settings,
            workers=args.record_workers,
            progress=not args.quiet,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
        episodes, meta = wd.merge_pieces(pieces)
        if args.data:
            episodes.save(args.data, meta)
        print(f"merged {len(pieces)} pieces: {len(episodes)} episodes" + (f" into {args.data}" if args.data else ""))
        return episodes, meta
    if args.data and Path(args.data).is_file():
        episodes = ds.Episodes.load(args.data)
        print(f"read {len(episodes)} episodes from {args.data}", file=sys.stderr)
        return episodes, ds.read_meta(args.data)
    problem = settings.problem()
    if problem:
        raise ValueError(problem)
    from kosmos_env.policies import make_policy, parse_policy_arg

    built = {p: make_policy(n, **kw) for p, (n, kw) in ((p, parse_policy_arg(p)) for p in specs)}
    episodes = ds.record(
        built, seeds_per_task=args.seeds_per_task, seed_offset=args.seed_offset, progress=not args.quiet
    )
    if args.data:
        episodes.save(args.data)
    return episodes, None


def _args_text(args) -> str:
    parts = []
    for key, value in sorted(vars(args).items()):
        if key in ("func", "command") or value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif isinstance(value, (list, tuple)):
            parts.append(flag + " " + " ".join(str(v) for v in value))
        else:
            parts.append(f"{flag} {value}")
    return " ".join(parts)
