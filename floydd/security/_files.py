"""Owner-only files: written atomically, refused when others can read them.

Keys, the token store and secrets go through :func:`write_private`; public material
(certificates) through :func:`write_public`. Writes go to a temporary file made with
``O_EXCL | O_NOFOLLOW`` at its final mode, are fsynced, then renamed into place, so a
crash leaves the old file or the new one and a secret is never briefly world-readable.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from floydd.errors import FloyddError

__all__ = ["ensure_private_dir", "write_private", "write_public", "read_private", "read_public"]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def ensure_private_dir(path: Path) -> Path:
    """Make ``path`` (and parents) if missing; the leaf folder is owner-only (0700)."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Atomically write ``data`` to ``path`` with mode 0600."""
    _write(Path(path), data, 0o600)


def write_public(path: Path, data: bytes) -> None:
    """Atomically write non-secret ``data`` (certificates) with mode 0644."""
    _write(Path(path), data, 0o644)


def read_private(path: Path) -> bytes:
    """Read an owner-only file; refuse it (like ssh) when group or others may read it."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o077:
            raise FloyddError(f"{path} is readable by others (mode {mode:o}); refusing to use it",
                              hint=f"chmod 600 {path}", code="insecure_permissions")
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_public(path: Path) -> bytes:
    return Path(path).read_bytes()


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(6)}")
    fd = os.open(tmp, _CREATE, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have taken bits away from public files
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
