"""Rounds at rest (issue 23): a box alone runs its scheduling round on events, or every
``ALONE_ROUND``; a member of a cluster of boxes every second (it judges silent boxes)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from floydd.scheduler.placer import ALONE_ROUND, ClusterScheduler, every_second_or_sooner
from tests.harness.wait import wait_until_async


def test_a_box_alone_schedules_on_events_and_a_member_every_second():
    assert ClusterScheduler(SimpleNamespace(alone=True))._period() == ALONE_ROUND
    assert ClusterScheduler(SimpleNamespace(alone=False))._period() == 1.0
    assert ALONE_ROUND >= 30


async def test_the_period_is_asked_before_each_wait_and_a_wake_runs_the_body():
    wake, rounds, asked = asyncio.Event(), [], []

    async def body() -> None:
        rounds.append(1)

    def period() -> float:
        asked.append(len(rounds))
        return 3600.0
    task = asyncio.create_task(every_second_or_sooner(wake, body, "test round", period))
    try:
        await wait_until_async(lambda: asked == [0])
        wake.set()
        await wait_until_async(lambda: rounds == [1] and asked == [0, 1])
        wake.set()
        await wait_until_async(lambda: rounds == [1, 1] and asked == [0, 1, 2])
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
