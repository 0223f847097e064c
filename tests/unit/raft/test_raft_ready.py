"""The Ready/Advance contract, restarts from storage, status and compaction."""

from __future__ import annotations

import random

import pytest

from floydd.cluster.raft import (AppendEntries, AppendResponse, ConfState, Entry, HardState,
                                 MemoryStorage, RaftNode, Role, bootstrap_state)


def test_ready_reports_each_thing_once(cluster) -> None:
    c = cluster([1])
    node = c[1]
    assert not node.has_ready() or node.ready().hard_state is None or node.advance() is None
    node.campaign()
    rd = node.ready()
    assert rd.hard_state == HardState(term=2, vote=1, commit=1)
    assert rd.soft_state.role == Role.LEADER and rd.entries == (Entry(2, 2, b""),)
    assert rd.must_sync
    node.advance()
    rd = node.ready()                          # the self-ack committed the no-op
    assert rd.hard_state.commit == 2 and rd.committed_entries == (Entry(2, 2, b""),)
    assert rd.entries == () and rd.soft_state is None
    node.advance()
    assert not node.has_ready()


def test_ready_twice_without_advance_is_refused(cluster) -> None:
    c = cluster([1])
    c[1].campaign()
    c[1].ready()
    assert not c[1].has_ready()
    with pytest.raises(RuntimeError):
        c[1].ready()
    c[1].advance()
    with pytest.raises(RuntimeError):
        c[1].advance()
        c[1].advance()


