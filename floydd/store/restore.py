"""Restore a tree into a folder, never writing outside it.

The manifest was validated by ``Tree.decode`` (relative safe paths, parents are folders,
links stay inside). Restore adds defence in depth: everything is created relative to
an open folder descriptor of the destination, each folder is opened with
``O_NOFOLLOW | O_DIRECTORY`` and each file created with ``O_CREAT | O_EXCL | O_NOFOLLOW``,
and symlinks are created last, after every file and folder, so no write can ever pass
through a link the manifest made. Folder modes are applied last, deepest first, so a
read-only folder can still be filled.

The destination must be absent (restored into a hidden sibling, renamed into place at
the end, removed on failure) or an empty folder (emptied again on failure). Every chunk
is verified as it is read; file sizes are checked against the manifest.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import threading
from collections import OrderedDict
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Iterable

from floydd.errors import Conflict, IntegrityError, StoreFull, UserError
from floydd.store.ids import ObjectId
from floydd.store.tree import Entry, Kind, Tree

__all__ = ["restore"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def restore(get: Callable[[ObjectId], bytes], tree: Tree, dest: Path, *,
            progress: Callable[[int, int], object] | None = None, workers: int = 2) -> None:
    dest = Path(os.path.abspath(dest))
    fresh = not os.path.lexists(dest)
    if not fresh:
        if dest.is_symlink() or not dest.is_dir():
            raise Conflict(f"{dest} exists and is not a folder", hint="choose an empty or new folder")
        if any(os.scandir(dest)):
            raise Conflict(f"{dest} is not empty", hint="choose an empty or new folder")
        target = dest
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        target = dest.parent / f".{dest.name}.floyd-restore-{secrets.token_hex(4)}"
        target.mkdir()
    try:
        root_fd = os.open(target, _DIR_FLAGS)
        try:
            _Restorer(root_fd, get, workers).run(tree, progress)
        finally:
            os.close(root_fd)
        if fresh:
            os.rename(target, dest)
    except BaseException as e:
        if fresh:
            shutil.rmtree(target, ignore_errors=True)
        else:
            _empty(target)
        if isinstance(e, OSError):
            raise _translate(e, dest) from e
        raise


class _Restorer:
    """Folders and links from the calling thread; file contents on a pool, one job per
    file (or per run of small files sharing a pack), so reads, decryption and writes of
    different files overlap. Progress is reported from the calling thread only."""

    def __init__(self, root_fd: int, get: Callable[[ObjectId], bytes], workers: int) -> None:
        self._root = root_fd
        self._get = get
        self._workers = max(1, workers)
        self._fds: OrderedDict[bytes, int] = OrderedDict()
        self._done = 0
        self._done_lock = threading.Lock()

    def run(self, tree: Tree, progress) -> None:
        total = tree.size
        if progress:
            progress(0, total)
        try:
            for e in tree.entries:
                if e.kind is Kind.DIR:
                    parent, name = _split(e.raw_path)
                    os.mkdir(name, 0o700, dir_fd=self._dir(parent))
            self._write_files(_jobs(e for e in tree.entries if e.kind is Kind.FILE), progress, total)
            for e in tree.entries:
                if e.kind is Kind.LINK:
                    parent, name = _split(e.raw_path)
                    os.symlink(os.fsencode(e.target), name, dir_fd=self._dir(parent))
            for e in sorted((e for e in tree.entries if e.kind is Kind.DIR),
                            key=lambda e: e.raw_path.count(b"/"), reverse=True):
                fd = _open_path(self._root, e.raw_path)
                try:
                    os.fchmod(fd, e.mode & 0o777)
                finally:
                    os.close(fd)
        except FileExistsError as e:
            raise UserError(f"the manifest lists {e.filename!r} twice", hint="do not restore this tree") from None
        finally:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def _write_files(self, jobs: list[list[Entry]], progress, total: int) -> None:
        with ThreadPoolExecutor(self._workers, thread_name_prefix="floydd-restore") as pool:
            pending = {pool.submit(self._write_job, job) for job in jobs}
            try:
                while pending:
                    finished, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                    for f in finished:
                        f.result()
                    if progress:
                        progress(self._done, total)
            finally:
                for f in pending:
                    f.cancel()

    def _write_job(self, entries: list[Entry]) -> None:
        dirs: dict[bytes, int] = {}
        packed: tuple[ObjectId, bytes] | None = None
        try:
            for e in entries:
                parent, name = _split(e.raw_path)
                dfd = self._root if not parent else dirs.get(parent)
                if dfd is None:
                    dfd = dirs[parent] = _open_path(self._root, parent)
                fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=dfd)
                try:
                    written = 0
                    for oid in e.chunks:
                        if e.offset is None:
                            chunk = self._get(oid)
                        else:
                            if packed is None or packed[0] != oid:
                                packed = (oid, self._get(oid))
                            chunk = memoryview(packed[1])[e.offset:e.offset + e.size]
                        _write_all(fd, chunk)
                        written += len(chunk)
                        with self._done_lock:
                            self._done += len(chunk)
                    if written != e.size:
                        raise IntegrityError(f"{e.path}: restored {written} bytes, the manifest says {e.size}",
                                             hint="the manifest is damaged; run verify")
                    os.fchmod(fd, e.mode & 0o777)
                finally:
                    os.close(fd)
        finally:
            for dfd in dirs.values():
                os.close(dfd)

    def _dir(self, rel: bytes) -> int:
        """A descriptor of folder ``rel`` (calling thread only), cached."""
        if not rel:
            return self._root
        fd = self._fds.get(rel)
        if fd is not None:
            self._fds.move_to_end(rel)
            return fd
        fd = _open_path(self._root, rel)
        self._fds[rel] = fd
        if len(self._fds) > 64:
            _, old = self._fds.popitem(last=False)
            os.close(old)
        return fd


def _jobs(files: Iterable[Entry]) -> list[list[Entry]]:
    """One job per file; consecutive small files of the same pack share one job (one fetch)."""
    jobs: list[list[Entry]] = []
    for e in files:
        if e.offset is not None and jobs and jobs[-1][-1].offset is not None \
                and jobs[-1][-1].chunks == e.chunks:
            jobs[-1].append(e)
        else:
            jobs.append([e])
    return jobs


def _split(path: bytes) -> tuple[bytes, bytes]:
    parent, _, name = path.rpartition(b"/")
    return parent, name


def _open_path(root_fd: int, rel: bytes) -> int:
    """Open folder ``rel`` below ``root_fd`` component by component, never following a link."""
    fd = os.dup(root_fd)
    for part in rel.split(b"/"):
        try:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _translate(e: OSError, dest: Path) -> Exception:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFull(f"no space left on the device of {dest} while restoring; the partial copy was removed",
                         hint="free disk space there, or restore somewhere else")
    return UserError(f"cannot restore into {dest}: {e.strerror or e}",
                     hint="check that the folder is writable and that nothing else writes into it")


def _empty(folder: Path) -> None:
    for child in list(os.scandir(folder)):
        if child.is_dir(follow_symlinks=False):
            os.chmod(child.path, stat.S_IRWXU)
            shutil.rmtree(child.path, ignore_errors=True)
        else:
            os.unlink(child.path)
