"""Restore a tree into a folder, never writing outside it.

The manifest was validated by ``Tree.decode`` (relative safe paths, parents are folders,
links stay inside). Restore adds defence in depth: everything is created relative to
an open folder descriptor of the destination, each folder is opened beneath it with no
symlink followed anywhere on its path (:func:`floydd.security.beneath.open_dir`) and each
file created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` relative to its folder's descriptor,
and symlinks are created last, after every file and folder, so no write can ever pass
through a link the manifest made (or one something else swapped in meanwhile). Folder
modes are applied last, deepest first, so a read-only folder can still be filled.

The destination must be absent (restored into a hidden sibling, renamed into place at
the end, removed on failure) or an empty folder (emptied again on failure). With
``within`` (a job's workspace), the destination's parents are reached and made beneath that
folder without following a link, so a job's earlier run cannot point them elsewhere.
Every chunk is verified as it is read; file sizes are checked against the manifest.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Iterable

from floydd.errors import Conflict, IntegrityError, StoreFull, UnsafePath, UserError
from floydd.security import beneath
from floydd.store.ids import ObjectId
from floydd.store.tree import Entry, Kind, Tree

__all__ = ["restore"]

_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def restore(get: Callable[[ObjectId], bytes], tree: Tree, dest: Path, *,
            progress: Callable[[int, int], object] | None = None, workers: int = 2,
            within: Path | None = None) -> None:
    dest = Path(os.path.abspath(dest))
    try:
        parent_fd = _open_parent(dest, within)
    except OSError as e:
        raise _translate(e, dest) from e
    try:
        _restore_at(get, tree, dest, parent_fd, os.fsencode(dest.name), progress, workers)
    finally:
        os.close(parent_fd)


def _open_parent(dest: Path, within: Path | None) -> int:
    """A descriptor of ``dest``'s folder, made if missing: by path (the caller's own) or,
    with ``within``, beneath that folder without following a link."""
    if within is None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        return beneath.open_root(dest.parent, follow=True)
    within = Path(os.path.abspath(within))
    if not dest.is_relative_to(within) or dest == within:
        raise UnsafePath(f"{dest} is not inside {within}", hint="this is a bug in floydd: report it")
    root_fd = beneath.open_root(within, follow=True)
    try:
        rel = dest.parent.relative_to(within)
        return beneath.make_dirs(root_fd, b"" if rel == Path(".") else os.fsencode(rel.as_posix()))
    finally:
        os.close(root_fd)


def _restore_at(get, tree: Tree, dest: Path, parent_fd: int, name: bytes, progress, workers: int) -> None:
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    fresh = st is None
    if fresh:
        target = b".%s.floyd-restore-%s" % (name, secrets.token_hex(4).encode())
        os.mkdir(target, 0o700, dir_fd=parent_fd)
    else:
        target = name
        if not stat.S_ISDIR(st.st_mode):
            raise Conflict(f"{dest} exists and is not a folder", hint="choose an empty or new folder")
    try:
        root_fd = beneath.open_dir(parent_fd, target)
        try:
            if not fresh and any(True for _ in os.scandir(root_fd)):
                raise Conflict(f"{dest} is not empty", hint="choose an empty or new folder")
            try:
                _Restorer(root_fd, get, workers).run(tree, progress)
            except BaseException:
                if not fresh:
                    beneath.empty_dir(root_fd)
                raise
        finally:
            os.close(root_fd)
        if fresh:
            os.rename(target, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    except BaseException as e:
        if fresh:
            try:
                beneath.remove_tree(parent_fd, target)
            except OSError:
                pass
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
        self._dirs = beneath.Dirs(root_fd)   # the calling thread's
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
                fd = beneath.open_dir(self._root, e.raw_path)
                try:
                    os.fchmod(fd, e.mode & 0o777)
                finally:
                    os.close(fd)
        except FileExistsError as e:
            raise UserError(f"the manifest lists {e.filename!r} twice", hint="do not restore this tree") from None
        finally:
            self._dirs.close()

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
                    dfd = dirs[parent] = beneath.open_dir(self._root, parent)
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
        return self._dirs.get(rel)


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
