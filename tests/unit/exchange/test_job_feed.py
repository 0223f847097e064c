"""An export's jobs gathered on the loop while the file is written (:class:`floydd.exchange.export.JobFeed`):
the writing thread takes them in order however they finish, a job that fails to gather fails
the writing, and closing the feed cancels what is still gathering."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from floydd.errors import Unavailable
from floydd.exchange import export
from floydd.exchange.export import JobFeed, Plan


def _plan(n: int) -> Plan:
    return Plan(views=[SimpleNamespace(id=f"p/{k}", number=k) for k in range(1, n + 1)])


async def _estimate(store, plan) -> int:
    return 1000 * len(list(plan.jobs))


def _take(feed: JobFeed) -> tuple[list, BaseException | None]:
    """What the writing thread gets: the jobs in order, then what ended it."""
    got = []
    try:
        for item in feed:
            got.append(item)
    except BaseException as exc:    # noqa: BLE001 - the test looks at it
        return got, exc
    return got, None


async def test_the_writer_takes_the_jobs_in_order_however_they_finish(monkeypatch, tmp_path):
    done = {k: asyncio.Event() for k in range(1, 5)}
    done[4].set()

    async def job(service, view, spool):
        await done[view.number + 1].wait()      # the last finishes first, the first last
        done[view.number].set()
        return f"item {view.number}"
    monkeypatch.setattr(export, "_job", job)
    monkeypatch.setattr(export, "_estimate", _estimate)
    plan = _plan(3)
    feed = JobFeed(SimpleNamespace(store=None), plan, tmp_path)
    try:
        got, error = await asyncio.to_thread(_take, feed)
        assert await feed.all() == got
    finally:
        await feed.aclose()
    assert got == ["item 1", "item 2", "item 3"] and error is None
    assert plan.estimate == 3000                 # with its jobs, once gathered


async def test_a_job_that_fails_to_gather_ends_the_writing_and_closing_cancels_the_rest(monkeypatch, tmp_path):
    cancelled = []

    async def job(service, view, spool):
        if view.number == 2:
            raise Unavailable("box-2, which ran p/2, is away")
        if view.number == 3:
            try:
                await asyncio.Event().wait()     # still gathering when the writing ends
            except asyncio.CancelledError:
                cancelled.append(view.id)
                raise
        return f"item {view.number}"
    monkeypatch.setattr(export, "_job", job)
    monkeypatch.setattr(export, "_estimate", _estimate)
    feed = JobFeed(SimpleNamespace(store=None), _plan(3), tmp_path)
    try:
        got, error = await asyncio.to_thread(_take, feed)
    finally:
        await feed.aclose()
    assert got == ["item 1"] and isinstance(error, Unavailable) and "box-2" in error.message
    assert cancelled == ["p/3"]
