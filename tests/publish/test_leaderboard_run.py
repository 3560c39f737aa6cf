"""A board that runs the policy (issue 43, item 1): `kosmos-env leaderboard run` evaluates each submitted
policy itself, on challenge seeds drawn from its own secret after the submission arrived, and lists it
"verified by re-run" with the numbers of its own episodes, named by the identity it established.

The issue's three attacks on the evidence-only board each become a test: swapped evidence (random
filed with scripted:skill=1.0's episodes, every hash recomputed), a scripted oracle relabelled
``openvla-7b-ft``, and a forgery whose results.json is padded to steer the replay sample. None of
them is listed as verified. Self-reported results are listed apart; episodes count once."""

from __future__ import annotations

import json
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from kosmos_env.publish.board import BoardSettings, challenge_seeds, load_submission
from kosmos_env.publish.leaderboard import (
    IDENTITY_CLAIMED,
    SELF_REPORTED,
    VERIFIED,
    build_leaderboard,
    run_leaderboard,
    write_leaderboard,
)
from kosmos_env.publish.validate import SubmissionRejected
from kosmos_env.utils.seed_ranges import stage_of
from tests.support.publish_bundles import forge_consistently, rehash

SECRET = "5e" * 32  # a fixed board secret: the challenge seeds of these tests are fixed too
SETTINGS = BoardSettings(tasks=("carrot_on_plate",), seeds=2, image_size=(64, 64))
ORACLE = "scripted:skill=1.0"
CKPT = Path(__file__).resolve().parents[2] / "policies" / "checkpoints" / "bc_clone_6000.safetensors"


def make_board(path: Path) -> Path:
    """A board folder whose secret is :data:`SECRET` (a real board creates a random one once)."""
    path.mkdir(parents=True)
    (path / "secret").write_text(SECRET + "\n")
    (path / "secret").chmod(0o600)
    return path


def submission(folder: Path, label: str, policy: dict, results: Path | None = None, files=()) -> Path:
    """A runnable submission folder: submission.json naming ``policy``, optionally its own results."""
    folder.mkdir(parents=True)
    doc = {"schema": "kosmos-env/board-submission", "schema_version": 1, "label": label, "policy": policy}
    if results is not None:
        shutil.copytree(results, folder / "results")
        doc["results"] = "results"
    for rel, src in files:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, folder / rel)
    (folder / "submission.json").write_text(json.dumps(doc))
    return folder


def entries(data, standing=None):
    return [e for b in data["boards"] for e in b["entries"] if standing is None or b["standing"] == standing]


def board_results(board: Path, run: dict) -> dict:
    return json.loads((board / run["run"] / "results.json").read_text())


# -- the attacks, built as a forger would (every hash and aggregate made consistent) -------------------


def swap_evidence(out: Path) -> None:
    """random's rows take scripted:skill=1.0's evidence and outcomes (and the reverse), seed by seed."""

    def swap(results):
        rows = {(e["policy"], e["task"], e["seed"], e["repeat"]): e for e in results["per_episode"]}
        for (policy, task, seed, repeat), row in rows.items():
            if policy != "random":
                continue
            other = rows[(ORACLE, task, seed, repeat)]
            for key in [k for k in row if k not in ("episode_id", "policy")]:
                row[key], other[key] = other[key], row[key]

    forge_consistently(out, swap)


def relabel_oracle(out: Path, label: str = "openvla-7b-ft") -> None:
    """scripted:skill=1.0's results filed as an OpenVLA fine-tune: label, name, kwargs, content hash."""

    def relabel(results):
        for p in results["campaign"]["policies"]:
            if p["label"] == ORACLE:
                p.update(
                    label=label, name="openvla", kwargs={"model_id": "openvla/openvla-7b-ft"}, content_hash="7" * 64
                )
        for e in results["per_episode"]:
            if e["policy"] == ORACLE:
                e["policy"] = label
                e["episode_id"] = e["episode_id"].replace(ORACLE, label, 1)

    forge_consistently(out, relabel)


