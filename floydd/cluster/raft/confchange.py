"""Membership changes, one node at a time (Raft thesis §4.1).

A change is an entry of kind ``CONF_CHANGE``; every node switches to the new
membership when the entry is *applied* (committed and handed to the application).
The leader accepts a new change only once the previous one is applied, and a new
leader only after its first entry (the term's no-op) is applied, which closes the
single-server-change hole found after the thesis.

New nodes join as learners: they receive the log but do not vote or count towards
quorums. A learner is promoted to voter only once it has caught up with the
leader's commit index, so adding a voter never stalls commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import msgpack

from .errors import CodecError, ConfChangeRejected
from .messages import ConfState, NodeId

__all__ = ["ConfChangeOp", "ConfChange", "apply_conf_change", "validate_conf_change"]


class ConfChangeOp(IntEnum):
    ADD_LEARNER = 0   # a new node starts receiving the log
    PROMOTE = 1       # a caught-up learner becomes a voter
    REMOVE = 2        # a voter or learner leaves


@dataclass(frozen=True, slots=True)
class ConfChange:
    op: ConfChangeOp
    node: NodeId

    def encode(self) -> bytes:
        return msgpack.packb([int(self.op), self.node])

    @classmethod
    def decode(cls, data: bytes) -> "ConfChange":
        try:
            op, node = msgpack.unpackb(data)
            return cls(ConfChangeOp(op), _node_id(node))
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise CodecError(f"malformed conf change: {exc}") from exc


def validate_conf_change(conf: ConfState, cc: ConfChange) -> None:
    """Raise :class:`ConfChangeRejected` when ``cc`` makes no sense for ``conf``."""
    if cc.op == ConfChangeOp.ADD_LEARNER:
        if cc.node in conf.members:
            raise ConfChangeRejected(f"node {cc.node!r} is already a member")
    elif cc.op == ConfChangeOp.PROMOTE:
        if cc.node not in conf.learners:
            raise ConfChangeRejected(f"node {cc.node!r} is not a learner",
                                     hint="add it as a learner first and let it catch up")
    elif cc.op == ConfChangeOp.REMOVE:
        if cc.node not in conf.members:
            raise ConfChangeRejected(f"node {cc.node!r} is not a member")
        if conf.voters == {cc.node}:
            raise ConfChangeRejected("cannot remove the last voter",
                                     hint="use `floydd recover` to restart as a new cluster")


def apply_conf_change(conf: ConfState, cc: ConfChange) -> ConfState:
    """The membership after ``cc``. Committed changes that no longer make sense (a
    duplicate add, say) leave it unchanged, the same way on every node."""
    voters, learners = conf.voters, conf.learners
    if cc.op == ConfChangeOp.ADD_LEARNER:
        if cc.node in voters or cc.node in learners:
            return conf
        learners = learners | {cc.node}
    elif cc.op == ConfChangeOp.PROMOTE:
        if cc.node not in learners:
            return conf
        learners = learners - {cc.node}
        voters = voters | {cc.node}
    else:
        if conf.voters == {cc.node}:
            return conf
        voters = voters - {cc.node}
        learners = learners - {cc.node}
    return ConfState(voters=voters, learners=learners)


def _node_id(value) -> NodeId:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"node id must be int or str, not {type(value).__name__}")
    return value
