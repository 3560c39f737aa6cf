"""Every stored hash is pinned: the spec hashes of the registered envs, the task suites, the study
registration, the judge and world artifacts, the shipped checkpoints and policy content hashes, and
each hashing variant (file, folder, canonical JSON) on a fixed tree. The literals were computed with
the hashing helpers as they were before they moved into :mod:`kosmos_env.hashing`, so the move (and
any later change of that module) provably changes no value a result or a bundle already carries.
"""

from __future__ import annotations

from pathlib import Path

#: a JSON document that exercises what differs between the canonical forms: nesting, key order,
#: non-ASCII text, floats, ints, booleans and None
JSON_SAMPLE = {
    "b": [1, 2.5, {"z": None, "a": True}],
    "a": "caf\u00e9 \u2713",
    "c": {"y": 1e-7, "x": -0.0},
    "d": 12345678901234567890,
}


def build_tree(root: Path) -> Path:
    """A fixed folder: files at two depths, hidden files and a hidden folder, several suffixes."""
    files = {
        "a.txt": b"alpha\n",
        "model.safetensors": bytes(range(256)) * 9,
        "config.json": b'{"x": 1}\n',
        ".hidden": b"secret",
        "adapter_config.json": b'{"r": 8}',
        "adapter_model.safetensors": b"\x00" * 1000 + b"\x01",
        "notes.md": b"# notes\n",
        "sub/c.bin": b"c" * 3000,
        "sub/tokenizer.model": b"tok",
        "sub/.cache/d.json": b"{}",
        "sub/deeper/e.py": b"print('e')\n",
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def build_package(root: Path) -> Path:
    """A fixed importable package ``pinpkg`` (a backend sub-package three dots deep, and a top module)."""
    files = {
        "pinpkg/__init__.py": "",
        "pinpkg/top.py": "X = 1\n",
        "pinpkg/worlds/__init__.py": "",
        "pinpkg/worlds/deep/__init__.py": "",
        "pinpkg/worlds/deep/world.py": "from pinpkg.worlds.deep import helper\n",
        "pinpkg/worlds/deep/helper.py": "Y = 2\n",
        "pinpkg/worlds/deep/sub/inner.py": "Z = 3\n",
        "pinpkg/worlds/deep/data.json": "{}",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# -- the registered envs and their task suites -------------------------------------------------------

SPEC_HASHES = {
    "Kosmos-Bridge-v1": "9e7cd6d03a1ad7ee3f9c0cec71ced268bd25cb76a4a54e48e514a18dea6ebdcc",
    "Kosmos-Tabletop-v1": "b0f08ca61ab64f9b8e6a8d64231b1485563cc100684bdb49678ebcba6f80e8a2",
    "Kosmos-TabletopLearned-v1": "f5b6ee921416e66741964471a648913e489cc60070b3e2b7b7cace17da23906e",
}
SUITE_HASHES = {
    "bridge": "76931ddc6bd9420af431fa635a63475cc5a5d6ea3f9833fafcb06a71a78f8ad0",
    "tabletop": "7e9de5a8b173ad526cf2f9739a31147ecc70b24dd8c74f5d763b6be8a87285ff",
}


def test_spec_hashes_of_the_registered_v1_envs():
    from kosmos_env.spec import load_spec

    assert {env_id: load_spec(env_id).hash for env_id in SPEC_HASHES} == SPEC_HASHES


def test_task_suite_hashes():
    from kosmos_env.tasks import available_suites, load_suite

    assert {name: load_suite(name).sha256 for name in available_suites()} == SUITE_HASHES


def test_task_frames_match_the_sha256_their_suite_binds():
    """The suites bind each shipped initial frame by sha256 (checked by the Cosmos world and doctor)."""
    from importlib import resources

    from kosmos_env.hashing import sha256_file
    from kosmos_env.tasks import load_suite

    checked = 0
    for task in load_suite("bridge").tasks.values():
        entry = dict(task.params.get("frame") or {})
        if entry.get("path"):
            assert sha256_file(Path(str(resources.files("kosmos_env.tasks") / entry["path"]))) == entry["sha256"]
            checked += 1
    assert checked >= 1


# -- committed artifacts -----------------------------------------------------------------------------

STUDY = Path(__file__).resolve().parent.parent / "bench" / "results" / "validity_study" / "registration.json"
# re-registered on 2026-12-03 09:07 UTC after the code-health moves changed the bound source hashes
STUDY_SEAL = "6f68a9aa6d4b20c10463f7076d774c257d49bcc979c256f0ef406b30c5f2dc42"
WORLD_WEIGHTS = "38fab49609b47849484b230d26299c47fdcd5c11df3fd341f350a0889ba208fc"
VISION_WEIGHTS = "e7f26564602ffe6eb72ef759f26b8bfe44db46458596c8efd71c7ec0cb3a1adc"
COEFFICIENTS = "7f366256cf77215dc9884dccb2abc3f51d8df161df06820b33ef0394be8fde10"


def test_validity_study_registration_seal_and_bindings():
    """The committed registration's seal recomputes, and every value it binds that does not hash
    source code (which changes with every edit) recomputes from the shipped files."""
    import json

    from kosmos_env.hashing import sha256_file
    from kosmos_env.judges.action_learned import load_coefficients
    from kosmos_env.judges.vision_frame import shipped_classifier_path
    from kosmos_env.policies import parse_policy_arg, policy_hash_from_files
    from kosmos_env.study.registration import load_registration_file
    from kosmos_env.worlds.tabletop_learned.world import weights_dir

    record = json.loads(STUDY.read_text())
    assert record["sha256"] == STUDY_SEAL
    assert load_registration_file(STUDY)["sha256"] == STUDY_SEAL  # the seal is recomputed there
    assert record["world"]["spec_hash"] == SPEC_HASHES[record["world"]["id"]]
    assert record["reference"]["spec_hash"] == SPEC_HASHES[record["reference"]["id"]]
    assert record["world"]["weights"]["sha256"] == WORLD_WEIGHTS == sha256_file(weights_dir() / "world.safetensors")
    assert record["judges"]["vision"]["weights"]["sha256"] == VISION_WEIGHTS == sha256_file(shipped_classifier_path())
    assert record["judges"]["action_learned"]["coefficients_sha256"] == COEFFICIENTS == load_coefficients()["sha256"]
    assert len(record["policies"]) >= 4
    for entry in record["policies"]:
        assert policy_hash_from_files(*parse_policy_arg(entry["policy"])) == entry["content_hash"], entry["policy"]


def test_learned_world_weights_match_the_spec():
    from kosmos_env.hashing import sha256_file
    from kosmos_env.spec import load_spec
    from kosmos_env.worlds.tabletop_learned.world import weights_dir

    spec = load_spec("Kosmos-TabletopLearned-v1")
    assert sha256_file(weights_dir() / spec.world["weights"]) == spec.world["weights_sha256"] == WORLD_WEIGHTS


CHECKPOINT_CONTENT = {
    "bc_clone_2000": "07a41947c31428d41b3e67daafc7a01a140d0d8b222b5e8ba2c9719ebd44620f",
    "bc_clone_6000": "5affd7c71fd4c2508fe5985ffd690815ae0d8e5e1cbaa639cd0fb4702432b67a",
    "sim_judge_ppo_3072": "772d5158c9f9dc497b69ee97c15b7133a8aedc5aa13c7f34491beeb9f9bb1ff4",
    "sim_judge_ppo_9216": "8d0535040e63f5679225b57ccda7897549dbe5bb9226b0016b47cb02aaf6f7ab",
    "sim_oracle_ppo_9216": "eafaba8a0f6c7adf7deaf1c61487b3e45fa376b8aabccc20422a7dcf966d2b2d",
    "world_judge_ppo_12288": "e61c145d2c023fba3c26b58510d40c67030f111e1647311c00f5f024e986e87b",
    "world_judge_ppo_3072": "2a2e11298f9df3699afb46db7b66fd6fb2113173ff961dacf6744cf26c5f05e4",
}


def test_shipped_checkpoints_file_and_content_hashes():
    from kosmos_env.hashing import sha256_file
    from kosmos_env.policies import policy_hash_from_files
    from kosmos_env.policies.checkpoint import shipped_checkpoint_path, shipped_checkpoints

    entries = shipped_checkpoints()
    assert sorted(entries) == sorted(CHECKPOINT_CONTENT)
    for name, entry in entries.items():
        assert sha256_file(shipped_checkpoint_path(name)) == entry["sha256"], name
        assert policy_hash_from_files("ckpt", {"shipped": name}) == CHECKPOINT_CONTENT[name], name
    assert (
        policy_hash_from_files("ckpt", {"shipped": "bc_clone_2000", "sample": True, "seed": 3})
        == "e40c038f6f60226f7e5d9fc9ad7eca4bd157fbc283c1ff6d7cd53e8d6e21f070"
    )


def test_policy_content_hashes():
    from kosmos_env.policies import make_policy, parse_policy_arg, policy_hash_from_files
    from kosmos_env.policies.base import ChunkedPolicy

    expected = {
        "random": "02fafd2a5e3a59aa0fd50bea691937550d23926889456fc70bafb56374f3bc48",
        "scripted:skill=0.7": "d66d52ff747b8ec7a859ee46e4e405197eecf7cfc9e346e99b36487dcb728623",
        "scripted:skill=1.0": "e16bead434fdd04f3dd77f9c41f2936597d1826414ec797a8507e2de6c850a1f",
    }
    assert {arg: policy_hash_from_files(*parse_policy_arg(arg)) for arg in expected} == expected
    chunked = ChunkedPolicy(make_policy("scripted", skill=1.0), chunk=1, execute=2)
    assert chunked.content_hash() == "0b8e8ef3722d9257800cc49c246e99e4d7f53f2fa5b6a9cbcea5db4f6e07836a"


def test_judge_artifact_hashes():
    from kosmos_env.judges.vlm_prompt import PROMPT_SHA256, prompt_sha256

    assert PROMPT_SHA256 == prompt_sha256() == "7eb764f8a8b26fcd8d997c66b6e3b4b68b6cb4ad369c119bcd65edcd57ad7afb"


# -- campaign, publish and distill hashes over fixed inputs ------------------------------------------


def _submission():
    from types import SimpleNamespace

    campaign = {
        "env_id": "Kosmos-Tabletop-v1",
        "spec_hash": "ab" * 32,
        "judge": {"type": "state"},
        "policies": [{"content_hash": "cd" * 32}, {"name": "random", "kwargs": {"a": 1}}],
        "tasks": ["b", "a"],
        "seeds": [2, 1],
        "repeats": 1,
    }
    return SimpleNamespace(
        campaign=campaign,
        env_id="Kosmos-Tabletop-v1",
        spec_hash="ab" * 32,
        manifest={"files": {"x/a.npy": "11" * 32, "x/l.npz": "22" * 32}},
        rows=[
            {"outcome": "success", "artifacts": {"actions": "x/a.npy", "log": "x/l.npz"}},
            {"outcome": "failure", "artifacts": {"actions": "x/a.npy"}},
            {"outcome": "error", "artifacts": {"actions": "x/a.npy"}},
        ],
    )


def test_campaign_hashes():
    from kosmos_env.campaign.design import env_seed, make_config
    from kosmos_env.campaign.judgments import judge_identity

    cfg = make_config(
        "Kosmos-Tabletop-v1",
        ["scripted:skill=1.0", "random"],
        tasks=["carrot_on_plate"],
        seeds=3,
        judge={"type": "state"},
    )
    assert cfg.config_hash == "33544e6bcffa4e31003f9c06609cf2cc3d05bb75ff05916e1a81437c312b5a21"
    assert [env_seed(3, r) for r in range(4)] == [3, 869687201, 262889037, 47919368]
    assert judge_identity({"type": "vlm", "model_id": "Qwen/x", "temperature": 0.0}) == "5196df649fb09514"


def test_publish_bundle_hashes():
    from kosmos_env.publish.leaderboard import design_hash
    from kosmos_env.publish.validate import episode_content_hashes

    sub = _submission()
    assert design_hash(sub) == "b009940a823f47b1477dc91954db83ea1f71a08e218ec99d820b5d7bf94889d1"
    assert sorted(episode_content_hashes(sub)) == [
        "650252fbd5ecffb7c8bd78e41d42d50324c0dc0aa828308b70b3919c7d095850",
        "f2bdebcf434a90252776a9446ea9db4f22bacff6408ff0d2e541b3b4d9c6f751",
    ]


def test_a_real_bundle_s_hashes(tmp_path_factory):
    """A bundle written by ``kosmos-env eval`` (tests/support/publish_bundles.py, campaign "a"): its manifest's
    sha256 of every file recomputes, and its campaign id and design hash (from the policies' content
    hashes, spec hash, tasks and seeds: nothing a simulation computed) are the pinned values."""
    import json

    from kosmos_env.hashing import sha256_file
    from kosmos_env.publish.leaderboard import design_hash
    from kosmos_env.publish.validate import verify_submission
    from tests.support.publish_bundles import campaign

    root = campaign(tmp_path_factory, "a")
    files = json.loads((root / "manifest.json").read_text())["files"]
    assert len(files) >= 6 and {rel: sha256_file(root / rel) for rel in files} == files
    sub = verify_submission(root)
    assert sub.campaign_id == "c-33544e6bcffa4e31" and sub.spec_hash == SPEC_HASHES["Kosmos-Tabletop-v1"]
    assert design_hash(sub) == "6f1bdd39ea03b5f08a49f10d463406528dca7d0dd3f8bd0d960d084ed8e04017"


def test_distill_hashes(tmp_path):
    from kosmos_env.distill.judgespec import judge_identity, spec_hash
    from kosmos_env.distill.labels import labels_sha256

    rows = [
        {"rollout_hash": "r2", "spec_hash": "s", "label": 1, "labelled_at": 5.0, "p": 0.25},
        {"rollout_hash": "r1", "spec_hash": "s", "label": 0, "labelled_at": 6.0, "p": float("nan")},
    ]
    assert labels_sha256(rows) == "7457661731c50c149fa055b0c862ac57af382e22d76b649c033c4e619c411383"
    assert (
        spec_hash({"judge": {"type": "vlm"}, "weights": {"model_id": "Qwen/x"}})
        == "169b148cf8c18e387a363ea1ddf00e92dc9962970775bb38482c15818f456c26"
    )
    tree = build_tree(tmp_path / "tree")
    identity = judge_identity(None, {"type": "vlm", "model": str(tree), "temperature": 0.0})
    assert identity["weights"] == {"folder_sha256": FOLDER_STREAM_TRAILED}


# -- each hashing variant on a fixed tree --------------------------------------------------------------

FILE_SHA = "0828357fc4d85de76348492ed9a7df93e9d01a2e561c5f280c68a8c357fd6e65"  # sub/c.bin
JSON_STRICT = "f90809f449aed24a3efe2786b21a3eb749911eaaa154fd6c66401817a926dd2b"
JSON_DISTILL = "9af45dc033609ea7e5fac50344717911d1a0e0ebc736601293fbe07140512954"
JSON_SPACED = "39a9ecd10d467e74fdf32e59a97ab266732af4d5c5389571ae259a72a8bb2b44"
JSON_SPACED_STR = "5a96a22eb0d73c06733e02290a5f54ab5f5a1173ca046b3322f9f8b29be7c17a"
FOLDER_STREAM_TRAILED = "244ebe6320295da8198f3ac933c9c82e65e784d178811a7975d28ac4f0f905df"  # distill's folder_sha256
FOLDER_MANIFEST_SIZED = "e803d490021d653f651b8f4df2a9a9cedb6df02df17dc027dd45f308f7e1f9f5"  # weights' folder_digest
TREE_FILES = {
    "a.txt": "b6a98d9ce9a2d9149288fa3df42d377c3e42737afdcdaf714e33c0a100b51060",
    "adapter_config.json": "fd66c57ec3933dd396b22ffd2c904bdbe96a4477c250382ee6265e2d7921fdd8",
    "adapter_model.safetensors": "5ca2d1f9244580f448b8f9ba50f12e5e19ad0165271054cf24cd0065f604995f",
    "config.json": "936353965b4ba9180e3acb781d81aa634390ac95fd2874a9cbc4c4846b49fbd4",
    "model.safetensors": "a8b2beedb2cb53792d92eb492452bf399e8ba7fa5659c1c916b0ec7410e06cc5",
    "notes.md": "4a28fc250c09e1f28c9f37486fca6db3c7a4ee707373216f6f7bd62ade5d9330",
    "sub/c.bin": FILE_SHA,
    "sub/deeper/e.py": "a6deb89047e6d67c70ce0d77ed6c326ecaa5913e17f96f5c9fe05f6e18a5bff0",
    "sub/tokenizer.model": "1a7674eb4ee78df7e1ac439a93c3fa8e3c945784d4dec9fd8e3011738b2f1d62",
}
HASH_FILES_ALL = "84d7b652c171d948040ecc9a79f9901455a3c9e5fb326cdbf59025d46a564bf2"  # policies' hash_files
HASH_FILES_SUFFIX = "b80117459b08964039372bf5b474f9f483448f023c4f3ac7f42c7dfea70dac9d"
HASH_FILES_FILE = "87c1ab3efa73668d8d00ef3e2d79934c01bef084cb3d7bf761ce7c5545dbd5dc"
ADAPTER = "a279133fb494c62eb1a53e2eed5466971511fb06c92da8ff2dd41333b915a2a8"  # the VLM judge's LoRA adapter files
CODE_PKG = "5fda54c2c4d15159d2f1d04265732f41dd7621ef5c44dd9cf218c0f5be842d84"
CODE_FILE = "3bd3e2a86e51c192487584f0185b37b89ff6d01c471115e22e116cbc6c69132e"
OPENVLA_FILES = "3605d339cf1365d24aa6eb64a0bd4f07f1476dc6ebd51ddd713643a20ddcf879"


def test_file_sha256(tmp_path):
    from kosmos_env.hashing import sha256_file, sha256_hex

    path = build_tree(tmp_path / "tree") / "sub" / "c.bin"
    assert sha256_file(path) == sha256_file(path, block=7) == sha256_hex(path.read_bytes()) == FILE_SHA


def test_canonical_json_variants():
    from kosmos_env.distill.judgespec import identity_hash
    from kosmos_env.hashing import canonical_hash, canonical_json, sha256_hex
    from kosmos_env.policies.base import policy_hash

    assert canonical_hash(JSON_SAMPLE) == sha256_hex(canonical_json(JSON_SAMPLE)) == JSON_STRICT
    with_path_nan = {**JSON_SAMPLE, "path": Path("/x/y"), "nan": float("nan")}
    assert canonical_hash(with_path_nan, allow_nan=True, default=str) == identity_hash(with_path_nan) == JSON_DISTILL
    assert canonical_hash(JSON_SAMPLE, spaced=True, allow_nan=True) == policy_hash(JSON_SAMPLE) == JSON_SPACED
    with_path = {**JSON_SAMPLE, "path": Path("/x/y")}
    assert canonical_hash(with_path, spaced=True, allow_nan=True, default=str) == JSON_SPACED_STR
    assert policy_hash(with_path, default=str) == JSON_SPACED_STR


def test_canonical_json_refuses_what_it_cannot_write_by_default():
    """The strict default (spec, suite, protocol, bundle hashes) refuses NaN and unknown objects;
    only the named options of the forms published that way write them."""
    import pytest

    from kosmos_env.hashing import canonical_json

    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})
    with pytest.raises(TypeError):
        canonical_json({"x": Path("/p")})
    assert canonical_json({"x": float("nan")}, allow_nan=True) == '{"x":NaN}'
    assert canonical_json({"b": 1, "a": "\u00e9"}) == '{"a":"\\u00e9","b":1}'
    assert canonical_json({"b": 1, "a": 2}, spaced=True) == '{"a": 2, "b": 1}'