def steer_forgery(out: Path) -> dict:
    """One random episode forged to a success (its robot log rewritten to agree), then results.json
    padded with whitespace until the old board's replay sample (2 episodes, seed 0, salted with
    results.json's own sha256) misses it. Returns the forged row."""
    from kosmos_env.campaign.artifacts import ArtifactStore, npz_bytes
    from kosmos_env.campaign.rederive import sample_rows
    from kosmos_env.hashing import sha256_file

    store = ArtifactStore(out)

    def forge(results):
        e = next(e for e in results["per_episode"] if e["policy"] == "random")
        e.update(outcome="success", success=True, score=1.0)
        e["judgment"].update(success=True, score=1.0)
        e["ground_truth"].update(success=True)
        with np.load(out / e["artifacts"]["log"]) as z:
            log = {k: z[k] for k in z.files}
        log["gt_success"] = np.ones_like(log["gt_success"])
        _, rel, _ = store.put_bytes(npz_bytes(log), "npz")
        e["artifacts"]["log"] = rel
        rehash(out, rel)

    results = forge_consistently(out, forge)
    forged = next(e for e in results["per_episode"] if e["policy"] == "random" and e["outcome"] == "success")
    for pad in range(1, 200):
        rows = [r for r in results["per_episode"] if r["outcome"] != "error"]
        picked = sample_rows(rows, 2, 0, salt=sha256_file(out / "results.json"))
        if forged["episode_id"] not in {r["episode_id"] for r in picked}:
            return forged
        (out / "results.json").write_text(json.dumps(results, indent=1) + "\n" + " " * pad)
        rehash(out, "results.json")
    raise AssertionError("no padding steered the sample")


# -- one board run shared by the tests of the swapped and relabelled attacks --------------------------


@pytest.fixture(scope="module")
def swapped(tiny_campaign, tmp_path_factory):
    out = Path(shutil.copytree(tiny_campaign, tmp_path_factory.mktemp("swapped") / "camp"))
    swap_evidence(out)
    return out


@pytest.fixture(scope="module")
def relabelled(tiny_campaign, tmp_path_factory):
    out = Path(shutil.copytree(tiny_campaign, tmp_path_factory.mktemp("relabelled") / "camp"))
    relabel_oracle(out)
    return out


@pytest.fixture(scope="module")
def board_run(swapped, relabelled, tmp_path_factory):
    """random submitted with the swapped evidence as its own results; the scripted oracle submitted
    under the label openvla-7b-ft; the relabelled results alone (self-reported)."""
    root = tmp_path_factory.mktemp("board-run")
    subs = [
        submission(root / "sub-random", "random", {"kind": "builtin", "name": "random"}, results=swapped),
        submission(root / "sub-oracle", "openvla-7b-ft", {"kind": "builtin", "name": "scripted", "skill": 1.0}),
        relabelled,
    ]
    board = make_board(root / "board")
    data = run_leaderboard(subs, board, SETTINGS, allow_overrides=True)
    _, page = write_leaderboard(data, root / "out")
    return data, board, page


def test_swapped_evidence_is_not_verified_and_the_board_lists_its_own_episodes(board_run, swapped):
    data, board, _ = board_run
    assert not data["rejected"], data["rejected"]
    # the old board ranked random first at 100 % from this evidence (every hash and replay agrees);
    # `build` still re-derives it, but lists it apart, as a claim
    old = build_leaderboard([swapped], allow_overrides=True, replay_sample="all", replay_seed=0)
    claimed = next(e for e in entries(old) if e["policy"] == "random")
    assert claimed["success_rate"] == 1.0  # the evidence is self-consistent ...
    assert claimed["standing"] == SELF_REPORTED and IDENTITY_CLAIMED in claimed["checks"]["on_trust"]
    assert [b["standing"] for b in old["boards"]] == [SELF_REPORTED]  # ... and never verified
    # the board ran random itself: its entry holds the board's numbers, on the board's seeds
    (run,) = [r for r in data["runs"] if r["label"] == "random"]
    mine = board_results(board, run)
    (entry,) = [e for e in entries(data, VERIFIED) if e["policy"] == "random"]
    outcomes = [r["outcome"] for r in mine["per_episode"]]
    assert entry["n"] == len(outcomes) == 2 and entry["successes"] == outcomes.count("success")
    assert entry["success_rate"] != 1.0
    expected = challenge_seeds(bytes.fromhex(SECRET), run["arrival"], 2, exclude=[0, 1])
    assert run["challenge_seeds"] == expected == mine["campaign"]["seeds"]
    assert entry["episode_seeds"] == sorted(expected)
    assert all(stage_of(s) == "evaluation" for s in expected) and not set(expected) & {0, 1}  # not its seeds
    # its own results are a claim beside the board's numbers, never listed as an entry of their own
    assert {c["policy"]: c["success_rate"] for c in run["claims"]}["random"] == 1.0
    assert any("shown only" in x for x in entry["checks"]["re_derived"])
    assert not [s for e in entries(data, SELF_REPORTED) for s in e["submissions"] if "sub-random" in s]


