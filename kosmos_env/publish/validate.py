"""Verify a results bundle (a campaign directory or a published submission) trusting nothing in it.

A submission is a directory holding ``results.json``, ``episodes.parquet``, ``manifest.json``
and optionally artifacts (``artifacts/sha256/..``) and a ``README.md``. :func:`verify_submission`
checks, in this order, and stops at the first problem with a :class:`SubmissionRejected` whose
message says what is wrong and what to do about it:

1. **The tree.** No symlinks anywhere (a link could point outside the submission), no file whose
   extension is not on :data:`ALLOWED_EXTENSIONS`; pickles, torch checkpoints and other formats
   that can run code when loaded (:data:`FORBIDDEN_EXTENSIONS`) are named as such. Nothing in a
   submission is ever executed, unpickled or loaded with ``allow_pickle``: JSON is parsed as
   data and the parquet file is read with pyarrow (plain columns); artifacts are only hashed.
2. **The manifest.** ``manifest.json`` lists every other file with its sha256. Every listed path
   must be relative, without ``..`` or backslashes, and hash to the listed value; in strict mode
   (leaderboard submissions) a file on disk that the manifest does not list is refused too. The
   campaign's live ledger (``ledger.sqlite``, its WAL files and set-up lock) and ``.bundle.lock`` are never
   in the manifest and are ignored (never opened).
3. **The spec.** ``campaign.env_id`` must be registered in this kosmos-env version, and
   ``campaign.spec`` must hash (``EnvSpec.from_dict(spec).hash``) to ``campaign.spec_hash``.
   A spec equal to the registered one is *official*. A spec with overrides (a smaller image, a
   shorter horizon, ...) hashes to something else: it is accepted only with
   ``allow_overrides=True`` and then always ranked on its own board, never with official results.
   The same holds for a campaign judge that differs from the spec's judge (the judge is not part
   of the spec hash but changes every outcome), which also gets its own board.
4. **The design.** ``per_episode`` holds every policy × task × seed × repeat of the declared
   design exactly once, no extras; outcomes are known labels and ``success`` agrees with the
   outcome (true for success, false for failure, null otherwise); ``episodes.parquet`` carries the
   same episodes with the same outcomes; each outcome agrees with the episode's own stored
   judgment, gate verdict and (state judge) ground truth.
5. **The numbers.** Every aggregate (counts, success rate, Wilson 95% interval, worst-case 95%
   bounds, per policy and per policy × task, and the ranking) is recomputed from the rows; a
   submitted number that differs is a forged (or stale) aggregate and rejects the submission.
   The leaderboard only ever shows the recomputed numbers.
6. **Re-derivation** (:func:`rederive_submission`, run by the leaderboard): every episode carries
   the artifacts its outcome is drawn from, each episode's provenance names the campaign's spec,
   world and judge, the deterministic judge re-run on the artifacts gives the recorded outcomes,
   and a seeded sample of simulator episodes replays bit for bit. Arrays are loaded with
   ``allow_pickle=False`` only; nothing in the submission is executed.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence

from kosmos_env.hashing import canonical_hash, sha256_file

RESULTS_SCHEMA = "kosmos-env/results"
MANIFEST_SCHEMA = "kosmos-env/manifest"
SUPPORTED_SCHEMA_VERSIONS = (1,)
OUTCOMES = ("success", "failure", "discarded", "abstained", "error")

#: every file extension a submission may contain (lower case, with the dot)
ALLOWED_EXTENSIONS = (
    ".json",
    ".parquet",
    ".mp4",
    ".webm",
    ".npy",
    ".npz",
    ".md",
    ".yaml",
    ".yml",
    ".txt",
    ".png",
    ".jpg",
    ".jpeg",
    ".csv",
)
#: extensions named in the rejection because loading them can execute code
FORBIDDEN_EXTENSIONS = (
    ".pkl",
    ".pickle",
    ".pt",
    ".pth",
    ".bin",
    ".ckpt",
    ".joblib",
    ".dill",
    ".npy_obj",
    ".h5",
    ".hdf5",
    ".keras",
    ".pb",
    ".onnx",
    ".safetensors",
    ".py",
    ".pyc",
    ".sh",
    ".so",
    ".exe",
    ".dll",
    ".js",
    ".html",
    ".htm",
    ".zip",
    ".tar",
    ".gz",
)
#: local campaign files that are never part of a submission: ignored, never opened
IGNORED_LOCAL_FILES = (
    "ledger.sqlite",
    "ledger.sqlite-wal",
    "ledger.sqlite-shm",
    "ledger.sqlite-journal",
    "ledger.sqlite-setup.lock",
    ".bundle.lock",
    # what `kosmos-env report` and `analyze` write beside the bundle (never published)
    "report.html",
    "report.md",
    "analysis.json",
)
#: folders at the top of a campaign folder that hold local outputs, ignored like the files above
IGNORED_LOCAL_DIRS = ("report_assets", "judges")  # judges/<id>/: reports and analyses by re-judging judges
MAX_JSON_BYTES = 256 * 1024 * 1024
#: largest single file a submission may hold (a rollout video or array), and all files together
MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_TOTAL_BYTES = 16 * 1024 * 1024 * 1024
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TOL = 1e-9


class SubmissionRejected(ValueError):
    """A submission failed a check. ``check`` names the check, ``reason`` says what to do."""

    def __init__(self, submission: str | os.PathLike, check: str, reason: str):
        self.submission = str(submission)
        self.check = check
        self.reason = reason
        super().__init__(f"{submission}: rejected ({check}): {reason}")


@dataclass
class VerifiedSubmission:
    """A submission that passed every check, with aggregates recomputed from its rows.

    ``official`` is True when the spec hash equals the registered env version's hash and the
    campaign judge is the spec's judge. ``board_key`` groups submissions that may be ranked
    together: (env id, spec hash, judge hash). ``omitted_artifacts`` counts artifacts the rows
    name that are not in the submission (a published tree keeps only selected videos).
    """

    root: Path
    results: dict
    manifest: dict
    rows: list[dict]
    aggregated: dict
    official: bool
    registered_spec_hash: str
    judge_hash: str
    results_sha256: str
    omitted_artifacts: int = 0
    notes: list[str] = field(default_factory=list)
    #: what :func:`rederive_submission` re-derived and what it took on trust (None: not run)
    rederivation: dict | None = None

    @property
    def campaign(self) -> dict:
        return self.results["campaign"]

    @property
    def env_id(self) -> str:
        return self.campaign["env_id"]

    @property
    def spec_hash(self) -> str:
        return self.campaign["spec_hash"]

    @property
    def campaign_id(self) -> str:
        return str(self.campaign["id"])

    @property
    def labels(self) -> list[str]:
        return [p["label"] for p in self.campaign["policies"]]

    @property
    def board_key(self) -> tuple[str, str, str]:
        return (self.env_id, self.spec_hash, self.judge_hash)


# ----------------------------------------------------------------------------- helpers


def check_relpath(rel: Any) -> str | None:
    """Why ``rel`` is not a safe relative POSIX path inside a submission (None when it is)."""
    if not isinstance(rel, str) or not rel:
        return f"path {rel!r} is not a non-empty string"
    if "\x00" in rel or "\\" in rel:
        return f"path {rel!r} contains a NUL byte or a backslash"
    if rel.startswith("/") or re.match(r"^[A-Za-z]:", rel):
        return f"path {rel!r} is absolute; paths must be relative to the submission folder"
    parts = PurePosixPath(rel).parts
    if ".." in parts or "." in rel.split("/") or "" in rel.split("/"):
        return f"path {rel!r} escapes or is not normalised ('..', '.' and empty components are not allowed)"
    return None


def _ext(name: str) -> str:
    return os.path.splitext(name)[1].lower()


def _load_json(root: Path, rel: str, check: str) -> Any:
    path = root / rel
    if not path.is_file():
        raise SubmissionRejected(
            root,
            check,
            f"{rel} is missing; a submission needs results.json, "
            "episodes.parquet and manifest.json (as `kosmos-env eval` writes them)",
        )
    if path.stat().st_size > MAX_JSON_BYTES:
        raise SubmissionRejected(root, check, f"{rel} is larger than {MAX_JSON_BYTES} bytes")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise SubmissionRejected(root, check, f"{rel} is not valid UTF-8 JSON: {exc}") from None


# ----------------------------------------------------------------------------- 1. the tree


def scan_tree(root: Path) -> list[str]:
    """Every regular file under ``root`` as a relative POSIX path; refuses links and bad types."""
    if root.is_symlink():
        raise SubmissionRejected(root, "tree", "the submission folder itself is a symlink; pass the real folder")
    if not root.is_dir():
        raise SubmissionRejected(root, "tree", "not a directory (pass the campaign or submission folder)")
    files: list[str] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        if base == root:  # local outputs (reports) are never part of a submission: not even walked
            dirnames[:] = [d for d in dirnames if d not in IGNORED_LOCAL_DIRS or (base / d).is_symlink()]
        for name in sorted(dirnames + filenames):
            full = base / name
            rel = full.relative_to(root).as_posix()
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                raise SubmissionRejected(
                    root,
                    "tree",
                    f"{rel} is a symlink; submissions may not contain links "
                    "(copy the real file in and list it in the manifest)",
                )
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise SubmissionRejected(root, "tree", f"{rel} is not a regular file")
            if name in IGNORED_LOCAL_FILES and base == root:
                continue
            size = os.lstat(full).st_size
            if size > MAX_FILE_BYTES:
                raise SubmissionRejected(
                    root, "size", f"{rel} is {size} bytes, over the per-file limit of {MAX_FILE_BYTES} bytes"
                )
            total += size
            if total > MAX_TOTAL_BYTES:
                raise SubmissionRejected(root, "size", f"the submission holds more than {MAX_TOTAL_BYTES} bytes")
            ext = _ext(name)
            if ext in FORBIDDEN_EXTENSIONS or name.lower().endswith(".npy.pkl"):
                raise SubmissionRejected(
                    root,
                    "tree",
                    f"{rel}: {ext} files are not accepted because loading them "
                    "can execute code; submissions hold only data formats "
                    f"({', '.join(ALLOWED_EXTENSIONS)})",
                )
            if ext not in ALLOWED_EXTENSIONS:
                hint = (
                    " (a leftover from an interrupted write; delete it and re-run `kosmos-env eval`)"
                    if name.startswith(".tmp-")
                    else ""
                )
                raise SubmissionRejected(
                    root,
                    "tree",
                    f"{rel}: extension {ext or '(none)'!r} is not on the allow-list "
                    f"{', '.join(ALLOWED_EXTENSIONS)}{hint}",
                )
            files.append(rel)
    return sorted(files)


# ----------------------------------------------------------------------------- 2. the manifest


def check_manifest(root: Path, on_disk: Sequence[str], strict: bool) -> dict:
    manifest = _load_json(root, "manifest.json", "manifest")
    if not isinstance(manifest, dict) or manifest.get("schema") != MANIFEST_SCHEMA:
        raise SubmissionRejected(root, "manifest", f"manifest.json must be an object with schema {MANIFEST_SCHEMA!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise SubmissionRejected(root, "manifest", "manifest.json has no 'files' mapping of path -> sha256")
    for rel, digest in files.items():
        why = check_relpath(rel)
        if why:
            raise SubmissionRejected(root, "manifest", f"manifest.json lists an unsafe {why}")
        if rel == "manifest.json":
            raise SubmissionRejected(root, "manifest", "manifest.json may not list itself")
        if not isinstance(digest, str) or not _HEX64.match(digest):
            raise SubmissionRejected(root, "manifest", f"manifest.json: {rel} has no valid sha256 (64 lower-case hex)")
    present = set(on_disk)
    for rel in sorted(files):
        if rel not in present:
            raise SubmissionRejected(
                root,
                "manifest",
                f"{rel} is listed in manifest.json but missing from the submission; upload every listed file",
            )
    if strict:
        unlisted = sorted(present - set(files) - {"manifest.json"})
        if unlisted:
            raise SubmissionRejected(
                root,
                "manifest",
                f"{unlisted[0]} is not listed in manifest.json"
                f"{f' (and {len(unlisted) - 1} more)' if len(unlisted) > 1 else ''}; "
                "every file must be hash-bound by the manifest",
            )
    for rel in sorted(files):
        actual = sha256_file(root / rel)
        if actual != files[rel]:
            raise SubmissionRejected(
                root,
                "sha256",
                f"{rel} has sha256 {actual[:16]}… but manifest.json says "
                f"{files[rel][:16]}…: the file changed after the manifest was "
                "written (re-download it, or rebuild the bundle)",
            )
    for required in ("results.json", "episodes.parquet"):
        if required not in files:
            raise SubmissionRejected(root, "manifest", f"{required} is not listed in manifest.json")
    for rel in sorted(files):
        if _ext(rel) in (".npy", ".npz"):
            check_numeric_arrays(root, rel)
    return manifest


def check_numeric_arrays(root: Path, rel: str) -> None:
    """A .npy/.npz artifact must hold plain numeric arrays: loaded with ``allow_pickle=False``, so an
    object array (which only unpickling could read, and unpickling can run code) is refused."""
    import numpy as np

    try:
        loaded = np.load(root / rel, allow_pickle=False)
        arrays = [loaded] if isinstance(loaded, np.ndarray) else [loaded[k] for k in loaded.files]
        if not isinstance(loaded, np.ndarray):
            loaded.close()
    except Exception as exc:  # noqa: BLE001 - object arrays raise ValueError; a corrupt file anything
        raise SubmissionRejected(
            root,
            "arrays",
            f"{rel} is not a plain numeric array file ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); object "
            "arrays are refused because reading them means unpickling",
        ) from None
    for arr in arrays:
        if arr.dtype.hasobject or arr.dtype.kind not in "biuf":
            raise SubmissionRejected(
                root, "arrays", f"{rel} holds an array of dtype {arr.dtype}; only numeric arrays are accepted"
            )


# ----------------------------------------------------------------------------- 3. the spec


def check_spec(root: Path, campaign: Mapping[str, Any], allow_overrides: bool) -> tuple[bool, str, str]:
    """(official, registered hash, judge hash) after checking the spec hash chain."""
    from kosmos_env.spec import EnvSpec, SpecError, load_spec

    env_id = campaign.get("env_id")
    if not isinstance(env_id, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", env_id):
        raise SubmissionRejected(root, "spec", f"campaign.env_id {env_id!r} is not a valid env id")
    try:
        registered = load_spec(env_id)
    except SpecError as exc:
        raise SubmissionRejected(
            root,
            "spec",
            f"env {env_id!r} is not registered in this kosmos-env version ({exc}); "
            "upgrade kosmos-env or evaluate on a registered env",
        ) from None
    declared = campaign.get("spec_hash")
    if not isinstance(declared, str) or not _HEX64.match(declared):
        raise SubmissionRejected(root, "spec", f"campaign.spec_hash {declared!r} is not a sha256 hex digest")
    raw = campaign.get("spec")
    if not isinstance(raw, dict):
        raise SubmissionRejected(root, "spec", "campaign.spec (the full spec the campaign ran) is missing")
    try:
        spec = EnvSpec.from_dict(raw)
    except Exception as exc:  # noqa: BLE001 - untrusted data: any failure to build the spec is a rejection
        raise SubmissionRejected(root, "spec", f"campaign.spec is not a valid spec: {exc}") from None
    if spec.id != env_id:
        raise SubmissionRejected(
            root, "spec", f"campaign.spec is for env {spec.id!r}, but campaign.env_id is {env_id!r}"
        )
    if spec.hash != declared:
        raise SubmissionRejected(
            root,
            "spec",
            f"spec hash mismatch: campaign.spec hashes to {spec.hash[:12]}… but "
            f"campaign.spec_hash says {declared[:12]}… (the spec was edited "
            "after the campaign ran, or the hash was forged)",
        )
    judge = campaign.get("judge")
    if not isinstance(judge, dict) or not isinstance(judge.get("type"), str):
        raise SubmissionRejected(root, "spec", "campaign.judge must be a judge spec with a 'type'")
    official = declared == registered.hash and canonical_hash(judge) == canonical_hash(dict(registered.judge))
    if not official and not allow_overrides:
        why = (
            (
                f"its spec hash {declared[:12]}… differs from registered {env_id} ({registered.short_hash}…): "
                "the campaign overrode spec fields"
            )
            if declared != registered.hash
            else f"its judge {judge.get('type')!r} differs from the judge {env_id} specifies"
        )
        raise SubmissionRejected(
            root,
            "spec",
            f"not an official {env_id} result: {why}. Re-run without overrides, or "
            "build with --allow-overrides to rank it on a separate board",
        )
    return official, registered.hash, canonical_hash(judge)


# ----------------------------------------------------------------------------- 4. the design


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_design(root: Path, campaign: Mapping[str, Any], rows: Any) -> list[dict]:
    policies = campaign.get("policies")
    if (
        not isinstance(policies, list)
        or not policies
        or not all(isinstance(p, dict) and isinstance(p.get("label"), str) for p in policies)
    ):
        raise SubmissionRejected(root, "design", "campaign.policies must list policies with a 'label'")
    labels = [p["label"] for p in policies]
    tasks, seeds, repeats = campaign.get("tasks"), campaign.get("seeds"), campaign.get("repeats")
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks):
        raise SubmissionRejected(root, "design", "campaign.tasks must be a non-empty list of task names")
    if not isinstance(seeds, list) or not seeds or not all(_is_int(s) for s in seeds):
        raise SubmissionRejected(root, "design", "campaign.seeds must be a non-empty list of integers")
    if not _is_int(repeats) or repeats < 1:
        raise SubmissionRejected(root, "design", "campaign.repeats must be an integer >= 1")
    for name, values in (("policies", labels), ("tasks", tasks), ("seeds", seeds)):
        if len(set(values)) != len(values):
            raise SubmissionRejected(root, "design", f"campaign.{name} lists a value twice")
    if not isinstance(rows, list):
        raise SubmissionRejected(root, "design", "results.json has no per_episode list")
    expected = {(p, t, s, r) for p in labels for t in tasks for s in seeds for r in range(repeats)}
    seen: dict[tuple, int] = {}
    ids: set[str] = set()
    for i, row in enumerate(rows):
        where = f"per_episode[{i}]"
        if not isinstance(row, dict):
            raise SubmissionRejected(root, "design", f"{where} is not an object")
        key = (row.get("policy"), row.get("task"), row.get("seed"), row.get("repeat"))
        where += f" ({key[0]} | {key[1]} | seed {key[2]} | repeat {key[3]})"
        if (
            not (isinstance(key[0], str) and isinstance(key[1], str) and _is_int(key[2]) and _is_int(key[3]))
            or key not in expected
        ):
            raise SubmissionRejected(
                root,
                "design",
                f"{where} is not a cell of the declared design (policy, task, seed or repeat not in campaign)",
            )
        if key in seen:
            raise SubmissionRejected(
                root,
                "design",
                f"{where} appears twice (also per_episode[{seen[key]}]); each cell must be run exactly once",
            )
        seen[key] = i
        eid = row.get("episode_id")
        if not isinstance(eid, str) or eid in ids:
            raise SubmissionRejected(root, "design", f"{where}: episode_id {eid!r} is missing or duplicated")
        ids.add(eid)
        outcome = row.get("outcome")
        if outcome not in OUTCOMES:
            raise SubmissionRejected(root, "design", f"{where}: outcome {outcome!r} is not one of {OUTCOMES}")
        success = row.get("success")
        want = {"success": True, "failure": False}.get(outcome)
        if success is not want:
            raise SubmissionRejected(
                root, "design", f"{where}: success={success!r} contradicts outcome {outcome!r} (expected {want!r})"
            )
        score = row.get("score")
        if score is not None and (
            not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score)
        ):
            raise SubmissionRejected(root, "design", f"{where}: score {score!r} is not a finite number or null")

        arts = row.get("artifacts") or {}
        if not isinstance(arts, dict):
            raise SubmissionRejected(root, "design", f"{where}: artifacts must be an object")
        for kind, rel in arts.items():
            if rel is None:
                continue
            why = check_relpath(rel)
            if why:
                raise SubmissionRejected(root, "paths", f"{where}: artifact {kind}: {why}")
    missing = sorted(expected - set(seen), key=str)
    if missing:
        p, t, s, r = missing[0]
        raise SubmissionRejected(
            root,
            "design",
            f"{len(missing)} of {len(expected)} planned episodes are missing "
            f"(first: {p} | {t} | seed {s} | repeat {r}); the campaign is "
            "incomplete: finish it (re-run the same `kosmos-env eval` command "
            "to resume) before submitting",
        )
    return rows


def check_parquet(root: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """episodes.parquet must hold the same episodes with the same design keys and outcomes."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - pyarrow is a dependency of the results extra
        raise RuntimeError("verifying a submission needs pyarrow (pip install 'kosmos-env[results]')") from exc
    cols = ("episode_id", "policy", "task", "seed", "repeat", "outcome", "success")
    try:
        table = pq.read_table(root / "episodes.parquet", columns=list(cols))
    except Exception as exc:  # noqa: BLE001 - any parse failure is the submission's problem
        raise SubmissionRejected(
            root, "parquet", f"episodes.parquet cannot be read as a table with columns {cols}: {exc}"
        ) from None
    data = table.to_pydict()
    if table.num_rows != len(rows):
        raise SubmissionRejected(
            root, "parquet", f"episodes.parquet has {table.num_rows} rows but results.json has {len(rows)} episodes"
        )
    by_id = {r["episode_id"]: r for r in rows}
    for i in range(table.num_rows):
        eid = data["episode_id"][i]
        row = by_id.get(eid)
        if row is None:
            raise SubmissionRejected(
                root, "parquet", f"episodes.parquet row {i} has episode_id {eid!r}, which results.json does not have"
            )
        for col in cols[1:]:
            if data[col][i] != row.get(col):
                raise SubmissionRejected(
                    root,
                    "parquet",
                    f"episodes.parquet disagrees with results.json on episode "
                    f"{eid!r}: {col} = {data[col][i]!r} vs {row.get(col)!r}",
                )


