"""What the core hands its driver each cycle, and the status it reports.

The driver's loop (etcd-io/raft's Ready/Advance contract)::

    rd = node.ready()                                # only when node.has_ready()
    if rd.send_early: send(rd.messages)              # a leader's: in parallel with its save
    storage.save(rd.hard_state, rd.entries, rd.snapshot)   # one transaction, one fsync
    if not rd.send_early: send(rd.messages)          # only after the save is durable
    restore state machine from rd.snapshot (if any); apply rd.committed_entries
    serve reads in rd.read_states once applied >= their index
    node.advance()

Nothing that depends on this node's state leaves it (votes, acknowledgements) before
that state is durable. The one exception is ``send_early``: a leader whose term and vote
are already on disk may send its AppendEntries while it writes the same entries itself
(Raft thesis 10.2.1; etcd does the same). That is safe because the leader counts its own
copy toward the quorum only in :meth:`~floydd.cluster.raft.RaftNode.advance`, after the
save, so an entry commits before the leader's fsync only if a quorum of followers has
fsynced it: a leader that crashes in between loses only its own copy.

Stepping messages between ``ready()`` and ``advance()`` is allowed; a second
``ready()`` before ``advance()`` is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from .messages import ConfState, HardState, NodeId, Snapshot

__all__ = ["Role", "SoftState", "Ready", "PeerStatus", "Status"]


class Role(IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile state worth telling the driver about when it changes."""

    lead: NodeId | None
    role: Role


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready:
    hard_state: HardState | None = None   # persist when not None
    entries: tuple = ()                   # persist; entries[0].index replaces from there on
    snapshot: Snapshot | None = None      # persist, drop the log it covers, restore the state machine
    committed_entries: tuple = ()         # apply in order, after the save
    messages: tuple = ()                  # send after the save (or with it: send_early)
    read_states: tuple = ()               # ReadState(index, context)
    soft_state: SoftState | None = None   # leader / role changed
    send_early: bool = False
    """The messages may leave before the save is durable: this node leads, and its term
    and vote are already durable (see the module docstring for why that is safe)."""

    @property
    def must_sync(self) -> bool:
        return self.hard_state is not None or bool(self.entries) or self.snapshot is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerStatus:
    match: int
    next: int
    state: str
    recent_active: bool
    learner: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Status:
    id: NodeId
    role: Role
    term: int
    vote: NodeId | None
    lead: NodeId | None
    commit: int
    applied: int
    last_index: int
    snapshot_index: int
    conf: ConfState
    lead_transferee: NodeId | None = None
    progress: dict = field(default_factory=dict)   # leader only: NodeId -> PeerStatus