def test_a_relabelled_oracle_is_listed_by_its_identity_and_its_results_apart(board_run, relabelled):
    data, _, _ = board_run
    old = build_leaderboard([relabelled], allow_overrides=True, replay_sample=0)
    (claimed,) = [e for e in entries(old) if e["policy"] == "openvla-7b-ft"]
    assert claimed["success_rate"] == 1.0 and claimed["standing"] == SELF_REPORTED  # the old board: "verified"
    assert IDENTITY_CLAIMED in claimed["checks"]["on_trust"]
    # on the run board: the relabelled results only as self-reported ...
    assert not [e for e in entries(data, VERIFIED) if e["policy"] == "openvla-7b-ft"]
    (listed,) = [e for e in entries(data, SELF_REPORTED) if e["policy"] == "openvla-7b-ft"]
    assert IDENTITY_CLAIMED in listed["checks"]["on_trust"]
    # ... and the oracle the board ran is named by what it is, the label kept as the submitter's word
    (oracle,) = [e for e in entries(data, VERIFIED) if "openvla-7b-ft" in e["submitted_as"]]
    from kosmos_env.policies import make_policy

    assert oracle["policy"] == ORACLE and oracle["identity"]["digest"] == make_policy("scripted").content_hash()
    assert any("'openvla-7b-ft': the submitter's name" in x for x in oracle["checks"]["on_trust"])


class Page(HTMLParser):
    """Rows of the page by section, with each row's standing, rank, policy and checks lists."""

    def __init__(self):
        super().__init__()
        self.section = None
        self.rows: dict[str, list[dict]] = {}
        self.commitment = None
        self._row = None
        self._list = None
        self._code = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section" and a.get("class") == "standing":
            self.section = a["id"]
        elif tag == "tr" and "data-standing" in a:
            self._row = {"standing": a["data-standing"], "rank": int(a["data-rank"]), "policy": a["data-policy"]}
            self.rows.setdefault(self.section, []).append(self._row)
        elif tag == "ul" and self._row is not None:
            self._list = a.get("class")
            self._row[self._list] = []
        elif tag == "code" and a.get("class") == "commitment":
            self._code = True

    def handle_endtag(self, tag):
        if tag == "tr":
            self._row = None
        elif tag == "ul":
            self._list = None
        elif tag == "code":
            self._code = False

    def handle_data(self, data):
        if self._code:
            self.commitment = data
        if self._list and self._row is not None and data.strip():
            self._row[self._list].append(data)


def test_the_page_lists_re_run_and_self_reported_entries_apart_with_what_each_rests_on(board_run):
    data, board, page = board_run
    dom = Page()
    dom.feed(page.read_text())
    verified, self_reported = dom.rows["verified"], dom.rows["self-reported"]
    assert {r["standing"] for r in verified} == {VERIFIED} and {r["standing"] for r in self_reported} == {SELF_REPORTED}
    assert sorted(r["policy"] for r in verified) == sorted([ORACLE, "random"])
    assert [r["rank"] for r in verified] == [1, 2] and [r["rank"] for r in self_reported] == [1, 2]  # ranked apart
    for row in verified:
        assert row["re-run"][0].startswith("run by this board on 2 challenge seed(s)") and row["on-trust"]
    for row in self_reported:
        assert row["re-run"] == ["nothing"] and IDENTITY_CLAIMED in row["on-trust"]
    from kosmos_env.publish.board import Board

    assert dom.commitment == data["board"]["secret_commitment"] == Board(board).commitment
    assert SECRET not in page.read_text() and SECRET not in json.dumps(data)  # the secret is never published