def test_messages_may_be_stepped_between_ready_and_advance(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.settle()
    follower = c[2]
    follower.step(AppendEntries(frm=1, to=2, term=2, index=2, log_term=2,
                                entries=(Entry(2, 3, b"a"),), commit=2))
    rd = follower.ready()
    follower.step(AppendEntries(frm=1, to=2, term=2, index=3, log_term=2,
                                entries=(Entry(2, 4, b"b"),), commit=3))
    c.storage[2].save(rd.hard_state, rd.entries, rd.snapshot)
    follower.advance()
    rd2 = follower.ready()
    assert [e.data for e in rd2.entries] == [b"b"] and [e.data for e in rd2.committed_entries] == [b"a"]


def test_restart_resumes_from_what_was_saved(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    for i in range(3):
        c[1].propose(b"%d" % i)
    c.settle()
    before = c[2]
    after = c.restart(2)
    assert (after.term, after.vote, after.log.committed, after.log.last_index()) == \
        (before.term, before.vote, before.log.committed, before.log.last_index())
    assert after.role == Role.FOLLOWER and after.log.applied == 1       # re-applies from the snapshot
    rd = after.ready()
    assert [e.data for e in rd.committed_entries if e.data] == [b"0", b"1", b"2"]


def test_a_durable_state_machine_skips_what_it_applied() -> None:
    storage = MemoryStorage(bootstrap_state(ConfState(voters=frozenset({1}))))
    node = RaftNode(1, rng=random.Random(0), state=storage.load())
    node.campaign()
    for data in (b"a", b"b"):
        node.propose(data)
    while node.has_ready():
        rd = node.ready()
        storage.save(rd.hard_state, rd.entries, rd.snapshot)
        node.advance()
    again = RaftNode(1, rng=random.Random(0), state=storage.load(), applied=3)
    assert [e.data for e in again.ready().committed_entries] == [b"b"]


def test_status_shows_progress_on_the_leader_only(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.settle()
    st = c[1].status()
    assert st.role == Role.LEADER and st.lead == 1 and set(st.progress) == {1, 2, 3}
    assert st.progress[2].match == st.commit and st.progress[2].state == "REPLICATE"
    assert c[2].status().progress == {} and c[2].status().lead == 1


def test_compact_keeps_the_membership_of_that_index(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c[1].propose(b"a")
    c.settle()
    with pytest.raises(ValueError):
        c[1].compact(c[1].log.applied + 1, b"")
    snap = c[1].compact(c[1].log.applied, b"state")
    assert (snap.index, snap.term, snap.data) == (c[1].log.applied, 2, b"state")
    assert snap.conf == c[1].tracker.conf
    assert c[1].compact(1, b"older") is snap              # nothing to do


def test_unknown_mutation_is_refused() -> None:
    with pytest.raises(ValueError):
        RaftNode(1, rng=random.Random(0), mutations=frozenset({"typo"}))


def test_messages_for_someone_else_are_ignored(cluster) -> None:
    c = cluster([1, 2, 3])
    c[1].step(AppendEntries(frm=2, to=3, term=9, index=0, log_term=0))
    assert c[1].term == 1


# -- send_early: the leader replicates while it writes ----------------------------------------


def test_only_a_leader_whose_term_and_vote_are_durable_sends_early(cluster) -> None:
    solo = cluster([1])
    solo[1].campaign()
    rd = solo[1].ready()              # leader in the ready that also saves its new term
    assert rd.soft_state.role == Role.LEADER and not rd.send_early
    solo[1].advance()
    solo[1].propose(b"a")
    assert solo[1].ready().send_early

    c = cluster([1, 2, 3])
    c[1].campaign()
    rd = c.process(1)                 # pre-vote requests
    assert rd.messages and not rd.send_early
    c.deliver()
    assert not any(c.process(i).send_early for i in (2, 3))      # pre-vote answers
    c.settle()
    assert c[1].role == Role.LEADER
    c[1].propose(b"a")
    rd = c.process(1)
    assert rd.send_early and {type(m) for m in rd.messages} == {AppendEntries}
    c.deliver()
    rd = c.process(2)                 # the follower's acknowledgement waits for its save
    assert rd.entries and {type(m) for m in rd.messages} == {AppendResponse} and not rd.send_early


def _leader_mid_save(cluster, mutations=frozenset()):
    """Node 1 leads {1, 2, 3}; it proposes ``x`` and sends it early; its own save is not
    done (the ready not advanced). Returns the cluster and the entry."""
    c = cluster([1, 2, 3], mutations=mutations)
    c.elect(1)
    c.settle()
    entry = c[1].propose(b"x")
    rd = c[1].ready()
    assert rd.send_early and rd.entries == (entry,)
    c.queue.extend(rd.messages)
    return c, entry


@pytest.mark.parametrize("mutations", [frozenset(), frozenset({"count_self_unsynced"})])
def test_a_leader_counts_its_own_copy_only_once_durable(cluster, mutations) -> None:
    c, entry = _leader_mid_save(cluster, mutations)
    c.queue = [m for m in c.queue if m.to == 2]       # node 3 never gets it
    c.deliver()
    c.process(2)                                      # node 2 fsyncs x and says so
    c.deliver()                                       # the leader hears it mid-save
    committed = c[1].log.committed >= entry.index
    c.restart(1)                                      # ... and crashes before its fsync
    c.queue.clear()
    c.elect(3)                                        # with the vote of node 1: neither has x
    c.settle()
    lost = c[2].log.term(entry.index) != entry.term
    assert lost                                       # x was on one node in three
    # Counting its unsynced copy, the leader called x committed (and a driver that
    # applied it could have answered the proposal): that is what the mutation breaks.
    assert committed == bool(mutations)


def test_entries_followers_fsynced_while_the_leader_saves_survive_its_crash(cluster) -> None:
    c, entry = _leader_mid_save(cluster)
    c.deliver()
    c.process(2)
    c.process(3)
    c.deliver()                                       # both acknowledgements, mid-save
    assert c[1].log.committed == entry.index          # a quorum of followers holds x
    c.restart(1)                                      # the leader loses its own copy
    c.queue.clear()
    c.elect(2)                                        # with the vote of node 1
    c.settle()
    for i in (1, 2, 3):
        assert c[i].log.committed >= entry.index and c[i].log.term(entry.index) == entry.term
        assert b"x" in c.data(i)
