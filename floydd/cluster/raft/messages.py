"""Raft's values: log entries, hard state, configuration, snapshots and the messages.

Everything here is a frozen, slotted value. Entries carry opaque ``bytes``
encoded by the caller (JSON or msgpack); nothing is pickled. The wire codec for
these values lives in :mod:`floydd.cluster.raft.codec`.

Messages (``frm`` -> ``to`` at ``term``), the names follow the Raft paper and
etcd-io/raft:

    AppendEntries      leader -> peer: entries after (index, log_term), leader commit
    AppendResponse     peer -> leader: matched up to ``index``, or a rejection with a hint
    RequestVote        candidate -> voter (``pre`` for a PreVote, ``transfer`` when
                       leadership is being handed over and leases must be ignored)
    VoteResponse       voter -> candidate
    Heartbeat          leader -> peer: commit (capped at the peer's match), read context
    HeartbeatResponse  peer -> leader: echoes the read context
    InstallSnapshot    leader -> peer whose next entry was compacted away
    TimeoutNow         leader -> transferee: campaign now, skipping PreVote
    ReadIndexRequest   follower -> leader: a linearizable read is wanted
    ReadIndexResponse  leader -> follower: reads may be served once applied >= index
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Union

__all__ = [
    "NodeId",
    "EntryKind",
    "Entry",
    "HardState",
    "ConfState",
    "Snapshot",
    "ReadState",
    "Message",
    "AppendEntries",
    "AppendResponse",
    "RequestVote",
    "VoteResponse",
    "Heartbeat",
    "HeartbeatResponse",
    "InstallSnapshot",
    "TimeoutNow",
    "ReadIndexRequest",
    "ReadIndexResponse",
    "MESSAGE_TYPES",
    "sorted_ids",
]

NodeId = Union[int, str]
"""A node is named by a small int or a short string, stable for its lifetime."""


class EntryKind(IntEnum):
    NORMAL = 0        # application data (may be empty: a new leader's no-op)
    CONF_CHANGE = 1   # an encoded :class:`~floydd.cluster.raft.confchange.ConfChange`


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    data: bytes = b""
    kind: int = EntryKind.NORMAL


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before any message depending on it is sent."""

    term: int = 0
    vote: NodeId | None = None
    commit: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfState:
    """Membership: voters decide elections and commits; learners only receive the log."""

    voters: frozenset = frozenset()
    learners: frozenset = frozenset()

    def __post_init__(self) -> None:
        if self.voters & self.learners:
            raise ValueError(f"nodes both voter and learner: {sorted_ids(self.voters & self.learners)}")

    @property
    def members(self) -> frozenset:
        return self.voters | self.learners


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """The state machine as of ``index`` (``term`` there) and the membership then."""

    index: int = 0
    term: int = 0
    conf: ConfState = field(default_factory=ConfState)
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read for ``context`` may be served once ``applied >= index``."""

    index: int
    context: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    frm: NodeId
    to: NodeId
    term: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendEntries(Message):
    index: int            # index of the entry just before ``entries``
    log_term: int         # its term
    entries: tuple = ()   # tuple[Entry, ...]
    commit: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendResponse(Message):
    index: int                # accepted: last matched index; rejected: the probed index
    reject: bool = False
    reject_hint: int = 0      # rejected: the follower's best guess of a matching index
    log_term: int = 0         # rejected: the follower's term at reject_hint


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestVote(Message):
    index: int                # candidate's last index
    log_term: int             # candidate's last term
    pre: bool = False
    transfer: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteResponse(Message):
    reject: bool = False
    pre: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat(Message):
    commit: int = 0
    context: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponse(Message):
    context: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class InstallSnapshot(Message):
    snapshot: Snapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeoutNow(Message):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadIndexRequest(Message):
    context: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadIndexResponse(Message):
    index: int
    context: bytes


MESSAGE_TYPES: tuple = (
    AppendEntries, AppendResponse, RequestVote, VoteResponse, Heartbeat,
    HeartbeatResponse, InstallSnapshot, TimeoutNow, ReadIndexRequest, ReadIndexResponse,
)


def sorted_ids(ids) -> tuple:
    """Node ids in a stable order (ints before strings), for deterministic iteration."""
    return tuple(sorted(ids, key=_id_key))


def _id_key(node_id: NodeId) -> tuple:
    return (isinstance(node_id, str), node_id)
