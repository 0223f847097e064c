"""Folders as tar streams, for a client whose files are not on the daemon's machine.

``floyd`` talking to a daemon over TCP (``FLOYD_HOST``, e.g. through an SSH tunnel from a
laptop) cannot hand it a path: :func:`pack` writes the project folder (``.floydignore``
honoured, regular files and folders only) as an uncompressed tar, and the daemon unpacks it
with :func:`unpack` into a private scratch folder before snapshotting it like any code
folder. Unpacking trusts nothing in the archive: names are plain relative paths (no ``/``
at the start, no ``..``, no NUL) that a tree may hold (at most 4096 bytes, 255 a name, and
:data:`MAX_DEPTH` folders deep), no name is both a file and a folder, only files and folders
are made (links, devices and fifos are skipped and counted), modes are reduced to rw/rwx for
the owner and group-less. Whatever breaks these rules is refused as
:class:`~floydd.errors.UnsafePath` naming the member. Every folder and file is made relative
to its parent folder's descriptor, without following a link (:mod:`floydd.security.beneath`):
nothing in the archive or put next to it meanwhile can send a write outside ``dest``.

Size: what unpacking would *write* is counted against a :class:`SizeLimit` (:class:`_Budget`),
before each member is written and again while it is: a sparse member counts at its real,
expanded size (a 10 KB archive holding a 3 GiB sparse file is 3 GiB to write), a compressed
one at what it decompresses to, and every entry (file, folder, link) counts against a cap of
``limit / 512`` entries (what their headers alone would take in a plain tar), so an archive of
millions of empty files is refused too. Past the limit: :class:`~floydd.errors.TooLarge`
(HTTP 413) naming the limit and the setting that raises it, with nothing past it written.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
import tarfile
from pathlib import Path
from typing import IO, NamedTuple

from floydd.errors import Conflict, InvalidSpec, StoreFull, TooLarge, UnsafePath, UserError
from floydd.model import format_size
from floydd.security import beneath
from floydd.store.ignore import IgnoreRules
from floydd.store.paths import MAX_COMPONENT, MAX_PATH

__all__ = ["pack", "unpack", "unpack_into", "Unpacked", "SizeLimit", "MAX_DEPTH", "ENTRY_BYTES"]

_CHUNK = 1 << 20
MAX_DEPTH = 256
"""How many folders deep a member may lie (deeper trees overflow the recursion of tools that
walk them, Python's own ``shutil.rmtree`` and ``pathlib.mkdir`` among them)."""
_HINT = "send a plain tar of one folder"
ENTRY_BYTES = 512
"""What one entry of an archive counts for against the limit's entry cap: a tar header block."""


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


def unpack(src: IO[bytes], dest: Path, limit: int | SizeLimit | None = None) -> Unpacked:
    """Unpack the tar stream ``src`` into the empty folder ``dest`` (see the module docstring);
    ``limit``: what it may write (a bare number of bytes is a code folder's, ``max_code_mb``)."""
    files = skipped = 0
    budget = _Budget(limit)
    name = ""
    root_fd = None
    folders = None
    try:
        with tarfile.open(fileobj=src, mode="r|*") as tar:
            root_fd = beneath.open_root(dest)       # after the archive's first header: it is one
            folders = beneath.Dirs(root_fd)
            root_b, path_max = os.fsencode(os.path.abspath(dest)), os.fpathconf(root_fd, "PC_PATH_MAX")
            for member in tar:
                name = _safe_name(member.name)
                if name is None:
                    continue
                budget.entry()
                if len(root_b) + 1 + len(os.fsencode(name)) >= path_max:   # reachable by path too
                    raise OSError(errno.ENAMETOOLONG, "File name too long", name)
                if member.isdir():
                    _make_folders(folders, name, name.split("/"))
                    continue
                if not member.isreg():
                    skipped += 1
                    continue
                budget.charge(member.size)
                parent_fd = _make_folders(folders, name, name.split("/")[:-1])
                leaf = name.rpartition("/")[2]
                if _exists(parent_fd, leaf):
                    raise UnsafePath(f"the upload names {_show(name)} twice", hint=_HINT)
                reader = tar.extractfile(member)
                fd = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o700 if member.mode & 0o100 else 0o600, dir_fd=parent_fd)
                with os.fdopen(fd, "wb") as out:
                    while chunk := reader.read(_CHUNK):
                        budget.wrote(len(chunk))
                        out.write(chunk)
                files += 1
    except tarfile.TarError as exc:
        raise InvalidSpec(f"the upload is not a readable tar archive: {exc}",
                          hint="floyd sends the project folder as an uncompressed tar") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreFull(f"no space left on the disk of {dest} while unpacking",
                            hint="free some space there and try again") from None
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"a folder of {dest} was replaced by a link or a file while {_show(name)} was unpacked; "
                             "nothing is written through a link", hint="unpack into a folder nothing else writes to")\
                from None
        if exc.errno == errno.ENAMETOOLONG:
            raise UnsafePath(f"the upload holds a path too long for this box's file system: {_show(name)}",
                             hint=_HINT) from None
        raise
    finally:
        if folders is not None:
            folders.close()
        if root_fd is not None:
            os.close(root_fd)
    return Unpacked(files, budget.charged, skipped)