def check_judgments(root: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Each outcome must be what the episode's own stored judgment (and gate, and the simulator's
    ground truth where the state judge decided) says; the same cross-check as ``kosmos-env verify``."""
    from kosmos_env.campaign.verify import evidence_problems

    for i, row in enumerate(rows):
        if row.get("outcome") == "error":
            continue
        try:
            problems = evidence_problems(row)
        except (AttributeError, TypeError, KeyError):
            problems = ["its judgment, gate or ground truth is malformed"]
        if problems:
            raise SubmissionRejected(
                root,
                "judgments",
                f"per_episode[{i}] ({row.get('episode_id')}): {problems[0]}; "
                "an outcome must be what its own stored judgment says",
            )


# ----------------------------------------------------------------------------- 5. the numbers


def recompute(rows: Sequence[Mapping[str, Any]], labels: Sequence[str], tasks: Sequence[str]) -> dict[str, Any]:
    """Every aggregate of results.json, recounted from the per-episode rows alone with the
    campaign writer's own code: the submitted numbers are compared with this, never reused."""
    from kosmos_env.campaign.bundle import aggregate

    return aggregate(rows, labels, tasks)


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isfinite(b) and abs(a - b) <= _TOL
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _compare_summary(root: Path, where: str, mine: Mapping[str, Any], theirs: Any) -> None:
    if not isinstance(theirs, dict):
        raise SubmissionRejected(root, "aggregates", f"{where} is missing")
    for key, value in mine.items():
        if key not in theirs:
            raise SubmissionRejected(root, "aggregates", f"{where}.{key} is missing")
        if not _same(value, theirs[key]):
            raise SubmissionRejected(
                root,
                "aggregates",
                f"forged or stale aggregate: {where}.{key} = {theirs[key]!r} but the per-episode rows give {value!r}",
            )


