"""Ending the background tasks a service owns (STYLE 9: every task has an owner).

:func:`cancel_and_wait` is what every ``close()`` uses. One cancel is not always enough on
Python 3.11: ``asyncio.wait_for`` returns the result of the future it waits on when that
future completes in the same loop iteration as the cancel (gh-86296, fixed in 3.12), so a
loop task can swallow its cancellation and run on, and a plain ``gather`` after one
``cancel()`` then waits for ever (seen as a hung test teardown). Tasks still running are
therefore cancelled again until they have all ended.
"""

from __future__ import annotations

import asyncio
from typing import Iterable

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(tasks: Iterable[asyncio.Task], *, again_after: float = 0.5) -> None:
    """Cancel ``tasks`` and return once every one has ended (their errors are consumed)."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=again_after)
    for task in tasks:
        if not task.cancelled():
            task.exception()        # retrieved: no "exception was never retrieved" at exit
