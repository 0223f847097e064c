"""cancel_and_wait ends tasks that swallow a cancellation (asyncio.wait_for on Python 3.11)."""

from __future__ import annotations

import asyncio

from floydd.tasks import cancel_and_wait


async def test_a_task_that_survives_one_cancel_is_cancelled_again_and_errors_are_consumed():
    swallowed = []

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                swallowed.append(1)
                if len(swallowed) == 1:     # what a lost cancellation looks like to the loop
                    continue
                raise

    async def failing() -> None:
        raise RuntimeError("boom")

    tasks = [asyncio.create_task(stubborn()), asyncio.create_task(failing()), asyncio.create_task(asyncio.sleep(10))]
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(tasks, again_after=0.01), 5)
    assert all(t.done() for t in tasks) and len(swallowed) == 2
