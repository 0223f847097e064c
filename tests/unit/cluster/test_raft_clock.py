"""The raft clock of a follower (issue 23): parked while its leader speaks, it queues no tick;
once the leader is silent for the shortest election timeout it queues the ticks owed for the
silence (never more than that timeout's) and ticks on, so elections start when they did."""

from __future__ import annotations

import asyncio

from floydd.cluster.driver.clock import Clock
from tests.conftest import wait_until_async

INTERVAL, PARK = 0.01, 5


class _Inbox:
    def __init__(self) -> None:
        self.ticks: list[float] = []        # loop time each tick was queued

    def submit(self, fn) -> None:
        fn()


async def test_a_follower_hearing_its_leader_queues_no_tick_and_owes_the_silence_after():
    loop = asyncio.get_running_loop()
    inbox = _Inbox()
    heard = [loop.time()]
    clock = Clock(inbox, INTERVAL, park_ticks=PARK, leader_heard=lambda: heard[0])
    task = asyncio.create_task(clock.run(lambda: inbox.ticks.append(loop.time())))
    try:
        speaking_until = loop.time() + 0.3
        while loop.time() < speaking_until:     # the leader's heartbeats, every 2 ticks
            heard[0] = loop.time()
            await asyncio.sleep(2 * INTERVAL)
        assert inbox.ticks == []                # ticking, it would have queued ~30 that changed nothing
        silent_from = heard[0]
        await wait_until_async(lambda: len(inbox.ticks) >= PARK + 3, 5.0)
        first = inbox.ticks[0]
        assert first >= silent_from + PARK * INTERVAL       # not before the shortest timeout
        assert sum(1 for t in inbox.ticks if t == first) <= PARK     # never counts past it
        assert inbox.ticks[-1] > first                      # then it ticks on
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_node_that_follows_no_leader_it_hears_ticks_every_interval():
    loop = asyncio.get_running_loop()
    inbox = _Inbox()
    clock = Clock(inbox, INTERVAL, park_ticks=PARK, leader_heard=lambda: None)
    task = asyncio.create_task(clock.run(lambda: inbox.ticks.append(loop.time())))
    try:
        await wait_until_async(lambda: len(inbox.ticks) >= 5, 5.0)
        assert inbox.ticks == sorted(set(inbox.ticks))      # one at a time, not in bursts
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
