"""Elections, the candidate's half of :class:`~floydd.cluster.raft.core.RaftNode`.

A follower whose election timer runs out first asks for pre-votes at term+1 without
changing any term (PreVote, thesis §9.6): only if a quorum would vote for it does it
bump its term and ask for real votes. A vote is granted once per term, only to a
candidate whose log is at least as up to date (§5.4.1). With CheckQuorum, a node that
heard from its leader within the last election timeout ignores (pre-)vote requests
altogether (a leader lease), unless the request comes from a leadership transfer.
"""

from __future__ import annotations

from .messages import EntryKind, NodeId, RequestVote, VoteResponse
from .readonly import ReadOnly
from .ready import Role
from .tracker import VoteResult

__all__ = ["ElectionMixin", "PRE_ELECTION", "ELECTION", "TRANSFER"]

PRE_ELECTION, ELECTION, TRANSFER = 0, 1, 2


class ElectionMixin:
    """Methods of RaftNode that run elections (state lives on the node)."""

    def _on_request_vote(self, m: RequestVote) -> None:
        vote = self.vote
        can_vote = (vote == m.frm or (vote is None and self.lead is None)
                    or (m.pre and m.term > self.term))
        if can_vote and (self._mut_vote_no_log or self.log.is_up_to_date(m.index, m.log_term)):
            self._send(VoteResponse(frm=self.id, to=m.frm, term=m.term, pre=m.pre))
            if not m.pre:
                self.election_elapsed = 0
                self.vote = m.frm
        else:
            self._send(VoteResponse(frm=self.id, to=m.frm, term=self.term, reject=True, pre=m.pre))

    def _on_vote_response(self, m: VoteResponse) -> None:
        role = self.role
        if not ((role == Role.PRE_CANDIDATE and m.pre) or (role == Role.CANDIDATE and not m.pre)):
            return
        result = self.tracker.record_vote(m.frm, not m.reject)
        if result == VoteResult.WON:
            if m.pre:
                self._campaign(ELECTION)
            else:
                self._become_leader()
        elif result == VoteResult.LOST:
            self._become_follower(self.term, None)

    def _in_lease(self) -> bool:
        return (self.config.check_quorum and self.lead is not None
                and self.election_elapsed < self.config.election_ticks)

    def _hup(self, kind: int) -> None:
        if self.role == Role.LEADER or not self.promotable():
            return
        log = self.log
        for i in range(max(log.applied, log.snapshot.index) + 1, log.committed + 1):
            if log.entry(i).kind == EntryKind.CONF_CHANGE:
                return      # a membership change we have not applied may concern us
        self._campaign(kind)

    def _campaign(self, kind: int) -> None:
        if kind == PRE_ELECTION:
            self.role = Role.PRE_CANDIDATE
            self.lead = None
            self.tracker.reset_votes()
            term = self.term + 1
        else:
            votes = self.tracker.votes
            self._reset(self.term + 1)
            if self._mut_stale_votes:
                self.tracker.votes = votes
            self.role = Role.CANDIDATE
            self.vote = self.id
            term = self.term
        if self.tracker.record_vote(self.id, True) == VoteResult.WON:
            if kind == PRE_ELECTION:
                self._campaign(ELECTION)
            else:
                self._become_leader()
            return
        log = self.log
        index, log_term = log.last_index(), log.last_term()
        pre, transfer = kind == PRE_ELECTION, kind == TRANSFER
        for voter in self.tracker.voters:
            if voter != self.id:
                self._send(RequestVote(frm=self.id, to=voter, term=term, index=index,
                                       log_term=log_term, pre=pre, transfer=transfer))

    def _become_follower(self, term: int, lead: NodeId | None) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.lead = lead

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = None
        self.lead = None
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self._reset_election_timeout()
        self.lead_transferee = None
        self.tracker.reset_votes()
        self.pending_conf_index = 0
        if self.read_only.queue:
            self.read_only = ReadOnly()
        self._pending_reads = []
        self._bcast_pending = False

    def _reset_election_timeout(self) -> None:
        e = self.config.election_ticks
        self.randomized_election_timeout = self._rng.randrange(e, 2 * e)
