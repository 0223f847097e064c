"""Recording the rest of ended jobs' logs, behind their final state (issue 20, "Limits").

A job whose process ended is made final within seconds (:mod:`.watch` drains its log for at
most ``DRAIN_BUDGET``); a flood of metric lines left in its log is recorded afterwards, here:
one task per job (:meth:`CatchUps.start`), retried when the records are briefly unavailable
and, on a full disk, once there is room again. The record is marked ``log_behind`` until the
end is reached, so the next daemon picks it up (:meth:`NodeRuntime.reattach`). Once a log is
recorded to its end, ``on_recorded(project, number)`` says so (the reconciler then sends the
cluster the job's final metrics). A new start of the same job here abandons its catch-up
(:meth:`CatchUps.abandon`: the record of the attempt is replaced), as does its deletion.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from floydd import log
from floydd.errors import NotFound
from floydd.runtime.disk import CHECK_INTERVAL
from floydd.runtime.watch import JobWatch
from floydd.tasks import cancel_and_wait

__all__ = ["CatchUps"]

Key = tuple[str, int]


class CatchUps:
    """The catch-up tasks of one runtime; ``spawn(coro, name)`` makes a task it owns."""

    def __init__(self, *, spawn: Callable, retry: float, on_recorded: Callable[[str, int], None] | None) -> None:
        self._spawn, self._retry, self._on_recorded = spawn, retry, on_recorded
        self._tasks: dict[Key, asyncio.Task] = {}

    def start(self, watch: JobWatch) -> None:
        """Record the rest of ``watch``'s job's log (no second task for a job)."""
        key = (watch.project, watch.number)
        if key not in self._tasks:
            log.runtime.info("job %s: the rest of its log is recorded behind its end", watch.key)
            self._tasks[key] = self._spawn(self._run(watch), f"floydd.runtime.catch-up {watch.key}")

    async def abandon(self, key: Key) -> None:
        """A new start of the job: its previous attempt's log is not recorded further."""
        task = self._tasks.pop(key, None)
        if task is not None:
            log.runtime.info("job %s/%d starts again: the rest of its previous log is not recorded", *key)
            await cancel_and_wait({task})

    async def _run(self, watch: JobWatch) -> None:
        key = (watch.project, watch.number)
        delay = self._retry
        try:
            while True:
                try:
                    if await watch.catch_up():
                        break
                    await asyncio.sleep(CHECK_INTERVAL)       # the disk is full: again once there is room
                except asyncio.CancelledError:
                    raise
                except NotFound:                              # deleted, or placed here again, meanwhile
                    return
                except Exception:
                    log.runtime.exception("recording the rest of job %s's log failed; retrying in %.1fs",
                                          watch.key, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30.0)
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]
        log.runtime.info("job %s: its log is recorded to the end", watch.key)
        if self._on_recorded is not None:
            try:
                self._on_recorded(*key)
            except Exception:
                log.runtime.exception("on_recorded(%s) failed", watch.key)
