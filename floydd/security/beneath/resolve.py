"""Resolving a path beneath a folder descriptor, following no symlink: ``openat2`` where the
kernel has it, an ``O_NOFOLLOW`` walk one component at a time otherwise (the package
docstring, :mod:`floydd.security.beneath`, says why). Also the single-entry calls that need
no path (``chmod`` of an entry itself) and :class:`Dirs`, the folder descriptors a walk or a
restore keeps open.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from collections import OrderedDict
from typing import Callable

from floydd.errors import UnsafePath

__all__ = ["RESOLVE_BENEATH", "RESOLVE_NO_SYMLINKS", "RESOLVE_NO_MAGICLINKS", "openat2_available", "open_root",
           "open_beneath", "open_dir", "make_dirs", "split_rel", "join_rel", "Dirs", "chmod_at", "resolves_inside"]

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_HOP = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC    # a folder only passed through
_SYSCALL_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437, "riscv64": 437, "ppc64le": 437,
                    "s390x": 437, "i686": 437, "i386": 437}
_CHUNK_PARTS = 32          # components opened in one go when a folder is reopened from far above
_CHUNK_BYTES = 3000        # ... and bytes (PATH_MAX is 4096)
_MAX_HOPS = 40             # links followed by resolves_inside's own walk, as the kernel does

_SWAPPED = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)
"""What opening a folder met says when the entry went or was swapped for a link or a file."""


def openat2_available() -> bool:
    """Whether this kernel (and its seccomp policy) lets us call ``openat2``; probed once."""
    global _use_openat2
    if _use_openat2 is None:
        _use_openat2 = _probe_openat2()
    return _use_openat2


def open_root(path: os.PathLike | str | bytes, *, follow: bool = False) -> int:
    """A descriptor of the folder ``path``, the root of a tree to work beneath. Its last
    component is not followed unless ``follow`` (a person's own ``floyd data upload
    ./link-to-data``); the path up to it is the caller's own and trusted."""
    return os.open(path, _DIR if not follow else _DIR & ~os.O_NOFOLLOW)


