"""The raft clock: a tick queued for the core every ``tick_interval_ms``, except on a leader
alone (a configuration of itself only, no learner). No election can happen there and nobody
waits for its heartbeats, so the clock stops, and autopilot's rounds with it, until a ready
leaves the node with company (a learner or voter added, a step-down); an idle box alone then
wakes only for what it is asked (issue 23).

A follower that hears its leader is *parked*: a follower's tick only counts towards its
election timeout, and each word from the leader sets that count back to 0, so while the leader
speaks (every heartbeat) the ticks change nothing. The clock sleeps until the leader has been
silent for the shortest election timeout (``park``), and then queues the ticks owed for that
silence (at most ``park``'s worth, so it never counts past the shortest timeout), and ticks
on as before until the leader is heard again. Elections start when they did; a lease a
follower grants its leader (it refuses votes while it heard the leader within the shortest
timeout) ends when it did. An idle member wakes about once a shortest timeout instead of every
tick (issue 23).

A leader queues its ticks a heartbeat's worth at a time (``stride``): between two heartbeats
its ticks only count, so queueing them together at the heartbeat's time changes nothing but
the number of wakes."""

from __future__ import annotations

import asyncio
from typing import Callable

from floydd.cluster.driver.seam import Loop
from floydd.cluster.raft import RaftNode, Role

__all__ = ["Clock", "leads_alone"]


def leads_alone(node: RaftNode | None, node_id: str) -> bool:
    """``node`` leads a configuration of itself only (a box alone)."""
    return (node is not None and node.role == Role.LEADER and not node.tracker.learners
            and node.tracker.voters == (node_id,))


class Clock:
    """Submits ``tick`` to the loop (its inbox) every ``interval`` seconds while the node has
    company; the loop tells it after each ready (:meth:`heard`)."""

    def __init__(self, loop: Loop, interval: float, *, park_ticks: int = 0,
                 leader_heard: Callable[[], float | None] = lambda: None,
                 stride: Callable[[], int] = lambda: 1) -> None:
        self._loop, self._interval = loop, interval
        self._stride = stride
        """Ticks queued together, a stride's worth of intervals apart: a leader's heartbeat
        ticks (its ticks between two heartbeats only count), else 1."""
        self._park_ticks = park_ticks
        """Ticks a follower that hears its leader may leave uncounted (the shortest election
        timeout); 0: never parks."""
        self._leader_heard = leader_heard
        """Loop time of the last word from the leader this node follows; None when it is no
        follower of a leader it has heard (a leader, a candidate, a node that knows none)."""
        self._company = asyncio.Event()
        self._company.set()                 # a follower at first: its clock runs until it leads alone

    def heard(self, alone: bool) -> None:
        """After a ready: stop while the node leads alone, run otherwise."""
        if alone:
            self._company.clear()
        else:
            self._company.set()

    async def until_company(self) -> None:
        """Return at once unless the node leads alone; else once it no longer does."""
        await self._company.wait()

    async def run(self, tick: Callable[[], object]) -> None:
        loop = asyncio.get_running_loop()
        interval = self._interval
        due = loop.time()
        while True:
            if not self._company.is_set():      # a leader alone: nothing to time until a peer comes
                await self._company.wait()
                due = loop.time()
            heard, park = self._leader_heard(), self._park_ticks * interval
            if heard is not None and loop.time() - heard < park:     # parked (see the module)
                await asyncio.sleep(heard + park - loop.time())
                if self._leader_heard() == heard and self._company.is_set():     # silent all along
                    owed = min(self._park_ticks, int((loop.time() - heard) / interval))
                    for _ in range(owed):
                        self._loop.submit(tick)
                    due = heard + owed * interval
                continue
            stride = max(1, self._stride())
            due += stride * interval
            delay = due - loop.time()
            if delay < -5 * interval:       # the loop stalled: do not fire a burst of ticks
                due, delay = loop.time(), 0.0
            await asyncio.sleep(max(0.0, delay))
            if self._company.is_set():
                for _ in range(stride):
                    self._loop.submit(tick)
