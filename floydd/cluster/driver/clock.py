"""The raft clock: a tick queued for the core every ``tick_interval_ms``, except on a leader
alone (a configuration of itself only, no learner). No election can happen there and nobody
waits for its heartbeats, so the clock stops, and autopilot's rounds with it, until a ready
leaves the node with company (a learner or voter added, a step-down); an idle box alone then
wakes only for what it is asked (issue 23)."""

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

    def __init__(self, loop: Loop, interval: float) -> None:
        self._loop, self._interval = loop, interval
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
            due += interval
            delay = due - loop.time()
            if delay < -5 * interval:       # the loop stalled: do not fire a burst of ticks
                due, delay = loop.time(), 0.0
            await asyncio.sleep(max(0.0, delay))
            if self._company.is_set():
                self._loop.submit(tick)
