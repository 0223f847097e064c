"""Failing futures that nobody may be awaiting any more."""

from __future__ import annotations

import asyncio

__all__ = ["settle"]


def settle(fut: asyncio.Future, exc: BaseException) -> None:
    """Fail ``fut`` unless done, without a "never retrieved" warning if nobody awaits it
    (its caller may have timed out; whoever still awaits it gets the exception)."""
    if not fut.done():
        fut.set_exception(exc)
        fut.exception()
