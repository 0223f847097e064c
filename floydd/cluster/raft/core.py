"""The Raft node as a pure state machine (in the style of etcd-io/raft).

Messages and ticks go in (:meth:`RaftNode.step`, :meth:`RaftNode.tick` and the
calls below); what to persist, send and apply comes out of :meth:`RaftNode.ready`
(see :mod:`floydd.cluster.raft.ready` for the driver's contract). The node reads
no clock, does no I/O and draws randomness only from the ``rng`` it is given.

Roles::

    FOLLOWER ──election timeout──► PRE_CANDIDATE ──quorum of pre-votes──► CANDIDATE
       ▲   ▲                            │                                  │
       │   └──── higher term / leader ──┴──────────────────────────────────┤
       │                                                         quorum of votes
       └──── higher term, or no quorum heard within an election ◄── LEADER ◄┘
             timeout (CheckQuorum), or removed from the voters

The public calls are :meth:`campaign`, :meth:`propose`, :meth:`propose_conf_change`,
:meth:`transfer_leadership`, :meth:`read_index`, :meth:`compact`,
:meth:`report_unreachable`, :meth:`report_snapshot` and :meth:`status`. The node holds
the raft state (term, vote, role, log, tracker, outbox); three parts, given the log and
tracker in their constructors, do the rest: ``replication``, the leader's half
(:mod:`.leading`), ``elections`` (:mod:`.election`) and ``following``, the follower's
half (:mod:`.following`). Its test-only bugs are listed in :mod:`.mutations`.
"""

from __future__ import annotations

from typing import Protocol

from .config import DEFAULT_CONFIG, RaftConfig
from .confchange import ConfChange, ConfChangeOp, apply_conf_change, validate_conf_change
from .errors import ConfChangeRejected, ProposalDropped
from .election import ELECTION, PRE_ELECTION, Elections
from .following import Following
from .log import RaftLog
from .messages import (AppendEntries, AppendResponse, Entry, EntryKind, HardState, Heartbeat,
                       HeartbeatResponse, InstallSnapshot, Message, NodeId, ReadIndexRequest,
                       ReadIndexResponse, ReadState, RequestVote, Snapshot, TimeoutNow,
                       VoteResponse)
from .mutations import MUTATIONS
from .progress import ProgressState
from .readonly import ReadOnly
from .ready import PeerStatus, Ready, Role, SoftState, Status
from .leading import Replication
from .storage import DurableState
from .tracker import Tracker

__all__ = ["RaftNode", "Rng", "MUTATIONS"]

class Rng(Protocol):
    def randrange(self, start: int, stop: int) -> int: ...


