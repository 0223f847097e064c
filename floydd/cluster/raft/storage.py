"""Durable storage for one node's Raft state, behind a small interface.

A storage keeps the hard state (term, vote, commit), the latest snapshot and the
log after it. :meth:`Storage.save` is called once per ready cycle and must be one
atomic, durable write (one fsync): the driver sends the ready's messages only once
it returns (a leader's may go while it runs: ``Ready.send_early``).
:class:`MemoryStorage` is the in-memory implementation for tests;
:mod:`floydd.cluster.raft.sqlite_storage` is the real one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

from .errors import RaftInvariantError
from .messages import ConfState, Entry, HardState, Snapshot

__all__ = ["DurableState", "Storage", "MemoryStorage", "bootstrap_state", "check_save",
           "BOOTSTRAP_INDEX"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableState:
    """What a node restarts from."""

    hard_state: HardState = field(default_factory=HardState)
    snapshot: Snapshot = field(default_factory=Snapshot)
    entries: tuple = ()


BOOTSTRAP_INDEX = 1
"""Founding members start from a snapshot at (index 1, term 1) naming the initial
membership, with empty data (the application's empty state). Being a snapshot, it
reaches nodes that join later like any other: as an InstallSnapshot."""


def bootstrap_state(conf: ConfState) -> DurableState:
    """The state of a founding member (the same on each). A node that joins an
    existing cluster starts from an empty ``DurableState()`` instead and learns the
    membership from its leader."""
    if not conf.voters:
        raise ValueError("a cluster needs at least one voter")
    return DurableState(hard_state=HardState(term=BOOTSTRAP_INDEX, commit=BOOTSTRAP_INDEX),
                        snapshot=Snapshot(index=BOOTSTRAP_INDEX, term=BOOTSTRAP_INDEX, conf=conf))


class Storage(Protocol):
    def load(self) -> DurableState:
        """Everything saved so far."""

    def save(self, hard_state: HardState | None, entries: Sequence[Entry],
             snapshot: Snapshot | None) -> None:
        """Persist one ready, atomically and durably: the snapshot (replacing the whole
        log), then ``entries`` (replacing the log from ``entries[0].index`` on), then
        the hard state."""

    def compact(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` (taken locally at an applied index) and drop the entries it
        covers. Losing this write in a crash is harmless."""

    def close(self) -> None:
        """Release resources."""


def check_save(last_index: int, snapshot_index: int, entries: Sequence[Entry]) -> None:
    """Shared validation: entries must attach to the stored log."""
    if entries:
        first = entries[0].index
        if first <= snapshot_index or first > last_index + 1:
            raise RaftInvariantError(
                f"entries from {first} do not attach to a log of ({snapshot_index}, {last_index}]")


class MemoryStorage:
    """Storage in memory: for tests and for the simulator's disk."""

    def __init__(self, state: DurableState | None = None) -> None:
        state = state or DurableState()
        self.hard_state = state.hard_state
        self.snapshot = state.snapshot
        self.entries: list[Entry] = list(state.entries)
        self.saves = 0

    def load(self) -> DurableState:
        return DurableState(hard_state=self.hard_state, snapshot=self.snapshot,
                            entries=tuple(self.entries))

    def last_index(self) -> int:
        return self.entries[-1].index if self.entries else self.snapshot.index

    def save(self, hard_state: HardState | None, entries: Sequence[Entry],
             snapshot: Snapshot | None) -> None:
        if snapshot is not None:
            self.snapshot = snapshot
            self.entries = []
        if entries:
            check_save(self.last_index(), self.snapshot.index, entries)
            del self.entries[entries[0].index - self.snapshot.index - 1:]
            self.entries.extend(entries)
        if hard_state is not None:
            self.hard_state = hard_state
        self.saves += 1

    def compact(self, snapshot: Snapshot) -> None:
        if snapshot.index <= self.snapshot.index:
            return
        del self.entries[:snapshot.index - self.snapshot.index]
        self.snapshot = snapshot

    def close(self) -> None:
        pass