def check_aggregates(
    root: Path, submitted: Any, mine: Mapping[str, Any], labels: Sequence[str], tasks: Sequence[str]
) -> None:
    if not isinstance(submitted, dict):
        raise SubmissionRejected(root, "aggregates", "results.json has no 'aggregated' block")
    for block in ("per_policy", "per_policy_task"):
        theirs = submitted.get(block)
        if not isinstance(theirs, dict) or set(theirs) != set(labels):
            raise SubmissionRejected(
                root,
                "aggregates",
                f"aggregated.{block} must have exactly the campaign's policies {labels}, got {sorted(theirs or {})}",
            )
    for label in labels:
        _compare_summary(
            root, f"aggregated.per_policy[{label!r}]", mine["per_policy"][label], submitted["per_policy"][label]
        )
        theirs_t = submitted["per_policy_task"][label]
        if not isinstance(theirs_t, dict) or set(theirs_t) != set(tasks):
            raise SubmissionRejected(
                root,
                "aggregates",
                f"aggregated.per_policy_task[{label!r}] must have exactly the campaign's tasks {list(tasks)}",
            )
        for task in tasks:
            _compare_summary(
                root,
                f"aggregated.per_policy_task[{label!r}][{task!r}]",
                mine["per_policy_task"][label][task],
                theirs_t[task],
            )
    if submitted.get("ranking") != mine["ranking"]:
        raise SubmissionRejected(
            root,
            "aggregates",
            f"forged or stale aggregate: aggregated.ranking = "
            f"{submitted.get('ranking')!r} but the per-episode rows rank "
            f"{mine['ranking']!r}",
        )


