"""The state folder's disk: what "full" means here, and a reserve to record and clean up with.

A full disk must end the job that filled it with a reason, not wedge the daemon. Yet
SQLite (the records, the raft log, the catalog) needs a few free pages to record
anything, a stop or a delete included. So the runtime keeps a reserve, as CockroachDB
keeps its ballast: a file of :func:`reserve_size` bytes at ``STATE/reserve``, allocated
while the disk has room and released the moment it is full. The records can then say
which job failed and why, and ``floyd stop``, ``floyd delete`` and ``floyd data gc`` can
commit; once they have freed space the reserve is allocated again (and a daemon that
shuts down cleanly gives it back: it is made again at the next start)::

    room ──(free < reserve / 2)──► full: the reserve is released; a job whose log, output
      ▲                                  or metrics cannot be written ends failed,
      │                                  "disk full at PATH"
      └──────────(free ≥ 3 × reserve)───┘ the reserve is allocated again

:meth:`Disk.check` is blocking (statvfs, fallocate): call it in a thread. The runtime
calls it every :data:`CHECK_INTERVAL` seconds and whenever a write fails for lack of
space (:func:`no_space`).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
from pathlib import Path

from floydd import log
from floydd.errors import StoreFull

__all__ = ["Disk", "no_space", "reserve_size", "RESERVE_NAME", "CHECK_INTERVAL"]

RESERVE_NAME = "reserve"
RESERVE_SHARE = 0.02
"""The reserve is this share of the disk, within [RESERVE_MIN, RESERVE_MAX]."""
RESERVE_MIN = 256 * 1024
RESERVE_MAX = 16 * 1024 * 1024
"""16 MiB holds thousands of SQLite transactions: every stop, delete and report a full disk
needs, with room to spare; on a 1 TB disk it is invisible."""
CHECK_INTERVAL = 1.0
"""Seconds between two looks at the free space (one statvfs)."""
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def no_space(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is a write that failed for lack of space."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, StoreFull):
            return True
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
            return True
        if isinstance(exc, sqlite3.OperationalError) and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def reserve_size(total: int) -> int:
    """The reserve kept on a disk of ``total`` bytes."""
    return max(RESERVE_MIN, min(RESERVE_MAX, int(total * RESERVE_SHARE)))


class Disk:
    """The disk holding ``state_dir``: whether it is full, and its reserve (one per daemon)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.reserve_path = self.state_dir / RESERVE_NAME
        self.full = False
        self._lock = threading.Lock()
        self._try_reserve = True  # False after an allocation failed (until the disk was full again)

    def free(self) -> int:
        """Bytes free for the daemon's writes (not counting the reserve)."""
        st = os.statvfs(self.state_dir)
        return st.f_bavail * st.f_frsize

    def reserve(self) -> int:
        """The size of this disk's reserve."""
        st = os.statvfs(self.state_dir)
        return reserve_size(st.f_blocks * st.f_frsize)

    def check(self) -> bool:
        """Look at the free space: release the reserve when the disk is full, allocate it
        again once there is room. Returns whether the disk is full."""
        with self._lock:
            try:
                free, size = self.free(), self.reserve()
            except OSError as exc:
                log.runtime.warning("cannot read the free space of %s: %s", self.state_dir, exc)
                return self.full
            if free < size // 2:
                if not self.full:
                    log.runtime.warning("disk full at %s (%d bytes free): released the %d-byte reserve so "
                                        "floydd can record and clean up; free space with floyd delete or "
                                        "floyd data delete, then floyd data gc", self.state_dir, free, size)
                self.full = True
                self._try_reserve = True
                self._release()
            elif free >= 3 * size:
                if self.full:
                    log.runtime.info("disk at %s has room again (%d bytes free)", self.state_dir, free)
                self.full = False
                if self._try_reserve:
                    self._allocate(size)
            return self.full

    def why(self, path: Path | str | None = None) -> str:
        """The reason a job ends with: ``disk full at PATH`` (the state folder by default)."""
        return f"disk full at {path or self.state_dir}"

    def release(self) -> None:
        """Give the reserve back (at shutdown)."""
        with self._lock:
            self._release()

    def _release(self) -> None:
        try:
            self.reserve_path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.runtime.warning("cannot release the reserve %s: %s", self.reserve_path, exc)

    def _allocate(self, size: int) -> None:
        try:
            if self.reserve_path.stat().st_size >= size:
                return
        except FileNotFoundError:
            pass
        try:
            fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            log.runtime.warning("cannot make the reserve %s: %s", self.reserve_path, exc)
            self._try_reserve = False
            return
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:  # no room after all, or a filesystem without fallocate
            log.runtime.warning("cannot allocate the %d-byte reserve %s (%s): a full disk will stall "
                                "recording until space is freed", size, self.reserve_path, exc)
            self._try_reserve = False
        finally:
            os.close(fd)
        if not self._try_reserve:
            self._release()