def test_folder_hashes(tmp_path):
    from kosmos_env.hashing import files_sha256, folder_digest, folder_sha256, walk_files
    from kosmos_env.policies.openvla import _files_hash

    tree = build_tree(tmp_path / "tree")
    assert folder_sha256(tree) == FOLDER_STREAM_TRAILED
    digest = folder_digest(tree)
    assert (digest["sha256"], digest["files"], digest["bytes"]) == (FOLDER_MANIFEST_SIZED, TREE_FILES, 6350)
    # walk order (a folder's files before its sub-folders), not name order: both hashes depend on it
    assert [rel for rel, _ in walk_files(tree)][-3:] == ["sub/c.bin", "sub/tokenizer.model", "sub/deeper/e.py"]
    assert files_sha256([tree]) == HASH_FILES_ALL
    assert files_sha256([tree, tree / "a.txt"], (".safetensors", ".json", ".txt")) == HASH_FILES_SUFFIX
    assert files_sha256([tree / "a.txt"]) == HASH_FILES_FILE
    adapter = [tree / n for n in ("adapter_model.safetensors", "adapter_config.json")]  # any order given
    assert files_sha256(adapter) == ADAPTER
    settings = {"unnorm_key": "bridge_orig", "dtype": "float32", "path": Path("/p")}
    assert _files_hash("OpenVLAPolicy", str(tree), settings) == OPENVLA_FILES


def test_folder_digest_sees_a_changed_file(tmp_path):
    """The per-process cache is keyed by size and mtime: an edited file is hashed again."""
    import os

    from kosmos_env.hashing import folder_digest

    tree = build_tree(tmp_path / "tree")
    before = folder_digest(tree)["sha256"]
    path = tree / "a.txt"
    path.write_bytes(b"alphA\n")  # same size
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert folder_digest(tree)["sha256"] != before


def test_code_digest(tmp_path, monkeypatch):
    from kosmos_env.study.registration import code_digest

    monkeypatch.syspath_prepend(str(build_package(tmp_path / "src")))
    assert code_digest("pinpkg.worlds.deep.world") == {
        "module": "pinpkg.worlds.deep.world",
        "files": 4,
        "sha256": CODE_PKG,
    }
    assert code_digest("pinpkg.top") == {"module": "pinpkg.top", "files": 1, "sha256": CODE_FILE}
