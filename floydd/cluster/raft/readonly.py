"""ReadIndex (Raft thesis §6.4): linearizable reads without writing to the log.

The leader records its commit index for each read request, piggybacks the request's
context on a heartbeat round and, once a quorum of voters has answered that round,
knows it was still leader when the read arrived: the read may then be served by any
node that has applied up to the recorded index. Requests are answered in order; an
acknowledged context also confirms every request queued before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .messages import NodeId

__all__ = ["ReadRequest", "ReadOnly"]


@dataclass(slots=True)
class ReadRequest:
    index: int                   # leader's commit index when the request arrived
    context: bytes
    requester: NodeId            # the leader itself, or the follower that forwarded it
    acks: set = field(default_factory=set)


class ReadOnly:
    __slots__ = ("pending", "queue")

    def __init__(self) -> None:
        self.pending: dict[bytes, ReadRequest] = {}
        self.queue: list[bytes] = []

    def __len__(self) -> int:
        return len(self.queue)

    def add(self, index: int, context: bytes, requester: NodeId) -> ReadRequest | None:
        """Queue a request; None when this context is already waiting."""
        if context in self.pending:
            return None
        req = ReadRequest(index, context, requester)
        self.pending[context] = req
        self.queue.append(context)
        return req

    def ack(self, node: NodeId, context: bytes) -> set | None:
        """Record ``node``'s answer to the round for ``context``; the acks so far."""
        req = self.pending.get(context)
        if req is None:
            return None
        req.acks.add(node)
        return req.acks

    def release_through(self, context: bytes) -> list[ReadRequest]:
        """Pop every request up to and including ``context``."""
        if context not in self.pending:
            return []
        n = self.queue.index(context) + 1
        done = [self.pending.pop(c) for c in self.queue[:n]]
        del self.queue[:n]
        return done

    def last_context(self) -> bytes:
        return self.queue[-1] if self.queue else b""
