"""Errors raised by the raft core; they hang off :mod:`floydd.errors`.

    FloyddError
    ├── Unavailable
    │   └── ProposalDropped        not leader / transfer in progress / no leader known;
    │       │                      ``leader`` says whom to ask (None when unknown)
    │       └── ConfChangeRejected a membership change that cannot go in now
    ├── UserError
    │   └── CodecError             bytes from a peer that are not a well-formed message
    └── InternalError
        └── RaftInvariantError     the log or a peer broke a Raft invariant (a bug)
"""

from __future__ import annotations

from floydd.errors import InternalError, Unavailable, UserError

__all__ = ["ProposalDropped", "ConfChangeRejected", "CodecError", "RaftInvariantError"]


class ProposalDropped(Unavailable):
    """The proposal (or read, or transfer) was not taken; retry at ``leader``."""

    code = "raft_proposal_dropped"

    def __init__(self, message: str, *, leader=None, hint: str = "") -> None:
        super().__init__(message, hint=hint or "retry on the current leader")
        self.leader = leader


class ConfChangeRejected(ProposalDropped):
    """A membership change that is invalid now (pending change, learner behind, ...)."""

    code = "raft_conf_change_rejected"


class RaftInvariantError(InternalError):
    """Raft's own invariants were broken; the node must stop."""

    code = "raft_invariant"


class CodecError(UserError):
    """Bytes that do not decode to a well-formed raft message."""

    code = "raft_codec"
