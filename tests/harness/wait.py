"""The one polling helper (STYLE 17, Nomad's ``WaitForResult``): wait for a condition, never
sleep for a guess. :func:`wait_until` blocks; :func:`wait_until_async` yields to the loop.
Every harness's ``wait_for`` is a use of these."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

import pytest

__all__ = ["wait_until", "wait_until_async"]


def wait_until(cond: Callable[[], object], timeout: float = 10.0, interval: float = 0.01,
               what: str = "condition", *, details: Callable[[], str] | None = None) -> object:
    """Poll ``cond`` until it returns something truthy; fail the test after ``timeout`` s
    (``details()`` is added to the failure message)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}" + (f"; {details()}" if details else ""))
        time.sleep(interval)


async def wait_until_async(cond: Callable[[], object], timeout: float = 10.0, interval: float = 0.01,
                           what: str = "condition", *, in_thread: bool = False,
                           details: Callable[[], str] | None = None,
                           pause: Callable[[float], Awaitable[object]] = asyncio.sleep) -> object:
    """:func:`wait_until` for async tests: polls without blocking the loop (``in_thread``: call
    ``cond`` in a thread, for conditions that read files or databases). ``details()`` is added
    to the failure message; ``pause(interval)`` waits between polls (a Textual pilot's
    ``pause`` lets the app's messages through)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(cond) if in_thread else cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}" + (f"; {details()}" if details else ""))
        await pause(interval)
