"""Model checkpoints on disk and in memory: content hashes and memory estimates.

Provenance needs to name the weights that actually ran, not the repository a spec asked for:
:func:`kosmos_env.hashing.folder_digest` hashes every file of a checkpoint folder (cached per
process: a real checkpoint of tens of GB takes about a minute) and :func:`module_digest` hashes
the tensors of a model object built in memory.

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

_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
_FLOAT_CODES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2")
RUN_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


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
