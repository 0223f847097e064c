"""Elections, the candidate's half of :class:`~floydd.cluster.raft.core.RaftNode`.

A follower whose election timer runs out first asks for pre-votes at term+1 without
changing any term (PreVote, thesis §9.6): only if a quorum would vote for it does it
bump its term and ask for real votes. A vote is granted once per term, only to a
candidate whose log is at least as up to date (§5.4.1). With CheckQuorum, a node that
heard from its leader within the last election timeout ignores (pre-)vote requests
altogether (a leader lease), unless the request comes from a leadership transfer.

:class:`Elections` is a part of the node (its ``elections``): the node's term, vote,
leader and role stay on the node (:class:`Voter` says which it reads and writes); the part
holds the log, tracker and config it is given and the election timer's randomness.
"""

from __future__ import annotations

from typing import Protocol

from .config import RaftConfig
from .log import RaftLog
from .messages import EntryKind, Message, NodeId, RequestVote, VoteResponse
from .ready import Role
from .tracker import Tracker, VoteResult

__all__ = ["Elections", "Voter", "PRE_ELECTION", "ELECTION", "TRANSFER"]

PRE_ELECTION, ELECTION, TRANSFER = 0, 1, 2


class Voter(Protocol):
    """What elections use of the node."""

    id: NodeId
    term: int
    vote: NodeId | None
    lead: NodeId | None
    role: Role
    election_elapsed: int
    randomized_election_timeout: int
    _mut_vote_no_log: bool
    _mut_stale_votes: bool

    def promotable(self) -> bool: ...
    def _send(self, m: Message) -> None: ...
    def _reset(self, term: int) -> None: ...
    def _become_follower(self, term: int, lead: NodeId | None) -> None: ...
    def _become_leader(self) -> None: ...


class Elections:
    def __init__(self, node: Voter, *, log: RaftLog, tracker: Tracker, config: RaftConfig, rng) -> None:
        self._node = node
        self._log = log
        self._tracker = tracker
        self._config = config
        self._rng = rng

    def on_request_vote(self, m: RequestVote) -> None:
        node = self._node
        vote = node.vote
        can_vote = (vote == m.frm or (vote is None and node.lead is None)
                    or (m.pre and m.term > node.term))
        if can_vote and (node._mut_vote_no_log or self._log.is_up_to_date(m.index, m.log_term)):
            node._send(VoteResponse(frm=node.id, to=m.frm, term=m.term, pre=m.pre))
            if not m.pre:
                node.election_elapsed = 0
                node.vote = m.frm
        else:
            node._send(VoteResponse(frm=node.id, to=m.frm, term=node.term, reject=True, pre=m.pre))

    def on_vote_response(self, m: VoteResponse) -> None:
        node = self._node
        role = node.role
        if not ((role == Role.PRE_CANDIDATE and m.pre) or (role == Role.CANDIDATE and not m.pre)):
            return
        result = self._tracker.record_vote(m.frm, not m.reject)
        if result == VoteResult.WON:
            if m.pre:
                self.campaign(ELECTION)
            else:
                node._become_leader()
        elif result == VoteResult.LOST:
            node._become_follower(node.term, None)

    def in_lease(self) -> bool:
        node = self._node
        return (self._config.check_quorum and node.lead is not None
                and node.election_elapsed < self._config.election_ticks)

    def hup(self, kind: int) -> None:
        node = self._node
        if node.role == Role.LEADER or not node.promotable():
            return
        log = self._log
        for i in range(max(log.applied, log.snapshot.index) + 1, log.committed + 1):
            if log.entry(i).kind == EntryKind.CONF_CHANGE:
                return      # a membership change we have not applied may concern us
        self.campaign(kind)

    def campaign(self, kind: int) -> None:
        node, tracker = self._node, self._tracker
        if kind == PRE_ELECTION:
            node.role = Role.PRE_CANDIDATE
            node.lead = None
            tracker.reset_votes()
            term = node.term + 1
        else:
            votes = tracker.votes
            node._reset(node.term + 1)
            if node._mut_stale_votes:
                tracker.votes = votes
            node.role = Role.CANDIDATE
            node.vote = node.id
            term = node.term
        if tracker.record_vote(node.id, True) == VoteResult.WON:
            if kind == PRE_ELECTION:
                self.campaign(ELECTION)
            else:
                node._become_leader()
            return
        log = self._log
        index, log_term = log.last_index(), log.last_term()
        pre, transfer = kind == PRE_ELECTION, kind == TRANSFER
        for voter in tracker.voters:
            if voter != node.id:
                node._send(RequestVote(frm=node.id, to=voter, term=term, index=index,
                                       log_term=log_term, pre=pre, transfer=transfer))

    def reset_election_timeout(self) -> None:
        e = self._config.election_ticks
        self._node.randomized_election_timeout = self._rng.randrange(e, 2 * e)
