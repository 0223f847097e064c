"""What the core hands its driver each cycle, and the status it reports.

The driver's loop (etcd-io/raft's Ready/Advance contract)::

    rd = node.ready()                                # only when node.has_ready()
    storage.save(rd.hard_state, rd.entries, rd.snapshot)   # one transaction, one fsync
    send(rd.messages)                                # only after the save is durable
    restore state machine from rd.snapshot (if any); apply rd.committed_entries
    serve reads in rd.read_states once applied >= their index
    node.advance()

Nothing leaves the node (votes, acknowledgements, commit indexes) before the state
it depends on is durable, so the node itself included, nothing is acknowledged
before it is on disk. Stepping messages between ``ready()`` and ``advance()`` is
allowed; a second ``ready()`` before ``advance()`` is not.
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
    messages: tuple = ()                  # send after the save
    read_states: tuple = ()               # ReadState(index, context)
    soft_state: SoftState | None = None   # leader / role changed

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
