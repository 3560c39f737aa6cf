"""`kosmos-env eval`: run (or resume) a campaign of policies × tasks × seeds and rank the policies.

Episodes go into a crash-safe SQLite ledger in ``--out``; rerunning the same command after a
crash finishes exactly the missing episodes. At the end the results bundle (results.json,
episodes.parquet, manifest.json, artifacts) is rewritten and a ranking table is printed.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_ENV = "Kosmos-Tabletop-v1"
DEFAULT_SEEDS = 5


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="run or resume a campaign (policies × tasks × seeds) and print a ranking table",
        description="Run a paired campaign: every policy sees the same tasks, seeds and initial scenes. "
        "Results go to a crash-safe ledger in --out; rerun the same command to resume.",
    )
    # design flags default to None so that, with --registration, a flag given can be told from one not given
    p.add_argument("--env", default=None, help=f"registered env id (default: {DEFAULT_ENV})")
    p.add_argument(
        "--policy",
        action="append",
        default=None,
        metavar="NAME[:k=v,...]",
        help="a policy (repeat for each), e.g. scripted:skill=0.6 or random (required without --registration)",
    )
    p.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        help="task names (space or comma separated) or 'all' (default: all tasks of the suite)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        metavar="N",
        help=f"seeds per task: N consecutive seeds from --seed-offset (default: {DEFAULT_SEEDS})",
    )
    p.add_argument(
        "--seed-offset",
        type=int,
        default=None,
        metavar="K",
        help="first seed: the campaign runs seeds K..K+N-1 on every task (default: the first evaluation seed "
        "of kosmos_env/study/seed_ranges.json, 100000; seeds 0-99999 are the training scenes of the learned "
        "world and judges, and a campaign on training or tuning seeds says so). A folder that already "
        "holds a campaign resumes on the seeds it recorded",
    )
    p.add_argument("--repeats", type=int, default=None, help="repeats of each (task, seed) cell (default: 1)")
    p.add_argument(
        "--registration",
        default=None,
        metavar="REG.json",
        help="run exactly the design of a registration written by `kosmos-env register`; design flags "
        "given as well must match it, and any deviation is refused",
    )
    p.add_argument("--out", required=True, help="campaign folder (ledger, artifacts, results bundle)")
    p.add_argument("--workers", type=int, default=1, help="parallel workers (default: %(default)s)")
    from kosmos_env.utils.threads import add_threads_argument

    add_threads_argument(
        p,
        default="max(1, cores // processes) per worker process, --judge-workers counted; per Ray actor, its "
        "num_cpus; workers x threads <= cores. Recorded in results.json, campaign.worker_threads",
    )
    p.add_argument(
        "--lockstep",
        type=int,
        default=1,
        metavar="N",
        help="each worker (process or Ray actor) runs N episodes side by side through one vector env; on "
        "Kosmos-Bridge-v1 a step's world calls run as one batched model call; a lane whose episode "
        "ended takes the next one at once. Same records as N=1 (default: %(default)s)",
    )
    p.add_argument(
        "--executor",
        choices=("auto", "in-process", "process", "ray"),
        default="auto",
        help="auto: in this process for 1 worker, a spawn process pool for more; ray: --workers Ray "
        "actors (needs the ray extra) (default: %(default)s)",
    )
    p.add_argument(
        "--address",
        default=None,
        help="Ray cluster to join (e.g. auto or ray://head:10001); default: start a local Ray instance",
    )
    p.add_argument("--ray-num-cpus", type=float, default=None, help="CPUs of the local Ray instance (default: all)")
    p.add_argument(
        "--actor-resources",
        default=None,
        metavar="JSON",
        help='Ray resources per worker actor, e.g. \'{"num_gpus": 1}\' (default: {"num_cpus": 1})',
    )
    p.add_argument(
        "--judge-workers",
        type=int,
        default=0,
        metavar="N",
        help="judge as its own stage: N judge workers (processes, or Ray actors with --executor ray) take "
        "rolled-out episodes in batches while the --workers rollout workers, which load no judge, "
        "keep rolling out; 0 judges in-line in each worker (default: %(default)s)",
    )
    p.add_argument(
        "--judge-batch",
        type=int,
        default=None,
        metavar="N",
        help="rollouts a judge worker takes at a time (default: the judge's own batch_size, which its "
        "memory_budget_mb may split further; 1 for judges that do not batch)",
    )
    p.add_argument(
        "--rollout-resources",
        default=None,
        metavar="JSON",
        help="Ray resources per rollout actor (policy + world + gate), e.g. '{\"num_gpus\": 1}'; same as "
        "--actor-resources",
    )
    p.add_argument(
        "--judge-resources",
        default=None,
        metavar="JSON",
        help="Ray resources per judge actor (with --judge-workers), e.g. '{\"num_gpus\": 0.25}' to pack "
        'four judges on a GPU (default: {"num_cpus": 1})',
    )
    p.add_argument("--judge", default=None, help="judge type (e.g. state) or JSON spec; default: the env spec's judge")
    p.add_argument(
        "--tiny",
        action="store_true",
        help="run with tiny random models (Cosmos 3 world, Qwen-VL judge; built once in ~/.cache/kosmos-env): "
        "the whole campaign runs on a laptop CPU, results mean nothing; every result's provenance "
        "names the tiny weights",
    )
    p.add_argument(
        "--image-size",
        type=int,
        nargs=2,
        metavar=("H", "W"),
        default=None,
        help="override the spec's image size (changes the spec hash)",
    )
    p.add_argument("--no-video", action="store_true", help="do not keep MP4s of the rollouts")
    p.add_argument(
        "--control",
        choices=["shuffled"],
        default=None,
        help="shuffled: run the campaign in a control world that executes, at each step, a command drawn "
        "from the episode's earlier commands instead of the one given (any world; its spec hash "
        "differs). An evaluator whose ranking survives this control is not reading the commands",
    )
    p.add_argument(
        "--price-table",
        default=None,
        metavar="FILE|JSON",
        help='device prices, e.g. \'{"accelerator_per_hour": {"cpu": 0, "h100": 2.5}, "world": "h100", '
        '"policy": "h100", "judge": "h100"}\' (see kosmos_env/campaign/cost.py)',
    )
    p.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        help="tries per episode before a failure of the policy itself is an error; infrastructure "
        "failures (server unreachable, out of memory, worker killed) never count and are retried "
        "by the next run (default: %(default)s)",
    )
    p.add_argument(
        "--retry-errors",
        action="store_true",
        help="retry episodes that ended in error in an earlier run (the policy's own failures)",
    )
    p.add_argument(
        "--lease-seconds",
        type=float,
        default=120.0,
        help="lease length; a worker silent this long loses its episode (default: %(default)s)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--json", action="store_true", help="print results.json's aggregated section as JSON instead of a table"
    )
    p.add_argument(
        "--wandb",
        nargs="?",
        const="kosmos-env",
        default=None,
        metavar="PROJECT",
        help="log the spec, each episode as it finishes (with running success rates), sampled rollout "
        "videos, the episode table and per-policy summaries to W&B (project PROJECT, default "
        "kosmos-env; honours WANDB_MODE=offline)",
    )
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from kosmos_env.campaign.bundle import format_ranking
    from kosmos_env.campaign.cost import PriceTable, format_cost
    from kosmos_env.campaign.design import make_config
    from kosmos_env.campaign.bundle import error_summary
    from kosmos_env.campaign.executors import make_executor
    from kosmos_env.campaign.lockstep import check_lockstep
    from kosmos_env.campaign.preflight import check_judge, check_policies, check_weights
    from kosmos_env.campaign.runner import run_campaign
    from kosmos_env.campaign.worker import WorkSettings
    from kosmos_env.utils.fileio import check_writable_path
    from kosmos_env.utils.seed_ranges import evaluation_start, overlap_line
    from kosmos_env.utils.threads import ThreadChoice, busy_note, threads_problem

    from kosmos_env.errors import missing_extra_line

    # an optional package a flag needs is named before any work (a missing wandb would otherwise
    # surface after the campaign as a logger error, a missing Ray as a traceback)
    needs = [("wandb", "--wandb")] if args.wandb else []
    needs += [("ray", "--executor ray")] if args.executor == "ray" else []
    missing = [line for module, who in needs if (line := missing_extra_line(module, who))]
    if missing:
        raise RuntimeError("; ".join(missing))
    tasks = [t for item in args.tasks or ["all"] for t in item.split(",") if t]
    if getattr(args, "tiny", False):
        from kosmos_env.testing.tiny_run import apply_tiny

        tiny_judge = apply_tiny(args.env or DEFAULT_ENV)  # points the world at the tiny weights (os.environ)
        if args.judge is None:
            args.judge = json.dumps(tiny_judge)
    if args.max_attempts < 1:
        raise ValueError("--max-attempts must be at least 1")
    if args.threads is not None and (problem := threads_problem(args.threads)):
        raise ValueError(problem)
    if args.lockstep < 1:
        raise ValueError(f"--lockstep must be at least 1, got {args.lockstep}")
    if not args.lease_seconds > 0 or args.lease_seconds == float("inf"):  # "not >": NaN fails too
        raise ValueError(f"--lease-seconds must be a finite positive number, got {args.lease_seconds}")
    if args.registration and args.control:
        raise ValueError("--control runs a different world than the registered one; run it without --registration")
    check_writable_path(args.out)  # a file or read-only folder fails here, in one line (nothing is created)
    resumed = ""  # why the seeds are not the default ones, when they were taken from the folder
    if args.registration:
        from kosmos_env.registration import bind_registration, load_registration, registered_config

        registration = load_registration(args.registration)
        config = registered_config(
            registration,
            env=args.env,
            policies=args.policy,
            tasks=args.tasks and tasks,
            seeds=args.seeds,
            seed_offset=args.seed_offset,
            repeats=args.repeats,
            judge=args.judge,
            image_size=args.image_size,
            video=not args.no_video,
        )
    else:
        registration = None
        if not args.policy:
            raise ValueError("give at least one --policy (or --registration REG.json)")
        seed_offset, resumed = _seed_offset(args.seed_offset, args.out)
        config = make_config(
            args.env or DEFAULT_ENV,
            args.policy,
            tasks=tasks,
            seeds=DEFAULT_SEEDS if args.seeds is None else args.seeds,
            repeats=1 if args.repeats is None else args.repeats,
            judge=args.judge,
            image_size=args.image_size,
            video=not args.no_video,
            spec_overrides=control_overrides(args.control),
            seed_offset=seed_offset,
        )

    # nothing is written to --out before these checks pass: a refused campaign leaves no run folder
    check_weights(config)  # every missing world and judge weight, named at once
    check_lockstep(config, args.lockstep)  # before building policies: one that cannot run side by side is refused
    check_policies(config)  # a bad --policy fails here, in one line, before any episode runs
    check_judge(config)  # so do unreadable or mismatched judge weights, named as the judge's
    price_table = PriceTable.parse(args.price_table) if args.price_table else None
    if args.judge_batch is not None and args.judge_batch < 1:
        raise ValueError(f"--judge-batch must be at least 1, got {args.judge_batch}")
    if (args.judge_batch is not None or args.judge_resources is not None) and args.judge_workers < 1:
        raise ValueError("--judge-batch and --judge-resources apply to judge workers: give --judge-workers N")
    if args.rollout_resources is not None and args.actor_resources is not None:
        raise ValueError("give --rollout-resources or --actor-resources (the same setting), not both")
    ray_options = {
        "address": args.address,
        "num_cpus": args.ray_num_cpus,
        "actor_resources": args.rollout_resources or args.actor_resources,
        "judge_resources": args.judge_resources,
    }
    if registration is not None:
        bind_registration(args.out, config, registration)
        print(f"registered study {registration.name} (sha256 {registration.sha256})", file=sys.stderr)
    executor = make_executor(
        args.workers, args.executor, judge_workers=args.judge_workers, threads=_given_threads(args), **ray_options
    )
    if executor.name == "in-process" and executor.threads is None:
        from kosmos_env.utils.threads import choose_threads

        # the in-process executor leaves a library caller's process alone; this process is the command's own
        executor.threads = choose_threads(1)
    overlap = overlap_line(config.seeds)
    if overlap:  # said once as the campaign starts; results.json records it too (campaign.seed_provenance)
        overlap += f"; evaluation seeds start at --seed-offset {evaluation_start()}"
    busy = None
    # a hint only where the rule chose the count (not --threads or OMP_NUM_THREADS); Ray actors run elsewhere
    if isinstance(executor.threads, ThreadChoice) and executor.threads.source == "rule":
        busy = busy_note(executor.threads.threads, executor.threads.cores)
    note = "; ".join(x for x in (resumed, overlap, busy) if x)
    if note:
        print(f"kosmos-env eval: note: {note}", file=sys.stderr)
    settings = WorkSettings(
        lease_seconds=args.lease_seconds,
        max_attempts=args.max_attempts,
        judge_batch=args.judge_batch or 0,
        lockstep=args.lockstep,
    )
    print(
        f"campaign {config.campaign_id}: {len(config.policies)} policies × {len(config.tasks)} tasks × "
        f"{len(config.seeds)} seeds × {config.repeats} repeats = {config.n_episodes} episodes on {config.env_id} "
        f"(spec {config.spec_hash[:12]}), {executor.workers} worker(s)"
        f"{f' + {args.judge_workers} judge worker(s)' if args.judge_workers else ''}{_threads_note(executor)} "
        f"-> {args.out}",
        file=sys.stderr,
    )
    feed = None
    if args.wandb:  # episodes go to W&B as the ledger records them; workers in other processes need no handle
        from kosmos_env.publish.wandb_logger import LedgerFeed

        feed = LedgerFeed(args.out, project=args.wandb)
    run_stats: dict = {}
    try:
        results = run_campaign(
            config,
            args.out,
            executor,
            settings,
            price_table,
            argv=sys.argv,
            progress=not args.no_progress,
            on_progress=feed.poll if feed else None,
            retry_errors=args.retry_errors,
            run_stats=run_stats,
        )
    except BaseException:
        if feed is not None:
            feed.finish()
        raise
    if feed is not None:
        print(f"W&B run: {feed.finish(results)}", file=sys.stderr)
    _say_if_cancelled(args.out, results)
    errors = error_summary(results)
    if args.json:
        _say_discards(run_stats)
        print(json.dumps(results["aggregated"], indent=1))
        if errors:
            print(f"kosmos-env eval: {errors}", file=sys.stderr)
        return 1 if errors or not results["campaign"]["complete"] else 0
    camp = results["campaign"]
    done = len(results["per_episode"])
    print(
        f"\n{camp['env_id']} (spec {camp['spec_hash'][:12]}), campaign {camp['id']}: {done}/{camp['planned']} episodes"
    )
    print(format_ranking(results))
    print()
    print(format_cost(results["aggregated"]["cost"]))
    print(this_run_line(run_stats, camp["planned"]))
    _say_discards(run_stats)
    print(f"results: {args.out}/results.json, episodes.parquet, manifest.json")
    if errors:
        print(f"kosmos-env eval: {errors}", file=sys.stderr)
    elif not camp["complete"]:
        print(
            f"kosmos-env eval: {camp['planned'] - done} of {camp['planned']} episodes unfinished; rerun the same "
            "command to finish them",
            file=sys.stderr,
        )
    return 0 if camp["complete"] and not errors else 1


def _given_threads(args: argparse.Namespace):
    """``--threads`` as the executors' thread choice (recorded as given by ``--threads``), or None: the rule."""
    if args.threads is None:
        return None
    from kosmos_env.utils.threads import choose_threads

    in_process = args.executor == "in-process" or (
        args.executor == "auto" and args.workers == 1 and not args.judge_workers
    )
    return choose_threads(1 if in_process else args.workers + args.judge_workers, given=args.threads)


