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
calls it every :data:`CHECK_INTERVAL` seconds (:data:`IDLE_CHECK_INTERVAL` with no job running
and room) and whenever a write fails for lack of
space (:func:`no_space`).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable

from floydd import log
from floydd.errors import StoreError, StoreFull

__all__ = ["Disk", "StoreWatch", "no_space", "store_fault", "is_full", "reserve_size", "RESERVE_NAME",
           "CHECK_INTERVAL", "IDLE_CHECK_INTERVAL", "RECHECK_AFTER"]

RESERVE_NAME = "reserve"
RESERVE_SHARE = 0.02
"""The reserve is this share of the disk, within [RESERVE_MIN, RESERVE_MAX]."""
RESERVE_MIN = 256 * 1024
RESERVE_MAX = 16 * 1024 * 1024
"""16 MiB holds thousands of SQLite transactions: every stop, delete and report a full disk
needs, with room to spare; on a 1 TB disk it is invisible."""
CHECK_INTERVAL = 1.0
"""Seconds between two looks at the free space (one statvfs) while jobs run here or the disk is full."""
IDLE_CHECK_INTERVAL = 5.0
"""Seconds between two looks on a box with no job running and room (issue 23: an idle box wakes
rarely); a write that fails for lack of space looks at once either way."""
RECHECK_AFTER = 600.0
"""Seconds after a failed store write that a box offers to take data again even if nothing
says it recovered (it is asked again; a write that fails again keeps it out as long)."""
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_FAULTS = (errno.EIO, errno.EROFS, errno.EUCLEAN, errno.ENXIO, errno.ENODEV, errno.EBADMSG)
_SQLITE_FAULTS = (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


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


def store_fault(exc: BaseException | None) -> str:
    """Why ``exc`` is this box's store failing (an I/O error, a read-only or corrupt disk, under
    whatever the store wrapped it in) rather than a peer's, the network's or a passing state's
    (a re-key under way, a lock): its message, or "" when it is not."""
    top, seen = exc, 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in _FAULTS or \
                isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF in _SQLITE_FAULTS:
            return _message(top) if isinstance(top, StoreError) else (getattr(exc, "strerror", None) or str(exc))
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return ""


def is_full(free: int, total: int, was_full: bool) -> bool:
    """Whether a disk of ``total`` bytes with ``free`` left is full, with the reserve's
    hysteresis: full below half the reserve, room again from three reserves."""
    size = reserve_size(total)
    return free < size // 2 or (was_full and free < 3 * size)


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

    def check(self, *, release: bool = True) -> bool:
        """Look at the free space: release the reserve when the disk is full, allocate it
        again once there is room. Returns whether the disk is full. ``release=False`` only
        looks (to end the jobs that write before the reserve is given up)."""
        with self._lock:
            try:
                free, size = self.free(), self.reserve()
            except OSError as exc:
                log.runtime.warning("cannot read the free space of %s: %s", self.state_dir, exc)
                return self.full
            if free < size // 2:
                if not release:
                    return True
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


class StoreWatch:
    """Whether this box's store (the disks of ``roots``: the store and state folders) can take
    new data; thread-safe. :meth:`poll` (blocking: statvfs) every second or so, :meth:`failed`
    when a store write failed, :meth:`succeeded` when one worked; :meth:`report` is cheap."""

    def __init__(self, roots: list[Path], *, reserve: Path | None = None,
                 clock: Callable[[], float] = time.monotonic, recheck_after: float = RECHECK_AFTER) -> None:
        self.roots = list(dict.fromkeys(Path(r) for r in roots))
        self.reserve = reserve
        """The runtime's reserve file (:class:`Disk`): while it is released, its disk counts as
        that much fuller, so a disk the runtime calls full is full here too."""
        self._clock, self._recheck = clock, recheck_after
        self._lock = threading.Lock()
        self._full: dict[Path, bool] = {}
        self._room: tuple[int, int, Path] | None = None      # (free, total, root) of the fullest disk
        self._space_failed: tuple[float, int, str] | None = None   # (when, free then, why)
        self._fault: tuple[float, str] | None = None              # (when, why)
        self._said: dict | None = None

    def failed(self, exc: BaseException) -> bool:
        """Record a failed store write: whether it was this store's fault (lack of space or
        a failing disk), which keeps copies and jobs away until it recovers."""
        fault = "" if no_space(exc) else store_fault(exc)
        if not fault and not no_space(exc):
            return False
        free = self._free_now()
        with self._lock:
            if fault:
                self._fault = (self._clock(), fault)
            else:
                self._space_failed = (self._clock(), free, _message(exc))
        log.runtime.warning("this box's store cannot take new data (%s): no new copies or jobs are placed "
                            "here until it recovers", fault or _message(exc))
        return True

    def succeeded(self) -> None:
        """A store write worked: a failing store is not failing any more (space is judged by
        the free space alone)."""
        with self._lock:
            self._fault = None

    def poll(self) -> bool:
        """Look at the free space; whether the state :meth:`report` says changed since the
        last poll (worth a heartbeat now; the free space alone goes with the next one)."""
        rooms = []
        for root in self.roots:
            try:
                st = os.statvfs(root)
            except OSError:
                continue
            free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
            if self._released(root):
                free = max(0, free - reserve_size(total))
            rooms.append((free, total, root))
        with self._lock:
            for free, total, root in rooms:
                self._full[root] = is_full(free, total, self._full.get(root, False))
            if rooms:
                self._room = min(rooms, key=lambda r: (not self._full[r[2]], r[0]))
            said, self._said = self._said, self._report()
            return said is None or said["state"] != self._said["state"]

    def report(self) -> dict:
        """``{"state": "ok" | "full" | "failing", "why": words, "free": bytes, "total": bytes}``
        as of the last :meth:`poll` and failure (what a heartbeat carries)."""
        with self._lock:
            return dict(self._report())

    def _report(self) -> dict:
        now = self._clock()
        free, total, root = self._room or (0, 0, self.roots[0] if self.roots else Path("."))
        room = {"free": free, "total": total}
        if self._room is not None and self._full.get(root):
            return {"state": "full", "why": f"disk full at {root} ({_size(free)} free)", **room}
        if self._space_failed is not None:
            when, free_then, why = self._space_failed
            lifted = now - when >= self._recheck or \
                (self._room is not None and free >= 2 * free_then + reserve_size(total))
            if not lifted:
                return {"state": "full", "why": f"no space left for new data at {root} ({_size(free)} free): "
                                                f"{why}", **room}
            self._space_failed = None
        if self._fault is not None:
            when, why = self._fault
            if now - when < self._recheck:
                return {"state": "failing", "why": f"store failing: {why}", **room}
            self._fault = None
        return {"state": "ok", "why": "", **room}

    def _released(self, root: Path) -> bool:
        """Whether the runtime's reserve on ``root``'s disk is released (the disk was full)."""
        if self.reserve is None:
            return False
        try:
            if os.stat(root).st_dev != os.stat(self.reserve.parent).st_dev:
                return False
        except OSError:
            return False
        return not self.reserve.exists()

    def _free_now(self) -> int:
        try:
            return min(os.statvfs(r).f_bavail * os.statvfs(r).f_frsize for r in self.roots)
        except (OSError, ValueError):
            return 0


def _message(exc: BaseException) -> str:
    return str(getattr(exc, "message", "") or exc)[:200]


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
