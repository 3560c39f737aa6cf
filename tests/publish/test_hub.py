"""`kosmos-env publish`: one atomic dataset commit with exact paths, eval-results for model repos,
and a dry-run tree that is byte for byte what would be committed. No network: the HfApi client is
a recording fake with the same methods and signatures the publisher calls."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kosmos_env.publish.hub import plan_publish, publish
from kosmos_env.publish.leaderboard import build_leaderboard
from kosmos_env.publish.validate import verify_submission
from kosmos_env.spec import load_spec
from tests.conftest import requires_extra
from tests.support.publish_bundles import campaign, copy_bundle, edit_results, first_video, flip_byte

REPO = "kosmos-bench/tabletop-results"
MODEL = "kosmos-bench/scripted-expert"


@dataclass
class FakeCommitInfo:
    oid: str
    commit_url: str
    pr_url: str | None


class FakeHfApi:
    """Records what a real HfApi would be asked to do; reads each operation's bytes like an upload."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.n = 0

    def create_repo(self, repo_id, *, repo_type=None, exist_ok=False, private=None, **kw):
        self.calls.append(
            ("create_repo", {"repo_id": repo_id, "repo_type": repo_type, "exist_ok": exist_ok, "private": private})
        )

    def create_commit(
        self, repo_id, operations, *, commit_message, commit_description=None, repo_type=None, create_pr=None, **kw
    ):
        from huggingface_hub import CommitOperationAdd

        files = {}
        for op in operations:
            assert isinstance(op, CommitOperationAdd)
            src = op.path_or_fileobj
            files[op.path_in_repo] = src if isinstance(src, bytes) else Path(src).read_bytes()
        self.n += 1
        oid = f"{self.n:040x}"
        self.calls.append(
            (
                "create_commit",
                {
                    "repo_id": repo_id,
                    "repo_type": repo_type,
                    "create_pr": create_pr,
                    "message": commit_message,
                    "files": files,
                },
            )
        )
        prefix = "datasets/" if repo_type == "dataset" else ""
        return FakeCommitInfo(
            oid=oid,
            commit_url=f"https://huggingface.co/{prefix}{repo_id}/commit/{oid}",
            pr_url=f"https://huggingface.co/{prefix}{repo_id}/discussions/{self.n}" if create_pr else None,
        )


@pytest.fixture
def bundle(tmp_path_factory, tmp_path):
    """Campaign "a" with a Hub model id on the scripted policy (results.json re-hashed)."""
    root = copy_bundle(campaign(tmp_path_factory, "a"), tmp_path / "camp")
    edit_results(root, lambda r: r["campaign"]["policies"][0].__setitem__("hub_model_id", MODEL))
    return root


def expected_paths(root: Path) -> tuple[str, set[str]]:
    sub = verify_submission(root, strict=False)
    prefix = f"results/Kosmos-Tabletop-v1/{load_spec('Kosmos-Tabletop-v1').hash[:12]}/{sub.campaign_id}/"
    videos = {}
    for r in sub.rows:  # 2 per policy; each policy here has a single outcome, so its first two in design order
        videos.setdefault(r["policy"], [])
        if len(videos[r["policy"]]) < 2:
            videos[r["policy"]].append(r["artifacts"]["video"])
    paths = {"README.md"} | {prefix + f for f in ("results.json", "episodes.parquet", "manifest.json", "README.md")}
    paths |= {prefix + v for vs in videos.values() for v in vs}
    # issue 31: every episode's actions and robot log go up too (the leaderboard re-derives outcomes from them)
    paths |= {prefix + r["artifacts"][k] for r in sub.rows for k in ("actions", "log") if r["artifacts"][k]}
    return prefix, paths