def test_the_same_submission_again_resumes_its_arrival_on_the_same_seeds(board_run, swapped, tmp_path):
    data, board, _ = board_run
    first = {r["label"]: r for r in data["runs"]}
    sub = submission(tmp_path / "again", "random", {"kind": "builtin", "name": "random"}, results=swapped)
    again = run_leaderboard([sub], board, SETTINGS, allow_overrides=True, replay_sample=0)
    (run,) = again["runs"]
    assert (run["arrival"], run["challenge_seeds"]) == (first["random"]["arrival"], first["random"]["challenge_seeds"])


def test_a_sample_steered_forgery_is_never_listed_as_verified(tiny_campaign, tmp_path):
    out = Path(shutil.copytree(tiny_campaign, tmp_path / "forged"))
    forged = steer_forgery(out)
    # the old sample (seeded by the submission's own hash) is steered away from the forged episode:
    # re-deriving with that salt lists the forgery, as the old board did
    from kosmos_env.publish.validate import rederive_submission, verify_submission

    sub = verify_submission(out, allow_overrides=True)
    info = rederive_submission(sub, replay_sample=2, replay_seed=0)
    assert info["replayed"] == 2 and sub.aggregated["per_policy"]["random"]["successes"] == 1
    # neither board lists it as verified: `build` at most as self-reported, `run` the same ...
    built = build_leaderboard([out], allow_overrides=True, replay_seed=0)
    ran = run_leaderboard([out], make_board(tmp_path / "board"), SETTINGS, allow_overrides=True)
    for data in (built, ran):
        assert not entries(data, VERIFIED)
        assert all(e["standing"] == SELF_REPORTED for e in entries(data))
    # ... and submitted with a policy, the board ranks its own run of it, the forged claim refused or shown
    sub_dir = submission(tmp_path / "sub", "random", {"kind": "builtin", "name": "random"}, results=out)
    data = run_leaderboard([sub_dir], tmp_path / "board", SETTINGS, allow_overrides=True, replay_sample="all")
    (entry,) = entries(data)
    assert entry["standing"] == VERIFIED and forged["seed"] not in entry["episode_seeds"]
    assert data["runs"][0]["claims"][0]["status"] == "refused" and data["runs"][0]["claims"][0]["check"] == "replay"


def test_a_partially_overlapping_resubmission_counts_each_episode_once(tiny_campaign, tmp_path):
    from kosmos_env import cli
    from tests.support.campaign import tabletop_eval_argv

    later = tmp_path / "later"  # seeds 1-2: shares seed 1 (2 of its 4 episodes) with tiny_campaign's 0-1
    assert cli.main(tabletop_eval_argv(later, ("scripted:skill=1.0", "random"), seeds=2, seed_offset=1)) == 0
    data = build_leaderboard([tiny_campaign, later], allow_overrides=True, replay_sample=0)
    assert not data["rejected"], data["rejected"]
    listed = entries(data)
    assert sorted(e["policy"] for e in listed) == sorted([ORACLE, "random"])  # the old board listed each twice
    for e in listed:
        assert e["n"] == 3 and e["episode_seeds"] == [0, 1, 2] and e["counted_once"] == 1
        assert len(e["campaigns"]) == 2
    # re-run entries too: one submission sent twice (two folders, the same bytes) is one arrival, its
    # episodes counted once; the same policy under another label is another arrival, on new seeds, pooled
    board = make_board(tmp_path / "board")
    policy = {"kind": "builtin", "name": "random"}
    subs = [submission(tmp_path / name, label, policy) for name, label in (("a", "rnd"), ("b", "rnd"), ("c", "r2"))]
    data = run_leaderboard(subs, board, BoardSettings(tasks=("carrot_on_plate",), seeds=1, image_size=(64, 64)))
    (entry,) = entries(data)
    assert [r["arrival"] for r in data["runs"]] == [1, 1, 2] and entry["arrivals"] == [1, 2]
    assert entry["n"] == 2 and entry["counted_once"] == 1 and entry["submitted_as"] == ["rnd", "r2"]


