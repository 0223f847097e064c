"""The Raft log as one node sees it: a snapshot, then entries; a suffix not yet durable.

Indexes, left to right::

    snapshot.index <= applied <= applying <= committed <= last_index
                            stabled <= last_index   (entries past stabled await fsync)

Everything the node knows is kept in memory (the control-plane log is small and
compacted by snapshots); the storage layer holds the durable copy and gives it back
at start-up.
"""

from __future__ import annotations

from typing import Sequence

from .errors import RaftInvariantError
from .messages import Entry, Snapshot

__all__ = ["RaftLog"]


class RaftLog:
    __slots__ = ("snapshot", "entries", "offset", "committed", "applied", "applying",
                 "stabled", "pending_snapshot")

    def __init__(self, snapshot: Snapshot, entries: Sequence[Entry] = (), *,
                 committed: int = 0, applied: int = 0) -> None:
        self.snapshot = snapshot
        self.offset = snapshot.index + 1          # index of entries[0]
        self.entries: list[Entry] = list(entries)
        for i, e in enumerate(self.entries):
            if e.index != self.offset + i:
                raise RaftInvariantError(f"log not contiguous at {e.index} (expected {self.offset + i})")
        last = self.last_index()
        if committed > last:
            raise RaftInvariantError(f"commit {committed} is past the last index {last}")
        self.stabled = last                       # what we were given is durable
        self.committed = max(committed, snapshot.index)
        self.applied = max(min(applied, self.committed), snapshot.index)
        self.applying = self.applied              # handed to the application, not yet confirmed
        self.pending_snapshot: Snapshot | None = None   # received, not yet durable

    # -- reading -------------------------------------------------------------------------

    def last_index(self) -> int:
        return self.offset + len(self.entries) - 1

    def last_term(self) -> int:
        return self.entries[-1].term if self.entries else self.snapshot.term

    def first_index(self) -> int:
        return self.offset

    def term(self, index: int) -> int | None:
        """The term at ``index``; None when compacted away or not there yet."""
        off = index - self.offset
        if off >= 0:
            return self.entries[off].term if off < len(self.entries) else None
        if index == self.snapshot.index:
            return self.snapshot.term
        return None

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, index: int, term: int) -> bool:
        """Raft §5.4.1: is a log ending at (index, term) at least as new as ours?"""
        last_term = self.last_term()
        return term > last_term or (term == last_term and index >= self.last_index())

    def entry(self, index: int) -> Entry:
        return self.entries[index - self.offset]

    def slice(self, lo: int, max_count: int, max_bytes: int) -> tuple:
        """Entries from ``lo`` (>= first_index) on, at most ``max_count`` and about
        ``max_bytes`` of payload (always at least one when there is one)."""
        start = lo - self.offset
        out = self.entries[start:start + max_count]
        if len(out) > 1:
            size = 0
            for n, e in enumerate(out):
                size += len(e.data)
                if size > max_bytes and n > 0:
                    out = out[:n]
                    break
        return tuple(out)

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest (i, term_i) with i <= index and term_i <= term: where a log whose
        entry at ``index`` has ``term`` may match ours (term 0: unknown, compacted)."""
        while index > 0:
            ours = self.term(index)
            if ours is None:
                return index, 0
            if ours <= term:
                return index, ours
            index -= 1
        return 0, 0

    # -- writing -------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Leader append: ``entries`` continue the log."""
        self.entries.extend(entries)

    def maybe_append(self, index: int, log_term: int, commit: int, entries: Sequence[Entry],
                     *, check_match: bool = True) -> int | None:
        """Follower append (AppendEntries receiver, Raft §5.3). Returns the index of the
        last new entry, or None when our log does not hold (index, log_term)."""
        if check_match and self.term(index) != log_term:
            return None
        last_new = index + len(entries)
        for e in entries:
            if self.term(e.index) != e.term:
                if e.index <= self.committed:
                    raise RaftInvariantError(
                        f"entry {e.index} conflicts with committed log (commit {self.committed})")
                self._truncate_and_append(entries[e.index - index - 1:])
                break
        self.commit_to(min(commit, last_new))
        return last_new

    def _truncate_and_append(self, entries: Sequence[Entry]) -> None:
        first = entries[0].index
        if first <= self.offset - 1 or first > self.last_index() + 1:
            raise RaftInvariantError(f"cannot append at {first} to a log ending at {self.last_index()}")
        del self.entries[first - self.offset:]
        self.entries.extend(entries)
        if self.stabled >= first:
            self.stabled = first - 1

    def commit_to(self, index: int) -> bool:
        if index > self.committed:
            if index > self.last_index():
                raise RaftInvariantError(f"commit {index} is past the last index {self.last_index()}")
            self.committed = index
            return True
        return False

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole log by a snapshot received from the leader."""
        self.snapshot = snapshot
        self.offset = snapshot.index + 1
        self.entries = []
        self.committed = snapshot.index
        self.stabled = snapshot.index
        self.pending_snapshot = snapshot

    def compact(self, snapshot: Snapshot) -> None:
        """Drop entries covered by a snapshot the application took at an applied index."""
        if snapshot.index > self.applied or snapshot.index > self.stabled:
            raise RaftInvariantError(f"cannot compact at {snapshot.index}: applied {self.applied}")
        if snapshot.index <= self.snapshot.index:
            return
        del self.entries[:snapshot.index + 1 - self.offset]
        self.offset = snapshot.index + 1
        self.snapshot = snapshot

    # -- the ready/advance handshake ------------------------------------------------------

    def has_unstable(self) -> bool:
        return self.stabled < self.offset + len(self.entries) - 1

    def unstable_entries(self) -> tuple:
        return tuple(self.entries[self.stabled + 1 - self.offset:])

    def has_committed_to_apply(self) -> bool:
        return self.committed > self.applying

    def take_committed(self, max_count: int) -> tuple:
        """Committed entries not yet handed out; marks them as being applied."""
        lo = max(self.applying, self.snapshot.index) + 1
        hi = min(self.committed, lo + max_count - 1)
        if hi < lo:
            return ()
        out = tuple(self.entries[lo - self.offset:hi + 1 - self.offset])
        self.applying = hi
        return out

    def stable_to(self, index: int, term: int) -> None:
        """Entries up to (index, term) are durable, unless they were replaced meanwhile."""
        if index > self.stabled and self.term(index) == term:
            self.stabled = index

    def applied_to(self, index: int) -> None:
        if index > self.applied:
            self.applied = index
