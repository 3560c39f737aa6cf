"""A board that runs the policy: submissions name a runnable policy, the board evaluates it itself.

Hashes and replays only show that stored evidence is self-consistent; they cannot show *who
produced it* (one policy's episodes can be filed under another's name with every hash
recomputed). So ``kosmos-env leaderboard run`` earns each verified entry: it runs the named
policy through the project's own campaign machinery (:func:`kosmos_env.campaign.run_campaign`),
on **challenge seeds** it draws after the submission arrives, and lists the numbers of its own
episodes.

**A submission** is a folder with ``submission.json``::

    {"schema": "kosmos-env/board-submission", "schema_version": 1,
     "label": "my-policy",                       # the submitter's name for it: shown, never its identity
     "policy": {"kind": "ckpt", "path": "policy/model.safetensors"},
     "results": "results"}                        # optional: a campaign bundle of its own (self-reported)

``policy.kind`` is one of :data:`KINDS`, each with the settings :data:`SETTINGS` allows (an unknown
setting is refused, so ``trust_remote_code``, ``unpickle`` or a ``module:Class`` name cannot be
smuggled in): ``ckpt`` (a ``kosmos-env train-policy`` safetensors file), ``sb3`` (a Stable-Baselines3
zip, read with its allow-listed entries only), ``lerobot`` (a folder ``save_pretrained`` wrote:
config.json and safetensors, processor steps named by registry only), ``hub`` (a Hub model repo at
a pinned 40-hex commit, run by the ``ckpt``, ``sb3`` or ``lerobot`` adapter), ``remote`` (an
endpoint speaking the Kosmos policy protocol; contacted only when the board allows remote
endpoints) and ``builtin`` (the project's own ``random`` and ``scripted`` baselines). Every kind
resolves to a built-in adapter of :data:`kosmos_env.policies.POLICIES`, checked to be a Policy
subclass before it is built; nothing named in a submission is imported.

**Checks before anything runs** (:func:`load_submission`): no links, only regular files, size caps,
no file of a format that can run code when loaded (pickles, torch files, Python); every path
relative and inside the folder. The policy's files are then **copied into the board's store**
and hashed there (:func:`stage_policy`), so the file that runs is the file that was hashed.

**Identity** (:class:`PolicyIdentity`) is what the board computed, never the label: the sha256 of
the checkpoint or zip, the Hub repo at its revision and the hash of what was fetched, the hash of
a LeRobot folder, or, for a remote endpoint, the content hash its server *states* (the board cannot
look behind an endpoint: the page says so).

**Challenge seeds** (:class:`Board`): the board keeps a secret (``BOARD/secret``, 32 random bytes,
created once, owner-only) and numbers each arrival. Arrival *k*'s seeds are
``HMAC-SHA256(secret, "kosmos-env/challenge:k:i")`` mapped into the evaluation seed range
(:mod:`kosmos_env.utils.seed_ranges`), skipping the seeds the submission reported on: nothing
the submitter controls enters the draw, and the seeds are recorded with the arrival before the
run starts. The page shows ``sha256(secret)`` as a commitment: revealing the secret later lets
anyone recompute every draw. The same submission (byte for byte, same board settings) is the
same arrival: a rerun resumes its campaign on the same seeds instead of drawing new ones.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from kosmos_env.hashing import canonical_hash, sha256_file
from kosmos_env.publish.validate import (
    ALLOWED_EXTENSIONS,
    FORBIDDEN_EXTENSIONS,
    IGNORED_LOCAL_DIRS,
    IGNORED_LOCAL_FILES,
    SubmissionRejected,
    check_relpath,
)

SUBMISSION_FILE = "submission.json"
SUBMISSION_SCHEMA = "kosmos-env/board-submission"
ARRIVALS_SCHEMA = "kosmos-env/board-arrivals"
SECRET_FILE = "secret"
ARRIVALS_FILE = "arrivals.json"
#: the runnable kinds a submission may name (each maps onto a built-in adapter)
KINDS = ("ckpt", "sb3", "lerobot", "hub", "remote", "builtin")
#: the project's own baselines a submission may name (they load nothing)
BUILTIN_BASELINES = ("random", "scripted")
#: the adapters a Hub repo may be run with
HUB_ADAPTERS = ("ckpt", "sb3", "lerobot")
#: file formats a policy's folder may hold besides the results formats (never pickles or code)
POLICY_EXTENSIONS = (".safetensors", ".zip")
MAX_SUBMISSION_BYTES = 16 * 1024 * 1024 * 1024
MAX_POLICY_FILE_BYTES = 8 * 1024 * 1024 * 1024
MAX_CHALLENGE_SEEDS = 10_000
_LABEL = re.compile(r"^[^\x00-\x1f\x7f]{1,100}$")
_HUB_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")

_STR, _NUM, _BOOL, _INT = (str,), (int, float), (bool,), (int,)
_CONVENTION = {"rotation": _STR, "gripper": _STR, "translation_scale": _NUM, "rotation_scale": _NUM}
_LEROBOT = {
    "policy_type": _STR,
    "image_key": _STR,
    "state_key": (str, type(None)),
    "state_from": (list,),
    "task_key": (str, type(None)),
    "gripper_threshold": (int, float, type(None)),
    **_CONVENTION,
}
#: kind -> setting -> allowed JSON types (``path``/``url``/``repo``... are checked further)
SETTINGS: dict[str, dict[str, tuple]] = {
    "ckpt": {"path": _STR, "sample": _BOOL, "seed": _INT},
    "sb3": {"path": _STR, "algo": _STR, "deterministic": _BOOL, "seed": _INT},
    "lerobot": {"path": _STR, **_LEROBOT},
    "remote": {"url": _STR, **_CONVENTION},
    "builtin": {"name": _STR, "skill": _NUM, "seed": _INT, "scale": _NUM},
    "hub": {
        "repo": _STR,
        "revision": _STR,
        "adapter": _STR,
        "file": _STR,
        "sample": _BOOL,
        "seed": _INT,
        "algo": _STR,
        "deterministic": _BOOL,
        **_LEROBOT,
    },
}
REQUIRED = {
    "ckpt": ("path",),
    "sb3": ("path",),
    "lerobot": ("path",),
    "remote": ("url",),
    "builtin": ("name",),
    "hub": ("repo", "revision", "adapter"),
}


# ----------------------------------------------------------------------------- the submission


@dataclass
class RunSubmission:
    """A checked submission: where it lies, its digest (the sha256 of its files), the submitter's
    label, the validated policy block and the folder of its self-reported results (or None)."""

    root: Path
    digest: str
    label: str
    policy: dict[str, Any]
    results: Path | None

    @property
    def kind(self) -> str:
        return self.policy["kind"]


def _reject(root: Path, check: str, reason: str) -> SubmissionRejected:
    return SubmissionRejected(root, check, reason)


def _ext(name: str) -> str:
    return os.path.splitext(name)[1].lower()


def scan_files(root: Path, skip_local: Path | None = None, what: str = "the submission") -> list[str]:
    """Every regular file under ``root`` (relative POSIX paths, sorted), refusing links, special
    files, oversize files and formats that can run code when loaded. ``skip_local``: a campaign
    folder inside whose live ledger and local reports are ignored, as a results check ignores them."""
    if root.is_symlink():
        raise _reject(root, "tree", f"{what} folder is a symlink; pass the real folder")
    if not root.is_dir():
        raise _reject(root, "tree", f"{what} is not a folder")
    files, total = [], 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        if skip_local is not None and base == skip_local:
            dirnames[:] = [d for d in dirnames if d not in IGNORED_LOCAL_DIRS or (base / d).is_symlink()]
        for name in sorted(dirnames + filenames):
            full = base / name
            rel = full.relative_to(root).as_posix()
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                raise _reject(root, "tree", f"{rel} is a symlink; a submission may not contain links")
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise _reject(root, "tree", f"{rel} is not a regular file")
            if skip_local is not None and base == skip_local and name in IGNORED_LOCAL_FILES:
                continue
            size = os.lstat(full).st_size
            if size > MAX_POLICY_FILE_BYTES:
                raise _reject(root, "size", f"{rel} is {size} bytes, over the limit of {MAX_POLICY_FILE_BYTES}")
            total += size
            if total > MAX_SUBMISSION_BYTES:
                raise _reject(root, "size", f"{what} holds more than {MAX_SUBMISSION_BYTES} bytes")
            ext = _ext(name)
            if ext in POLICY_EXTENSIONS:
                pass
            elif ext in FORBIDDEN_EXTENSIONS:
                raise _reject(
                    root,
                    "tree",
                    f"{rel}: {ext} files are refused because loading them can run code; policies are "
                    "submitted as safetensors (ckpt, LeRobot) or a Stable-Baselines3 zip",
                )
            elif ext not in ALLOWED_EXTENSIONS:
                raise _reject(root, "tree", f"{rel}: extension {ext or '(none)'!r} is not on the allow-list")
            files.append(rel)
    return sorted(files)


def folder_hash(root: Path, files: Sequence[str] | None = None) -> str:
    """sha256 of a folder's content: every file's relative path, size and sha256, sorted."""
    files = scan_files(root, what="the policy folder") if files is None else files
    return canonical_hash([[rel, (root / rel).stat().st_size, sha256_file(root / rel)] for rel in sorted(files)])


def _inside(root: Path, rel: Any, what: str) -> Path:
    why = check_relpath(rel)
    if why:
        raise _reject(root, "submission", f"{what}: {why}")
    return root / rel


def _check_settings(root: Path, policy: Any) -> dict[str, Any]:
    if not isinstance(policy, dict) or policy.get("kind") not in KINDS:
        kind = policy.get("kind") if isinstance(policy, dict) else policy
        raise _reject(
            root,
            "submission",
            f"policy.kind {kind!r} is not a runnable kind; name one of {', '.join(KINDS)} "
            "(a module:Class is never imported from a submission)",
        )
    kind = policy["kind"]
    allowed = SETTINGS[kind]
    for key, value in policy.items():
        if key == "kind":
            continue
        if key not in allowed:
            raise _reject(
                root,
                "submission",
                f"policy setting {key!r} is not accepted for kind {kind!r} (accepted: {', '.join(sorted(allowed))})",
            )
        types = allowed[key]
        if isinstance(value, bool) and bool not in types:
            raise _reject(root, "submission", f"policy setting {key!r} must not be a boolean")
        if not isinstance(value, types) or (isinstance(value, str) and not 0 < len(value) <= 512):
            raise _reject(root, "submission", f"policy setting {key!r} has the wrong type or length: {value!r:.60}")
        if isinstance(value, list) and not all(isinstance(v, str) and 0 < len(v) <= 64 for v in value):
            raise _reject(root, "submission", f"policy setting {key!r} must be a list of short strings")
        if isinstance(value, float) and value != value:
            raise _reject(root, "submission", f"policy setting {key!r} is NaN")
    missing = [k for k in REQUIRED[kind] if k not in policy]
    if missing:
        raise _reject(root, "submission", f"a {kind!r} policy needs {', '.join(missing)}")
    if kind == "builtin" and policy["name"] not in BUILTIN_BASELINES:
        raise _reject(
            root, "submission", f"builtin policy {policy['name']!r} is not one of {', '.join(BUILTIN_BASELINES)}"
        )
    if kind == "builtin" and "skill" in policy and policy["name"] != "scripted":
        raise _reject(root, "submission", "only the scripted baseline takes a skill")
    if kind == "hub":
        check_hub_pin(root, policy["repo"], policy["revision"])
        if policy["adapter"] not in HUB_ADAPTERS:
            raise _reject(
                root, "submission", f"hub adapter {policy['adapter']!r} is not one of {', '.join(HUB_ADAPTERS)}"
            )
        if (policy["adapter"] == "lerobot") == ("file" in policy):
            raise _reject(
                root,
                "submission",
                "a hub policy run by the ckpt or sb3 adapter names its file (file=...); the lerobot adapter "
                "runs the whole repo and takes none",
            )
    if kind == "remote":
        check_remote_url(root, policy["url"])
    return dict(policy)


def check_hub_pin(root: Path, repo: str, revision: str) -> None:
    """A Hub model repo named ``owner/name`` (Hub naming rules) at a full 40-hex commit: a branch or
    tag moves after the board ran it, a commit does not."""
    parts = repo.split("/")
    if len(parts) != 2 or not all(_HUB_NAME.match(p) and ".." not in p and "--" not in p for p in parts):
        raise _reject(root, "submission", f"hub repo {repo!r} is not an 'owner/name' Hub repo id")
    if not _COMMIT.match(revision):
        raise _reject(
            root,
            "submission",
            f"hub revision {revision!r} is not a pinned commit: give the 40-hex commit sha (a branch or tag "
            "can move after the board ran it)",
        )


def check_remote_url(root: Path, url: str) -> None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
        raise _reject(root, "submission", f"remote url {url!r} must be http(s)://host[:port] without credentials")


def load_submission(path: str | os.PathLike) -> RunSubmission:
    """Read and check a runnable submission folder (see the module docstring); raise
    :class:`SubmissionRejected` with one reason at the first problem. Nothing in it is run."""
    root = Path(path)
    spec_path = root / SUBMISSION_FILE
    if root.is_symlink() or not root.is_dir():
        raise _reject(root, "tree", "not a folder (pass the submission folder)")
    if spec_path.is_symlink() or not spec_path.is_file():
        raise _reject(root, "submission", f"no {SUBMISSION_FILE}: a runnable submission names its policy there")
    if spec_path.stat().st_size > 64 * 1024:
        raise _reject(root, "submission", f"{SUBMISSION_FILE} is larger than 64 KiB")
    try:
        data = json.loads(spec_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _reject(root, "submission", f"{SUBMISSION_FILE} is not valid UTF-8 JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SUBMISSION_SCHEMA or data.get("schema_version") != 1:
        raise _reject(
            root, "submission", f"{SUBMISSION_FILE} must be an object with schema {SUBMISSION_SCHEMA!r}, version 1"
        )
    unknown = sorted(set(data) - {"schema", "schema_version", "label", "policy", "results"})
    if unknown:
        raise _reject(root, "submission", f"{SUBMISSION_FILE} has unknown keys {unknown}")
    label = data.get("label")
    if not isinstance(label, str) or not _LABEL.match(label):
        raise _reject(root, "submission", "label must be 1 to 100 printable characters")
    results = None
    if data.get("results") is not None:
        results = _inside(root, data["results"], "results")
        if results.is_symlink() or not results.is_dir():
            raise _reject(root, "submission", f"results {data['results']!r} is not a folder in the submission")
    policy = _check_settings(root, data.get("policy"))
    files = scan_files(root, skip_local=results)
    for key in ("path", "file"):
        if key in policy and policy["kind"] != "hub":
            target = _inside(root, policy[key], f"policy.{key}")
            want_dir = policy["kind"] == "lerobot"
            if target.is_symlink() or (not target.is_dir() if want_dir else not target.is_file()):
                raise _reject(
                    root,
                    "submission",
                    f"policy.{key} {policy[key]!r} is not a {'folder' if want_dir else 'file'} in the submission",
                )
    if policy["kind"] == "hub" and "file" in policy:
        _inside(root, policy["file"], "policy.file")
    digest = canonical_hash([[rel, sha256_file(root / rel)] for rel in files])
    return RunSubmission(root=root, digest=digest, label=label, policy=policy, results=results)


# ----------------------------------------------------------------------------- identity and staging


@dataclass
class PolicyIdentity:
    """Who the policy is, as the board established it.

    ``pool_key`` groups every run of the same policy (episodes of one policy pool, each counted
    once); ``display`` is how the page names it; ``digest`` what was hashed and ``what`` says of
    what; ``content_hash`` the adapter's own content hash the campaign must record (None where only
    building the model gives it: LeRobot); ``stated_by`` is ``"board"`` when the board hashed the
    bytes that run, ``"server"`` when a remote server's word is all there is."""

    kind: str
    pool_key: str
    display: str
    digest: str
    what: str
    content_hash: str | None
    stated_by: str = "board"
    hub: str | None = None
    adapter: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "pool_key": self.pool_key,
            "display": self.display,
            "digest": self.digest,
            "what": self.what,
            "content_hash": self.content_hash,
            "stated_by": self.stated_by,
            "hub": self.hub,
        }


