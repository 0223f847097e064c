"""RaftLog: the in-memory log with its durable prefix and applied cursor."""

from __future__ import annotations

import pytest

from floydd.cluster.raft import ConfState, Entry, RaftInvariantError, Snapshot
from floydd.cluster.raft.log import RaftLog


def log_of(*terms, snap_index=0, snap_term=0, committed=0, applied=0) -> RaftLog:
    entries = [Entry(t, snap_index + 1 + i) for i, t in enumerate(terms)]
    return RaftLog(Snapshot(index=snap_index, term=snap_term), entries,
                   committed=committed, applied=applied)


def terms(log: RaftLog) -> list:
    return [e.term for e in log.entries]


def test_indexes_and_terms() -> None:
    log = log_of(1, 1, 2, snap_index=4, snap_term=1)
    assert (log.first_index(), log.last_index(), log.last_term()) == (5, 7, 2)
    assert log.term(4) == 1 and log.term(7) == 2
    assert log.term(3) is None and log.term(8) is None       # compacted / not there
    assert log.stabled == 7 and not log.has_unstable()


def test_construction_rejects_gaps_and_commit_past_end() -> None:
    with pytest.raises(RaftInvariantError):
        RaftLog(Snapshot(), [Entry(1, 1), Entry(1, 3)])
    with pytest.raises(RaftInvariantError):
        log_of(1, committed=2)


@pytest.mark.parametrize("index,term,expected", [
    (3, 2, True), (4, 2, True), (2, 2, False),        # same last term: longer or equal wins
    (1, 3, True), (9, 1, False),                       # higher last term wins regardless of length
])
def test_is_up_to_date(index, term, expected) -> None:
    assert log_of(1, 1, 2).is_up_to_date(index, term) is expected


def test_maybe_append_rejects_when_prev_does_not_match() -> None:
    log = log_of(1, 1, 2)
    assert log.maybe_append(3, 1, 0, [Entry(3, 4)]) is None
    assert log.maybe_append(4, 2, 0, [Entry(3, 5)]) is None     # beyond our last
    assert terms(log) == [1, 1, 2]


def test_maybe_append_truncates_the_conflicting_suffix_only() -> None:
    log = log_of(1, 1, 2, 2, committed=1)
    assert log.maybe_append(2, 1, 3, [Entry(2, 3), Entry(3, 4), Entry(3, 5)]) == 5
    assert terms(log) == [1, 1, 2, 3, 3]
    assert log.stabled == 3                      # entry 4 was replaced: not durable any more
    assert log.committed == 3                    # min(leader commit, last new)
    assert log.unstable_entries() == (Entry(3, 4), Entry(3, 5))


def test_maybe_append_keeps_a_longer_matching_log() -> None:
    """A duplicate or reordered old AppendEntries must not cut entries it does not contradict."""
    log = log_of(1, 1, 2, 2)
    assert log.maybe_append(1, 1, 0, [Entry(1, 2)]) == 2
    assert terms(log) == [1, 1, 2, 2]


def test_conflict_with_committed_entry_is_an_invariant_error() -> None:
    log = log_of(1, 1, 2, committed=3)
    with pytest.raises(RaftInvariantError):
        log.maybe_append(2, 1, 3, [Entry(5, 3)])


def test_commit_never_goes_back_or_past_the_end() -> None:
    log = log_of(1, 1, committed=2)
    assert not log.commit_to(1) and log.committed == 2
    with pytest.raises(RaftInvariantError):
        log.commit_to(3)


@pytest.mark.parametrize("index,term,expected", [
    (10, 6, (10, 6)), (10, 5, (7, 5)), (10, 4, (5, 4)), (10, 3, (3, 1)), (10, 0, (0, 0)),
    (5, 9, (5, 4)),
])
def test_find_conflict_by_term(index, term, expected) -> None:
    log = log_of(1, 1, 1, 4, 4, 5, 5, 6, 6, 6)
    assert log.find_conflict_by_term(index, term) == expected


def test_find_conflict_by_term_stops_at_compaction_with_unknown_term() -> None:
    log = log_of(5, 6, snap_index=3, snap_term=4)
    assert log.find_conflict_by_term(5, 4) == (3, 4)      # the snapshot's term is known
    assert log.find_conflict_by_term(5, 1) == (2, 0)      # below it: unknown, maybe a match


def test_slice_limits_count_and_bytes_but_returns_at_least_one() -> None:
    log = RaftLog(Snapshot(), [Entry(1, i, b"x" * 10) for i in range(1, 6)])
    assert len(log.slice(1, 3, 1 << 20)) == 3
    assert len(log.slice(1, 10, 25)) == 2
    assert len(log.slice(1, 10, 1)) == 1
    assert log.slice(6, 10, 100) == ()


def test_take_committed_hands_out_each_entry_once() -> None:
    log = log_of(1, 1, 1, 1, committed=3)
    assert [e.index for e in log.take_committed(2)] == [1, 2]
    assert [e.index for e in log.take_committed(10)] == [3]
    assert log.take_committed(10) == ()
    log.applied_to(3)
    assert log.applied == 3


def test_stable_to_ignores_entries_replaced_meanwhile() -> None:
    log = log_of(1)
    log.append([Entry(1, 2), Entry(1, 3)])
    handed_out = log.unstable_entries()
    log.maybe_append(1, 1, 0, [Entry(2, 2)])        # replaced before the write finished
    log.stable_to(handed_out[-1].index, handed_out[-1].term)
    assert log.stabled == 1 and log.unstable_entries() == (Entry(2, 2),)
    log.stable_to(2, 2)
    assert log.stabled == 2


def test_compact_and_restore() -> None:
    log = log_of(1, 1, 2, 2, committed=4, applied=3)
    snap = Snapshot(index=3, term=2, conf=ConfState(voters=frozenset({1})))
    log.compact(snap)
    assert (log.first_index(), log.term(3), log.term(2), terms(log)) == (4, 2, None, [2])
    with pytest.raises(RaftInvariantError):
        log.compact(Snapshot(index=4, term=2))    # not applied yet
    newer = Snapshot(index=9, term=3)
    log.restore(newer)
    assert (log.last_index(), log.committed, log.pending_snapshot) == (9, 9, newer)
    assert not log.has_unstable()
