"""The leader's half of :class:`~floydd.cluster.raft.core.RaftNode`: replication,
commitment, heartbeats, CheckQuorum and ReadIndex.

Commit rule (Raft §5.4.2): the commit index moves to the largest index a quorum of
voters holds *only if that entry is from the leader's current term*; older entries
are committed indirectly, with it (figure 8 of the paper shows why counting replicas
of an older term's entry is unsafe).
"""

from __future__ import annotations

from .errors import ProposalDropped
from .messages import (AppendEntries, AppendResponse, Entry, Heartbeat, HeartbeatResponse,
                       InstallSnapshot, NodeId, ReadIndexRequest, ReadIndexResponse, ReadState,
                       TimeoutNow)
from .progress import ProgressState
from .ready import Role

__all__ = ["LeaderMixin"]

_PROBE, _REPLICATE, _SNAPSHOT = ProgressState.PROBE, ProgressState.REPLICATE, ProgressState.SNAPSHOT


class LeaderMixin:
    """Methods of RaftNode that only a leader runs (state lives on the node)."""

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.role = Role.LEADER
        self.lead = self.id
        log = self.log
        last = log.last_index()
        self.tracker.reset_progress(last + 1)
        me = self.tracker.progress[self.id]
        me.match = log.stabled
        me.become_replicate()
        # Changes proposed by an earlier leader may still be in flight: no new one
        # until this term's first entry (the no-op) is applied, hence committed.
        self.pending_conf_index = last + 1
        self.log.append((Entry(self.term, last + 1, b""),))
        self._bcast_append()

    def _tick_leader(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.config.election_ticks:
            self.election_elapsed = 0
            if self.config.check_quorum:
                progress = self.tracker.progress
                me = progress.get(self.id)
                if me is not None:
                    me.recent_active = True
                if not self.tracker.quorum_active():
                    self._become_follower(self.term, None)
                    return
                for node, pr in progress.items():
                    if node != self.id:
                        pr.recent_active = False
            self.lead_transferee = None     # a transfer not done within a timeout is over
        if self.heartbeat_elapsed >= self.config.heartbeat_ticks:
            self.heartbeat_elapsed = 0
            self._bcast_heartbeat(self.read_only.last_context())

    def _check_can_propose(self) -> None:
        if self.role != Role.LEADER:
            raise ProposalDropped("not the leader", leader=self.lead)
        if self.lead_transferee is not None:
            raise ProposalDropped("leadership transfer in progress", leader=self.lead_transferee)

    # -- replication ---------------------------------------------------------------------

    def _bcast_append(self) -> None:
        """Send every peer what it lacks: one probe, or in replicate state as many
        messages as its in-flight window allows (at least one, carrying the commit)."""
        me = self.id
        send = self._send_append
        for node in self.tracker.progress:
            if node != me and send(node):
                while send(node, send_if_empty=False):
                    pass

    def _bcast_heartbeat(self, context: bytes) -> None:
        me, term, committed = self.id, self.term, self.log.committed
        for node, pr in self.tracker.progress.items():
            if node != me:
                self.msgs.append(Heartbeat(frm=me, to=node, term=term,
                                           commit=min(pr.match, committed), context=context))

    def _send_append(self, to: NodeId, send_if_empty: bool = True) -> bool:
        pr = self.tracker.progress[to]
        config = self.config
        if pr.is_paused(config.max_inflight_msgs):
            return False
        log = self.log
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
        self.msgs.append(AppendEntries(frm=self.id, to=to, term=self.term, index=prev,
                                       log_term=prev_term, entries=entries, commit=log.committed))
        pr.sent_entries(prev + len(entries), len(entries))
        return True

    def _send_snapshot(self, to: NodeId, pr) -> bool:
        if not pr.recent_active:
            return False
        snap = self.log.snapshot
        pr.become_snapshot(snap.index)
        self.msgs.append(InstallSnapshot(frm=self.id, to=to, term=self.term, snapshot=snap))
        return True

    def _maybe_commit(self) -> bool:
        log = self.log
        index = self.tracker.committed_index()
        if index <= log.committed:
            return False
        if log.term(index) != self.term and not self._mut_commit_prev:
            return False
        log.commit_to(index)
        if self._pending_reads and log.term(index) == self.term:
            pending, self._pending_reads = self._pending_reads, []
            for context, requester in pending:
                self._leader_read(context, requester)
        return True

    def _on_append_response(self, m: AppendResponse) -> None:
        if self.role != Role.LEADER:
            return
        pr = self.tracker.progress.get(m.frm)
        if pr is None:
            return
        pr.recent_active = True
        if m.reject:
            probe = m.reject_hint
            if m.log_term > 0:
                probe, _ = self.log.find_conflict_by_term(m.reject_hint, m.log_term)
            if pr.maybe_decrease_to(m.index, probe):
                if pr.state == _REPLICATE:
                    pr.become_probe()
                self._send_append(m.frm)
            return
        was_paused = pr.is_paused(self.config.max_inflight_msgs)
        if not pr.maybe_update(m.index):
            return
        state = pr.state
        if state == _PROBE:
            pr.become_replicate()
        elif state == _SNAPSHOT:
            if pr.match + 1 >= self.log.first_index():
                pr.become_probe()
                pr.become_replicate()
        else:
            pr.free_acked(m.index)
        if self._maybe_commit():
            self._bcast_append()
        elif was_paused:
            self._send_append(m.frm)
        while self._send_append(m.frm, send_if_empty=False):
            pass
        if m.frm == self.lead_transferee and pr.match == self.log.last_index():
            self.msgs.append(TimeoutNow(frm=self.id, to=m.frm, term=self.term))

    def _on_heartbeat_response(self, m: HeartbeatResponse) -> None:
        if self.role != Role.LEADER:
            return
        pr = self.tracker.progress.get(m.frm)
        if pr is None:
            return
        pr.recent_active = True
        pr.probe_sent = False
        if pr.state == _REPLICATE and len(pr.inflights) >= self.config.max_inflight_msgs:
            pr.inflights.popleft()
        if pr.match < self.log.last_index():
            self._send_append(m.frm)
        if m.context and self.read_only.queue:
            acks = self.read_only.ack(m.frm, m.context)
            if acks is not None and self.tracker.has_quorum(acks):
                for req in self.read_only.release_through(m.context):
                    self._answer_read(req.index, req.context, req.requester)

    # -- ReadIndex -----------------------------------------------------------------------

    def _on_read_index_request(self, m: ReadIndexRequest) -> None:
        if self.role == Role.LEADER:
            self._leader_read(m.context, m.frm)

    def _leader_read(self, context: bytes, requester: NodeId) -> None:
        log = self.log
        if self._mut_read_no_quorum or self.tracker.voters == (self.id,):
            self._answer_read(log.committed, context, requester)
            return
        if log.term(log.committed) != self.term:
            # Our commit index may lag the true one until this term's first entry commits.
            self._pending_reads.append((context, requester))
            return
        req = self.read_only.add(log.committed, context, requester)
        if req is None:
            return
        req.acks.add(self.id)
        self._bcast_heartbeat(context)

    def _answer_read(self, index: int, context: bytes, requester: NodeId) -> None:
        if requester == self.id:
            self.read_states.append(ReadState(index, context))
        else:
            self.msgs.append(ReadIndexResponse(frm=self.id, to=requester, term=self.term,
                                               index=index, context=context))