@requires_extra("hub")
def test_publish_makes_one_atomic_dataset_commit_with_exact_paths(bundle):
    api = FakeHfApi()
    result = publish(plan_publish(bundle, REPO), api=api)
    prefix, paths = expected_paths(bundle)
    assert [c[0] for c in api.calls] == ["create_repo", "create_commit", "create_commit"]
    assert api.calls[0][1] == {"repo_id": REPO, "repo_type": "dataset", "exist_ok": True, "private": None}
    ds = api.calls[1][1]
    assert ds["repo_id"] == REPO and ds["repo_type"] == "dataset" and ds["create_pr"] is False
    assert set(ds["files"]) == paths and len(paths) == 9 + 2 * 6  # + actions and log of each of 6 episodes
    # bundle files go up unchanged; the new manifest binds every published file
    assert ds["files"][prefix + "results.json"] == (bundle / "results.json").read_bytes()
    assert ds["files"][prefix + "episodes.parquet"] == (bundle / "episodes.parquet").read_bytes()
    manifest = json.loads(ds["files"][prefix + "manifest.json"])
    import hashlib

    assert set(manifest["files"]) == {p[len(prefix) :] for p in paths if p.startswith(prefix)} - {"manifest.json"}
    for rel, digest in manifest["files"].items():
        assert hashlib.sha256(ds["files"][prefix + rel]).hexdigest() == digest
    assert manifest["source_manifest_sha256"] == hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    # the eval-results entry in the model repo, in the Hub's .eval_results format
    model = api.calls[2][1]
    assert model["repo_id"] == MODEL and model["repo_type"] == "model" and model["create_pr"] is True
    ((name, text),) = model["files"].items()
    spec12 = load_spec("Kosmos-Tabletop-v1").hash[:12]
    assert name.startswith(
        f".eval_results/kosmos-env_Kosmos-Tabletop-v1_{spec12}_scripted-skill-1.0-"
    ) and name.endswith(".yaml")
    entries = yaml.safe_load(text)
    from huggingface_hub import parse_eval_result_entries

    (entry,) = parse_eval_result_entries(entries)
    assert (entry.dataset_id, entry.task_id, entry.value) == (REPO, "Kosmos-Tabletop-v1", 100.0)
    assert entry.dataset_revision == result.dataset_commit["oid"] == f"{1:040x}"
    assert spec12 in entry.notes and "Wilson 95% [43.9, 100.0]" in entry.notes
    assert result.model_commits[0]["pr_url"].endswith("/discussions/2")


@requires_extra("hub")
def test_pr_mode_opens_a_pull_request_and_creates_no_repo(bundle):
    api = FakeHfApi()
    result = publish(plan_publish(bundle, REPO, pr=True, model_results="skip"), api=api)
    assert [c[0] for c in api.calls] == ["create_commit"]
    assert api.calls[0][1]["create_pr"] is True and api.calls[0][1]["repo_type"] == "dataset"
    assert result.dataset_commit["pr_url"].startswith(f"https://huggingface.co/datasets/{REPO}/discussions/")
    assert result.model_commits == []


@requires_extra("hub")
def test_dry_run_tree_is_exactly_what_is_committed_and_verifies(bundle, tmp_path):
    from kosmos_env.cli import main

    out = tmp_path / "dry"
    assert main(["publish", str(bundle), "--repo", REPO, "--dry-run", str(out)]) == 0
    api = FakeHfApi()
    publish(plan_publish(bundle, REPO), api=api)
    committed = {
        p: data
        for call, kw in api.calls
        if call == "create_commit"
        for p, data in (
            (f"dataset/{k}" if kw["repo_type"] == "dataset" else f"model_repos/{kw['repo_id']}/{k}", v)
            for k, v in kw["files"].items()
        )
    }
    on_disk = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    on_disk.pop("commits.json")
    assert set(on_disk) == set(committed)
    for path, data in committed.items():
        if path.startswith("model_repos/"):  # the dry run has no dataset commit yet: no revision in the entry
            assert yaml.safe_load(on_disk[path])[0]["dataset"] == {"id": REPO, "task_id": "Kosmos-Tabletop-v1"}
        else:
            assert on_disk[path] == data, path
    listing = json.loads((out / "commits.json").read_text())
    assert [c["repo_type"] for c in listing["commits"]] == ["dataset", "model"]
    # the published campaign folder is itself a submission the leaderboard accepts
    prefix = listing["prefix"]
    sub = verify_submission(out / "dataset" / prefix)
    assert sub.omitted_artifacts == 2  # 6 episodes x (video, actions, log) - 4 published videos - 12 actions/logs
    board = build_leaderboard([out / "dataset" / prefix])
    assert board["rejected"] == [] and board["boards"][0]["entries"][0]["policy"] == "scripted:skill=1.0"


