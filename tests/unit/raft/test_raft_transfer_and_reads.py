"""Leadership transfer (TimeoutNow) and linearizable reads (ReadIndex)."""

from __future__ import annotations

import random

import pytest

from floydd.cluster.raft import (AppendResponse, ConfState, Heartbeat, HeartbeatResponse,
                                 ProposalDropped, RaftConfig, RaftNode, ReadIndexRequest, ReadState,
                                 RequestVote, Role, TimeoutNow, VoteResponse, bootstrap_state)


def test_transfer_to_an_up_to_date_voter(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.settle()
    c[1].transfer_leadership(2)
    assert any(isinstance(m, TimeoutNow) and m.to == 2 for m in c[1].msgs)
    c.process(1)
    c.deliver()
    c.process(2)
    votes = [m for m in c.queue if isinstance(m, RequestVote)]
    assert votes and all(m.transfer and not m.pre for m in votes)
    c.settle()
    assert c[2].role == Role.LEADER and c[1].role == Role.FOLLOWER and c[2].term == 3


def test_transfer_to_a_lagging_voter_catches_it_up_first(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.cut = {3}
    c[1].propose(b"a")
    c.settle()
    c.cut = set()
    c[1].transfer_leadership(3)
    assert not any(isinstance(m, TimeoutNow) for m in c[1].msgs)
    with pytest.raises(ProposalDropped, match="transfer"):
        c[1].propose(b"b")
    c.settle()
    assert c[3].role == Role.LEADER and c.data(3) == [b"a"]


def test_transfer_is_abandoned_after_an_election_timeout(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.cut = {3}
    c[1].transfer_leadership(3)
    for _ in range(c.config.election_ticks):
        c.tick(1)
        c.settle()
    assert c[1].lead_transferee is None and c[1].role == Role.LEADER
    c[1].propose(b"ok again")


def test_transfer_needs_a_voter_and_a_leader(cluster) -> None:
    c = cluster([1, 2], learners=[3])
    c.elect(1)
    with pytest.raises(ProposalDropped, match="not a voter"):
        c[1].transfer_leadership(3)
    with pytest.raises(ProposalDropped, match="not the leader"):
        c[2].transfer_leadership(1)


def test_read_index_on_the_leader_waits_for_a_quorum_round(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.settle()
    c[1].read_index(b"r1")
    beats = [m for m in c[1].msgs if isinstance(m, Heartbeat)]
    assert {m.to for m in beats} == {2, 3} and all(m.context == b"r1" for m in beats)
    c.process(1)
    assert c.read_states[1] == []
    c.deliver(lambda m: m.to == 2)
    c.process(2)
    c.deliver(lambda m: m.to == 1)                 # 2's answer + 1 itself = quorum
    c.process(1)
    assert c.read_states[1] == [ReadState(c[1].log.committed, b"r1")]


def test_read_index_is_not_confirmed_by_a_minority(cluster) -> None:
    c = cluster([1, 2, 3, 4, 5])
    c.elect(1)
    c.settle()
    c.cut = {3, 4, 5}
    c[1].read_index(b"r")
    c.settle()
    assert c.read_states[1] == []


def test_a_new_leader_answers_reads_only_after_committing_in_its_term(cluster) -> None:
    c = cluster([1, 2, 3])
    c[1].campaign()
    c.run_until(lambda: c[1].role == Role.LEADER)
    assert c[1].log.term(c[1].log.committed) != c[1].term
    c[1].read_index(b"early")                     # its commit index may still lag
    assert not any(isinstance(m, Heartbeat) and m.context for m in c[1].msgs)
    c.settle()
    assert [rs.context for rs in c.read_states[1]] == [b"early"]


def test_pending_read_is_released_by_the_first_commit() -> None:
    node = RaftNode(1, rng=random.Random(1), config=RaftConfig(pre_vote=False),
                    state=bootstrap_state(ConfState(voters=frozenset({1, 2, 3}))))
    node.campaign()
    node.step(VoteResponse(frm=2, to=1, term=2))
    node.ready()
    node.advance()
    node.read_index(b"r")
    assert node.read_only.queue == [] and node._pending_reads == [(b"r", 1)]
    node.step(AppendResponse(frm=2, to=1, term=2, index=node.log.last_index()))
    assert node.read_only.queue == [b"r"]             # now a heartbeat round is asked for


def test_follower_read_is_forwarded_and_answered(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.settle()
    c[3].read_index(b"f1")
    assert c[3].msgs == [ReadIndexRequest(frm=3, to=1, term=2, context=b"f1")]
    c.settle()
    assert c.read_states[3] == [ReadState(c[1].log.committed, b"f1")]


def test_read_without_a_known_leader_is_refused(cluster) -> None:
    c = cluster([1, 2, 3])
    with pytest.raises(ProposalDropped, match="no leader"):
        c[2].read_index(b"x")


def test_single_voter_reads_at_once(cluster) -> None:
    c = cluster([1])
    c.elect(1)
    c.settle()
    c[1].read_index(b"x")
    c.process(1)
    assert c.read_states[1] == [ReadState(c[1].log.committed, b"x")]


def test_acks_for_a_later_read_confirm_earlier_ones(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.settle()
    c[1].read_index(b"a")
    c[1].read_index(b"b")
    c[1].step(HeartbeatResponse(frm=2, to=1, term=2, context=b"b"))
    assert [rs.context for rs in c[1].read_states] == [b"a", b"b"]
