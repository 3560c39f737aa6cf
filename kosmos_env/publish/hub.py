"""Publish a verified results bundle to the Hugging Face Hub as one atomic, hash-bound commit.

**Dataset repo.** Everything goes in a single ``HfApi.create_commit`` (all files appear
together or not at all) under ``results/<env id>/<spec hash[:12]>/<campaign id>/``:

- ``results.json`` and ``episodes.parquet`` exactly as the campaign wrote them,
- selected rollout videos at their original ``artifacts/sha256/..`` paths (so the paths in
  ``results.json`` stay valid), and every artifact re-deriving the outcomes reads (each episode's
  actions and robot log, and its video where the judge reads frames): a leaderboard ranks only
  outcomes that re-derive from their artifacts (:func:`~kosmos_env.publish.validate.rederive_submission`),
- ``README.md``: the campaign card (ranking with intervals, rerun and verify commands),
- ``manifest.json``: sha256 of every published file (``source_manifest_sha256`` binds it to the
  campaign's full manifest), so the folder is a submission ``kosmos-env leaderboard build`` accepts,

plus the repository card ``README.md`` at the root (Hub metadata and the latest summary, see
:mod:`kosmos_env.publish.card`). ``pr=True`` opens a pull request instead of committing to
``main`` (``create_commit(create_pr=True)``): that is how leaderboard submissions arrive.
Before anything is planned the bundle is verified (:func:`verify_submission`), so an
inconsistent bundle is never published.

**Model repos.** For each policy with ``hub_model_id``, an evaluation-results file is written to
that model repo in the Hub's current format (late 2026): a YAML list in
``.eval_results/<name>.yaml`` whose entries are ``{dataset: {id, task_id, revision}, value,
date, source: {url, name}, notes}``, as documented at https://huggingface.co/docs/hub/eval-results
and produced by ``huggingface_hub.EvalResultEntry`` / ``eval_result_entries_to_yaml``. This
replaced the legacy ``model-index`` block in the model card's YAML. Here ``dataset.id`` is the
results dataset repo, ``task_id`` the env id, ``dataset.revision`` the dataset commit just made,
``value`` the success rate in percent (successes / decided episodes), and ``notes`` carry the
spec hash, episode counts and intervals. One file per (env id, spec hash, policy label), so
another campaign on the same spec replaces it and another spec adds a file. These are separate
commits (one per model repo; a commit cannot span repos) and open pull requests by default
(``model_results="pr"``), since the model usually belongs to someone else; ``"commit"`` commits
directly, ``"skip"`` writes none. The Hub shows such entries on the model page; it links them to a
benchmark leaderboard only once the dataset is registered as a Hub benchmark (an ``eval.yaml``
and an allow-list entry, done by hand).

**Dry run.** :func:`write_tree` writes exactly what would be committed, with no network:
``PATH/dataset/`` is the dataset repo's tree, ``PATH/model_repos/<org>/<name>/`` each model
repo's tree, and ``PATH/commits.json`` lists the commits (repo, type, message, PR or not, files).

The ``HfApi`` client is injectable (``api=``): tests pass a fake that records operations. A real
client takes its token from ``HF_TOKEN`` or the cached login, as ``HfApi()`` always does.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kosmos_env.hashing import sha256_file, sha256_hex
from kosmos_env.publish.validate import MANIFEST_SCHEMA, VerifiedSubmission, verify_submission

RESULTS_ROOT = "results"
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
MODEL_RESULTS_MODES = ("pr", "commit", "skip")


@dataclass
class RepoCommit:
    """One commit to one repo: ``files`` maps path-in-repo to bytes or a local file."""

    repo_id: str
    repo_type: str
    files: dict[str, bytes | Path]
    message: str
    description: str
    create_pr: bool

    def operations(self) -> list:
        from huggingface_hub import CommitOperationAdd

        return [
            CommitOperationAdd(path_in_repo=path, path_or_fileobj=(data if isinstance(data, bytes) else str(data)))
            for path, data in sorted(self.files.items())
        ]

    def summary(self) -> dict[str, Any]:
        return {
            "repo_id": self.repo_id,
            "repo_type": self.repo_type,
            "message": self.message,
            "create_pr": self.create_pr,
            "files": sorted(self.files),
        }


@dataclass
class PublishPlan:
    """What a publish commits: the dataset commit, and how to build the model-repo commits."""

    sub: VerifiedSubmission
    repo_id: str
    prefix: str
    dataset: RepoCommit
    model_results: str = "pr"
    notes: list[str] = field(default_factory=list)

    def model_commits(self, dataset_revision: str | None = None, source_url: str | None = None) -> list[RepoCommit]:
        """``.eval_results`` commits for every policy with a Hub model id (none with ``skip``)."""
        if self.model_results == "skip":
            return []
        return eval_results_commits(
            self.sub, self.repo_id, self.prefix, dataset_revision, source_url, create_pr=self.model_results == "pr"
        )


@dataclass
class PublishResult:
    dataset_commit: dict[str, Any]
    model_commits: list[dict[str, Any]]


def check_repo_id(repo_id: str, what: str = "--repo") -> str:
    if not isinstance(repo_id, str) or not _REPO_ID.match(repo_id) or ".." in repo_id:
        raise ValueError(f"{what} {repo_id!r} is not a Hub repo id (ORG/NAME of letters, digits, '.', '_', '-')")
    return repo_id


def campaign_prefix(sub: VerifiedSubmission) -> str:
    """``results/<env id>/<spec hash[:12]>/<campaign id>/`` (all parts were checked as safe names)."""
    return f"{RESULTS_ROOT}/{sub.env_id}/{sub.spec_hash[:12]}/{sub.campaign_id}/"


def select_videos(sub: VerifiedSubmission, per_policy: int) -> list[str]:
    """Up to ``per_policy`` videos per policy, alternating outcomes (success, failure, other) in
    design order so a sample shows both; -1 means every video, 0 none. Deterministic."""
    listed = set(sub.manifest["files"])
    chosen: list[str] = []
    task_order = {t: i for i, t in enumerate(sub.campaign["tasks"])}
    for label in sub.labels:
        rows = sorted(
            (r for r in sub.rows if r["policy"] == label), key=lambda r: (r["repeat"], r["seed"], task_order[r["task"]])
        )
        with_video = [r for r in rows if (r.get("artifacts") or {}).get("video") in listed]
        if per_policy < 0:
            picked = with_video
        else:
            buckets = [
                [r for r in with_video if r["outcome"] == "success"],
                [r for r in with_video if r["outcome"] == "failure"],
                [r for r in with_video if r["outcome"] not in ("success", "failure")],
            ]
            picked = []
            while len(picked) < per_policy and any(buckets):
                for b in buckets:
                    if b and len(picked) < per_policy:
                        picked.append(b.pop(0))
        for r in picked:
            rel = r["artifacts"]["video"]
            if rel not in chosen:
                chosen.append(rel)
    return chosen


def plan_publish(
    bundle_dir: str | os.PathLike,
    repo_id: str,
    *,
    pr: bool = False,
    videos_per_policy: int = 2,
    model_results: str = "pr",
    license: str = "cc-by-4.0",
    judge: str | None = None,
) -> PublishPlan:
    """Verify the bundle and plan the dataset commit (nothing is sent anywhere). ``judge`` chooses
    whose ranking the cards lead with (:mod:`kosmos_env.publish.judge_choice`; None: the
    campaign's own judge, whose verdicts results.json holds in any case)."""
    from kosmos_env.publish.card import campaign_card, dataset_card
    from kosmos_env.publish.judge_choice import choose_judge

    check_repo_id(repo_id)
    if model_results not in MODEL_RESULTS_MODES:
        raise ValueError(f"model_results must be one of {MODEL_RESULTS_MODES}, got {model_results!r}")
    root = Path(bundle_dir)
    sub = verify_submission(root, strict=False, allow_overrides=True)
    prefix = campaign_prefix(sub)
    choice = choose_judge(root, judge)
    published: dict[str, bytes | Path] = {
        "results.json": root / "results.json",
        "episodes.parquet": root / "episodes.parquet",
    }
    if choice.verdicts_file is not None:  # another judge's verdicts, so its ranking can be recomputed
        published[choice.verdicts_file[0]] = choice.verdicts_file[1]
    videos = select_videos(sub, videos_per_policy)
    for rel in videos:
        published[rel] = root / rel
    from kosmos_env.publish.validate import needed_artifacts

    evidence = sorted(
        {rel for rels in needed_artifacts(sub).values() for rel in rels if rel in sub.manifest["files"]} - set(videos)
    )
    for rel in evidence:  # what the leaderboard re-derives outcomes from (small arrays; frames where judged)
        published[rel] = root / rel
    published["README.md"] = campaign_card(sub, repo_id, prefix, choice).encode()
    hashes = {
        rel: (sha256_hex(data) if isinstance(data, bytes) else sub.manifest["files"].get(rel) or sha256_file(data))
        for rel, data in published.items()
    }
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "campaign": sub.campaign_id,
        "files": dict(sorted(hashes.items())),
        "source_manifest_sha256": sha256_file(root / "manifest.json"),
    }
    published["manifest.json"] = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    files: dict[str, bytes | Path] = {prefix + rel: data for rel, data in published.items()}
    files["README.md"] = dataset_card(sub, repo_id, prefix, license=license, choice=choice).encode()
    ranking = ", ".join(
        f"{label} {_pct(sub.aggregated['per_policy'][label]['success_rate'])}" for label in sub.aggregated["ranking"]
    )
    commit = RepoCommit(
        repo_id=repo_id,
        repo_type="dataset",
        files=files,
        create_pr=pr,
        message=f"Add {sub.env_id} results: campaign {sub.campaign_id} (spec {sub.spec_hash[:12]})",
        description=(
            f"{len(sub.rows)} episodes, {len(sub.labels)} policies × {len(sub.campaign['tasks'])} tasks × "
            f"{len(sub.campaign['seeds'])} seeds × {sub.campaign['repeats']} repeats. Ranking: {ranking}. "
            f"Spec hash {sub.spec_hash}. Published by kosmos-env publish."
        ),
    )
    notes = list(sub.notes)
    if not choice.is_campaign_judge:
        notes.append(
            f"the cards lead with judge {choice.judge['label']} [{choice.judge['id']}]; its verdicts go to "
            f"{prefix}{choice.verdicts_file[0]}; results.json keeps the campaign's own judge "
            f"{choice.own['label']} [{choice.own['id']}]"
        )
    notes.append(
        f"{len(videos)} video(s) selected ({videos_per_policy if videos_per_policy >= 0 else 'all'} per policy)"
    )
    notes.append(f"{len(evidence)} artifact(s) the outcomes re-derive from (actions, robot logs, judged frames)")
    return PublishPlan(
        sub=sub, repo_id=repo_id, prefix=prefix, dataset=commit, model_results=model_results, notes=notes
    )