def open_beneath(dir_fd: int, rel: bytes | str, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """``openat`` of the relative path ``rel`` beneath ``dir_fd``, following no symlink at any
    component (``ELOOP``) and never leaving ``dir_fd``. ``rel`` is ``/``-separated; an empty
    ``rel`` opens ``dir_fd``'s own folder again. ``..``, ``.``, empty or absolute parts are
    refused (:class:`UnsafePath`) before anything is opened."""
    parts = _parts(rel)
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if not parts:
        return os.open(".", flags & ~os.O_NOFOLLOW, dir_fd=dir_fd)  # "." itself is never a link
    if openat2_available():
        return _chunked(dir_fd, parts, lambda fd, path, last: _openat2(
            fd, path, flags if last else _HOP, mode if last and flags & os.O_CREAT else 0, _RESOLVE))
    return _chunked(dir_fd, parts, lambda fd, path, last: _walk_open(fd, path.split(b"/"), flags if last else _HOP,
                                                                      mode))


def open_dir(dir_fd: int, rel: bytes | str) -> int:
    """A readable descriptor of the folder ``rel`` beneath ``dir_fd`` (:func:`open_beneath`)."""
    return open_beneath(dir_fd, rel, os.O_RDONLY | os.O_DIRECTORY)


def make_dirs(dir_fd: int, rel: bytes | str, mode: int = 0o700) -> int:
    """Make the folders of ``rel`` beneath ``dir_fd`` that are missing (``mode``), never
    through a link (``ELOOP``; a file in the way: ``ENOTDIR``); a descriptor of the last.
    An empty ``rel`` gives a new descriptor of ``dir_fd``'s folder."""
    here = open_dir(dir_fd, b"")
    try:
        for part in _parts(rel):
            try:
                os.mkdir(part, mode, dir_fd=here)
            except FileExistsError:
                pass
            nxt = open_dir(here, part)
            os.close(here)
            here = nxt
        return here
    except BaseException:
        os.close(here)
        raise


def split_rel(rel: bytes) -> tuple[bytes, bytes]:
    """``b"a/b/c"`` -> ``(b"a/b", b"c")``; ``b"c"`` -> ``(b"", b"c")``."""
    parent, _, name = rel.rpartition(b"/")
    return parent, name


def join_rel(parent: bytes, name: bytes) -> bytes:
    return parent + b"/" + name if parent else name


class Dirs:
    """Descriptors of folders beneath one root, by relative path, each opened without
    following links (from its nearest open ancestor) and kept in a small LRU.

    A descriptor returned by :meth:`get` is borrowed: valid until the next :meth:`get` may
    evict it (``size`` later calls at the earliest) or :meth:`close`. With ``writable``, a
    folder its owner cannot enter or change (a read-only folder of a restored tree, for a
    non-root daemon) is opened up to 0700 first, as a removal needs. Not thread-safe.
    """

    def __init__(self, root_fd: int, *, size: int = 64, writable: bool = False) -> None:
        self._root = root_fd
        self._size = max(size, 2)
        self._writable = writable
        self._fds: OrderedDict[bytes, int] = OrderedDict()

    def get(self, rel: bytes) -> int:
        if not rel:
            return self._root
        fd = self._fds.get(rel)
        if fd is not None:
            self._fds.move_to_end(rel)
            return fd
        parent, _, name = rel.rpartition(b"/")
        here = self._fds.get(parent) if parent else self._root
        if here is not None and name not in (b"", b".", b"..") and b"\0" not in name and not self._writable:
            fd = os.open(name, _DIR, dir_fd=here)     # the usual case: one name below a folder held
            self._keep(rel, fd)
            return fd
        base = rel
        while base:   # the nearest ancestor already open
            base = split_rel(base)[0]
            if not base or base in self._fds:
                break
        here = self.get(base)
        rest = _parts(rel[len(base) + 1:] if base else rel)
        done = base
        for start in range(0, len(rest), _CHUNK_PARTS):   # far from any open ancestor: keep waypoints
            step = rest[start:start + _CHUNK_PARTS]
            target = join_rel(done, b"/".join(step))
            here = self._open(here, done, step)
            self._keep(target, here)
            done = target
        return here

    def forget(self, rel: bytes) -> None:
        """Close ``rel``'s descriptor and every kept one below it (it is being removed)."""
        prefix = rel + b"/"
        for key in [k for k in self._fds if k == rel or k.startswith(prefix)]:
            os.close(self._fds.pop(key))

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> Dirs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self, fd: int, at: bytes, step: list[bytes]) -> int:
        try:
            return open_dir(fd, b"/".join(step))
        except PermissionError:
            if not self._writable:
                raise
        # open up each folder of the step that refuses us, one at a time
        here = os.dup(fd)
        try:
            for part in step:
                try:
                    nxt = open_dir(here, part)
                except PermissionError:
                    chmod_at(here, part, 0o700)
                    nxt = open_dir(here, part)
                os.close(here)
                here = nxt
            return here
        except BaseException:
            os.close(here)
            raise

    def _keep(self, rel: bytes, fd: int) -> None:
        old = self._fds.pop(rel, None)
        if old is not None:
            os.close(old)
        self._fds[rel] = fd
        while len(self._fds) > self._size:
            _, gone = self._fds.popitem(last=False)
            os.close(gone)


def chmod_at(dir_fd: int, name: bytes | str, mode: int) -> None:
    """``chmod`` the entry ``name`` of ``dir_fd`` itself; a link is left alone (links have no
    mode of their own on Linux). Needs no read access to the entry (a 0000 folder of ours
    can be opened up)."""
    name = _name(name)
    try:
        os.chmod(name, mode, dir_fd=dir_fd, follow_symlinks=False)
        return
    except (NotImplementedError, ValueError):   # Python's words for "the C library says ENOTSUP"
        pass
    except OSError as exc:
        if exc.errno != errno.EOPNOTSUPP:
            raise
    # a C library without fchmodat(AT_SYMLINK_NOFOLLOW), or a link: do what newer ones do
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if not stat.S_ISLNK(os.fstat(fd).st_mode):
            os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)


