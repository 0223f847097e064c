"""Snapshots for the raft driver: compaction, installing the leader's, streaming the archive.

A mixin of :class:`~floydd.cluster.driver.loop.RaftDriver`. Every ``snapshot_every`` applied
entries the driver snapshots the state machine and compacts the log (then purges the
archive's tombstones the snapshot made useless). A snapshot received from the leader
replaces the whole state; proposals waiting on indexes it covers learn only that their
outcome is unknown (:class:`ProposalDropped`), and the hooks see one ``restored`` event.

The archive of finished jobs (:mod:`floydd.cluster.state.archive`) and the audit chain
(:mod:`floydd.cluster.state.audit`) are not in the snapshot's data: they live in tables beside
the log, are streamed after a snapshot sent to a peer (``snapshot_source``), staged when
one is received (``snapshot_sink``) and swapped in by the storage in the transaction that
saves that snapshot.
"""

from __future__ import annotations

from typing import AsyncIterator

from floydd import log
from floydd.cluster.state import versions
from floydd.cluster.driver._futures import settle
from floydd.cluster.driver.applied import Applied
from floydd.cluster.state.audit import SplitSink
from floydd.cluster.raft import InstallSnapshot, ProposalDropped, Snapshot

__all__ = ["SnapshotsMixin"]

_log = log.cluster.getChild("driver")


class SnapshotsMixin:
    """Methods of RaftDriver that make, install and stream snapshots."""

    def snapshot_source(self, message: InstallSnapshot) -> AsyncIterator[bytes]:
        """What the transport streams after a snapshot's message: the archive's rows, then
        the audit chain's (:mod:`floydd.cluster.state.audit`)."""
        audit = self.state.audit.export() if versions.at_least(self.state, 2) else _chain()   # an 0.1 box reads none
        return _chain(self.state.archive.export(), audit)

    def snapshot_sink(self, message: InstallSnapshot):
        """Where the transport puts a received snapshot's archive, before the message itself
        reaches the core (staged on the writer thread; swapped in when the snapshot is saved)."""
        snap = message.snapshot
        return SplitSink(self.state.archive.receive(snap.index, snap.term, self._write_durably),
                         self.state.audit.receive(snap.index, snap.term, self._write_durably))

    def report_snapshot(self, peer: str, ok: bool) -> None:
        if self._node is not None:
            self._submit(lambda: self._node.report_snapshot(peer, ok))

    def _install(self, snap: Snapshot) -> None:
        self.state.restore(snap.data)
        self.state.archive.installed(snap.index, snap.term)
        self.state.audit.installed(snap.index, snap.term)
        self._applied = self._snapshot_index = snap.index
        for index in [i for i in self._waiters if i <= snap.index]:
            _, fut = self._waiters.pop(index)
            settle(fut, ProposalDropped("outcome unknown: state replaced by a snapshot", leader=self._node.lead))
        _log.info("[%s] state restored from the leader's snapshot at %d", self.node_id, snap.index)
        self._emit(Applied(index=snap.index, term=snap.term, restored=True))
        self._wake_readers()

    async def _compact(self) -> None:
        index = self._applied
        snap = self._node.compact(index, self.state.snapshot())
        self._snapshot_index = index
        await self._write_durably(self._storage.compact, snap)
        await self.state.archive.purge(index, self._write_durably)   # no replay starts before it now
        _log.debug("[%s] snapshot at %d, log compacted", self.node_id, index)


async def _chain(*sources):
    """The chunks of each source in turn (a snapshot's archive, then its audit chain)."""
    for source in sources:
        async for chunk in source:
            yield chunk
