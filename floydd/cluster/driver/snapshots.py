"""Snapshots for the raft driver: compaction, installing the leader's, streaming the archive.

A part of :class:`~floydd.cluster.driver.loop.RaftDriver` (its ``snapshots``). Every ``snapshot_every`` applied
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
from floydd.cluster.driver.applied import Applier
from floydd.cluster.driver.persist import Persist
from floydd.cluster.driver.proposals import Proposals
from floydd.cluster.driver.seam import Loop
from floydd.cluster.state.audit import SplitSink
from floydd.cluster.state.machine import ClusterState
from floydd.cluster.raft import InstallSnapshot, Snapshot

__all__ = ["Snapshots"]

_log = log.cluster.getChild("driver")


class Snapshots:
    """Makes snapshots of ``state`` as far as ``applier`` got and compacts the log
    (``persist``); installs the leader's, dropping the ``proposals`` it overtook."""

    def __init__(self, loop: Loop, state: ClusterState, persist: Persist, applier: Applier,
                 proposals: Proposals) -> None:
        self._loop = loop
        self.state = state
        self._persist = persist
        self._applier = applier
        self._proposals = proposals
        self.index = 0
        """The last snapshot's index."""

    def snapshot_source(self, message: InstallSnapshot) -> AsyncIterator[bytes]:
        """What the transport streams after a snapshot's message: the archive's rows, then
        the audit chain's (:mod:`floydd.cluster.state.audit`)."""
        audit = self.state.audit.export() if versions.at_least(self.state, 2) else _chain()   # an 0.1 box reads none
        return _chain(self.state.archive.export(), audit)

    def snapshot_sink(self, message: InstallSnapshot):
        """Where the transport puts a received snapshot's archive, before the message itself
        reaches the core (staged on the writer thread; swapped in when the snapshot is saved)."""
        snap = message.snapshot
        write = self._persist.write_durably
        return SplitSink(self.state.archive.receive(snap.index, snap.term, write),
                         self.state.audit.receive(snap.index, snap.term, write))

    def report_snapshot(self, peer: str, ok: bool) -> None:
        node = self._loop.node
        if node is not None:
            self._loop.submit(lambda: node.report_snapshot(peer, ok))

    def install(self, snap: Snapshot) -> None:
        """The leader's snapshot replaces the state (in the loop, from a ready)."""
        self.state.restore(snap.data)
        self.state.archive.installed(snap.index, snap.term)
        self.state.audit.installed(snap.index, snap.term)
        self.index = snap.index
        self._proposals.drop_through(snap.index)
        _log.info("[%s] state restored from the leader's snapshot at %d", self._loop.node_id, snap.index)
        self._applier.restored(snap.index, snap.term)

    async def compact(self) -> None:
        """Snapshot the state as applied and drop the log up to there."""
        index = self._applier.applied
        snap = self._loop.node.compact(index, self.state.snapshot())
        self.index = index
        await self._persist.write_durably(self._persist.storage.compact, snap)
        await self.state.archive.purge(index, self._persist.write_durably)   # no replay starts before it now
        _log.debug("[%s] snapshot at %d, log compacted", self._loop.node_id, index)


async def _chain(*sources):
    """The chunks of each source in turn (a snapshot's archive, then its audit chain)."""
    for source in sources:
        async for chunk in source:
            yield chunk