def campaign_judge_name(sub: VerifiedSubmission) -> str:
    """``label [identity]`` of the judge whose verdicts results.json holds."""
    from kosmos_env.campaign import judgments

    spec = sub.campaign.get("judge")
    spec = dict(spec) if isinstance(spec, dict) else {"type": str(spec)}
    return f"{judgments.judge_label(spec)} [{judgments.judge_identity(spec)}]"


def eval_results_commits(
    sub: VerifiedSubmission,
    repo_id: str,
    prefix: str,
    dataset_revision: str | None,
    source_url: str | None,
    create_pr: bool = True,
) -> list[RepoCommit]:
    """One ``.eval_results/*.yaml`` commit per policy with a ``hub_model_id`` and a success rate."""
    import yaml
    from huggingface_hub import EvalResultEntry, eval_result_entries_to_yaml

    commits = []
    date = sub.campaign.get("written") or sub.campaign.get("created")
    url = source_url or f"https://huggingface.co/datasets/{repo_id}/tree/{dataset_revision or 'main'}/{prefix}"
    for pol in sub.campaign["policies"]:
        model_id = pol.get("hub_model_id")
        if not model_id:
            continue
        check_repo_id(model_id, f"hub_model_id of policy {pol['label']!r}")
        s = sub.aggregated["per_policy"][pol["label"]]
        if s["success_rate"] is None:
            continue  # no decided episode: there is no number to report
        lo, hi = s["wilson_95"]
        wlo, whi = s["worst_case_95"]
        notes = (
            f"kosmos-env policy {pol['label']}; spec {sub.spec_hash[:12]}; success rate over "
            f"{s['successes'] + s['failures']} decided of {s['n']} episodes, Wilson 95% "
            f"[{100 * lo:.1f}, {100 * hi:.1f}], worst-case 95% [{100 * wlo:.1f}, {100 * whi:.1f}]; campaign "
            f"{sub.campaign_id}; judged by {campaign_judge_name(sub)}"
            + ("" if sub.official else "; NON-DEFAULT spec or judge")
        )
        entry = EvalResultEntry(
            dataset_id=repo_id,
            task_id=sub.env_id,
            value=round(100 * s["success_rate"], 2),
            dataset_revision=dataset_revision,
            date=date,
            source_url=url,
            source_name="Kosmos-Env results",
            notes=notes,
        )
        text = yaml.safe_dump(eval_result_entries_to_yaml([entry]), sort_keys=False, width=1000)
        name = f"kosmos-env_{sub.env_id}_{sub.spec_hash[:12]}_{_label_slug(pol['label'])}.yaml"
        commits.append(
            RepoCommit(
                repo_id=model_id,
                repo_type="model",
                files={f".eval_results/{name}": text.encode()},
                create_pr=create_pr,
                message=f"Add {sub.env_id} evaluation result (kosmos-env, spec {sub.spec_hash[:12]})",
                description=f"Success rate {100 * s['success_rate']:.1f}% on {sub.env_id}; details: {url}",
            )
        )
    return commits


