"""The raft log on disk, for the raft driver: one writer thread, one transaction a ready.

A part of :class:`~floydd.cluster.driver.loop.RaftDriver` (its ``persist``). The log is a
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from floydd import log
from floydd.cluster.raft import ConfState, DurableState, HardState
from floydd.cluster.raft.sqlite_storage import SqliteStorage
from floydd.cluster.state.machine import ClusterState

__all__ = ["Persist"]

_log = log.cluster.getChild("driver")


class Persist:
    """The log on disk and its writer thread. Uses of the replicated ``state`` only its
    archive and audit tables, which live in the same database and are written on the
    same thread."""

    def __init__(self, node_id: str, path: Path, state: ClusterState) -> None:
        self.node_id = node_id
        self.path = path
        self.state = state
        self.storage: SqliteStorage | None = None
        self.writer: ThreadPoolExecutor | None = None
        self.durable_vote: tuple = (0, None)          # (term, vote) on disk
        self.lazy_hard_state: HardState | None = None

    async def open(self, voters: frozenset | None) -> DurableState:
        """Start the writer thread, open the log (founding a cluster of ``voters`` when
        given and the log is blank) and load what it holds."""
        self.writer = ThreadPoolExecutor(1, thread_name_prefix=f"raft-log-{self.node_id[:6]}")
        self.storage = await self.write(self._open, voters)
        durable = await self.write(self.storage.load)
        self.durable_vote = (durable.hard_state.term, durable.hard_state.vote)
        return durable

    async def close(self, *, flush: bool) -> None:
        """Close the log and the tables beside it and stop the writer; ``flush``: write a
        commit index not yet written first."""
        if self.writer is None:
            return
        if self.storage is not None:
            if flush and self.lazy_hard_state is not None:
                await self.write(self.storage.save, self.lazy_hard_state, (), None)
            await self.write(self.storage.close)
        await self.write(self.state.archive.close)
        await self.write(self.state.audit.close)
        self.writer.shutdown(wait=True)
        self.writer = None

    def _open(self, voters: frozenset | None) -> SqliteStorage:
        archive, audit = self.state.archive, self.state.audit

        def hook(db, snapshot):                     # a received snapshot's archive and audit are swapped in
            archive.saved(db, snapshot)
            audit.saved(db, snapshot)
        if voters:
            return SqliteStorage.bootstrap(self.path, ConfState(voters=voters), on_snapshot=hook)
        return SqliteStorage(self.path, on_snapshot=hook)

    async def save(self, rd) -> None:
        """Save a ready in one transaction (one fsync), except a hard state that only moves
        the commit index: that is volatile state in Raft (figure 2 persists only the term,
        the vote and the log), so it waits for the next save instead of costing an fsync of
        its own. After a crash the commit index restarts lower and the leader re-sends it."""
        hs = rd.hard_state
        if (hs is not None and not rd.entries and rd.snapshot is None
                and (hs.term, hs.vote) == self.durable_vote):
            self.lazy_hard_state = hs
            return
        hs = hs or self.lazy_hard_state
        self.lazy_hard_state = None
        await self.write_durably(self.storage.save, hs, rd.entries, rd.snapshot)
        if hs is not None:
            self.durable_vote = (hs.term, hs.vote)

    async def write(self, fn, *args):
        """``fn(*args)`` on the writer thread."""
        return await asyncio.get_running_loop().run_in_executor(self.writer, fn, *args)

    async def write_durably(self, fn, *args):
        """:meth:`write`, tried again every second while the disk is full."""
        waited = 0
        while True:
            try:
                return await self.write(fn, *args)
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