def test_a_hub_repo_at_a_pinned_commit_runs_from_a_mirror_and_is_the_same_policy_as_its_file(tmp_path):
    from kosmos_env.hashing import sha256_file
    from kosmos_env.publish.board import Board, stage_policy

    revision = "0123456789abcdef0123456789abcdef01234567"
    mirror = tmp_path / "mirror"
    (mirror / "org" / "bc-clone" / revision).mkdir(parents=True)
    shutil.copyfile(CKPT, mirror / "org" / "bc-clone" / revision / "model.safetensors")
    (mirror / "org" / "bc-clone" / revision / ".gitattributes").write_text("*.safetensors filter=lfs\n")  # left behind
    hub = submission(
        tmp_path / "hub",
        "bc via the hub",
        {"kind": "hub", "repo": "org/bc-clone", "revision": revision, "adapter": "ckpt", "file": "model.safetensors"},
    )
    settings = BoardSettings(tasks=("carrot_on_plate",), seeds=1, image_size=(64, 64))
    data = run_leaderboard([hub], make_board(tmp_path / "board"), settings, hub_mirror=mirror)
    assert not data["rejected"], data["rejected"]
    (entry,) = entries(data)
    assert entry["standing"] == VERIFIED and entry["n"] == 1 and entry["submitted_as"] == ["bc via the hub"]
    assert entry["identity"]["digest"] == sha256_file(CKPT) and entry["hub_model_id"] == f"org/bc-clone@{revision}"
    # the same bytes submitted as a file are the same policy: their runs would pool in one entry
    direct = submission(
        tmp_path / "direct",
        "bc as a file",
        {"kind": "ckpt", "path": "policy/bc.safetensors"},
        files=[("policy/bc.safetensors", CKPT)],
    )
    assert stage_policy(Board(tmp_path / "board"), load_submission(direct)).pool_key == entry["pool_key"]
    # a branch name is not a pin, and a repo id must be one
    for repo, rev, why in (
        ("org/bc-clone", "main", "not a pinned commit"),
        ("../etc", revision, "not an 'owner/name'"),
    ):
        bad = submission(
            tmp_path / f"bad-{rev}", "x", {"kind": "hub", "repo": repo, "revision": rev, "adapter": "lerobot"}
        )
        with pytest.raises(SubmissionRejected, match=why):
            load_submission(bad)


def test_a_remote_oracle_is_named_by_its_server_and_its_identity_taken_on_trust(tmp_path):
    from kosmos_env.policies import make_policy
    from kosmos_env.policies.protocol import PolicyServer
    from kosmos_env.policies.remote import policy_info

    oracle = make_policy("scripted", skill=1.0)
    settings = BoardSettings(tasks=("carrot_on_plate",), seeds=1, image_size=(64, 64))
    with PolicyServer(oracle, policy_info(oracle)) as server:
        sub = submission(tmp_path / "remote", "openvla-7b-ft", {"kind": "remote", "url": server.url})
        refused = run_leaderboard([sub], make_board(tmp_path / "board"), settings)
        data = run_leaderboard([sub], tmp_path / "board", settings, allow_remote=True)
    assert [r["check"] for r in refused["rejected"]] == ["remote"] and not refused["boards"]
    (entry,) = entries(data)
    assert entry["standing"] == VERIFIED and entry["policy"] == "remote:scripted"
    assert entry["identity"]["stated_by"] == "server" and entry["identity"]["digest"] == oracle.content_hash()
    assert entry["submitted_as"] == ["openvla-7b-ft"]
    assert any("server's own statement" in x for x in entry["checks"]["on_trust"])
    # a server stating a checkpoint's hash never pools with that checkpoint's re-run entry
    assert entry["pool_key"].startswith("remote-stated:")


