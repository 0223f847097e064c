"""The leader's half of :class:`~floydd.cluster.raft.core.RaftNode`: replication,
commitment, heartbeats, CheckQuorum and ReadIndex.

Commit rule (Raft §5.4.2): the commit index moves to the largest index a quorum of
voters holds *only if that entry is from the leader's current term*; older entries
are committed indirectly, with it (figure 8 of the paper shows why counting replicas
of an older term's entry is unsafe).

:class:`Replication` is a part of the node (its ``replication``): the node's term, role
and timers stay on the node (:class:`Leader` says which it reads and writes); the part
holds the log, tracker and config it is given.
"""

from __future__ import annotations

from typing import Protocol

from .config import RaftConfig
from .errors import ProposalDropped
from .log import RaftLog
from .messages import (AppendEntries, AppendResponse, Heartbeat, HeartbeatResponse,
                       InstallSnapshot, Message, NodeId, ReadIndexRequest, ReadIndexResponse,
                       ReadState, TimeoutNow)
from .progress import ProgressState
from .readonly import ReadOnly
from .ready import Role
from .tracker import Tracker

__all__ = ["Replication", "Leader"]

_PROBE, _REPLICATE, _SNAPSHOT = ProgressState.PROBE, ProgressState.REPLICATE, ProgressState.SNAPSHOT


class Leader(Protocol):
    """What replication uses of the node."""

    id: NodeId
    term: int
    role: Role
    lead: NodeId | None
    lead_transferee: NodeId | None
    election_elapsed: int
    heartbeat_elapsed: int
    read_only: ReadOnly
    _pending_reads: list
    msgs: list[Message]
    read_states: list[ReadState]
    _mut_commit_prev: bool
    _mut_read_no_quorum: bool

    def _become_follower(self, term: int, lead: NodeId | None) -> None: ...