def test_dataset_card_has_hub_metadata_and_renders_the_ranking(bundle, tmp_path):
    plan = plan_publish(bundle, REPO)
    card = plan.dataset.files["README.md"].decode()
    assert card.startswith("---\n")
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["configs"][0]["data_files"][0]["path"] == "results/*/*/*/episodes.parquet"
    assert "robotics" in meta["task_categories"] and meta["kosmos_env"]["latest"]["spec_hash"] == plan.sub.spec_hash
    assert [r["policy"] for r in meta["kosmos_env"]["latest"]["ranking"]] == ["scripted:skill=1.0", "random"]
    lines = card.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| rank |"))
    assert lines[first + 2].startswith("| 1 | `scripted:skill=1.0` | 100.0% | [43.9, 100.0] |")
    assert lines[first + 3].startswith("| 2 | `random` | 0.0% | [0.0, 56.1] |")
    # the rerun command in the card is one the real CLI parses into the same design
    import shlex

    from kosmos_env.cli import build_parser

    block = card.split("```bash\n")[2].split("```")[0]
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[0] == "kosmos-env"
    args = build_parser().parse_args(argv[1:])
    assert (args.command, args.env, args.policy, args.tasks, args.seeds, args.seed_offset) == (
        "eval",
        "Kosmos-Tabletop-v1",
        ["scripted:skill=1.0", "random"],
        ["carrot_on_plate"],
        3,
        0,  # the bundle's seeds 0-2, written out: eval's default first seed is an evaluation seed
    )
    campaign_card = plan.dataset.files[plan.prefix + "README.md"].decode()
    assert "| 1 | `scripted:skill=1.0` | 100.0%" in campaign_card


def test_publish_refuses_a_bundle_that_fails_verification(bundle, capsys):
    from kosmos_env.cli import main

    flip_byte(bundle / first_video(bundle))
    assert main(["publish", str(bundle), "--repo", REPO, "--dry-run", str(bundle.parent / "dry")]) == 2
    err = capsys.readouterr().err
    assert "failed verification (sha256)" in err and not (bundle.parent / "dry").exists()


def test_bad_repo_id_is_a_clear_error(bundle):
    with pytest.raises(ValueError, match="not a Hub repo id"):
        plan_publish(bundle, "../evil")


@requires_extra("hub")
def test_cli_publish_pr_uses_the_default_client_with_its_own_token(bundle, monkeypatch, capsys):
    """Without --dry-run the CLI builds HfApi() itself (token from HF_TOKEN or the login cache)."""
    import huggingface_hub

    from kosmos_env.cli import main

    made: list[FakeHfApi] = []

    def factory(*args, **kwargs):
        assert args == () and kwargs == {}  # nothing overrides the Hub's own token lookup
        made.append(FakeHfApi())
        return made[-1]

    monkeypatch.setattr(huggingface_hub, "HfApi", factory)
    assert (
        main(["publish", str(bundle), "--repo", REPO, "--pr", "--model-results", "skip", "--videos-per-policy", "0"])
        == 0
    )
    (api,) = made
    ((call, kw),) = api.calls
    assert call == "create_commit" and kw["create_pr"] is True
    assert (
        not any(p.endswith(".mp4") for p in kw["files"]) and len(kw["files"]) == 5 + 2 * 6
    )  # + actions and log of 6 episodes
    out = capsys.readouterr().out
    assert f"https://huggingface.co/datasets/{REPO}/discussions/1" in out
