"""`kosmos-env publish DIR --repo ORG/NAME`: one atomic Hub commit of a verified results bundle.

The bundle is verified first (hashes, spec hash, design, recomputed aggregates); then results.json,
episodes.parquet, selected videos, a new manifest and the dataset cards go to the dataset repo under
``results/<env id>/<spec hash[:12]>/<campaign id>/`` in one commit (``--pr``: a pull request, which
is how leaderboard submissions arrive). Policies with a Hub model id get an ``.eval_results/*.yaml``
entry in their model repo (a PR by default). ``--dry-run PATH`` writes the exact trees instead and
touches no network. See kosmos_env/publish/hub.py for the layout.

The cards name the judge of every success number (label and identity hash) and state the time
and money per stage with the judge's share of the bill. ``--judge ID_OR_NAME`` leads the cards
with another judge stored with the campaign (``kosmos-env judge DIR --judge SPEC``) and adds its
verdicts as ``judgments/<judge id>.json``; results.json (what leaderboards rank) always keeps the
campaign's own judge. An unknown judge is an error that lists the stored ones.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "publish",
        help="publish a campaign's results bundle to the Hugging Face Hub (one atomic commit)",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", help="campaign folder written by kosmos-env eval")
    p.add_argument("--repo", required=True, metavar="ORG/NAME", help="dataset repo to publish to")
    p.add_argument(
        "--dry-run",
        metavar="PATH",
        default=None,
        help="write the trees that would be committed to PATH (dataset/, model_repos/, commits.json); no network",
    )
    p.add_argument("--pr", action="store_true", help="open a pull request on the dataset repo instead of committing")
    p.add_argument(
        "--videos-per-policy",
        type=int,
        default=2,
        help="rollout videos to include per policy, mixing successes and failures; -1 = all (default: %(default)s)",
    )
    p.add_argument(
        "--model-results",
        choices=("pr", "commit", "skip"),
        default="pr",
        help="eval-results entries in model repos of policies with a Hub model id: open a PR, commit "
        "directly, or skip (default: %(default)s)",
    )
    p.add_argument("--private", action="store_true", help="create the dataset repo as private if it does not exist")
    p.add_argument("--license", default="cc-by-4.0", help="license in the dataset card (default: %(default)s)")
    p.add_argument(
        "--judge",
        default=None,
        metavar="ID_OR_NAME",
        help="judge whose ranking the cards lead with: 'campaign' (default: the campaign's own) or the "
        "identity, id prefix or label of a judge stored by `kosmos-env judge DIR --judge SPEC`",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip `kosmos-env verify` of the campaign's ledger (the bundle checks always run)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kosmos_env.publish.hub import plan_publish, publish, write_tree
    from kosmos_env.publish.validate import SubmissionRejected

    if args.videos_per_policy < -1:
        raise ValueError("--videos-per-policy must be -1 (all), 0 or more")
    try:
        plan = plan_publish(
            args.dir,
            args.repo,
            pr=args.pr,
            videos_per_policy=args.videos_per_policy,
            model_results=args.model_results,
            license=args.license,
            judge=args.judge,
        )
    except SubmissionRejected as exc:
        raise ValueError(f"the bundle in {args.dir} failed verification ({exc.check}): {exc.reason}") from None
    if not args.no_verify:  # the campaign's ledger too: an edited ledger is refused, not published
        from kosmos_env.campaign.verify import check_before_use

        check_before_use(args.dir, "publish")
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.dry_run:
        out = write_tree(plan, args.dry_run)
        n_models = len(plan.model_commits())
        print(
            f"dry run: {len(plan.dataset.files)} file(s) for dataset {args.repo} under {out}/dataset "
            f"(campaign at {plan.prefix}); {n_models} model repo commit(s) under {out}/model_repos; "
            f"commits listed in {out}/commits.json"
        )
        return 0
    result = publish(plan, private=args.private or None)
    where = result.dataset_commit.get("pr_url") or result.dataset_commit.get("commit_url")
    print(f"published {len(plan.dataset.files)} file(s) to {args.repo}: {where}")
    for m in result.model_commits:
        print(f"eval results for {m['repo_id']}: {m.get('pr_url') or m.get('commit_url')}")
    print(json.dumps({"dataset": result.dataset_commit, "models": result.model_commits}, indent=1))
    return 0