def _copy_into_store(
    board: "Board", src: Path, is_dir: bool, only_loadable: bool = False
) -> tuple[Path, str, list[str]]:
    """Copy ``src`` into the board's content-addressed store and hash the copy (not the original,
    which the submitter could change between the hash and the run). Returns (path, digest, files):
    a folder lands in ``policies/<folder hash>/``, a file as ``policies/<sha256>/policy<suffix>``.
    ``only_loadable`` (a Hub repo): files of other formats are left behind instead of refused, as
    the Hub download leaves them (a model card's images, .gitattributes, pickled duplicates)."""
    store = board.root / "policies"
    store.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=store))
    try:
        if is_dir:
            for rel in _loadable_files(src) if only_loadable else scan_files(src, what="the policy folder"):
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src / rel, tmp / rel, follow_symlinks=False)
            files = scan_files(tmp, what="the policy folder")
            digest = folder_hash(tmp, files)
            final = store / digest
            if not final.exists():
                os.replace(tmp, final)
            return final, digest, files
        name = "policy" + src.suffix.lower()  # the adapters read the format from the suffix, never the name
        shutil.copyfile(src, tmp / name, follow_symlinks=False)
        digest = sha256_file(tmp / name)
        (store / digest).mkdir(exist_ok=True)
        if not (store / digest / name).exists():
            os.replace(tmp / name, store / digest / name)
        return store / digest / name, digest, [name]
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _loadable_files(src: Path) -> list[str]:
    """The files of a fetched Hub repo the board may load (links refused, other formats skipped)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        base = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not d.startswith(".") or (base / d).is_symlink()]
        for name in sorted(dirnames + filenames):
            full = base / name
            if full.is_symlink():
                raise _reject(src, "hub", f"{full.relative_to(src).as_posix()} is a symlink in the fetched repo")
            ext = _ext(name)
            if full.is_file() and (ext in POLICY_EXTENSIONS or ext in ALLOWED_EXTENSIONS):
                out.append(full.relative_to(src).as_posix())
    return sorted(out)


def check_lerobot_folder(root: Path, folder: Path, files: Sequence[str]) -> None:
    """A LeRobot folder runs only through LeRobot's own registries: config.json names a policy type
    (a plain name), and every processor pipeline step is named by registry, never by a module path
    (LeRobot imports a step's ``class`` path, which would run code the submission names)."""
    config = folder / "config.json"
    if "config.json" not in files:
        raise _reject(root, "lerobot", "the LeRobot folder has no config.json (save_pretrained writes one)")
    try:
        cfg = json.loads(config.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _reject(root, "lerobot", f"config.json is not valid JSON: {exc}") from None
    kind = cfg.get("type") if isinstance(cfg, dict) else None
    if not isinstance(kind, str) or not re.match(r"^[a-z][a-z0-9_]{0,63}$", kind):
        raise _reject(root, "lerobot", f"config.json's type {kind!r} is not a LeRobot policy type name")
    if not any(f.endswith(".safetensors") for f in files):
        raise _reject(root, "lerobot", "the LeRobot folder holds no .safetensors weights")
    for rel in files:
        if not (rel.endswith(".json") and "processor" in rel):
            continue
        try:
            pipeline = json.loads((folder / rel).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise _reject(root, "lerobot", f"{rel} is not valid JSON: {exc}") from None
        steps = pipeline.get("steps") if isinstance(pipeline, dict) else None
        for step in steps if isinstance(steps, list) else []:
            if not isinstance(step, dict) or "class" in step or not isinstance(step.get("registry_name"), str):
                raise _reject(
                    root,
                    "lerobot",
                    f"{rel}: a processor step names a module path ('class') instead of a registry name; "
                    "loading it would import code the submission names",
                )


def fetch_hub(board: "Board", root: Path, repo: str, revision: str, mirror: Path | None) -> Path:
    """The Hub repo's files at ``revision`` in a local folder: from ``mirror/<owner>/<name>/<revision>/``
    (a local folder standing in for the Hub), else downloaded with ``huggingface_hub`` (data and
    safetensors files only: never pickles or code)."""
    if mirror is not None:
        src = mirror / repo / revision
        if src.is_symlink() or not src.is_dir():
            raise _reject(root, "hub", f"{repo}@{revision[:12]} is not in the Hub mirror {mirror}")
        return src
    dest = board.root / "hub" / repo / revision
    try:
        from huggingface_hub import snapshot_download

        patterns = [f"*{ext}" for ext in (*ALLOWED_EXTENSIONS, *POLICY_EXTENSIONS)]
        snapshot_download(repo_id=repo, revision=revision, local_dir=str(dest), allow_patterns=patterns)
    except Exception as exc:  # noqa: BLE001 - offline, missing repo, bad revision: one line each
        raise _reject(
            root, "hub", f"cannot fetch {repo}@{revision[:12]} ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    return dest


def stage_policy(
    board: "Board", sub: RunSubmission, *, hub_mirror: Path | None = None, allow_remote: bool = False
) -> PolicyIdentity:
    """Copy the submission's policy into the board's store, hash it there, and return its identity
    with the adapter and settings the campaign will build it with."""
    p = dict(sub.policy)
    kind = p.pop("kind")
    if kind == "builtin":
        return _builtin_identity(p)
    if kind == "remote":
        return _remote_identity(sub.root, p, allow_remote)
    if kind == "hub":
        repo, revision, adapter = p.pop("repo"), p.pop("revision"), p.pop("adapter")
        fetched = fetch_hub(board, sub.root, repo, revision, hub_mirror)
        folder, digest, files = _copy_into_store(board, fetched, is_dir=True, only_loadable=True)
        hub, display = f"{repo}@{revision}", f"hub:{repo}@{revision[:12]}"
        if adapter == "lerobot":
            return _lerobot_identity(sub.root, folder, digest, files, p, kind, display, hub)
        rel = p.pop("file")
        if rel not in files:
            raise _reject(sub.root, "hub", f"{repo}@{revision[:12]} has no file {rel!r}")
        what = f"sha256 of {rel} fetched at that revision"
        return _file_identity(sub.root, folder / rel, sha256_file(folder / rel), p, kind, adapter, display, what, hub)
    src = sub.root / p.pop("path")
    if kind == "lerobot":
        folder, digest, files = _copy_into_store(board, src, is_dir=True)
        return _lerobot_identity(sub.root, folder, digest, files, p, kind, f"lerobot:{digest[:12]}", None)
    path, digest, _ = _copy_into_store(board, src, is_dir=False)
    what = "sha256 of the checkpoint file" if kind == "ckpt" else "sha256 of the model zip"
    return _file_identity(sub.root, path, digest, p, kind, kind, f"{kind}:{digest[:12]}", what, None)


def _builtin_identity(settings: dict[str, Any]) -> PolicyIdentity:
    from kosmos_env.campaign.design import policy_label
    from kosmos_env.policies import policy_hash_from_files

    name = settings.pop("name")
    kwargs = {k: float(v) if k in ("skill", "scale") else v for k, v in settings.items()}
    content = policy_hash_from_files(name, kwargs)
    return PolicyIdentity(
        kind="builtin",
        pool_key=f"content:{content}",
        display=policy_label(name, kwargs),
        digest=content,
        what="the baseline's content hash (its class and settings)",
        content_hash=content,
        adapter=name,
        kwargs=kwargs,
    )


def _remote_identity(root: Path, settings: dict[str, Any], allow_remote: bool) -> PolicyIdentity:
    from kosmos_env.policies.protocol import PolicyClient, RemotePolicyError

    if not allow_remote:
        raise _reject(
            root, "remote", "this board does not contact remote endpoints (leaderboard run --allow-remote): not re-run"
        )
    client = PolicyClient(settings["url"], timeout=30.0, retries=1)
    try:
        info = client.info()["policy"]
    except RemotePolicyError as exc:
        raise _reject(root, "remote", f"the endpoint did not answer: {str(exc).splitlines()[0]}") from None
    finally:
        client.close()
    stated = info.get("content_hash")
    if not isinstance(stated, str) or not re.match(r"^[0-9a-f]{16,128}$", stated):
        raise _reject(root, "remote", "the endpoint states no content hash in /v1/info")
    return PolicyIdentity(
        kind="remote",
        pool_key=f"remote-stated:{stated}",
        display=f"remote:{str(info.get('name', 'policy'))[:60]}",
        digest=stated,
        what="the content hash the server states (its word: the board cannot see behind an endpoint)",
        content_hash=stated,
        stated_by="server",
        adapter="remote",
        kwargs=settings,
    )


def _lerobot_identity(
    root: Path, folder: Path, digest: str, files: list[str], settings: dict, kind: str, display: str, hub: str | None
) -> PolicyIdentity:
    check_lerobot_folder(root, folder, files)
    kwargs = {**settings, "path": str(folder), "device": "cpu"}
    adapter_settings = canonical_hash({k: v for k, v in kwargs.items() if k != "path"})
    return PolicyIdentity(
        kind=kind,
        pool_key=f"lerobot-folder:{digest}:{adapter_settings}",
        display=display,
        digest=digest,
        what="sha256 of the LeRobot folder's files (paths, sizes, sha256s)",
        content_hash=None,  # LeRobot's own hash needs the model built: recorded by the run
        hub=hub,
        adapter="lerobot",
        kwargs=kwargs,
    )


def _file_identity(
    root: Path, path: Path, digest: str, settings: dict, kind: str, adapter: str, display: str, what: str, hub
) -> PolicyIdentity:
    from kosmos_env.policies import policy_hash_from_files

    kwargs = {**settings, "path": str(path)}
    try:
        content = policy_hash_from_files(adapter, kwargs)  # from the file's bytes: nothing is unpickled
    except (ValueError, OSError) as exc:
        raise _reject(root, "policy", f"the {adapter} file cannot be read: {str(exc).splitlines()[0]}") from None
    return PolicyIdentity(
        kind=kind,
        pool_key=f"content:{content}",
        display=display,
        digest=digest,
        what=what,
        content_hash=content,
        hub=hub,
        adapter=adapter,
        kwargs=kwargs,
    )


# ----------------------------------------------------------------------------- the board's state


def challenge_seeds(secret: bytes, number: int, count: int, exclude: Sequence[int] = ()) -> list[int]:
    """``count`` distinct evaluation-range seeds for arrival ``number``: HMAC-SHA256 of the board's
    secret over ``kosmos-env/challenge:<number>:<i>`` for i = 0, 1, ..., mapped uniformly onto the
    evaluation spans, skipping ``exclude`` (the seeds the submission reported on) and repeats."""
    from kosmos_env.utils.seed_ranges import seed_ranges

    spans = seed_ranges()["evaluation"]
    total = sum(b - a + 1 for a, b in spans)
    skip = {int(s) for s in exclude if any(a <= int(s) <= b for a, b in spans)}
    if not 1 <= count <= MAX_CHALLENGE_SEEDS:
        raise ValueError(f"--seeds must be in [1, {MAX_CHALLENGE_SEEDS}], got {count}")
    if count > (total - len(skip)) // 2:  # draws would mostly hit excluded seeds: refuse, never spin
        raise ValueError(
            f"cannot draw {count} challenge seeds: the submission reported on {len(skip)} of the {total} "
            "evaluation seeds"
        )
    out: list[int] = []
    i = 0
    while len(out) < count:
        mac = hmac.new(secret, f"kosmos-env/challenge:{int(number)}:{i}".encode(), hashlib.sha256).digest()
        index = int.from_bytes(mac[:8], "big") % total  # bias below 1e-13: 2**64 draws onto ~1e5 seeds
        for a, b in spans:
            if index <= b - a:
                seed = a + index
                break
            index -= b - a + 1
        if seed not in skip and seed not in out:
            out.append(seed)
        i += 1
    return out


class Board:
    """A board's private folder: its secret (created once), its arrivals, the policies it staged
    and the campaigns it ran. Never publish it: the page goes to ``--out``."""

    def __init__(self, root: str | os.PathLike):
        from kosmos_env.utils.fileio import writable_folder

        self.root = writable_folder(root, "--board")
        self._secret = self._load_or_create_secret()

    def _load_or_create_secret(self) -> bytes:
        path = self.root / SECRET_FILE
        try:  # O_EXCL: two boards starting at once never both write one
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(os.urandom(32).hex() + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        if path.is_symlink() or not path.is_file():
            raise ValueError(f"--board {self.root}: {SECRET_FILE} is not a regular file")
        text = path.read_text(encoding="ascii", errors="replace").strip()
        if not re.match(r"^[0-9a-f]{64}$", text):
            raise ValueError(
                f"--board {self.root}: {SECRET_FILE} is not 64 hex characters (it was edited or truncated); "
                "a board's secret is created once and never changed"
            )
        return bytes.fromhex(text)

    @property
    def commitment(self) -> str:
        """sha256 of the secret: published now, so the secret revealed later proves every draw."""
        return hashlib.sha256(b"kosmos-env/board-secret:" + self._secret).hexdigest()

    def replay_salt(self, results_sha256: str) -> str:
        """The salt of the replay sample of a self-reported bundle: keyed by the board's secret, so a
        forger who pads the bundle to steer the sample cannot compute which episodes it picks."""
        return hmac.new(self._secret, f"kosmos-env/replay:{results_sha256}".encode(), hashlib.sha256).hexdigest()

    def arrivals(self) -> list[dict[str, Any]]:
        path = self.root / ARRIVALS_FILE
        if not path.is_file():
            return []
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"--board {self.root}: {ARRIVALS_FILE} is not readable JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("schema") != ARRIVALS_SCHEMA:
            raise ValueError(f"--board {self.root}: {ARRIVALS_FILE} is not a board's arrivals file")
        return list(data.get("arrivals") or [])

    def arrive(
        self, sub: RunSubmission, settings: Mapping[str, Any], count: int, exclude: Sequence[int]
    ) -> tuple[dict[str, Any], bool]:
        """This submission's arrival under ``settings`` (env, tasks, seeds, overrides): the recorded
        one when the same bytes arrived under the same settings before (its seeds are reused), else
        a new one, numbered, with its challenge seeds drawn now and recorded before anything runs.
        Returns (arrival, new)."""
        from kosmos_env.utils.fileio import atomic_write, file_lock

        key = canonical_hash({"submission": sub.digest, "settings": dict(settings)})
        with file_lock(self.root / ".board.lock"):
            arrivals = self.arrivals()
            for arrival in arrivals:
                if arrival.get("key") == key:
                    return arrival, False
            number = 1 + max((int(a["number"]) for a in arrivals), default=0)
            arrival = {
                "number": number,
                "key": key,
                "submission_sha256": sub.digest,
                "submission": str(sub.root),
                "label": sub.label,
                "arrived": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "settings": dict(settings),
                "challenge_seeds": challenge_seeds(self._secret, number, count, exclude),
                "excluded_seeds": sorted({int(s) for s in exclude}),
                "run": f"runs/a{number:05d}",
            }
            arrivals.append(arrival)
            doc = {"schema": ARRIVALS_SCHEMA, "schema_version": 1, "arrivals": arrivals}
            atomic_write(self.root / ARRIVALS_FILE, json.dumps(doc, indent=1) + "\n")
        return arrival, True


# ----------------------------------------------------------------------------- running


@dataclass
class BoardSettings:
    """Where and how much the board evaluates every submission (the board's choice, not theirs)."""

    env_id: str = "Kosmos-Tabletop-v1"
    tasks: tuple[str, ...] | None = None
    seeds: int = 20
    image_size: tuple[int, int] | None = None
    video: bool = False
    workers: int = 1

    def key(self) -> dict[str, Any]:
        """What decides the numbers (workers do not)."""
        return {
            "env_id": self.env_id,
            "tasks": list(self.tasks) if self.tasks else None,
            "seeds": self.seeds,
            "image_size": list(self.image_size) if self.image_size else None,
            "video": self.video,
        }


@dataclass
class BoardRun:
    """One arrival the board evaluated: the submission, its identity, the arrival record and the
    folder of the board's own campaign (a bundle like any ``kosmos-env eval`` output)."""

    sub: RunSubmission
    identity: PolicyIdentity
    arrival: dict[str, Any]
    folder: Path
    label: str  # the policy's label inside the board's campaign
    results: dict[str, Any]


def campaign_label(identity: PolicyIdentity) -> str:
    """The policy's key in the board's campaign: the baseline's own label, else kind and digest."""
    return identity.display if identity.kind == "builtin" else f"{identity.adapter}@{identity.digest[:16]}"


def evaluate(
    board: Board, sub: RunSubmission, identity: PolicyIdentity, settings: BoardSettings, *, progress: bool = False
) -> BoardRun:
    """Run the board's campaign for this submission on its arrival's challenge seeds (a resume when
    the arrival ran before), and check the campaign recorded the identity the board staged."""
    from kosmos_env.campaign.design import PolicyRef, make_config
    from kosmos_env.campaign.executors import make_executor
    from kosmos_env.campaign.preflight import PolicyCheckError, check_judge, check_policies, check_weights
    from kosmos_env.campaign.runner import run_campaign
    from kosmos_env.utils.seed_ranges import check_seeds, stage_of

    exclude: list[int] = []
    if sub.results is not None and (sub.results / "results.json").is_file():
        exclude = [s for s in _reported_seeds(sub.results) if stage_of(s) == "evaluation"]
    if len(exclude) > MAX_CHALLENGE_SEEDS:
        raise _reject(
            sub.root,
            "seeds",
            f"its results report on {len(exclude)} evaluation seeds; the board draws its challenge seeds outside "
            f"the seeds a submission reported on, for at most {MAX_CHALLENGE_SEEDS} of them",
        )
    arrival, _ = board.arrive(sub, {**settings.key(), "policy": identity.pool_key}, settings.seeds, exclude)
    seeds = [int(s) for s in arrival["challenge_seeds"]]
    check_seeds(seeds, "evaluation", "challenge seeds")
    label = campaign_label(identity)
    config = make_config(
        settings.env_id,
        [PolicyRef(label, identity.adapter, dict(identity.kwargs))],
        tasks=list(settings.tasks) if settings.tasks else None,
        seeds=seeds,
        image_size=settings.image_size,
        video=settings.video,
    )
    try:
        check_weights(config)
        check_policies(config)
        check_judge(config)
    except PolicyCheckError as exc:
        raise _reject(sub.root, "policy", str(exc).replace(f"--policy {label!r} ", "the policy ")) from None
    folder = board.root / arrival["run"]
    results = run_campaign(config, folder, make_executor(settings.workers), progress=progress)
    if not results["campaign"]["complete"]:
        done = len(results["per_episode"])
        raise _reject(sub.root, "rerun", f"the board's run finished {done} of {config.n_episodes} episodes")
    recorded = results["campaign"]["policies"][0].get("content_hash")
    if identity.content_hash is not None and recorded != identity.content_hash:
        raise _reject(
            sub.root,
            "identity",
            f"the policy the board ran hashed to {str(recorded)[:12]}, not the {identity.content_hash[:12]} it "
            "staged: it changed between staging and the run",
        )
    return BoardRun(sub, identity, arrival, folder, label, results)


def _reported_seeds(results_dir: Path) -> list[int]:
    """The seeds a submission's own results name (read as data; the results are checked elsewhere)."""
    try:
        data = json.loads((results_dir / "results.json").read_text(encoding="utf-8"))
        seeds = data["campaign"]["seeds"]
        return [int(s) for s in seeds if isinstance(s, int) and not isinstance(s, bool)]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return []
