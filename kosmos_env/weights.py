"""Model checkpoints on disk and in memory: content hashes and memory estimates.

Provenance needs to name the weights that actually ran, not the repository a spec asked for:
:func:`folder_digest` hashes every file of a checkpoint folder (sha256 per file, then one
sha256 over the sorted ``path\\0size\\0sha256`` lines) and :func:`module_digest` hashes the
tensors of a model object built in memory. Hashing a real checkpoint (tens of GB) takes
about a minute, so folder digests are cached per process, keyed by each file's size and
modification time.

:func:`safetensors_bytes` reads only the JSON headers of ``*.safetensors`` files to count the
bytes the tensors take at a given dtype, which is what the memory check compares with a GPU's
free memory. Nothing here imports torch at module level.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_FLOAT_CODES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2")
RUN_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# (abs path, ((relpath, size, mtime_ns), ...)) -> digest dict
_FOLDER_CACHE: dict[tuple, dict[str, Any]] = {}


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_digest(path: str | os.PathLike) -> dict[str, Any]:
    """``{"path", "sha256", "files": {relpath: sha256}, "bytes"}`` of every regular file under ``path``.

    Hidden files and folders (``.cache``, ``.git``) are skipped: they are not weights.
    """
    root = Path(path).resolve()
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            full = Path(dirpath) / name
            st = full.stat()
            entries.append((full.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns))
    key = (str(root), tuple(entries))
    if key not in _FOLDER_CACHE:
        files = {rel: sha256_file(root / rel) for rel, _, _ in entries}
        lines = "".join(f"{rel}\0{size}\0{files[rel]}\n" for rel, size, _ in entries)
        _FOLDER_CACHE[key] = {
            "path": str(root),
            "sha256": hashlib.sha256(lines.encode("utf-8")).hexdigest(),
            "files": files,
            "bytes": sum(size for _, size, _ in entries),
        }
    return dict(_FOLDER_CACHE[key])


def module_digest(*modules: Any) -> str:
    """sha256 over the named tensors (name, dtype, shape, bytes) of torch modules held in memory."""
    import torch

    digest = hashlib.sha256()
    for i, module in enumerate(modules):
        if module is None or not hasattr(module, "state_dict"):
            continue
        for name, tensor in sorted(module.state_dict().items()):
            t = tensor.detach().to("cpu").contiguous()
            digest.update(f"{i}:{name}:{t.dtype}:{tuple(t.shape)}\0".encode())
            raw = t.view(torch.uint8) if t.dtype != torch.bool else t.to(torch.uint8)
            digest.update(raw.numpy().tobytes())
    return digest.hexdigest()


def safetensors_bytes(path: str | os.PathLike, run_dtype: str | None = None) -> int:
    """Bytes the tensors of every ``*.safetensors`` under ``path`` take; floating tensors counted at
    ``run_dtype`` (``"bfloat16"``, ...) when given, else at their stored dtype. Reads headers only."""
    total = 0
    for file in sorted(Path(path).rglob("*.safetensors")):
        with open(file, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            numel = 1
            for d in info["shape"]:
                numel *= int(d)
            code = info["dtype"]
            per = RUN_DTYPE_BYTES[run_dtype] if run_dtype and code in _FLOAT_CODES else _DTYPE_BYTES.get(code, 4)
            total += numel * per
    return total


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.2f} GiB"