class SizeLimit(NamedTuple):
    """What an unpack may write at most, and how a refusal names it."""

    bytes: int
    setting: str = "max_code_mb"
    """The daemon setting that raises the limit (named in the refusal)."""
    what: str = "the code folder"
    code: str = "code_too_large"
    hint: str = "move data out of the code folder (floyd data upload) or into .floydignore"

    def refusal(self, message: str) -> TooLarge:
        """:class:`TooLarge`: ``what`` ``message``, then the limit and the setting."""
        return TooLarge(f"{self.what} {message}, over this box's limit of {format_size(self.bytes)} "
                        f"({self.setting} in the daemon's config)", code=self.code,
                        hint=self.hint + f"; or ask the box's operator to raise {self.setting}")


class _Budget:
    """What an unpack writes, counted against its :class:`SizeLimit` before each member (its
    declared size: a sparse member's real, expanded size, which is what writing it takes) and
    while it is written (never more than was declared and counted)."""

    def __init__(self, limit: int | SizeLimit | None) -> None:
        self.limit = SizeLimit(limit) if isinstance(limit, int) else limit
        self.charged = 0        # bytes of the regular members begun, at their declared sizes
        self._written = 0
        self._entries = 0

    def entry(self) -> None:
        """One more entry (file, folder, link...): at most ``limit / ENTRY_BYTES`` of them."""
        self._entries += 1
        if self.limit is not None and self._entries > max(1, self.limit.bytes // ENTRY_BYTES):
            raise self.limit.refusal(f"holds more than {max(1, self.limit.bytes // ENTRY_BYTES):,} entries")

    def charge(self, size: int) -> None:
        """A regular member of ``size`` bytes is about to be written: refused if it would pass."""
        self.charged += size
        if self.limit is not None and self.charged > self.limit.bytes:
            raise self.limit.refusal(f"would unpack to at least {format_size(self.charged)} (files at their real "
                                     "size, sparse ones expanded)")

    def wrote(self, n: int) -> None:
        """``n`` more bytes are about to be written: never past what was charged."""
        self._written += n
        if self._written > self.charged:
            raise InvalidSpec("the upload yields more bytes than its members declare", hint=_HINT)


def _make_folders(folders: beneath.Dirs, name: str, parts: list[str]) -> int:
    """Make the folders ``parts`` below the destination, one at a time (no recursion),
    each in its parent's descriptor (nothing is reached by path), refusing a name the
    archive also gave a file; a descriptor of the last (borrowed from ``folders``)."""
    rel = b""
    here = folders.get(rel)
    for part in parts:
        part_b = os.fsencode(part)
        try:
            os.mkdir(part_b, 0o700, dir_fd=here)
        except FileExistsError:
            if not stat.S_ISDIR(os.stat(part_b, dir_fd=here, follow_symlinks=False).st_mode):
                raise UnsafePath(f"the upload names {_show(name)} as a file and as a folder", hint=_HINT) from None
        rel = beneath.join_rel(rel, part_b)
        here = folders.get(rel)
    return here


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


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
        raise UnsafePath(f"the upload holds an unsafe path {_show(raw)}", hint=_HINT)
    name = posixpath.normpath(raw)
    if name in (".", ""):
        return None
    parts = name.split("/")
    if ".." in parts:
        raise UnsafePath(f"the upload holds a path outside its folder: {_show(raw)}", hint=_HINT)
    if len(os.fsencode(name)) > MAX_PATH or any(len(os.fsencode(part)) > MAX_COMPONENT for part in parts):
        raise UnsafePath(f"the upload holds a path too long: {_show(raw)}",
                         hint=f"paths are at most {MAX_PATH} bytes, each name in them at most {MAX_COMPONENT}")
    if len(parts) > MAX_DEPTH:
        raise UnsafePath(f"the upload holds a path {len(parts)} folders deep: {_show(raw)}",
                         hint=f"paths are at most {MAX_DEPTH} folders deep")
    return name


def _show(name: str) -> str:
    """A member's name for a message: its start, quoted."""
    return repr(name[:80]) + ("..." if len(name) > 80 else "")