def resolves_inside(root_fd: int, rel: bytes) -> bool:
    """Whether following the path ``rel`` (typically a symlink) from ``root_fd``, links and all,
    stays beneath ``root_fd``: False if it climbs above the root or meets an absolute link.
    A path that stops resolving (a missing entry, a loop) stays inside as far as it goes.
    Nothing is read: only names and link targets are looked at."""
    if openat2_available():
        try:
            fd = _openat2(root_fd, rel, os.O_PATH | os.O_CLOEXEC, 0, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
        except OSError as exc:
            return exc.errno != errno.EXDEV
        os.close(fd)
        return True
    return _resolves_inside_by_hand(root_fd, rel)


# -- helpers ------------------------------------------------------------------------------

_use_openat2: bool | None = None
_libc = None


def _probe_openat2() -> bool:
    if _SYSCALL_OPENAT2.get(platform.machine()) is None:
        return False
    try:
        fd = _openat2(-100, b".", os.O_PATH | os.O_CLOEXEC, 0, _RESOLVE)   # AT_FDCWD
    except OSError:
        return False      # ENOSYS (an older kernel), EPERM (a seccomp policy that predates it), ...
    os.close(fd)
    return True


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _openat2(dir_fd: int, path: bytes, flags: int, mode: int, resolve: int) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    number = _SYSCALL_OPENAT2.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, "openat2 is not known on this machine")
    how = _OpenHow(flags, mode, resolve)
    for _ in range(8):
        fd = _libc.syscall(ctypes.c_long(number), ctypes.c_int(dir_fd), ctypes.c_char_p(path), ctypes.byref(how),
                           ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err not in (errno.EINTR, errno.EAGAIN):   # EAGAIN: a rename raced the resolution
            break
    raise OSError(err, os.strerror(err), os.fsdecode(path))


def _walk_open(dir_fd: int, parts: list[bytes], flags: int, mode: int) -> int:
    """The fallback of :func:`open_beneath`: one component at a time, ``O_NOFOLLOW`` each."""
    fd = dir_fd
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _HOP, dir_fd=fd)
            except NotADirectoryError:
                if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise OSError(errno.ELOOP, "a symbolic link is on the path", os.fsdecode(part)) from None
                raise
            if fd != dir_fd:
                os.close(fd)
            fd = nxt
        try:
            return os.open(parts[-1], flags, mode, dir_fd=fd)
        except NotADirectoryError:
            if flags & os.O_DIRECTORY and stat.S_ISLNK(os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode):
                raise OSError(errno.ELOOP, "a symbolic link is on the path", os.fsdecode(parts[-1])) from None
            raise
    finally:
        if fd != dir_fd:
            os.close(fd)


def _chunked(dir_fd: int, parts: list[bytes], open_one: Callable[[int, bytes, bool], int]) -> int:
    """Open ``parts`` in pieces short enough for one system call each (a folder nested
    past PATH_MAX is still reached, each piece relative to the one before)."""
    fd, start = dir_fd, 0
    try:
        while True:
            end, size = start, 0
            while end < len(parts) and (end == start or size + len(parts[end]) + 1 <= _CHUNK_BYTES):
                size += len(parts[end]) + 1
                end += 1
            last = end == len(parts)
            nxt = open_one(fd, b"/".join(parts[start:end]), last)
            if fd != dir_fd:
                os.close(fd)
            fd = nxt
            if last:
                return fd
            start = end
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise


def _parts(rel: bytes | str) -> list[bytes]:
    rel = os.fsencode(rel)
    if not rel:
        return []
    if rel.startswith(b"/") or b"\0" in rel:
        raise UnsafePath(f"{_show(rel)} is not a relative path", hint="this is a bug in floydd: report it")
    parts = rel.split(b"/")
    if any(p in (b"", b".", b"..") for p in parts):
        raise UnsafePath(f"{_show(rel)} has an empty, '.' or '..' part", hint="this is a bug in floydd: report it")
    return parts


def _name(name: bytes | str) -> bytes:
    """One entry's name (no ``/``): what the ``*at`` calls may be given without resolving a path."""
    name = os.fsencode(name)
    if len(_parts(name)) != 1:
        raise UnsafePath(f"{_show(name)} is not one name", hint="this is a bug in floydd: report it")
    return name


def _resolves_inside_by_hand(root_fd: int, rel: bytes) -> bool:
    """:func:`resolves_inside` without ``openat2``: the kernel's walk, done here with a stack
    of folder descriptors (``..`` goes back to the folder really walked through)."""
    todo = rel.split(b"/")
    todo.reverse()
    fds = [os.dup(root_fd)]
    hops = 0
    try:
        while todo:
            part = todo.pop()
            if part in (b"", b"."):
                continue
            if part == b"..":
                if len(fds) == 1:
                    return False
                os.close(fds.pop())
                continue
            try:
                st = os.stat(part, dir_fd=fds[-1], follow_symlinks=False)
            except OSError:
                return True
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > _MAX_HOPS:
                    return True
                target = os.readlink(part, dir_fd=fds[-1])
                if target.startswith(b"/"):
                    return False
                todo.extend(reversed(target.split(b"/")))
                continue
            if not todo:
                return True
            if not stat.S_ISDIR(st.st_mode):
                return True
            try:
                fds.append(os.open(part, _HOP, dir_fd=fds[-1]))
            except OSError:
                return True
        return True
    finally:
        for fd in fds:
            os.close(fd)


def _show(rel: bytes) -> str:
    return repr(rel.decode("utf-8", "backslashreplace")[:200])
