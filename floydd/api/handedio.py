"""Reading and writing a file a local CLI handed over (:mod:`floydd.api.handoff`).

An export is written into its handed file by a thread of its own (:class:`FileOut`), so the
write calls (the page cache's copy, most of an export's time) run while the next records are
opened and sealed; an import reads its file straight (:class:`FileIn`). What the writer
saves on the way::

    fresh memory     each sealed record is framed in a buffer of the writer's own
                     (:meth:`FileOut.buffer`), handed back to the export once written: a
                     fresh 4 MiB buffer a record costs more than its crypto here
    the final fsync  writeback of what was written is started every
                     :data:`WRITEBACK` bytes (``sync_file_range``, Linux), so the fsync at the
                     end waits for the last stretch, not the whole file; it still comes
                     before the answer, as always
    the CLI's wait   progress reports the bytes written into the file, not queued: the CLI
                     verifies the file up to there while the rest is written
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Callable

from floydd.store.fileio import start_writeback

__all__ = ["FileOut", "FileIn", "WRITEBACK", "BUFFERS"]

WRITEBACK = 32 << 20
"""Bytes written between two starts of writeback (the fsync at the end still waits for all)."""
BUFFERS = 8
"""Record buffers a writer has (~4 MiB each): those queued for the writing thread, and one
being sealed; the export waits for one to be written when all are queued."""
_SMALL = 64 << 10
_BLOCK = 1 << 20
_MIN_BUFFER = (4 << 20) + (64 << 10)
"""A buffer fits a 4 MiB chunk's record and its frame (larger records grow theirs)."""


class _Lent(bytearray):
    """A record buffer of a :class:`FileOut`: written by its thread, then reused."""


class FileOut:
    """A handed file the export's worker thread writes into, through a thread of its own (see
    the module docstring). Small writes are gathered; a record framed in one of
    :meth:`buffer`'s is queued as it is, other large writes copied; ``progress(bytes written
    into the file)`` after each write. A failed write is raised at the next :meth:`write` or
    :meth:`close`."""

    def __init__(self, fd: int, progress: Callable[[int], None]) -> None:
        self.fd, self.position, self.written, self._progress = fd, 0, 0, progress
        self._small = bytearray()
        self._queue: queue.Queue = queue.Queue(maxsize=2 * BUFFERS)
        self._free: queue.Queue = queue.Queue()
        self._made = 0
        self._failed: BaseException | None = None
        self._synced = 0
        self._thread = threading.Thread(target=self._drain, name="floydd-export-out", daemon=True)
        self._thread.start()

    def buffer(self, n: int) -> bytearray:
        """A buffer of at least ``n`` bytes for one record (``Writer(buffers=...)``): a free one,
        a new one while there are fewer than :data:`BUFFERS`, else the next one written."""
        try:
            buf = self._free.get_nowait()
        except queue.Empty:
            if self._made < BUFFERS:
                self._made += 1
                buf = _Lent(max(n, _MIN_BUFFER))
            else:
                buf = self._free.get()
        return buf if len(buf) >= n else _Lent(n)

    def write(self, data) -> None:
        if self._failed is not None:
            raise self._failed
        self.position += len(data)
        if isinstance(data, memoryview) and isinstance(data.obj, _Lent):
            self._put_small()
            self._queue.put(data)
        elif len(data) < _SMALL:
            self._small += data
            if len(self._small) >= _BLOCK:
                self._put_small()
        else:
            self._put_small()
            self._queue.put(bytes(data))
        self._progress(self.written)        # raises once the client went away: the writing stops

    def close(self, *, sync: bool) -> None:
        """Write what is queued (and fsync when ``sync``), then end the thread; raises what failed."""
        if self._failed is None:
            self._put_small()
        self._queue.put(None)
        self._thread.join()
        if self._failed is not None:
            raise self._failed
        if sync:
            os.fsync(self.fd)

    def _put_small(self) -> None:
        if self._small:
            self._queue.put(bytes(self._small))
            self._small = bytearray()

    def _drain(self) -> None:
        while (data := self._queue.get()) is not None:
            if self._failed is None:        # else taken and dropped: the writer stops at its next write
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(self.fd, view):]
                    self.written += len(data)
                    if self.written - self._synced >= WRITEBACK:
                        start_writeback(self.fd, self._synced, self.written - self._synced)
                        self._synced = self.written
                except BaseException as exc:    # raised in the export's thread
                    self._failed = exc
            if isinstance(data, memoryview) and isinstance(data.obj, _Lent):
                self._free.put(data.obj)


class FileIn:
    """A handed file the import reads (from where the CLI's offset is), with progress."""

    def __init__(self, fd: int, progress: Callable[[int, int], None]) -> None:
        self.fd, self._progress = fd, progress
        self._done, self._total = os.lseek(fd, 0, os.SEEK_CUR), os.fstat(fd).st_size

    def read(self, n: int) -> bytes:
        data = os.read(self.fd, n)
        self._count(len(data))
        return data

    def readinto(self, buffer) -> int:
        """Straight into the reader's buffer (no fresh memory per read)."""
        n = os.readv(self.fd, [buffer])
        self._count(n)
        return n

    def _count(self, n: int) -> None:
        self._done += n
        self._progress(self._done, max(self._done, self._total))
