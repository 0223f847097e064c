"""A simulated disk under the storage interface: writes sit in a volatile buffer
until ``fsync``; a crash throws the buffer away and the node restarts from what was
synced. A correct driver writes a ready and fsyncs before sending its messages
(a leader's ready marked ``send_early`` excepted)."""

from __future__ import annotations

from floydd.cluster.raft import DurableState, MemoryStorage


class SimDisk:
    __slots__ = ("durable", "buffer", "fsyncs")

    def __init__(self, state: DurableState | None = None) -> None:
        self.durable = MemoryStorage(state)
        self.buffer: list = []     # writes not yet fsynced: ("save", args) / ("compact", snap)
        self.fsyncs = 0

    def write(self, hard_state, entries, snapshot) -> None:
        if hard_state is not None or entries or snapshot is not None:
            self.buffer.append((hard_state, entries, snapshot))

    def fsync(self) -> None:
        if self.buffer:
            for hs, entries, snapshot in self.buffer:
                self.durable.save(hs, entries, snapshot)
            self.buffer.clear()
            self.fsyncs += 1

    def compact(self, snapshot) -> None:
        self.fsync()
        self.durable.compact(snapshot)

    def crash(self) -> None:
        """Power loss: whatever was not fsynced is gone."""
        self.buffer.clear()

    def load(self) -> DurableState:
        return self.durable.load()