def write_tree(plan: PublishPlan, out: str | os.PathLike) -> Path:
    """Write the dry-run tree (see the module docstring); returns ``out``. Refuses a non-empty folder."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"dry-run folder {out} is not empty; pass a new or empty folder")
    commits = [plan.dataset] + plan.model_commits()
    for commit in commits:
        base = out / "dataset" if commit.repo_type == "dataset" else out / "model_repos" / commit.repo_id
        for rel, data in commit.files.items():
            dest = base / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data if isinstance(data, bytes) else Path(data).read_bytes())
    listing = {
        "dataset_dir": "dataset",
        "model_repos_dir": "model_repos",
        "prefix": plan.prefix,
        "notes": plan.notes,
        "commits": [c.summary() for c in commits],
    }
    (out / "commits.json").write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")
    return out


def publish(plan: PublishPlan, api: Any = None, *, private: bool | None = None) -> PublishResult:
    """Send the plan: one dataset commit (or PR), then one eval-results commit/PR per model repo.

    A network or Hub failure (offline mode, no connection, an HTTP error) raises RuntimeError
    with one line naming the repo and the cause."""
    try:
        return _send(plan, api, private)
    except OSError as exc:  # requests' and huggingface_hub's errors (offline mode, HTTP, connection) are OSErrors
        if type(exc).__name__ == "OfflineModeIsEnabled":
            raise RuntimeError(
                f"cannot publish to {plan.repo_id}: Hugging Face offline mode is on (HF_HUB_OFFLINE "
                "is set); unset it to publish, or write the exact commits locally with --dry-run PATH"
            ) from None
        lines = str(exc).strip().splitlines()
        raise RuntimeError(
            f"publishing to {plan.repo_id} failed: {type(exc).__name__}: {lines[0] if lines else ''}"
        ) from None


def _send(plan: PublishPlan, api: Any, private: bool | None) -> PublishResult:
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()  # token from HF_TOKEN or the cached login
    ds = plan.dataset
    if not ds.create_pr:
        api.create_repo(ds.repo_id, repo_type="dataset", exist_ok=True, private=private)
    info = api.create_commit(
        ds.repo_id,
        ds.operations(),
        commit_message=ds.message,
        commit_description=ds.description,
        repo_type="dataset",
        create_pr=ds.create_pr,
    )
    dataset_info = _commit_info(info, ds)
    revision = dataset_info.get("oid")
    source = dataset_info.get("pr_url") if ds.create_pr else None
    models = []
    for mc in plan.model_commits(dataset_revision=revision, source_url=source):
        minfo = api.create_commit(
            mc.repo_id,
            mc.operations(),
            commit_message=mc.message,
            commit_description=mc.description,
            repo_type="model",
            create_pr=mc.create_pr,
        )
        models.append(_commit_info(minfo, mc))
    return PublishResult(dataset_commit=dataset_info, model_commits=models)


def _commit_info(info: Any, commit: RepoCommit) -> dict[str, Any]:
    return {
        "repo_id": commit.repo_id,
        "repo_type": commit.repo_type,
        "files": sorted(commit.files),
        "oid": getattr(info, "oid", None),
        "commit_url": getattr(info, "commit_url", None),
        "pr_url": getattr(info, "pr_url", None),
    }


def _label_slug(label: str) -> str:
    """A filename-safe, stable slug of a policy label (readable part + short hash)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-.")[:40] or "policy"
    return f"{readable}-{sha256_hex(label)[:8]}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"
