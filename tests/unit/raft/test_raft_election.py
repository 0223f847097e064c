"""Elections: timeouts, PreVote, votes, leases, CheckQuorum, terms in messages."""

from __future__ import annotations

import random

import pytest

from floydd.cluster.raft import (AppendEntries, AppendResponse, ConfState, Entry, Heartbeat,
                                 RaftConfig, RaftNode, RequestVote, Role, VoteResponse,
                                 bootstrap_state)
from floydd.cluster.raft.storage import DurableState

CLASSIC = RaftConfig(pre_vote=False, check_quorum=False)


def test_single_voter_elects_itself_at_once(cluster) -> None:
    c = cluster([1])
    c[1].campaign()
    assert c[1].role == Role.LEADER and c[1].term == 2


def test_follower_campaigns_after_a_randomized_timeout_in_e_2e(cluster) -> None:
    cfg = RaftConfig()
    seen = set()
    for seed in range(40):
        node = RaftNode(1, rng=random.Random(seed), config=cfg,
                        state=bootstrap_state(ConfState(voters=frozenset({1, 2, 3}))))
        ticks = 0
        while node.role == Role.FOLLOWER:
            node.tick()
            ticks += 1
        seen.add(ticks)
        assert node.role == Role.PRE_CANDIDATE
    assert min(seen) >= cfg.election_ticks and max(seen) < 2 * cfg.election_ticks
    assert len(seen) > 3          # actually randomized


def test_timeout_is_drawn_from_the_injected_rng_only() -> None:
    def timeouts(seed):
        conf = ConfState(voters=frozenset({1, 2, 3}))
        node = RaftNode(1, rng=random.Random(seed), state=bootstrap_state(conf))
        return node.randomized_election_timeout
    assert timeouts(7) == timeouts(7)


def test_prevote_does_not_bump_anyones_term(cluster) -> None:
    c = cluster([1, 2, 3])
    c[1].campaign()
    rd = c.process(1)
    assert c[1].role == Role.PRE_CANDIDATE and c[1].term == 1 and rd.hard_state is None
    votes = [m for m in rd.messages if isinstance(m, RequestVote)]
    assert {m.to for m in votes} == {2, 3} and all(m.pre and m.term == 2 for m in votes)
    c.deliver()
    assert c[2].term == 1 and c[2].vote is None          # granting a pre-vote changes nothing
    c.settle()
    assert c[1].role == Role.LEADER and c[1].term == 2


