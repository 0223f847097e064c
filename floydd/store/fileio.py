"""File I/O under the local object store (:mod:`.local`): whole writes and reads, the
read-back into a per-thread buffer, and durability at the system-call level (fsync of a
folder, ``syncfs``, starting writeback with ``sync_file_range``; the last two through libc,
None where it lacks them).
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

__all__ = ["fsync_dir"]

_READBACK_MIN = 5 << 20  # above the largest object a snapshot makes: one buffer per thread


def _load_syncfs():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_syncfs = _load_syncfs()


def _load_sync_file_range():
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def _start_writeback(fd: int) -> None:
    """Ask the kernel to start writing the file out now (asynchronously; pages stay cached)."""
    if _sync_file_range is not None:
        _sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


def _syncfs_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make the names in a folder durable (created, renamed or removed entries)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    data = os.read(fd, size + 1)
    if len(data) == size:
        return data
    parts = [data]
    while chunk := os.read(fd, 1 << 20):
        parts.append(chunk)
    return b"".join(parts)


_tls = threading.local()


def _read_back(fd: int, size: int) -> memoryview:
    """The file's bytes (one more than expected, to notice extra ones), into a per-thread
    buffer; the view is valid until this thread's next read-back."""
    buf = getattr(_tls, "buf", None)
    if buf is None or len(buf) < size + 1:
        buf = _tls.buf = bytearray(max(size + 1, _READBACK_MIN))
    view = memoryview(buf)[:size + 1]
    got = 0
    while got < size + 1:
        n = os.preadv(fd, [view[got:]], got)
        if n == 0:
            break
        got += n
    return view[:got]


def _unlink_quiet(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # gone, or unremovable now: a temp name, which list() skips and gc removes
