"""Whole trees through descriptors: walk, remove, chown (the package docstring,
:mod:`floydd.security.beneath`, says why ``shutil.rmtree`` and ``os.walk`` are not used).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Callable, Iterator

from floydd.security.beneath.resolve import _SWAPPED, Dirs, _name, join_rel, open_dir, open_root, split_rel

__all__ = ["Found", "walk", "remove_tree", "remove_path", "empty_dir", "chown_tree"]

_MAX_ROUNDS = 100          # times one folder is emptied again because something new appeared in it

OnError = Callable[[bytes, OSError], object]


class Found:
    """One entry met by :func:`walk`: ``rel`` below the root, its ``name`` in the folder
    open as ``dir_fd`` (valid while the entry is being looked at), the ``scandir`` entry
    (``stat`` goes through ``dir_fd``, never by path) and ``is_dir``: a real folder, not a
    link to one (from the directory entry)."""

    __slots__ = ("rel", "name", "dir_fd", "entry", "is_dir", "pruned")

    def __init__(self, rel: bytes, name: bytes, dir_fd: int, entry: os.DirEntry) -> None:
        self.rel, self.name, self.dir_fd, self.entry = rel, name, dir_fd, entry
        try:
            self.is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            self.is_dir = False
        self.pruned = False

    def lstat(self) -> os.stat_result:
        """The entry itself (``AT_SYMLINK_NOFOLLOW``); cached after the first call."""
        return self.entry.stat(follow_symlinks=False)

    def prune(self) -> None:
        """Do not walk into this folder."""
        self.pruned = True

    def __repr__(self) -> str:
        return f"Found({self.rel!r})"


def walk(root_fd: int, *, on_error: OnError | None = None) -> Iterator[Found]:
    """Every entry beneath ``root_fd``, folder by folder (names sorted within a folder),
    through descriptors only. A folder is walked into after all its entries were yielded,
    unless :meth:`Found.prune` was called on it. A folder that cannot be opened or read
    (gone, replaced by a link, no permission) or one met twice (moved while walked, which
    would otherwise let a job keep a walk going forever) goes to ``on_error(rel, error)``
    and is skipped; without ``on_error`` the error is raised."""
    top = os.fstat(root_fd)
    seen = {(top.st_dev, top.st_ino)}
    with Dirs(root_fd) as dirs:
        stack: list[bytes] = [b""]
        while stack:
            rel_dir = stack.pop()
            try:
                fd = dirs.get(rel_dir)
                if rel_dir:
                    st = os.fstat(fd)
                    if (st.st_dev, st.st_ino) in seen:
                        raise OSError(errno.ELOOP, "the folder was met twice (it was moved while being read)")
                    seen.add((st.st_dev, st.st_ino))
                with os.scandir(fd) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                if on_error is None:
                    raise
                on_error(rel_dir, exc)
                continue
            found = []
            for entry in entries:
                name = os.fsencode(entry.name)
                f = Found(join_rel(rel_dir, name), name, fd, entry)
                yield f
                found.append(f)
            stack.extend(reversed([f.rel for f in found if f.is_dir and not f.pruned]))


def remove_tree(dir_fd: int, name: bytes | str) -> None:
    """Remove the entry ``name`` of the folder ``dir_fd``: a file, a link (not what it points
    to) or a folder with everything in it, never following a link. Absent: nothing to do."""
    name = _name(name)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        _unlink(dir_fd, name)
        return
    with Dirs(dir_fd, writable=True, size=2) as opener:
        try:
            fd = os.dup(opener.get(name))
        except OSError as exc:
            if exc.errno not in _SWAPPED:
                raise
            _unlink(dir_fd, name)            # gone, or replaced by a file or a link since: that goes
            return
    try:
        for _ in range(_MAX_ROUNDS):
            empty_dir(fd)
            try:
                _rmdir(dir_fd, name)
                return
            except NotADirectoryError:      # swapped for a link or a file meanwhile: that goes
                _unlink(dir_fd, name)
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        raise OSError(errno.ENOTEMPTY, "something keeps writing into the folder being removed", os.fsdecode(name))
    finally:
        os.close(fd)


def remove_path(path: Path) -> None:
    """:func:`remove_tree` of ``path``'s last part, reached from its parent folder (the path to
    that parent is the daemon's own: a workspace, an environment's folder); absent: nothing to do."""
    path = Path(path)
    try:
        parent = open_root(path.parent)
    except FileNotFoundError:
        return
    try:
        remove_tree(parent, path.name)
    finally:
        os.close(parent)


def empty_dir(fd: int) -> None:
    """Remove everything inside the folder ``fd`` (not the folder itself), iteratively and
    through descriptors only; read-only folders of its owner's are opened up first."""
    rounds: dict[bytes, int] = {}
    with Dirs(fd, writable=True, size=128) as dirs:
        stack: list[bytes] = [b""]
        while stack:
            rel = stack[-1]
            try:
                dfd = dirs.get(rel)
            except OSError as exc:
                if exc.errno not in _SWAPPED:
                    raise
                stack.pop()      # gone, or replaced by a link or a file: its parent, still on
                continue         # the stack below it, is read again and unlinks what is there
            subdirs = _unlink_all_but_folders(dfd, rel)
            if subdirs:
                rounds[rel] = rounds.get(rel, 0) + 1
                if rounds[rel] > _MAX_ROUNDS:
                    raise OSError(errno.ENOTEMPTY, "something keeps writing into the folder being removed",
                                  os.fsdecode(rel) or ".")
                stack.extend(subdirs)
                continue
            stack.pop()
            if rel:
                parent, name = split_rel(rel)
                dirs.forget(rel)
                try:
                    _rmdir(dirs.get(parent), name)
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        stack.append(rel)  # something appeared in it meanwhile: empty it again
                    elif exc.errno != errno.ENOTDIR:
                        raise              # ENOTDIR: swapped for a link or a file, which the parent,
                                           # read again next, unlinks


def chown_tree(dir_fd: int, name: bytes | str, uid: int, gid: int) -> None:
    """``chown`` the entry ``name`` of ``dir_fd`` and, if it is a folder, everything beneath
    it, each entry itself (a link's owner changes, never its target's)."""
    name = _name(name)
    os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
        return
    fd = open_dir(dir_fd, name)
    try:
        for f in walk(fd):
            os.chown(f.name, uid, gid, dir_fd=f.dir_fd, follow_symlinks=False)
    finally:
        os.close(fd)


def _unlink_all_but_folders(dfd: int, rel: bytes) -> list[bytes]:
    """Unlink every non-folder entry of ``dfd``; the folders in it (their paths)."""
    subdirs = []
    with os.scandir(dfd) as it:
        entries = list(it)
    for entry in entries:
        name = os.fsencode(entry.name)
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            subdirs.append(join_rel(rel, name))
            continue
        try:
            _unlink(dfd, name)
        except IsADirectoryError:       # became a folder since it was listed
            subdirs.append(join_rel(rel, name))
    return subdirs


def _unlink(dir_fd: int, name: bytes) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except PermissionError:              # a read-only folder of ours: open it up, once
        os.fchmod(dir_fd, 0o700)
        os.unlink(name, dir_fd=dir_fd)


def _rmdir(dir_fd: int, name: bytes) -> None:
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except PermissionError:
        os.fchmod(dir_fd, 0o700)
        os.rmdir(name, dir_fd=dir_fd)