def _threads_note(executor) -> str:
    """``, N torch thread(s) each`` for the campaign's first line (Ray: per role, when they differ)."""
    threads = getattr(executor, "threads", None)
    if isinstance(threads, dict):  # Ray: one choice per role
        roles = ["rollout"] + (["judge"] if getattr(executor, "judge_workers", 0) else [])
        counts = sorted({threads[role].threads for role in roles})
        return f", {'/'.join(map(str, counts))} torch thread(s) each"
    return "" if threads is None else f", {threads.threads} torch thread(s) each"


def _seed_offset(given: int | None, out: str) -> tuple[int, str]:
    """The first seed and, when it was not asked for, why: ``--seed-offset`` when given; else the
    first seed of the campaign ``out`` already holds (a folder made when the default was seed 0
    resumes on its own seeds, never on new ones beside them); else the first evaluation seed."""
    from kosmos_env.campaign.runner import recorded_config
    from kosmos_env.utils.seed_ranges import evaluation_start

    if given is not None:
        return given, ""
    recorded = recorded_config(out)
    if recorded is None or not recorded.seeds:
        return evaluation_start(), ""
    first = min(recorded.seeds)
    if first == evaluation_start():
        return first, ""
    return first, f"{out} holds campaign {recorded.campaign_id}: resuming on its recorded seeds (--seed-offset {first})"


