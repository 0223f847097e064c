"""When this box last heard from each node, by its own monotonic clock (issue 21, "Time").

A node's ``last_heartbeat`` in the replicated state is the ``ts`` its own clock wrote in its
``node.health`` or ``node.upsert``: comparing it with another box's clock made a box whose
wall clock ran 10 minutes behind look stale to everyone (third copies of all it held, no
placements) and one running ahead never go quiet. So liveness is not read from it: each box
notes, on its own monotonic clock, when it *applied* a node's own entry (a heartbeat, an
announcement, its clean ``off``), and the decisions ask for ages from here::

    node.upsert / node.health (not a leader's "suspect") applied live  -> heard now
    entries re-applied at start-up, a snapshot                         -> not heard: the age
                                                                          counts from this start

The age of a node never heard since this box started is the time since it started: a box
that has just started judges nobody gone before it has had time to hear from them (it errs
towards "still there"). Nothing here is replicated: it is this box's observation, used by
its own leader-local decisions (suspect, lost-after, placement health) and by the copies a
box decides to make (:mod:`floydd.cluster.replication.replicas`).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from floydd.cluster.driver.applied import Applied

__all__ = ["Heard", "OWN_OPS"]

OWN_OPS = ("node.upsert", "node.health")
"""The ops by which a node speaks for itself (a ``node.health`` "suspect" is the leader's)."""


class Heard:
    """Node id -> the monotonic time this box applied the node's own latest entry."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.started = clock()
        self._at: dict[str, float] = {}

    def on_apply(self, event: Applied) -> None:
        """An ``on_apply`` hook: note a node's own entry applied live."""
        cmd = event.command
        if cmd is None or event.replay or event.restored or event.error is not None:
            return
        if cmd.get("op") in OWN_OPS and cmd.get("status") != "suspect" and isinstance(cmd.get("id"), str):
            self._at[cmd["id"]] = self._clock()

    def age(self, node_id: str, now: float | None = None) -> float:
        """Seconds since this box heard from ``node_id`` (since it started, if not since)."""
        now = self._clock() if now is None else now
        return max(0.0, now - self._at.get(node_id, self.started))

    def ages(self, node_ids: Iterable[str]) -> dict[str, float]:
        """:meth:`age` of each of ``node_ids``, read at one instant."""
        now = self._clock()
        return {nid: self.age(nid, now) for nid in node_ids}
