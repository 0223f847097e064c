"""Folders as tar streams, for a client whose files are not on the daemon's machine.

``floyd`` talking to a daemon over TCP (``FLOYD_HOST``, e.g. through an SSH tunnel from a
laptop) cannot hand it a path: :func:`pack` writes the project folder (``.floydignore``
honoured, regular files and folders only) as an uncompressed tar, and the daemon unpacks it
with :func:`unpack` into a private scratch folder before snapshotting it like any code
folder. Unpacking trusts nothing in the archive: names are plain relative paths (no ``/``
at the start, no ``..``, no NUL), only files and folders are made (links, devices and fifos
are skipped and counted), modes are reduced to rw/rwx for the owner and group-less, and the
total size is checked against the limit while reading, before anything past it is written.
"""

from __future__ import annotations

import errno
import os
import posixpath
import tarfile
from pathlib import Path
from typing import IO, NamedTuple

from floydd.errors import Conflict, InvalidSpec, StoreFull, UnsafePath, UserError
from floydd.store.ignore import IgnoreRules

__all__ = ["pack", "unpack", "unpack_into", "Unpacked"]

_CHUNK = 1 << 20


def pack(folder: Path, out: IO[bytes], limit: int | None = None, *, ignore: bool = True) -> tuple[int, int]:
    """Write ``folder`` (``.floydignore`` honoured unless ``ignore`` is False) to ``out`` as a
    tar; (files, bytes). Symbolic links and special files are left out; past ``limit``
    bytes: UserError."""
    if not folder.is_dir():
        raise UserError(f"folder {folder} does not exist", hint="check the path")
    rules = IgnoreRules.for_folder(folder) if ignore else (lambda path, is_dir: False)
    files = total = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(folder):
            rel = os.path.relpath(dirpath, folder)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            dirnames[:] = sorted(d for d in dirnames if not rules(prefix + d, True)
                                 and not os.path.islink(os.path.join(dirpath, d)))
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if rules(prefix + name, False) or os.path.islink(path) or not os.path.isfile(path):
                    continue
                info = tar.gettarinfo(path, arcname=prefix + name)
                total += info.size
                if limit is not None and total > limit:
                    raise UserError(f"{folder} holds more than {limit / 2**20:.0f} MiB",
                                    hint="upload data with `floyd data upload PATH --name NAME` and mount it "
                                         "with --data, or list large files in .floydignore", code="code_too_large")
                with open(path, "rb") as f:
                    tar.addfile(info, f)
                files += 1
    return files, total


class Unpacked(NamedTuple):
    files: int
    bytes: int
    skipped: int
    """Links, devices and fifos left out."""


def unpack(src: IO[bytes], dest: Path, limit: int | None = None) -> Unpacked:
    """Unpack the tar stream ``src`` into the empty folder ``dest`` (see the module docstring)."""
    files = total = skipped = 0
    try:
        with tarfile.open(fileobj=src, mode="r|*") as tar:
            for member in tar:
                name = _safe_name(member.name)
                if name is None:
                    continue
                target = dest / name
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True, mode=0o700)
                    continue
                if not member.isreg():
                    skipped += 1
                    continue
                total += member.size
                if limit is not None and total > limit:
                    raise UserError(f"the upload holds more than {limit / 2**20:.0f} MiB", code="code_too_large",
                                    hint="move data out of the code folder (floyd data upload) or into .floydignore")
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                if target.exists():
                    raise UnsafePath(f"the upload names {name} twice", hint="send a plain tar of one folder")
                reader = tar.extractfile(member)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o700 if member.mode & 0o100 else 0o600)
                with os.fdopen(fd, "wb") as out:
                    while chunk := reader.read(_CHUNK):
                        out.write(chunk)
                files += 1
    except tarfile.TarError as exc:
        raise InvalidSpec(f"the upload is not a readable tar archive: {exc}",
                          hint="floyd sends the project folder as an uncompressed tar") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreFull(f"no space left on the disk of {dest} while unpacking",
                            hint="free some space there and try again") from None
        raise
    return Unpacked(files, total, skipped)


def unpack_into(src: IO[bytes], dest: Path) -> Unpacked:
    """:func:`unpack` into ``dest``, made if absent; an existing ``dest`` must be an empty
    folder (as a restore requires)."""
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise Conflict(f"{dest} exists and is not an empty folder", hint="choose an empty or new folder")
    dest.mkdir(parents=True, exist_ok=True)
    return unpack(src, dest)


def _safe_name(raw: str) -> str | None:
    """A member's path as a plain relative path; None for the archive's own root."""
    if "\0" in raw or raw.startswith("/") or "\\" in raw:
        raise UnsafePath(f"the upload holds an unsafe path {raw[:200]!r}", hint="send a plain tar of one folder")
    name = posixpath.normpath(raw)
    if name in (".", ""):
        return None
    if name == ".." or name.startswith("../") or any(part == ".." for part in name.split("/")):
        raise UnsafePath(f"the upload holds a path outside its folder: {raw[:200]!r}",
                         hint="send a plain tar of one folder")
    return name
