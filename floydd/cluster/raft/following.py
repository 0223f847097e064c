"""The follower's half of :class:`~floydd.cluster.raft.core.RaftNode`: what it does with
what a leader sends (AppendEntries, heartbeats, snapshots, TimeoutNow, ReadIndex answers).

A follower accepts entries only where its log matches the leader's at the entry before
them (Raft §5.3); on a mismatch it rejects with a hint (the last index of the conflicting
term, found by term) so the leader skips back a term at a time instead of an entry at a
time. A heartbeat only moves the commit index; a snapshot newer than what the follower
committed replaces its log and its membership.

:class:`Following` is a part of the node (its ``following``): the node's term, leader,
role and timers stay on the node (:class:`Follower` says which it reads and writes); the
part holds the log, tracker and elections it is given.
"""

from __future__ import annotations

from typing import Protocol

from .election import TRANSFER, Elections
from .log import RaftLog
from .messages import (AppendEntries, AppendResponse, Heartbeat, HeartbeatResponse,
                       InstallSnapshot, Message, NodeId, ReadIndexResponse, ReadState, TimeoutNow)
from .ready import Role
from .tracker import Tracker

__all__ = ["Following", "Follower"]


class Follower(Protocol):
    """What the follower's side uses of the node."""

    id: NodeId
    term: int
    role: Role
    lead: NodeId | None
    election_elapsed: int
    read_states: list[ReadState]
    _conf_history: list
    _mut_no_match: bool

    def _send(self, m: Message) -> None: ...
    def _become_follower(self, term: int, lead: NodeId | None) -> None: ...


class Following:
    def __init__(self, node: Follower, *, log: RaftLog, tracker: Tracker, elections: Elections) -> None:
        self._node = node
        self._log = log
        self._tracker = tracker
        self._elections = elections

    def on_append(self, m: AppendEntries) -> None:
        node = self._node
        if node.role == Role.LEADER:
            return
        self._heard_from_leader(m)
        log = self._log
        if m.index < log.committed:
            node._send(AppendResponse(frm=node.id, to=m.frm, term=node.term, index=log.committed))
            return
        last_new = log.maybe_append(m.index, m.log_term, m.commit, m.entries,
                                    check_match=not node._mut_no_match)
        if last_new is not None:
            node._send(AppendResponse(frm=node.id, to=m.frm, term=node.term, index=last_new))
            return
        hint, hint_term = log.find_conflict_by_term(min(m.index, log.last_index()), m.log_term)
        node._send(AppendResponse(frm=node.id, to=m.frm, term=node.term, index=m.index,
                                  reject=True, reject_hint=hint, log_term=hint_term))

    def on_heartbeat(self, m: Heartbeat) -> None:
        node = self._node
        if node.role == Role.LEADER:
            return
        self._heard_from_leader(m)
        self._log.commit_to(m.commit)
        node._send(HeartbeatResponse(frm=node.id, to=m.frm, term=node.term, context=m.context))

    def on_snapshot(self, m: InstallSnapshot) -> None:
        node = self._node
        if node.role == Role.LEADER:
            return
        self._heard_from_leader(m)
        snap, log = m.snapshot, self._log
        if snap.index <= log.committed:
            index = log.committed
        elif log.match_term(snap.index, snap.term):
            log.commit_to(snap.index)
            index = log.last_index()
        else:
            log.restore(snap)
            self._tracker.set_conf(snap.conf, log.last_index() + 1)
            node._conf_history = [(snap.index, snap.conf)]
            index = log.last_index()
        node._send(AppendResponse(frm=node.id, to=m.frm, term=node.term, index=index))

    def on_timeout_now(self, m: TimeoutNow) -> None:
        if self._node.role == Role.FOLLOWER:
            self._elections.hup(TRANSFER)

    def on_read_index_response(self, m: ReadIndexResponse) -> None:
        self._node.read_states.append(ReadState(m.index, m.context))

    def _heard_from_leader(self, m: Message) -> None:
        node = self._node
        if node.role != Role.FOLLOWER:
            node._become_follower(node.term, m.frm)
        node.election_elapsed = 0
        node.lead = m.frm
