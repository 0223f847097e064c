"""Membership: learners, promotion once caught up, one change at a time, removals."""

from __future__ import annotations

import random

import pytest

from floydd.cluster.raft import (ConfChange, ConfChangeOp, ConfChangeRejected, ConfState,
                                 ProposalDropped, RaftNode, Role)
from floydd.cluster.raft.confchange import apply_conf_change
from floydd.cluster.raft.storage import DurableState

ADD, PROMOTE, REMOVE = ConfChangeOp.ADD_LEARNER, ConfChangeOp.PROMOTE, ConfChangeOp.REMOVE


def add_learner(c, node_id):
    c.add(node_id, DurableState())              # a new, empty node
    c[1].propose_conf_change(ConfChange(ADD, node_id))
    c.settle()


def test_a_new_node_joins_as_a_learner_and_catches_up(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c[1].propose(b"a")
    c.settle()
    add_learner(c, 4)
    assert c[4].tracker.conf == ConfState(voters=frozenset({1, 2, 3}), learners=frozenset({4}))
    assert c.data(4) == [b"a"] and c[4].log.committed == c[1].log.committed
    assert c[1].tracker.progress[4].is_learner


def test_a_learner_is_not_counted_and_does_not_vote(cluster) -> None:
    c = cluster([1, 2], learners=[3])
    c.elect(1)
    c.cut = {2}
    e = c[1].propose(b"a")
    c.settle()
    assert c[3].log.last_index() >= e.index and c[1].log.committed < e.index
    assert 3 not in c[1].tracker.voters


def test_promotion_waits_until_the_learner_caught_up(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.cut = {4}
    add_learner(c, 4)
    for i in range(3):
        c[1].propose(b"%d" % i)
    c.settle()
    with pytest.raises(ConfChangeRejected, match="not caught up"):
        c[1].propose_conf_change(ConfChange(PROMOTE, 4))
    c.cut = set()
    c.tick(1)
    c.settle()
    c[1].propose_conf_change(ConfChange(PROMOTE, 4))
    c.settle()
    assert all(c[i].tracker.conf.voters == {1, 2, 3, 4} for i in (1, 2, 3, 4))
    assert c[1].tracker.quorum == 3


def test_one_change_at_a_time(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.add(4, DurableState())
    c[1].propose_conf_change(ConfChange(ADD, 4))
    with pytest.raises(ConfChangeRejected, match="still being applied"):
        c[1].propose_conf_change(ConfChange(REMOVE, 3))
    c.settle()
    c[1].propose_conf_change(ConfChange(REMOVE, 3))          # fine once applied


def test_a_new_leader_waits_for_its_first_entry_before_a_change(cluster) -> None:
    c = cluster([1, 2, 3])
    c[1].campaign()
    c.run_until(lambda: c[1].role == Role.LEADER)
    assert c[1].log.applied < c[1].log.last_index()
    with pytest.raises(ConfChangeRejected):
        c[1].propose_conf_change(ConfChange(REMOVE, 3))
    c.settle()
    c[1].propose_conf_change(ConfChange(REMOVE, 3))


@pytest.mark.parametrize("cc,msg", [
    (ConfChange(ADD, 2), "already a member"), (ConfChange(PROMOTE, 2), "not a learner"),
    (ConfChange(PROMOTE, 9), "not a learner"), (ConfChange(REMOVE, 9), "not a member"),
])
def test_invalid_changes_are_rejected(cluster, cc, msg) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.settle()
    with pytest.raises(ConfChangeRejected, match=msg):
        c[1].propose_conf_change(cc)


def test_only_the_leader_takes_changes(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    with pytest.raises(ProposalDropped):
        c[2].propose_conf_change(ConfChange(REMOVE, 3))


def test_removing_a_lagging_voter_lets_commits_through(cluster) -> None:
    c = cluster([1, 2, 3, 4])
    c.elect(1)
    c.settle()
    c.cut = {3, 4}
    e = c[1].propose(b"stuck")                 # 1, 2 of 4: no quorum
    c.settle()
    assert c[1].log.committed < e.index
    c.cut = {4}
    c[1].propose_conf_change(ConfChange(REMOVE, 4))
    c.settle()
    assert c[1].tracker.voters == (1, 2, 3) and c[1].log.committed >= e.index


def test_a_removed_leader_steps_down_and_the_rest_elect(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.settle()
    c[1].propose_conf_change(ConfChange(REMOVE, 1))
    c.settle()
    assert c[1].role == Role.FOLLOWER and not c[1].promotable()
    assert c[2].tracker.voters == (2, 3)
    for _ in range(40):
        c.tick(2)
        c.tick(3)
        c.settle()
    assert {c[2].role, c[3].role} == {Role.LEADER, Role.FOLLOWER}


def test_last_voter_cannot_be_removed(cluster) -> None:
    c = cluster([1])
    c.elect(1)
    c.settle()
    with pytest.raises(ConfChangeRejected, match="last voter"):
        c[1].propose_conf_change(ConfChange(REMOVE, 1))


def test_membership_survives_restart_and_compaction(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    add_learner(c, 4)
    snap = c[1].compact(c[1].log.applied, b"s")
    c.storage[1].compact(snap)
    assert snap.conf.learners == {4}
    node = c.restart(1)
    assert node.tracker.conf.learners == {4}


def test_apply_conf_change_is_lenient_and_deterministic() -> None:
    conf = ConfState(voters=frozenset({1, 2}), learners=frozenset({3}))
    assert apply_conf_change(conf, ConfChange(ADD, 1)) == conf
    assert apply_conf_change(conf, ConfChange(PROMOTE, 9)) == conf
    assert apply_conf_change(conf, ConfChange(PROMOTE, 3)).voters == {1, 2, 3}
    assert apply_conf_change(ConfState(voters=frozenset({1})), ConfChange(REMOVE, 1)).voters == {1}
    assert ConfChange.decode(ConfChange(REMOVE, "box-7").encode()) == ConfChange(REMOVE, "box-7")


def test_a_durable_state_machine_restart_keeps_applied_membership(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    add_learner(c, 4)
    applied = c[2].log.applied
    again = RaftNode(2, rng=random.Random(2), state=c.storage[2].load(), applied=applied)
    assert again.tracker.conf.learners == {4}
    assert again.ready().committed_entries == ()
