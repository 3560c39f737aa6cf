"""Every content hash of the package: bytes, files, folders, canonical JSON (and so specs).

Results stand on these hashes (a spec hash is stamped on every episode, a bundle's manifest lists
the sha256 of every file, a registration binds weights and policies by hash), so there is one
implementation of each, here. Where two stored hashes were first published with different
conventions, the difference is a named, documented option of one function, never a second
function, and never a change of value: ``tests/test_hashing_pins.py`` pins each variant and every
hash the repository stores.

- bytes and text: :func:`sha256_hex`;
- a file: :func:`sha256_file` (read in blocks);
- JSON: :func:`canonical_json` / :func:`canonical_hash`, sorted keys, ASCII only. The default (compact
  separators, NaN refused) is the form of spec, task-suite, protocol, campaign and bundle hashes;
  ``spaced``, ``allow_nan`` and ``default`` reproduce the forms policy content hashes and distilled
  judge identities were published in;
- a folder: :func:`folder_sha256` (one stream over names and bytes; distilled judges' weights),
  :func:`folder_digest` (a manifest of per-file hashes and sizes; world-model and VLM weights),
  :func:`files_sha256` (named files or folders, optionally by suffix; policy checkpoints and LoRA
  adapters) and :func:`manifest_sha256` (a manifest over files the caller lists; source code).

Two kinds of hashing stay where they are used, on purpose: seed derivations (a repeat's env seed,
a judge's sampling seed, a replay sample) turn a string into an integer and name nothing; and the
digests of models held in memory (:func:`kosmos_env.utils.weights.module_digest`, the LeRobot adapter's
content hash) stream tensors through torch, which this module must not import.

Imports nothing of the package (the bottom layer), nothing heavy at import time.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

BLOCK = 1 << 20  # bytes read at a time: a multi-GB checkpoint is never held in memory whole

# -- bytes, text and files ----------------------------------------------------------------------------


def sha256_hex(data: bytes | str) -> str:
    """sha256 (hex) of bytes, or of text as UTF-8."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, block: int = BLOCK) -> str:
    """sha256 (hex) of a file's bytes, read in blocks (equal to ``sha256_hex(read_bytes())``)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(block), b""):
            digest.update(chunk)
    return digest.hexdigest()


# -- canonical JSON -----------------------------------------------------------------------------------

_COMPACT = (",", ":")
_SPACED = (", ", ": ")  # json.dumps's own default separators


def canonical_json(
    data: Any, *, spaced: bool = False, allow_nan: bool = False, default: Callable[[Any], Any] | None = None
) -> str:
    """Canonical JSON: sorted keys, ASCII only (``\\uXXXX`` escapes), floats as Python's ``repr``.

    Same data, same text, on any machine. The defaults are the form of every spec, task-suite,
    protocol, study-registration, campaign and bundle hash. The options reproduce forms that stored
    hashes were first published in (changing them would change those hashes):

    - ``spaced``: ``", "`` and ``": "`` separators (``json.dumps(..., sort_keys=True)``), the form of
      policy content hashes (``Policy.content_hash`` and the adapters built on it);
    - ``allow_nan``: NaN and infinities written as ``NaN``/``Infinity`` instead of refused with a
      ValueError: policy configs and distilled-label sets (a label's probability may be NaN);
    - ``default``: called on an object JSON cannot encode (``str``: paths and dtypes in distilled
      judge identities and in checkpoint adapters' settings) instead of a TypeError.
    """
    return json.dumps(
        data,
        sort_keys=True,
        separators=_SPACED if spaced else _COMPACT,
        ensure_ascii=True,
        allow_nan=allow_nan,
        default=default,
    )


def canonical_hash(
    data: Any, *, spaced: bool = False, allow_nan: bool = False, default: Callable[[Any], Any] | None = None
) -> str:
    """sha256 (hex) of :func:`canonical_json` with the same options."""
    return sha256_hex(canonical_json(data, spaced=spaced, allow_nan=allow_nan, default=default))


# -- folders ------------------------------------------------------------------------------------------


def walk_files(root: str | os.PathLike) -> list[tuple[str, Path]]:
    """``(relative POSIX name, path)`` of every regular file under ``root``, hidden files and folders
    (``.git``, ``.cache``) skipped, in walk order: a folder's files (sorted) before its sub-folders
    (sorted), depth first. (This is not the sorted order of the names: ``sub/x/a`` comes after
    ``sub/b``.) The order of :func:`folder_sha256` and :func:`folder_digest`."""
    base = Path(root)
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(f for f in filenames if not f.startswith(".")):
            full = Path(dirpath) / name
            out.append((full.relative_to(base).as_posix(), full))
    return out


def folder_sha256(path: str | os.PathLike) -> str:
    """One sha256 over every file under ``path`` (:func:`walk_files`: hidden entries skipped): for
    each, its relative name, ``\\0``, its bytes, ``\\0``. The hash of a distilled judge's weights
    folder and of a student adapter (``judge-distill``)."""
    digest = hashlib.sha256()
    for rel, full in walk_files(path):
        digest.update(rel.encode("utf-8") + b"\0")
        _update_from_file(digest, full)
        digest.update(b"\0")
    return digest.hexdigest()


# (abs path, ((relpath, size, mtime_ns), ...)) -> digest dict: a multi-GB folder is read once per process
_FOLDER_CACHE: dict[tuple, dict[str, Any]] = {}


def folder_digest(path: str | os.PathLike) -> dict[str, Any]:
    """``{"path", "sha256", "files": {relpath: sha256}, "bytes"}`` of every file under ``path``
    (:func:`walk_files`: hidden entries skipped, they are not weights).

    ``sha256`` is :func:`manifest_sha256` with sizes (``relpath\\0size\\0sha256\\n`` lines in walk
    order): the weights hash of a world model's or VLM judge's checkpoint folder. The result is
    cached per process while no file's size or modification time changes.
    """
    root = Path(path).resolve()
    entries = []
    for rel, full in walk_files(root):
        st = full.stat()
        entries.append((rel, st.st_size, st.st_mtime_ns))
    key = (str(root), tuple(entries))
    if key not in _FOLDER_CACHE:
        files = {rel: sha256_file(root / rel) for rel, _, _ in entries}
        _FOLDER_CACHE[key] = {
            "path": str(root),
            "sha256": manifest_sha256(
                [(rel, files[rel]) for rel, _, _ in entries], sizes=[size for _, size, _ in entries]
            ),
            "files": files,
            "bytes": sum(size for _, size, _ in entries),
        }
    return dict(_FOLDER_CACHE[key])


def manifest_sha256(entries: Sequence[tuple[str, str]], sizes: Sequence[int] | None = None) -> str:
    """sha256 of a manifest: one line per ``(name, sha256)`` entry, in the order given,
    ``name\\0sha256\\n``, or ``name\\0size\\0sha256\\n`` with ``sizes``. The form of
    :func:`folder_digest` (with sizes) and of a study registration's source-code digests (without)."""
    if sizes is None:
        lines = "".join(f"{name}\0{sha}\n" for name, sha in entries)
    else:
        if len(sizes) != len(entries):
            raise ValueError(f"manifest_sha256: {len(sizes)} sizes for {len(entries)} entries")
        lines = "".join(f"{name}\0{size}\0{sha}\n" for (name, sha), size in zip(entries, sizes, strict=True))
    return sha256_hex(lines)


def files_sha256(paths: Iterable[str | os.PathLike], suffixes: tuple[str, ...] | None = None) -> str:
    """One sha256 over files, or every file under folders: for each, its name, ``\\0``, its bytes.

    A file given directly is named by its base name, a file under a folder by its path relative to
    that folder; hidden files are included; the files are taken in sorted order of those names;
    ``suffixes`` keeps only names ending in one of them (weights and configs). The hash of a
    policy checkpoint folder (openvla, minivla) and of a VLM judge's LoRA adapter files. A progress
    bar shows above 256 MiB.
    """
    files: list[tuple[str, Path]] = []
    for root in map(Path, paths):
        if root.is_dir():
            files += [(str(p.relative_to(root)), p) for p in sorted(root.rglob("*")) if p.is_file()]
        elif root.is_file():
            files.append((root.name, root))
        else:
            raise FileNotFoundError(f"cannot hash {root}: no such file or directory")
    if suffixes is not None:
        files = [(n, p) for n, p in files if n.endswith(suffixes)]
    digest = hashlib.sha256()
    total = sum(p.stat().st_size for _, p in files)
    from tqdm.auto import tqdm  # lazy: only hashing needs it

    with tqdm(total=total, unit="B", unit_scale=True, desc="hashing weights", disable=total < 256 << 20) as bar:
        for name, path in sorted(files):
            digest.update(name.encode("utf-8") + b"\0")
            _update_from_file(digest, path, bar.update, block=1 << 22)
    return digest.hexdigest()


def _update_from_file(
    digest: Any, path: Path, progress: Callable[[int], Any] | None = None, block: int = BLOCK
) -> None:
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(block), b""):
            digest.update(chunk)
            if progress is not None:
                progress(len(chunk))