# ----------------------------------------------------------------------------- entry point


def verify_submission(
    path: str | os.PathLike, *, strict: bool = True, allow_overrides: bool = False
) -> VerifiedSubmission:
    """Run every check on the submission at ``path``; return it verified or raise
    :class:`SubmissionRejected`.

    ``strict`` (leaderboard submissions) also refuses files the manifest does not list;
    ``kosmos-env publish`` checks a local campaign folder with ``strict=False`` and then publishes
    only manifest-listed files.
    """
    root = Path(path)
    on_disk = scan_tree(root)
    manifest = check_manifest(root, on_disk, strict)
    results = _load_json(root, "results.json", "schema")
    if not isinstance(results, dict) or results.get("schema") != RESULTS_SCHEMA:
        raise SubmissionRejected(root, "schema", f"results.json must have schema {RESULTS_SCHEMA!r}")
    version = results.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise SubmissionRejected(
            root,
            "schema",
            f"results.json schema_version {version!r} is not supported by this "
            f"kosmos-env (supported: {SUPPORTED_SCHEMA_VERSIONS}); upgrade kosmos-env",
        )
    campaign = results.get("campaign")
    if not isinstance(campaign, dict) or not isinstance(campaign.get("id"), str) or not campaign["id"]:
        raise SubmissionRejected(root, "schema", "results.json has no campaign block with an id")
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", campaign["id"]):
        raise SubmissionRejected(
            root, "schema", f"campaign.id {campaign['id']!r} must be letters, digits, '.', '_', '-'"
        )
    official, registered_hash, judge_hash = check_spec(root, campaign, allow_overrides)
    rows = check_design(root, campaign, results.get("per_episode"))
    check_parquet(root, rows)
    check_judgments(root, rows)
    labels = [p["label"] for p in campaign["policies"]]
    mine = recompute(rows, labels, campaign["tasks"])
    check_aggregates(root, results.get("aggregated"), mine, labels, campaign["tasks"])
    listed = set(manifest["files"])
    omitted = sum(
        1 for r in rows for rel in (r.get("artifacts") or {}).values() if rel is not None and rel not in listed
    )
    notes = []
    if omitted:
        notes.append(f"{omitted} artifact(s) named by episodes are not included (only selected videos are published)")
    if not official:
        notes.append("non-default spec or judge: ranked on its own board")
    return VerifiedSubmission(
        root=root,
        results=results,
        manifest=manifest,
        rows=rows,
        aggregated=mine,
        official=official,
        registered_spec_hash=registered_hash,
        judge_hash=judge_hash,
        results_sha256=manifest["files"]["results.json"],
        omitted_artifacts=omitted,
        notes=notes,
    )


