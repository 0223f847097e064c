"""The raft log on disk, for the raft driver: one writer thread, one transaction a ready.

A mixin of :class:`~floydd.cluster.driver.loop.RaftDriver`. The log is a
:class:`~floydd.cluster.raft.sqlite_storage.SqliteStorage` (``raft.db``, with the archive
and audit tables beside it) written by one thread of its own, so the loop never blocks on
an fsync. A ready is saved in ONE transaction (hard state, entries, snapshot), except a
hard state that only moves the commit index: that is volatile in Raft, so it rides along
with the next save (or the flush at a clean close) instead of costing an fsync of its own.

A write that fails for lack of space (the log is on the state folder's disk, which a job
can fill) is tried again every second until it goes through, instead of ending the loop:
the node stands still meanwhile (proposals wait, a lone box's jobs report later) and goes
on, with nothing lost, once space is freed; the runtime releases its reserve on a full
disk (:mod:`floydd.runtime.disk`) so that is soon.
"""

from __future__ import annotations

import asyncio
import errno
import sqlite3

from floydd import log
from floydd.cluster.raft import ConfState
from floydd.cluster.raft.sqlite_storage import SqliteStorage

__all__ = ["PersistMixin"]

_log = log.cluster.getChild("driver")


class PersistMixin:
    """Methods of RaftDriver that open and write the log."""

    def _open(self, voters: frozenset | None) -> SqliteStorage:
        archive, audit = self.state.archive, self.state.audit

        def hook(db, snapshot):                     # a received snapshot's archive and audit are swapped in
            archive.saved(db, snapshot)
            audit.saved(db, snapshot)
        if voters:
            return SqliteStorage.bootstrap(self.path, ConfState(voters=voters), on_snapshot=hook)
        return SqliteStorage(self.path, on_snapshot=hook)

    async def _persist(self, rd) -> None:
        """Save a ready in one transaction (one fsync), except a hard state that only moves
        the commit index: that is volatile state in Raft (figure 2 persists only the term,
        the vote and the log), so it waits for the next save instead of costing an fsync of
        its own. After a crash the commit index restarts lower and the leader re-sends it."""
        hs = rd.hard_state
        if (hs is not None and not rd.entries and rd.snapshot is None
                and (hs.term, hs.vote) == self._durable_vote):
            self._lazy_hard_state = hs
            return
        hs = hs or self._lazy_hard_state
        self._lazy_hard_state = None
        await self._write_durably(self._storage.save, hs, rd.entries, rd.snapshot)
        if hs is not None:
            self._durable_vote = (hs.term, hs.vote)

    async def _write(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    async def _write_durably(self, fn, *args):
        """:meth:`_write`, tried again every second while the disk is full."""
        waited = 0
        while True:
            try:
                return await self._write(fn, *args)
            except (sqlite3.OperationalError, OSError) as exc:
                if not _disk_full(exc):
                    raise
                if waited % 60 == 0:
                    _log.error("[%s] the raft log cannot be written, the disk is full (%s); trying again "
                               "every second", self.node_id, exc)
                waited += 1
                await asyncio.sleep(1.0)


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.OperationalError):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
