"""Content-addressed artifact store: ``artifacts/sha256/<2 hex>/<64 hex>.<ext>``, written once.

A file's name is the sha256 of its bytes, so a finished artifact never changes and the same
content is stored once. Writing goes to a temporary file in the same folder, is fsynced,
and then linked into place only if the name is still absent (``os.link`` fails rather than
overwrite; where hard links are unsupported, ``os.replace`` runs after an existence check).
A crash mid-write leaves at most a ``.tmp-*`` file, never a truncated artifact.

Arrays are stored byte-deterministically: actions with ``np.save`` (``.npy``) and the robot
log as an ``.npz`` whose zip entries carry a fixed timestamp, so equal arrays give equal hashes.
"""

from __future__ import annotations

import io
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Mapping

import numpy as np

from kosmos_env.utils.fileio import default_file_mode, fsync_dir
from kosmos_env.hashing import sha256_file, sha256_hex

STORE_DIR = "artifacts"
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def npy_bytes(array: np.ndarray) -> bytes:
    """``np.save`` bytes of one array (no pickles)."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    return buf.getvalue()


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An ``.npz`` of named arrays with fixed zip timestamps (``np.load`` reads it)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, npy_bytes(arrays[name]))
    return buf.getvalue()


class ArtifactStore:
    """The store under ``root/artifacts``; paths it returns are relative to ``root``."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.base = self.root / STORE_DIR / "sha256"

    def relpath(self, sha256: str, ext: str) -> str:
        return f"{STORE_DIR}/sha256/{sha256[:2]}/{sha256}.{ext}"

    def path(self, relpath: str) -> Path:
        return self.root / relpath

    def put_bytes(self, data: bytes, ext: str) -> tuple[str, str, int]:
        """Store ``data``; returns (sha256, relpath, size). Existing content is left untouched."""
        digest = sha256_hex(data)
        rel = self.relpath(digest, ext)
        final = self.root / rel
        if final.exists():
            return digest, rel, len(data)
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=final.parent)
        os.fchmod(fd, default_file_mode())  # the umask's mode, like every other file of the run folder
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            self._place(Path(tmp), final)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return digest, rel, len(data)

    def put_file(self, src: str | os.PathLike, ext: str) -> tuple[str, str, int]:
        """Move a finished file (e.g. an MP4 ffmpeg wrote) into the store by its hash."""
        src = Path(src)
        digest = sha256_file(src)
        rel = self.relpath(digest, ext)
        final = self.root / rel
        size = src.stat().st_size
        try:
            if not final.exists():
                final.parent.mkdir(parents=True, exist_ok=True)
                with open(src, "rb") as fh:
                    os.fsync(fh.fileno())
                self._place(src, final)
        finally:
            if src.exists():
                src.unlink()
        return digest, rel, size

    def put_video(self, frames: np.ndarray, fps: float) -> tuple[str, str, int]:
        """Encode frames as MP4 (H.264) into a temp file, then store it."""
        from kosmos_env.utils.video import write_mp4

        self.base.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".mp4", dir=self.base)
        os.fchmod(fd, default_file_mode())  # the umask's mode, like every other file of the run folder
        os.close(fd)
        try:
            write_mp4(tmp, frames, fps)
        except BaseException:
            os.unlink(tmp)
            raise
        return self.put_file(tmp, "mp4")

    def files(self) -> list[str]:
        """Relative paths of every stored artifact (temp files excluded)."""
        if not self.base.exists():
            return []
        return sorted(
            str(p.relative_to(self.root))
            for p in self.base.rglob("*")
            if p.is_file() and not p.name.startswith(".tmp-")
        )

    @staticmethod
    def _place(tmp: Path, final: Path) -> None:
        try:
            os.link(tmp, final)  # atomic, and refuses to overwrite
        except FileExistsError:
            return
        except OSError:
            if final.exists():
                return
            os.replace(tmp, final)
        fsync_dir(final.parent)