def test_a_partitioned_node_does_not_disrupt_the_leader_when_it_returns(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.cut = {3}
    for _ in range(100):                                  # 3 keeps failing its pre-vote
        c.tick(3)
        c.process(3)
    assert c[3].term == 2
    c.cut = set()
    c.queue.clear()
    c.tick(3, 30)
    c.settle()
    assert c[1].role == Role.LEADER and c[1].term == 2


def test_without_prevote_the_returning_node_forces_a_new_term(cluster) -> None:
    c = cluster([1, 2, 3], config=CLASSIC)
    c.elect(1)
    c.cut = {3}
    c.tick(3, 40)
    c.process(3)
    assert c[3].term > 3
    c.cut = set()
    c.queue.clear()
    c.tick(1)                                            # a heartbeat reaches 3 ...
    c.settle()
    assert c[1].role != Role.LEADER or c[1].term > 2     # ... and 3's term deposes 1


def test_one_vote_per_term() -> None:
    node = RaftNode(1, rng=random.Random(1), config=CLASSIC,
                    state=bootstrap_state(ConfState(voters=frozenset({1, 2, 3}))))
    node.step(RequestVote(frm=2, to=1, term=5, index=1, log_term=1))
    node.step(RequestVote(frm=3, to=1, term=5, index=1, log_term=1))
    node.step(RequestVote(frm=2, to=1, term=5, index=1, log_term=1))     # duplicate: same answer
    answers = [(m.to, m.reject) for m in node.ready().messages]
    assert answers == [(2, False), (3, True), (2, False)]
    assert node.vote == 2 and node.term == 5


def test_vote_refused_to_a_candidate_with_an_older_log() -> None:
    state = DurableState(snapshot=bootstrap_state(ConfState(voters=frozenset({1, 2, 3}))).snapshot)
    node = RaftNode(1, rng=random.Random(1), config=CLASSIC, state=state)
    node.step(AppendEntries(frm=2, to=1, term=3, index=1, log_term=1, entries=(Entry(3, 2),),
                            commit=1))
    node.ready(); node.advance()
    node.step(RequestVote(frm=3, to=1, term=4, index=5, log_term=2))    # longer, older term
    (answer,) = [m for m in node.ready().messages if isinstance(m, VoteResponse)]
    assert answer.reject and answer.term == 4 and node.vote is None


def test_lease_ignores_votes_while_the_leader_is_heard(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c[2].step(RequestVote(frm=3, to=2, term=5, index=9, log_term=9))
    c[2].step(RequestVote(frm=3, to=2, term=5, index=9, log_term=9, pre=True))
    assert c[2].term == 2 and not c[2].msgs                  # ignored, not even answered
    c[2].step(RequestVote(frm=3, to=2, term=5, index=9, log_term=9, transfer=True))
    assert c[2].term == 5 and c[2].vote == 3                 # a leadership transfer may


def test_stale_leader_learns_the_new_term_from_its_heartbeat_reply(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c[2].step(Heartbeat(frm=9, to=2, term=1, commit=0))
    (reply,) = c[2].msgs
    assert isinstance(reply, AppendResponse) and reply.term == 2 and reply.to == 9
    c[1].step(AppendResponse(frm=2, to=1, term=7, index=0))
    assert c[1].role == Role.FOLLOWER and c[1].term == 7


def test_messages_from_an_older_term_are_dropped(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c[1].step(VoteResponse(frm=2, to=1, term=1))
    c[1].step(AppendResponse(frm=2, to=1, term=1, index=99))
    assert c[1].tracker.progress[2].match < 99 and not c[1].msgs


def test_rejected_prevote_from_an_older_term_is_answered() -> None:
    node = RaftNode(1, rng=random.Random(1),
                    state=bootstrap_state(ConfState(voters=frozenset({1, 2, 3}))))
    node.step(AppendEntries(frm=2, to=1, term=4, index=1, log_term=1, commit=1))
    node.msgs.clear()
    node.step(RequestVote(frm=3, to=1, term=3, index=1, log_term=1, pre=True))
    (reply,) = node.msgs
    assert reply.reject and reply.pre and reply.term == 4


def test_candidate_steps_down_for_a_leader_of_its_term(cluster) -> None:
    c = cluster([1, 2, 3], config=CLASSIC)
    c[1].campaign()
    assert c[1].role == Role.CANDIDATE
    c[1].step(AppendEntries(frm=2, to=1, term=c[1].term, index=1, log_term=1, commit=1))
    assert c[1].role == Role.FOLLOWER and c[1].lead == 2


def test_candidate_that_loses_returns_to_follower(cluster) -> None:
    c = cluster([1, 2, 3], config=CLASSIC)
    c[1].campaign()
    term = c[1].term
    c[1].step(VoteResponse(frm=2, to=1, term=term, reject=True))
    c[1].step(VoteResponse(frm=3, to=1, term=term, reject=True))
    assert c[1].role == Role.FOLLOWER and c[1].term == term


def test_isolated_leader_steps_down_within_two_election_timeouts(cluster) -> None:
    cfg = RaftConfig()
    for offset in range(cfg.election_ticks):            # whatever the phase of its check
        c2 = cluster([1, 2, 3])
        c2.elect(1)
        for _ in range(offset):
            c2.tick(1); c2.process_all(); c2.deliver(); c2.process_all(); c2.deliver()
        c2.cut = {2, 3}
        ticks = 0
        while c2[1].role == Role.LEADER:
            c2.tick(1)
            c2.process(1)
            ticks += 1
            assert ticks <= 2 * cfg.election_ticks
        assert c2[1].role == Role.FOLLOWER


def test_leader_with_quorum_stays(cluster) -> None:
    c = cluster([1, 2, 3])
    c.elect(1)
    c.cut = {3}
    for _ in range(100):
        c.tick(1)
        c.settle()
    assert c[1].role == Role.LEADER and c[1].term == 2


def test_learners_and_strangers_never_campaign(cluster) -> None:
    c = cluster([1, 2], learners=[3])
    stranger = c.add(4, DurableState())
    for _ in range(100):
        c[3].tick()
        stranger.tick()
    assert c[3].role == Role.FOLLOWER and stranger.role == Role.FOLLOWER
    assert not c[3].msgs and not stranger.msgs


def test_restart_keeps_term_and_vote(cluster) -> None:
    c = cluster([1, 2, 3], config=CLASSIC)
    c[2].step(RequestVote(frm=3, to=2, term=4, index=1, log_term=1))
    c.process(2)
    node = c.restart(2)
    assert (node.term, node.vote) == (4, 3)
    node.step(RequestVote(frm=1, to=2, term=4, index=1, log_term=1))
    assert node.msgs[-1].reject                             # still voted for 3 in term 4


@pytest.mark.parametrize("pre_vote", [True, False])
def test_elections_converge_from_simultaneous_candidates(cluster, pre_vote) -> None:
    c = cluster([1, 2, 3, 4, 5], config=RaftConfig(pre_vote=pre_vote))
    for i in (1, 2, 3):
        c[i].campaign()
    for _ in range(200):
        c.settle()
        if any(n.role == Role.LEADER for n in c.nodes.values()):
            break
        for i in c.nodes:
            c.tick(i)
    leaders = [n for n in c.nodes.values() if n.role == Role.LEADER]
    assert len(leaders) == 1
