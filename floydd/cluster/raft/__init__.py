"""Raft for the control plane: a pure core, its durable log, and nothing else.

The core (:class:`RaftNode`) imports no asyncio, sockets, sqlite or clocks; the
SQLite store is :mod:`floydd.cluster.raft.sqlite_storage`, imported on its own so
that importing this package does not load sqlite3. A driver owns a node and loops::

    if node.has_ready():
        rd = node.ready()
        storage.save(rd.hard_state, rd.entries, rd.snapshot)   # durable first ...
        transport.send(rd.messages)           # ... unless rd.send_early (a leader's)
        apply(rd.snapshot, rd.committed_entries); serve(rd.read_states)
        node.advance()
"""

from .confchange import ConfChange, ConfChangeOp
from .config import DEFAULT_CONFIG, RaftConfig
from .core import RaftNode
from .errors import CodecError, ConfChangeRejected, ProposalDropped, RaftInvariantError
from .messages import (AppendEntries, AppendResponse, ConfState, Entry, EntryKind, HardState,
                       Heartbeat, HeartbeatResponse, InstallSnapshot, Message, NodeId,
                       ReadIndexRequest, ReadIndexResponse, ReadState, RequestVote, Snapshot,
                       TimeoutNow, VoteResponse)
from .codec import decode_message, encode_message
from .ready import PeerStatus, Ready, Role, SoftState, Status
from .storage import DurableState, MemoryStorage, Storage, bootstrap_state

__all__ = [
    # the node and its driver contract
    "RaftNode", "RaftConfig", "DEFAULT_CONFIG", "Ready", "SoftState", "Role", "Status",
    "PeerStatus",
    # values
    "NodeId", "Entry", "EntryKind", "HardState", "ConfState", "Snapshot", "ReadState",
    "ConfChange", "ConfChangeOp",
    # messages and their codec
    "Message", "AppendEntries", "AppendResponse", "RequestVote", "VoteResponse", "Heartbeat",
    "HeartbeatResponse", "InstallSnapshot", "TimeoutNow", "ReadIndexRequest",
    "ReadIndexResponse", "encode_message", "decode_message",
    # storage
    "Storage", "DurableState", "MemoryStorage", "bootstrap_state",
    # errors
    "ProposalDropped", "ConfChangeRejected", "CodecError", "RaftInvariantError",
]
