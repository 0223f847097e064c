"""Raft's safety properties, checked incrementally while the simulation runs.

* Election Safety: at most one leader per term.
* Log Matching: an (index, term) pair names one entry, with one predecessor term, on
  every node (so logs that share an (index, term) share the whole prefix).
* Leader Completeness: a new leader's log holds every entry committed so far.
* Committed entries never change: every node that commits index i commits the same
  term there.
* State Machine Safety: every node applies the same entry at each index; snapshots
  taken at the same index hold the same state.
"""

from __future__ import annotations


class Violation(AssertionError):
    """A safety property (or liveness after healing, or linearizability) failed."""


class SafetyChecker:
    __slots__ = ("leaders", "entries", "committed", "max_committed", "applied", "snapshots")

    def __init__(self) -> None:
        self.leaders: dict = {}         # term -> node
        self.entries: dict = {}         # (index, term) -> (data, kind, prev term)
        self.committed: dict = {}       # index -> term
        self.max_committed = 0
        self.applied: dict = {}         # index -> Entry
        self.snapshots: dict = {}       # index -> state bytes

    def on_entries(self, node, log, entries) -> None:
        seen = self.entries
        term_of = log.term
        for e in entries:
            key = (e.index, e.term)
            info = (e.data, e.kind, term_of(e.index - 1))
            old = seen.setdefault(key, info)
            if old is not info and old != info:
                raise Violation(f"log matching: node {node} has entry {key} as {info}, "
                                f"another node as {old}")

    def on_leader(self, node, term: int, log) -> None:
        other = self.leaders.setdefault(term, node)
        if other != node:
            raise Violation(f"election safety: two leaders in term {term}: {other} and {node}")
        ci = self.max_committed
        if ci > log.snapshot.index and log.term(ci) != self.committed[ci]:
            raise Violation(f"leader completeness: leader {node} of term {term} lacks committed "
                            f"entry {ci} (term {self.committed[ci]}; has {log.term(ci)})")

    def on_commit(self, node, log, lo: int) -> None:
        committed = self.committed
        term_of = log.term
        hi = log.committed
        for i in range(max(lo, log.snapshot.index), hi + 1):
            t = term_of(i)
            if t is None:
                continue
            old = committed.setdefault(i, t)
            if old != t:
                raise Violation(f"committed entry {i} changed: term {old}, node {node} "
                                f"committed term {t}")
        if hi > self.max_committed:
            self.max_committed = hi

    def on_apply(self, node, entry) -> None:
        old = self.applied.setdefault(entry.index, entry)
        if old is not entry and (old.term != entry.term or old.data != entry.data):
            raise Violation(f"state machine safety: node {node} applied {entry} at {entry.index}, "
                            f"another node {old}")

    def on_snapshot(self, node, index: int, state: bytes) -> None:
        old = self.snapshots.setdefault(index, state)
        if old != state:
            raise Violation(f"state machines diverged: node {node}'s snapshot at {index} differs")