class Replication:
    def __init__(self, node: Leader, *, log: RaftLog, tracker: Tracker, config: RaftConfig) -> None:
        self._node = node
        self._id = node.id
        self._log = log
        self._tracker = tracker
        self._config = config

    def tick(self) -> None:
        """One tick of the leader's clock: CheckQuorum every election timeout, heartbeats."""
        node, config = self._node, self._config
        node.heartbeat_elapsed += 1
        node.election_elapsed += 1
        if node.election_elapsed >= config.election_ticks:
            node.election_elapsed = 0
            if config.check_quorum:
                tracker = self._tracker
                progress = tracker.progress
                me = progress.get(self._id)
                if me is not None:
                    me.recent_active = True
                if not tracker.quorum_active():
                    node._become_follower(node.term, None)
                    return
                for peer, pr in progress.items():
                    if peer != self._id:
                        pr.recent_active = False
            node.lead_transferee = None     # a transfer not done within a timeout is over
        if node.heartbeat_elapsed >= config.heartbeat_ticks:
            node.heartbeat_elapsed = 0
            self.bcast_heartbeat(node.read_only.last_context())

    def check_can_propose(self) -> None:
        node = self._node
        if node.role != Role.LEADER:
            raise ProposalDropped("not the leader", leader=node.lead)
        if node.lead_transferee is not None:
            raise ProposalDropped("leadership transfer in progress", leader=node.lead_transferee)

    # -- replication ---------------------------------------------------------------------

    def bcast_append(self) -> None:
        """Send every peer what it lacks: one probe, or in replicate state as many
        messages as its in-flight window allows (at least one, carrying the commit)."""
        me = self._id
        send = self.send_append
        for peer in self._tracker.progress:
            if peer != me and send(peer):
                while send(peer, send_if_empty=False):
                    pass

    def bcast_heartbeat(self, context: bytes) -> None:
        node = self._node
        me, term, committed, msgs = self._id, node.term, self._log.committed, node.msgs
        for peer, pr in self._tracker.progress.items():
            if peer != me:
                msgs.append(Heartbeat(frm=me, to=peer, term=term,
                                      commit=min(pr.match, committed), context=context))

    def send_append(self, to: NodeId, send_if_empty: bool = True) -> bool:
        pr = self._tracker.progress[to]
        config = self._config
        if pr.is_paused(config.max_inflight_msgs):
            return False
        log = self._log
        prev = pr.next - 1
        prev_term = log.term(prev)
        if prev_term is None:
            return self._send_snapshot(to, pr)
        if pr.next <= log.last_index():
            entries = log.slice(pr.next, config.max_entries_per_msg, config.max_bytes_per_msg)
        elif send_if_empty:
            entries = ()
        else:
            return False
        node = self._node
        node.msgs.append(AppendEntries(frm=self._id, to=to, term=node.term, index=prev,
                                       log_term=prev_term, entries=entries, commit=log.committed))
        pr.sent_entries(prev + len(entries), len(entries))
        return True

    def _send_snapshot(self, to: NodeId, pr) -> bool:
        if not pr.recent_active:
            return False
        snap = self._log.snapshot
        pr.become_snapshot(snap.index)
        node = self._node
        node.msgs.append(InstallSnapshot(frm=self._id, to=to, term=node.term, snapshot=snap))
        return True

    def maybe_commit(self) -> bool:
        node, log = self._node, self._log
        index = self._tracker.committed_index()
        if index <= log.committed:
            return False
        if log.term(index) != node.term and not node._mut_commit_prev:
            return False
        log.commit_to(index)
        if node._pending_reads and log.term(index) == node.term:
            pending, node._pending_reads = node._pending_reads, []
            for context, requester in pending:
                self.leader_read(context, requester)
        return True

    def on_append_response(self, m: AppendResponse) -> None:
        node = self._node
        if node.role != Role.LEADER:
            return
        pr = self._tracker.progress.get(m.frm)
        if pr is None:
            return
        pr.recent_active = True
        if m.reject:
            probe = m.reject_hint
            if m.log_term > 0:
                probe, _ = self._log.find_conflict_by_term(m.reject_hint, m.log_term)
            if pr.maybe_decrease_to(m.index, probe):
                if pr.state == _REPLICATE:
                    pr.become_probe()
                self.send_append(m.frm)
            return
        was_paused = pr.is_paused(self._config.max_inflight_msgs)
        if not pr.maybe_update(m.index):
            return
        state = pr.state
        if state == _PROBE:
            pr.become_replicate()
        elif state == _SNAPSHOT:
            if pr.match + 1 >= self._log.first_index():
                pr.become_probe()
                pr.become_replicate()
        else:
            pr.free_acked(m.index)
        if self.maybe_commit():
            self.bcast_append()
        elif was_paused:
            self.send_append(m.frm)
        while self.send_append(m.frm, send_if_empty=False):
            pass
        if m.frm == node.lead_transferee and pr.match == self._log.last_index():
            node.msgs.append(TimeoutNow(frm=self._id, to=m.frm, term=node.term))

    def on_heartbeat_response(self, m: HeartbeatResponse) -> None:
        node = self._node
        if node.role != Role.LEADER:
            return
        pr = self._tracker.progress.get(m.frm)
        if pr is None:
            return
        pr.recent_active = True
        pr.probe_sent = False
        if pr.state == _REPLICATE and len(pr.inflights) >= self._config.max_inflight_msgs:
            pr.inflights.popleft()
        if pr.match < self._log.last_index():
            self.send_append(m.frm)
        read_only = node.read_only
        if m.context and read_only.queue:
            acks = read_only.ack(m.frm, m.context)
            if acks is not None and self._tracker.has_quorum(acks):
                for req in read_only.release_through(m.context):
                    self._answer_read(req.index, req.context, req.requester)

    # -- ReadIndex -----------------------------------------------------------------------

    def on_read_index_request(self, m: ReadIndexRequest) -> None:
        if self._node.role == Role.LEADER:
            self.leader_read(m.context, m.frm)

    def leader_read(self, context: bytes, requester: NodeId) -> None:
        node, log = self._node, self._log
        if node._mut_read_no_quorum or self._tracker.voters == (self._id,):
            self._answer_read(log.committed, context, requester)
            return
        if log.term(log.committed) != node.term:
            # Our commit index may lag the true one until this term's first entry commits.
            node._pending_reads.append((context, requester))
            return
        req = node.read_only.add(log.committed, context, requester)
        if req is None:
            return
        req.acks.add(self._id)
        self.bcast_heartbeat(context)

    def _answer_read(self, index: int, context: bytes, requester: NodeId) -> None:
        node = self._node
        if requester == self._id:
            node.read_states.append(ReadState(index, context))
        else:
            node.msgs.append(ReadIndexResponse(frm=self._id, to=requester, term=node.term,
                                               index=index, context=context))
