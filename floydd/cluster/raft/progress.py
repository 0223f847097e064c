"""What a leader knows about each peer's log, and how it paces replication (etcd-style).

States of one peer's progress::

    PROBE ──ack──► REPLICATE ──reject / unreachable──► PROBE
      │  ▲                                               
      │  └───────── snapshot acked / failed ◄── SNAPSHOT ◄── next entry compacted away

PROBE sends one AppendEntries per heartbeat until the peer's match is found (a
rejection carries a hint so the leader skips a whole conflicting term at once).
REPLICATE streams optimistically, at most ``max_inflight`` messages unacknowledged.
SNAPSHOT waits for a snapshot to be installed.
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum

__all__ = ["ProgressState", "Progress"]


class ProgressState(IntEnum):
    PROBE = 0
    REPLICATE = 1
    SNAPSHOT = 2


class Progress:
    __slots__ = ("match", "next", "state", "probe_sent", "pending_snapshot", "recent_active",
                 "inflights", "is_learner")

    def __init__(self, next_index: int, *, is_learner: bool = False) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False              # PROBE: one probe outstanding, wait for a reply
        self.pending_snapshot = 0            # SNAPSHOT: index of the snapshot sent
        self.recent_active = True            # heard from within this election timeout
        self.inflights: deque[int] = deque() # REPLICATE: last index of each unacked message
        self.is_learner = is_learner

    def __repr__(self) -> str:
        return (f"Progress(match={self.match}, next={self.next}, state={self.state.name}"
                f"{', learner' if self.is_learner else ''})")

    def become_probe(self) -> None:
        if self.state == ProgressState.SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self._reset(ProgressState.PROBE)

    def become_replicate(self) -> None:
        self.next = self.match + 1
        self._reset(ProgressState.REPLICATE)

    def become_snapshot(self, index: int) -> None:
        self._reset(ProgressState.SNAPSHOT)
        self.pending_snapshot = index

    def _reset(self, state: ProgressState) -> None:
        self.state = state
        self.probe_sent = False
        self.pending_snapshot = 0
        self.inflights.clear()

    def maybe_update(self, index: int) -> bool:
        """An acknowledgement up to ``index``; False when it says nothing new."""
        updated = False
        if self.match < index:
            self.match = index
            updated = True
            self.probe_sent = False
        if self.next < index + 1:
            self.next = index + 1
        return updated

    def maybe_decrease_to(self, rejected: int, match_hint: int) -> bool:
        """A rejection of the append after ``rejected``; False when it is stale."""
        if self.state == ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def is_paused(self, max_inflight: int) -> bool:
        state = self.state
        if state == ProgressState.PROBE:
            return self.probe_sent
        if state == ProgressState.REPLICATE:
            return len(self.inflights) >= max_inflight
        return True

    def sent_entries(self, last: int, count: int) -> None:
        """Book an AppendEntries ending at ``last`` carrying ``count`` entries."""
        if self.state == ProgressState.REPLICATE:
            if count:
                self.next = last + 1
                self.inflights.append(last)
        elif self.state == ProgressState.PROBE:
            self.probe_sent = True

    def free_acked(self, index: int) -> None:
        inflights = self.inflights
        while inflights and inflights[0] <= index:
            inflights.popleft()