@pytest.mark.parametrize(
    "policy, files, check, words",
    [
        ({"kind": "os:system"}, (), "submission", "not a runnable kind"),
        ({"kind": "tests.support.campaign:SlowScripted"}, (), "submission", "never imported"),
        ({"kind": "ckpt", "path": "p.safetensors", "trust_remote_code": True}, (), "submission", "not accepted"),
        ({"kind": "sb3", "path": "m.zip", "unpickle": True}, (), "submission", "'unpickle' is not accepted"),
        ({"kind": "ckpt", "path": "../outside.safetensors"}, (), "submission", "escapes"),
        ({"kind": "ckpt", "path": "w.pt"}, [("w.pt", None)], "tree", "can run code"),
        ({"kind": "builtin", "name": "deceptive"}, (), "submission", "not one of"),
        ({"kind": "remote", "url": "http://user:pw@host:1"}, (), "submission", "without credentials"),
    ],
)
def test_a_bad_submission_is_refused_in_one_line_before_anything_runs(tmp_path, policy, files, check, words):
    import sys

    folder = tmp_path / "sub"
    folder.mkdir()
    for rel, _ in files:
        (folder / rel).write_bytes(b"\x80\x04K\x01.")  # a pickle: never loaded
    (folder / "submission.json").write_text(
        json.dumps({"schema": "kosmos-env/board-submission", "schema_version": 1, "label": "x", "policy": policy})
    )
    before = set(sys.modules)
    with pytest.raises(SubmissionRejected) as info:
        load_submission(folder)
    assert info.value.check == check and words in info.value.reason and "\n" not in info.value.reason
    assert "tests.support.campaign" not in set(sys.modules) - before


def test_a_lerobot_folder_runs_only_through_lerobot_registries(tmp_path):
    from kosmos_env.publish.board import Board, stage_policy

    folder = tmp_path / "sub"
    (folder / "policy").mkdir(parents=True)
    (folder / "policy" / "config.json").write_text(json.dumps({"type": "act"}))
    (folder / "policy" / "model.safetensors").write_bytes(b"\0" * 16)
    step = {"class": "os.system", "config": {}}  # LeRobot would import this module path
    (folder / "policy" / "policy_preprocessor.json").write_text(json.dumps({"name": "pre", "steps": [step]}))
    doc = {"schema": "kosmos-env/board-submission", "schema_version": 1, "label": "act"}
    (folder / "submission.json").write_text(json.dumps({**doc, "policy": {"kind": "lerobot", "path": "policy"}}))
    with pytest.raises(SubmissionRejected, match="module path"):
        stage_policy(Board(tmp_path / "board"), load_submission(folder))


def test_the_board_secret_is_created_once_owner_only_and_checked(tmp_path):
    from kosmos_env.publish.board import Board

    board = Board(tmp_path / "b")
    secret = (tmp_path / "b" / "secret").read_text()
    assert os.stat(tmp_path / "b" / "secret").st_mode & 0o777 == 0o600
    assert Board(tmp_path / "b").commitment == board.commitment and (tmp_path / "b" / "secret").read_text() == secret
    (tmp_path / "b" / "secret").write_text("short\n")
    with pytest.raises(ValueError, match="created once"):
        Board(tmp_path / "b")


def test_leaderboard_run_cli_writes_the_page_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    from kosmos_env import cli

    sub = submission(tmp_path / "sub", "rnd", {"kind": "builtin", "name": "random"})
    board = make_board(tmp_path / "board")
    argv = ["leaderboard", "run", str(sub), "--board", str(board), "--out", str(tmp_path / "out")]
    small = ["--tasks", "carrot_on_plate", "--seeds", "1", "--image-size", "64", "64"]
    assert cli.main(argv + small) == 0
    data = json.loads((tmp_path / "out" / "leaderboard.json").read_text())
    assert [e["standing"] for e in entries(data)] == [VERIFIED] and (tmp_path / "out" / "index.html").is_file()
    assert "verified by re-run" in capsys.readouterr().out
    for extra, words in (
        (["--seeds", "0"], "--seeds"),
        (["--out", str(board / "pub")], "two separate folders"),
    ):
        assert cli.main(argv + small + extra) == 2
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(err) == 1 and words in err[0], err


def test_challenge_seeds_are_keyed_by_the_board_secret_and_skip_the_submissions_seeds():
    key = bytes.fromhex(SECRET)
    first = challenge_seeds(key, 1, 5)
    assert first == challenge_seeds(key, 1, 5) and all(stage_of(s) == "evaluation" for s in first)
    assert challenge_seeds(key, 2, 5) != first  # another arrival, another draw
    assert challenge_seeds(bytes.fromhex("11" * 32), 1, 5) != first  # another secret, another draw
    skipped = challenge_seeds(key, 1, 5, exclude=first[:2])
    assert not set(first[:2]) & set(skipped) and skipped[:3] == first[2:]