# ----------------------------------------------------------------------------- 6. re-derivation

#: what a leaderboard re-derives by default: judges on every episode, and a replay of this many
#: simulator episodes per submission (a seeded sample; ``kosmos-env leaderboard build --replay``)
DEFAULT_REPLAY_SAMPLE = 2


def needed_artifacts(sub: VerifiedSubmission) -> dict[str, list[str]]:
    """Episode id -> the artifact paths re-deriving its outcome reads: its actions always; its robot
    log where it has one (and always on a simulator, whose log carries the ground truth); its video
    where the judge reads frames. Error episodes need nothing (they have no outcome to re-derive)."""
    from kosmos_env.campaign.rederive import judge_reads_frames

    frames = judge_reads_frames(sub.campaign.get("judge"))
    out: dict[str, list[str]] = {}
    for row in sub.rows:
        if row.get("outcome") == "error":
            continue
        arts = row.get("artifacts") or {}
        need = [arts.get("actions"), arts.get("log")] + ([arts.get("video")] if frames else [])
        out[str(row.get("episode_id"))] = [rel for rel in need if rel]
    return out


def rederive_submission(
    sub: VerifiedSubmission,
    *,
    replay_sample: int | str = DEFAULT_REPLAY_SAMPLE,
    replay_seed: int = 0,
    sample_salt: str | None = None,
) -> dict[str, Any]:
    """Re-derive a verified submission's outcomes from its artifacts, or raise :class:`SubmissionRejected`.

    1. **Artifacts required.** Every episode with an outcome must carry the artifacts its
       re-derivation reads (:func:`needed_artifacts`), listed in the manifest, each named by the
       sha256 of its bytes; a simulator episode must carry its robot log.
    2. **Judges re-run.** The campaign's judge, when deterministic, is re-run on every episode's
       stored actions, log and frames (the state judge on the ground truth the stored log records);
       an outcome it does not give rejects the submission.
    3. **Replay.** On a simulator world a seeded sample of ``replay_sample`` episodes (drawn with
       ``replay_seed`` and ``sample_salt``, by default the submission's results.json hash) is replayed
       from the stored actions: log, actions and frames must come out bit for bit, the ground truth
       and verdict equal. A salt the submitter can compute lets padding steer the sample away from
       forged episodes: the leaderboard passes its own (``""`` with a seed the build drew, or the
       board's secret-keyed salt).

    Returns what was re-derived and what is taken on trust (shown on the leaderboard page).
    """
    from kosmos_env.campaign.rederive import (
        ON_TRUST_GENERATED,
        Replayer,
        judge_is_deterministic,
        rederive_rows,
        sample_rows,
        world_is_simulator,
    )

    root = sub.root
    listed = sub.manifest["files"]
    simulator = world_is_simulator(sub.campaign.get("spec") or {})
    judge = dict(sub.campaign["judge"])
    for eid, rels in needed_artifacts(sub).items():
        row = next(r for r in sub.rows if str(r.get("episode_id")) == eid)
        arts = row.get("artifacts") or {}
        if not arts.get("actions"):
            raise SubmissionRejected(
                root,
                "artifacts",
                f"episode {eid} names no actions artifact; a leaderboard "
                "submission must carry every episode's actions (and robot log "
                "and frames where its judge reads them) so its outcome can "
                "be re-derived",
            )
        if simulator and row.get("outcome") != "discarded" and not arts.get("log"):
            raise SubmissionRejected(
                root,
                "artifacts",
                f"episode {eid} names no robot log, but {sub.env_id} is a "
                "simulator whose log records the ground truth: the outcome "
                "cannot be re-derived without it",
            )
        for rel in rels:
            if rel not in listed:
                raise SubmissionRejected(
                    root,
                    "artifacts",
                    f"episode {eid}'s artifact {rel} is not in the "
                    "submission: outcomes are ranked only when they re-derive "
                    "from their artifacts; include every episode's actions, "
                    "robot log (and video where the judge reads frames)",
                )
            if PurePosixPath(rel).name.split(".")[0] != listed[rel]:
                raise SubmissionRejected(
                    root,
                    "artifacts",
                    f"{rel} is named for a sha256 its bytes do not have "
                    f"({listed[rel][:16]}…): artifacts are content-addressed",
                )
    world_type = ((sub.campaign.get("spec") or {}).get("world") or {}).get("type")
    for row in sub.rows:  # each episode's provenance must name the campaign's spec, world and judge
        prov = row.get("provenance")
        if not isinstance(prov, dict) or row.get("outcome") == "error":
            continue
        named = {
            "spec hash": (prov.get("spec_hash"), sub.spec_hash),
            "world": ((prov.get("world") or {}).get("type"), world_type),
            "judge": (((prov.get("judge") or {}).get("spec") or {}).get("type"), judge.get("type")),
        }
        for what, (theirs, mine) in named.items():
            if theirs is not None and theirs != mine:
                raise SubmissionRejected(
                    root,
                    "provenance",
                    f"episode {row.get('episode_id')} was run with {what} "
                    f"{str(theirs)[:24]!r}, but the campaign states "
                    f"{str(mine)[:24]!r}",
                )
    problems, warnings, n = rederive_rows(root, sub.rows, judge, sub.campaign.get("spec") or {})
    if problems:
        raise SubmissionRejected(
            root,
            "rederive",
            f"{problems[0]}"
            f"{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}"
            "; outcomes must be what their own artifacts give",
        )
    replayed = 0
    if simulator and replay_sample:
        rows = [r for r in sub.rows if r.get("outcome") != "error"]
        salt = sub.results_sha256 if sample_salt is None else sample_salt
        picked = sample_rows(rows, replay_sample, replay_seed, salt=salt)
        try:
            replayer = Replayer(sub.env_id, sub.campaign.get("spec_overrides") or {}, judge, sub.spec_hash)
        except Exception as exc:  # noqa: BLE001 - a world that cannot be rebuilt cannot vouch for it
            raise SubmissionRejected(
                root, "replay", f"its world cannot be rebuilt to replay episodes ({type(exc).__name__}: {exc})"
            ) from None
        try:
            for row in picked:
                arts = row.get("artifacts") or {}
                if arts.get("video") and arts["video"] not in listed:
                    # a published tree keeps only selected videos: an omitted one has nothing to compare
                    row = {**row, "artifacts": {**arts, "video": None}}
                found = replayer.replay(root, row)
                if found:
                    raise SubmissionRejected(
                        root,
                        "replay",
                        f"episode {row.get('episode_id')} does not replay from its stored actions and seed: {found[0]}",
                    )
                replayed += 1
        finally:
            replayer.close()
    deterministic = judge_is_deterministic(judge)
    rederived = [
        f"judge {judge.get('type')} re-run on every episode's stored actions, log and frames"
        if deterministic
        else f"judge {judge.get('type')} is not deterministic: not re-run"
    ]
    if simulator:
        rederived.append(f"{replayed} episode(s) replayed bit for bit from their stored actions and seeds")
    on_trust = (
        []
        if simulator
        else [ON_TRUST_GENERATED, "the consistency gate's verdicts (recorded; not re-run on the stored frames)"]
    )
    if simulator:
        n_decided = sum(1 for r in sub.rows if r.get("outcome") != "error")
        if replayed < n_decided:  # a sample: the others' logs are re-judged but not re-simulated
            on_trust.append(
                f"the stored logs of {n_decided - replayed} of {n_decided} episodes (re-judged, not replayed)"
            )
    if not deterministic:
        on_trust.append(f"the verdicts of judge {judge.get('type')} (not deterministic)")
    on_trust += warnings
    info = {
        "rederived_episodes": n,
        "replayed": replayed,
        "rederived": rederived,
        "on_trust": on_trust,
        "simulator": simulator,
    }
    return info


def episode_content_hashes(sub: VerifiedSubmission) -> set[str]:
    """One sha256 per episode with an outcome from what it *is*, never from what the submission says
    about it: the env and spec hash (checked) and the sha256 of its actions and log as the manifest,
    checked against the bytes, has them. The same evidence relabelled (a new campaign id, another
    policy content hash) has the same hashes."""
    listed = sub.manifest["files"]
    out = set()
    for row in sub.rows:
        arts = row.get("artifacts") or {}
        if row.get("outcome") == "error" or arts.get("actions") not in listed:
            continue
        out.add(
            canonical_hash(
                {
                    "env_id": sub.env_id,
                    "spec_hash": sub.spec_hash,
                    "actions": listed[arts["actions"]],
                    "log": listed.get(arts.get("log")),
                }
            )
        )
    return out
