"""Replication: AppendEntries both ways, progress, commit rules, heartbeats, snapshots."""

from __future__ import annotations

import random

import pytest

from floydd.cluster.raft import (AppendEntries, AppendResponse, ConfState, Entry, HardState,
                                 Heartbeat, HeartbeatResponse, InstallSnapshot, ProposalDropped,
                                 RaftConfig, RaftInvariantError, RaftNode, Role, Snapshot,
                                 VoteResponse, bootstrap_state)
from floydd.cluster.raft.storage import DurableState
from floydd.cluster.raft.progress import ProgressState


def test_proposal_is_committed_and_applied_everywhere(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    entry = c[1].propose(b"a")
    c.settle()
    assert [c.data(i) for i in (1, 2, 3)] == [[b"a"]] * 3
    assert all(c[i].log.committed == entry.index for i in (1, 2, 3))


def test_follower_refuses_proposals_and_names_the_leader(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    with pytest.raises(ProposalDropped) as err:
        c[2].propose(b"x")
    assert err.value.leader == 1


def test_nothing_is_acknowledged_before_it_is_persisted(cluster) -> None:
    """Acks leave in the same ready that persists the entries, so a driver that saves
    before sending never acknowledges what is not on disk; the leader counts itself
    only after its own save."""
    c = cluster([1])
    c.elect(1)
    entry = c[1].propose(b"a")
    rd = c[1].ready()
    assert rd.entries[-1] == entry and c[1].log.committed < entry.index
    c[1].advance()
    assert c[1].log.committed == entry.index           # counted itself once durable


def test_follower_ack_goes_out_with_the_entries_to_persist(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c[1].propose(b"a")
    c.process(1)
    c.deliver(lambda m: m.to == 2)
    rd = c[2].ready()
    acks = [m for m in rd.messages if isinstance(m, AppendResponse)]
    assert rd.entries and acks and acks[0].index == rd.entries[-1].index


def test_commit_needs_a_quorum_of_voters(cluster) -> None:
    c = cluster([1, 2, 3, 4, 5])
    c.elect(1)
    c.cut = {3, 4}
    e = c[1].propose(b"a")
    c.settle()
    assert c[1].log.committed == e.index           # 1, 2, 5
    c.cut = {2, 3, 4}
    e2 = c[1].propose(b"b")
    c.settle()
    assert c[1].log.committed == e.index < e2.index


def _leader_with_an_old_entry(mutations=frozenset()):
    """Node 1 of {1,2,3} holds 2/2 (from term 2, never committed) and wins term 3."""
    conf = ConfState(voters=frozenset({1, 2, 3}))
    state = DurableState(hard_state=HardState(term=2, commit=1),
                         snapshot=bootstrap_state(conf).snapshot, entries=(Entry(2, 2, b"old"),))
    node = RaftNode(1, rng=random.Random(1), config=RaftConfig(pre_vote=False), state=state,
                    mutations=mutations)
    node.campaign()
    node.step(VoteResponse(frm=2, to=1, term=3))
    assert node.role == Role.LEADER and node.log.last_index() == 3     # its no-op 3/3
    node.ready()
    node.advance()                                                     # self-ack of 3
    return node


def test_leader_commits_only_entries_of_its_own_term_by_counting() -> None:
    node = _leader_with_an_old_entry()
    node.step(AppendResponse(frm=2, to=1, term=3, index=2))   # 2/2 now on a majority
    assert node.log.committed == 1                            # ... but it is from term 2
    node.step(AppendResponse(frm=2, to=1, term=3, index=3))
    assert node.log.committed == 3                            # 2/2 commits with 3/3


def test_the_commit_rule_mutation_breaks_exactly_that() -> None:
    node = _leader_with_an_old_entry({"commit_previous_term"})
    node.step(AppendResponse(frm=2, to=1, term=3, index=2))
    assert node.log.committed == 2


def test_fast_backoff_uses_the_hint(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    for i in range(5):
        c[1].propose(b"%d" % i)
    c.settle()
    pr = c[1].tracker.progress[2]
    last = c[1].log.last_index()
    pr.become_probe()
    pr.match, pr.next = 0, last + 1          # as after a restart: nothing known about 2
    c[1].step(AppendResponse(frm=2, to=1, term=2, index=last, reject=True,
                             reject_hint=1, log_term=1))
    assert pr.next == 2 and pr.state == ProgressState.PROBE
    msgs = [m for m in c[1].msgs if isinstance(m, AppendEntries) and m.to == 2]
    assert msgs[-1].index == 1 and msgs[-1].entries[-1].index == last


def test_stale_rejection_is_ignored(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    pr = c[1].tracker.progress[2]
    before = (pr.match, pr.next, pr.state)
    c[1].step(AppendResponse(frm=2, to=1, term=2, index=0, reject=True, reject_hint=0))
    assert (pr.match, pr.next, pr.state) == before


def test_probe_then_replicate_with_bounded_inflight(cluster) -> None:
    c = cluster([1, 2], config=RaftConfig(max_entries_per_msg=1, max_inflight_msgs=2))
    c.elect(1)
    pr = c[1].tracker.progress[2]
    assert pr.state == ProgressState.REPLICATE
    for i in range(5):
        c[1].propose(b"%d" % i)
    rd = c.process(1)
    apps = [m for m in rd.messages if isinstance(m, AppendEntries)]
    assert len(apps) == 2 and all(len(m.entries) == 1 for m in apps)   # paused at 2 in flight
    c.settle()
    assert c.data(2) == [b"0", b"1", b"2", b"3", b"4"]


def test_heartbeat_carries_a_commit_capped_at_the_peers_match(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.cut = {3}
    c[1].propose(b"a")
    c.settle()
    c.cut = set()
    c.tick(1)
    beats = {m.to: m for m in c[1].msgs if isinstance(m, Heartbeat)}
    assert beats[2].commit == c[1].log.committed
    assert beats[3].commit == c[1].tracker.progress[3].match < c[1].log.committed


def test_heartbeat_response_from_a_lagging_peer_triggers_an_append(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.cut = {3}
    c[1].propose(b"a")
    c.settle()
    c.cut = set()
    c[1].tracker.progress[3].probe_sent = True
    c[1].step(HeartbeatResponse(frm=3, to=1, term=2))
    assert any(isinstance(m, AppendEntries) and m.to == 3 for m in c[1].msgs)
    c.settle()
    assert c.data(3) == [b"a"]


def test_follower_heartbeat_moves_commit_and_answers(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c[2].step(Heartbeat(frm=1, to=2, term=2, commit=c[2].log.last_index(), context=b"r1"))
    assert c[2].msgs[-1] == HeartbeatResponse(frm=2, to=1, term=2, context=b"r1")
    with pytest.raises(RaftInvariantError):
        c[2].step(Heartbeat(frm=1, to=2, term=2, commit=c[2].log.last_index() + 5))


def test_append_below_commit_is_answered_with_the_commit(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c[1].propose(b"a")
    c.settle()
    c[2].step(AppendEntries(frm=1, to=2, term=2, index=0, log_term=0))
    assert c[2].msgs[-1] == AppendResponse(frm=2, to=1, term=2, index=c[2].log.committed)


def test_lagging_follower_gets_a_snapshot_after_compaction(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.cut = {3}
    for i in range(5):
        c[1].propose(b"%d" % i)
    c.settle()
    snap = c[1].compact(c[1].log.applied, b"state")
    c.storage[1].compact(snap)
    c.cut = set()
    c.tick(1)                            # a heartbeat; 3's answer shows it lags
    c.settle()
    sent = [m for m in c.delivered if isinstance(m, InstallSnapshot)]
    assert [(m.to, m.snapshot) for m in sent] == [(3, snap)]
    assert c[3].log.snapshot == snap and c.storage[3].snapshot == snap
    assert c[3].log.committed == c[1].log.committed
    assert c[1].tracker.progress[3].state == ProgressState.REPLICATE


def test_follower_ignores_a_snapshot_it_has_already_committed(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c[1].propose(b"a")
    c.settle()
    old = Snapshot(index=2, term=2, conf=c[2].tracker.conf)
    c[2].step(InstallSnapshot(frm=1, to=2, term=2, snapshot=old))
    assert c[2].log.snapshot.index == 1 and c[2].log.pending_snapshot is None
    assert c[2].msgs[-1] == AppendResponse(frm=2, to=1, term=2, index=c[2].log.committed)


def test_snapshot_report_moves_the_peer_back_to_probing(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    pr = c[1].tracker.progress[3]
    pr.become_snapshot(7)
    c[1].report_snapshot(3, ok=False)
    assert pr.state == ProgressState.PROBE and pr.next == pr.match + 1 and pr.probe_sent
    pr.become_snapshot(7)
    c[1].report_snapshot(3, ok=True)
    assert pr.state == ProgressState.PROBE and pr.next == 8


def test_unreachable_peer_is_probed_instead_of_streamed(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    pr = c[1].tracker.progress[2]
    assert pr.state == ProgressState.REPLICATE
    c[1].report_unreachable(2)
    assert pr.state == ProgressState.PROBE