class RaftNode:
    def __init__(self, node_id: NodeId, *, rng: Rng, config: RaftConfig = DEFAULT_CONFIG,
                 state: DurableState | None = None, applied: int = 0,
                 mutations: frozenset = frozenset()) -> None:
        """``state`` is what storage loaded (``bootstrap_state(conf)`` for a founding
        member, empty for a joining one); ``applied`` is how far a durable state machine
        already got (entries after it are handed out again)."""
        state = state or DurableState()
        if not mutations <= MUTATIONS:
            raise ValueError(f"unknown mutations: {sorted(mutations - MUTATIONS)}")
        self.id = node_id
        self.config = config
        hs = state.hard_state
        self.log = RaftLog(state.snapshot, state.entries, committed=hs.commit, applied=applied)
        self.term = hs.term
        self.vote = hs.vote
        self.tracker = Tracker(state.snapshot.conf, self.log.last_index() + 1)
        self.elections = Elections(self, log=self.log, tracker=self.tracker, config=config, rng=rng)
        self.replication = Replication(self, log=self.log, tracker=self.tracker, config=config)
        self.following = Following(self, log=self.log, tracker=self.tracker, elections=self.elections)
        self._conf_history: list = [(state.snapshot.index, state.snapshot.conf)]
        self.role = Role.FOLLOWER
        self.lead: NodeId | None = None
        self.msgs: list[Message] = []
        self.read_states: list[ReadState] = []
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = 0
        self.lead_transferee: NodeId | None = None
        self.pending_conf_index = 0
        self.read_only = ReadOnly()
        self._pending_reads: list = []      # (context, requester) before the term's first commit
        self._bcast_pending = False         # proposals appended since the last broadcast
        self._rd: Ready | None = None       # handed out, not yet advanced
        self._persisted = (hs.term, hs.vote, self.log.committed)
        self._soft = (None, Role.FOLLOWER)
        self._mut_stale_votes = "stale_votes" in mutations
        self._mut_commit_prev = "commit_previous_term" in mutations
        self._mut_vote_no_log = "vote_without_log_check" in mutations
        self._mut_no_match = "append_without_match" in mutations
        self._mut_read_no_quorum = "read_without_quorum" in mutations
        self._mut_count_unsynced = "count_self_unsynced" in mutations
        self._handlers = {
            AppendEntries: self.following.on_append, Heartbeat: self.following.on_heartbeat,
            InstallSnapshot: self.following.on_snapshot, RequestVote: self.elections.on_request_vote,
            VoteResponse: self.elections.on_vote_response,
            AppendResponse: self.replication.on_append_response,
            HeartbeatResponse: self.replication.on_heartbeat_response, TimeoutNow: self.following.on_timeout_now,
            ReadIndexRequest: self.replication.on_read_index_request,
            ReadIndexResponse: self.following.on_read_index_response,
        }
        for i in range(self.log.snapshot.index + 1, self.log.applied + 1):
            entry = self.log.entry(i)       # membership the application already applied
            if entry.kind == EntryKind.CONF_CHANGE:
                self._apply_conf_change(entry)
        self.elections.reset_election_timeout()

    def __repr__(self) -> str:
        return f"RaftNode({self.id!r}, {self.role.name}, term={self.term})"

    # -- public calls --------------------------------------------------------------------

    def tick(self) -> None:
        """One tick of the driver's clock (``config.tick_interval_ms``)."""
        if self.role == Role.LEADER:
            self.replication.tick()
            return
        self.election_elapsed += 1
        if self.election_elapsed >= self.randomized_election_timeout and self.promotable():
            self.election_elapsed = 0
            self.elections.hup(PRE_ELECTION if self.config.pre_vote else ELECTION)

    def campaign(self) -> None:
        """Start an election now (a PreVote round first when configured)."""
        self.elections.hup(PRE_ELECTION if self.config.pre_vote else ELECTION)

    def step(self, m: Message) -> None:
        """Feed one message received from a peer."""
        if m.to != self.id:
            return
        cls = type(m)
        mterm = m.term
        if mterm > self.term:
            if cls is RequestVote:
                if not m.transfer and self.elections.in_lease():
                    return          # our leader is alive: do not let this one disrupt it
                if not m.pre:
                    self._become_follower(mterm, None)
            elif cls is VoteResponse and m.pre and not m.reject:
                pass                # a granted pre-vote names the term we would campaign in
            elif cls is AppendEntries or cls is Heartbeat or cls is InstallSnapshot:
                self._become_follower(mterm, m.frm)
            else:
                self._become_follower(mterm, None)
        elif mterm < self.term:
            if cls is AppendEntries or cls is Heartbeat:
                # A stale leader (back from a partition): our term makes it step down.
                self._send(AppendResponse(frm=self.id, to=m.frm, term=self.term, index=0))
                return
            if cls is RequestVote and m.pre:
                self._send(VoteResponse(frm=self.id, to=m.frm, term=self.term, reject=True, pre=True))
                return
            if not (cls is VoteResponse and self._mut_stale_votes):
                return
        self._handlers[cls](m)

    def propose(self, data: bytes) -> Entry:
        """Append ``data`` to the log (leader only). Returns the entry: it is committed
        when an applied entry at its index has its term."""
        self.replication.check_can_propose()
        entry = Entry(self.term, self.log.last_index() + 1, data)
        self.log.append((entry,))
        self._bcast_pending = True
        return entry

    def propose_conf_change(self, cc: ConfChange) -> Entry:
        """Propose one membership change (leader only; one at a time)."""
        self.replication.check_can_propose()
        if self.pending_conf_index > self.log.applied:
            raise ConfChangeRejected("a membership change is still being applied",
                                     leader=self.id, hint="retry once it has been applied")
        validate_conf_change(self.tracker.conf, cc)
        if cc.op == ConfChangeOp.PROMOTE:
            match = self.tracker.progress[cc.node].match
            if match < self.log.committed:
                raise ConfChangeRejected(
                    f"learner {cc.node!r} has not caught up ({match} < {self.log.committed})",
                    leader=self.id, hint="retry once it has caught up")
        entry = Entry(self.term, self.log.last_index() + 1, cc.encode(), EntryKind.CONF_CHANGE)
        self.log.append((entry,))
        self.pending_conf_index = entry.index
        self._bcast_pending = True
        return entry

    def transfer_leadership(self, to: NodeId) -> None:
        """Hand leadership to voter ``to`` once it has caught up (leader only);
        proposals are refused meanwhile; abandoned after an election timeout."""
        if self.role != Role.LEADER:
            raise ProposalDropped("not the leader", leader=self.lead)
        if to == self.id:
            self.lead_transferee = None
            return
        if not self.tracker.is_voter(to):
            raise ProposalDropped(f"cannot transfer leadership to {to!r}: not a voter",
                                  leader=self.id, hint="promote it first")
        if self.lead_transferee == to:
            return
        self.lead_transferee = to
        self.election_elapsed = 0
        if self.tracker.progress[to].match == self.log.last_index():
            self._send(TimeoutNow(frm=self.id, to=to, term=self.term))
        else:
            self.replication.send_append(to)

    def read_index(self, context: bytes) -> None:
        """Ask for a linearizable read; a :class:`ReadState` with this context comes
        out of a later ready. Followers forward to the leader; requests may be lost
        (retry with a new context after a timeout)."""
        if self.role == Role.LEADER:
            self.replication.leader_read(context, self.id)
        elif self.lead is not None:
            self._send(ReadIndexRequest(frm=self.id, to=self.lead, term=self.term, context=context))
        else:
            raise ProposalDropped("no leader known", leader=None, hint="retry after an election")

    def compact(self, index: int, data: bytes) -> Snapshot:
        """The application's state as of applied ``index`` is ``data``: keep it as the
        snapshot and drop the log up to there. Persist it with ``storage.compact``."""
        log = self.log
        if index <= log.snapshot.index:
            return log.snapshot
        if index > log.applied:
            raise ValueError(f"cannot compact at {index}: only {log.applied} applied")
        history = self._conf_history
        while len(history) > 1 and history[1][0] <= index:
            history.pop(0)
        snap = Snapshot(index=index, term=log.term(index), conf=history[0][1], data=data)
        log.compact(snap)
        return snap

    def report_unreachable(self, peer: NodeId) -> None:
        """The transport could not reach ``peer``: stop streaming to it, probe instead."""
        pr = self.tracker.progress.get(peer) if self.role == Role.LEADER else None
        if pr is not None and pr.state == ProgressState.REPLICATE:
            pr.become_probe()

    def report_snapshot(self, peer: NodeId, ok: bool) -> None:
        """The transport finished sending a snapshot to ``peer`` (or failed to)."""
        pr = self.tracker.progress.get(peer) if self.role == Role.LEADER else None
        if pr is not None and pr.state == ProgressState.SNAPSHOT:
            if not ok:
                pr.pending_snapshot = 0
            pr.become_probe()
            pr.probe_sent = True     # wait for the next heartbeat response

    def promotable(self) -> bool:
        return self.id in self.tracker.conf.voters

    def status(self) -> Status:
        log = self.log
        progress = {}
        if self.role == Role.LEADER:
            progress = {node: PeerStatus(match=pr.match, next=pr.next, state=pr.state.name,
                                         recent_active=pr.recent_active, learner=pr.is_learner)
                        for node, pr in self.tracker.progress.items()}
        return Status(id=self.id, role=self.role, term=self.term, vote=self.vote, lead=self.lead,
                      commit=log.committed, applied=log.applied, last_index=log.last_index(),
                      snapshot_index=log.snapshot.index, conf=self.tracker.conf,
                      lead_transferee=self.lead_transferee, progress=progress)

    # -- ready / advance -----------------------------------------------------------------

    def has_ready(self) -> bool:
        if self._rd is not None:
            return False
        log = self.log
        return bool(self.msgs or self.read_states or self._bcast_pending
                    or log.pending_snapshot is not None or log.has_unstable()
                    or log.committed > log.applying
                    or (self.term, self.vote, log.committed) != self._persisted
                    or (self.lead, self.role) != self._soft)

    def ready(self) -> Ready:
        """What to persist, send and apply now; call :meth:`advance` when done."""
        if self._rd is not None:
            raise RuntimeError("advance() the previous ready first")
        if self._bcast_pending:
            self._bcast_pending = False
            self.replication.bcast_append()
        log = self.log
        hs = (self.term, self.vote, log.committed)
        snapshot = log.pending_snapshot
        if snapshot is not None and log.applying < snapshot.index:
            log.applying = snapshot.index
        soft = (self.lead, self.role)
        rd = Ready(
            hard_state=HardState(*hs) if hs != self._persisted else None,
            entries=log.unstable_entries() if log.has_unstable() else (),
            snapshot=snapshot,
            committed_entries=(log.take_committed(self.config.max_committed_per_ready)
                               if log.committed > log.applying else ()),
            messages=tuple(self.msgs),
            read_states=tuple(self.read_states),
            soft_state=SoftState(*soft) if soft != self._soft else None,
            # A leader's term and vote are durable unless it became leader in this very
            # ready (a cluster of one); then everything waits for the save as usual.
            send_early=self.role == Role.LEADER and (self.term, self.vote) == self._persisted[:2],
        )
        if self._mut_count_unsynced and rd.send_early and rd.entries:
            self.tracker.progress[self.id].maybe_update(rd.entries[-1].index)
        self.msgs = []
        self.read_states = []
        self._soft = soft
        self._rd = rd
        return rd

    def advance(self) -> None:
        """The last ready was persisted, sent and applied."""
        rd = self._rd
        if rd is None:
            raise RuntimeError("advance() without ready()")
        self._rd = None
        log = self.log
        if rd.hard_state is not None:
            hs = rd.hard_state
            self._persisted = (hs.term, hs.vote, hs.commit)
        if rd.snapshot is not None:
            if log.pending_snapshot is rd.snapshot:
                log.pending_snapshot = None
            log.applied_to(rd.snapshot.index)
        if rd.entries:
            last = rd.entries[-1]
            log.stable_to(last.index, last.term)
        if rd.committed_entries:
            for entry in rd.committed_entries:
                if entry.kind == EntryKind.CONF_CHANGE:
                    self._apply_conf_change(entry)
            log.applied_to(rd.committed_entries[-1].index)
        if self.role == Role.LEADER and rd.entries and log.pending_snapshot is None:
            # Only now, the entries durable, does the leader's own copy count toward the
            # quorum: what it sent early commits before this only on a quorum of followers.
            me = self.tracker.progress.get(self.id)
            if me is not None and me.maybe_update(log.stabled) and self.replication.maybe_commit():
                self._bcast_pending = True   # tell followers the new commit index

    # -- role changes --------------------------------------------------------------------

    def _become_follower(self, term: int, lead: NodeId | None) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.lead = lead

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
        self.replication.bcast_append()

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = None
        self.lead = None
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.elections.reset_election_timeout()
        self.lead_transferee = None
        self.tracker.reset_votes()
        self.pending_conf_index = 0
        if self.read_only.queue:
            self.read_only = ReadOnly()
        self._pending_reads = []
        self._bcast_pending = False

    # -- membership ----------------------------------------------------------------------

    def _apply_conf_change(self, entry: Entry) -> None:
        conf = apply_conf_change(self.tracker.conf, ConfChange.decode(entry.data))
        self._conf_history.append((entry.index, conf))
        if conf == self.tracker.conf:
            return
        self.tracker.set_conf(conf, self.log.last_index() + 1)
        if self.role != Role.LEADER:
            return
        if self.id not in conf.voters:
            self._become_follower(self.term, None)   # removed: let the others elect
            return
        if self.lead_transferee is not None and self.lead_transferee not in conf.voters:
            self.lead_transferee = None
        self.replication.maybe_commit()
        self._bcast_pending = True

    # -- plumbing ------------------------------------------------------------------------

    def _send(self, m: Message) -> None:
        self.msgs.append(m)
