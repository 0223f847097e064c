"""File I/O under the local object store (:mod:`.local`): whole writes and reads, the
read-back into a per-thread buffer, and durability at the system-call level (fsync of a
folder, ``syncfs``, starting writeback with ``sync_file_range``; the last two through libc,
None where it lacks them).
"""

from __future__ import annotations

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

__all__ = ["fsync_dir", "fsync_dirs"]

_DIR_SYNCERS = 8
"""Folders fsynced at once by :func:`fsync_dirs`."""

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


def fsync_dirs(paths: Iterable[Path]) -> None:
    """:func:`fsync_dir` of every folder in ``paths``, several at once; returns when all are
    durable, or raises the first failure once every one has been tried. The filesystem joins
    concurrent fsyncs into one journal commit: the 256 fan-out folders of a store took 266 ms
    one after another and 24 ms eight at a time (ext4, median of 5)."""
    paths = list(paths)
    if len(paths) <= 1:
        for path in paths:
            fsync_dir(path)
        return
    with ThreadPoolExecutor(max_workers=min(_DIR_SYNCERS, len(paths)), thread_name_prefix="floydd-fsync") as pool:
        futures = [pool.submit(fsync_dir, path) for path in paths]
    for future in futures:
        future.result()


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