def this_run_line(run_stats: dict, planned: int) -> str:
    """What this invocation did: a resumed campaign's table and cost lines cover every run of it, so
    this line says how many episodes and seconds were this run's and how many were already done."""
    if not run_stats:
        return ""
    before = run_stats["done_before"]
    line = f"this run: {run_stats['done_now']} episode(s) in {run_stats['seconds']:.1f} s of wall clock"
    if before:
        line += (
            f"; {before} of the {planned} were already done by earlier runs of this campaign (the table and the "
            f"cost lines above cover all of them)"
        )
    return line


def _say_discards(run_stats: dict) -> None:
    """The gate's reasons for this run's discards, by the check that failed, with how often and one
    example each (a discard is never counted as a failure)."""
    discards = run_stats.get("discards") or []
    if not discards:
        return
    from collections import Counter

    by_check = Counter(check for _, _, check in discards)
    first = {}
    for label, reason, check in discards:
        first.setdefault(check, (label, reason))
    print(
        f"discarded by the gate in this run: {len(discards)} episode(s) (not counted as failures): "
        + "; ".join(
            f"{check} check x{n} (e.g. {first[check][0]}: {first[check][1]})" for check, n in by_check.most_common()
        ),
        file=sys.stderr,
    )


def control_overrides(control: str | None) -> dict | None:
    """Spec overrides that put the campaign's world under a control (kosmos_env.worlds.shuffled)."""
    if control is None:
        return None
    from kosmos_env.worlds.shuffled import CONTROLS

    if control not in CONTROLS:
        raise ValueError(f"unknown --control {control!r}; known: {list(CONTROLS)}")
    return {"world": {"control": control}}


def _say_if_cancelled(out: str, results: dict) -> None:
    """A campaign stopped by a cancel request (``kosmos-env serve``'s cancel control) says how to resume."""
    import os

    from kosmos_env.campaign.control import control_state
    from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger

    with Ledger(os.path.join(out, LEDGER_NAME), create=False) as ledger:
        state = control_state(ledger)
    if state and state["action"] == "cancel" and not results["campaign"]["complete"]:
        print(
            f"campaign cancelled (by {state['by']}) after {len(results['per_episode'])}/"
            f"{results['campaign']['planned']} episodes; rerun the same command to resume",
            file=sys.stderr,
        )
