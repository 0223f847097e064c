"""Fixtures for the TUI tests: a fixed fake cluster, an app over it, and a way to wait."""

from __future__ import annotations

import io
from typing import Callable

import pytest
from rich.console import Console

from floydd.tui.app import FloydTop
from floydd.tui.poll import Want
from floydd.tui.poller import Poller
from tests.conftest import wait_until_async
from tests.tui.fake_cluster import NOW, FakeClient, FakeCluster

SIZE = (130, 36)
"""Terminal size for pilot and snapshot tests."""


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def client(cluster: FakeCluster) -> FakeClient:
    return FakeClient(cluster)


def make_app(client: FakeClient, *, clock: Callable[[], float] = lambda: NOW, refresh: float = 3600.0,
             history: int = 0) -> FloydTop:
    """An app that polls once at start and then only when poked (``refresh`` is an hour).

    ``history`` polls are made (the cluster ticking between them) before the
    app starts, so the GPU history sparklines have a fixed shape.
    """
    poller = Poller(client, clock=clock)
    for _ in range(history):
        poller.poll(Want())
        client.cluster.tick()
    client.calls.clear()
    return FloydTop(client, clock=clock, refresh=refresh, poller=poller)


async def until(pilot, cond: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> object:
    """Let the app run until ``cond()`` is truthy (the pilot's pause lets messages through)."""
    return await wait_until_async(cond, timeout, what=what, pause=pilot.pause)


async def started(pilot, app: FloydTop) -> None:
    """Wait until the first snapshot is in and the first screen is composed and drawn."""
    from floydd.tui.widgets.banner import Banner

    await until(pilot, lambda: app.polls >= 1 and app.screen.query(Banner), what="the first snapshot")
    await pilot.pause()


async def fresh(pilot, app: FloydTop, what: str = "a fresh snapshot") -> None:
    """Wait until a snapshot begun after this call has been drawn.

    A poll may be under way already (begun before the test changed something),
    so poke twice: the second poll starts after the first has finished.
    """
    for _ in range(2):
        before = app.polls
        app.action_poll_now()
        await until(pilot, lambda: app.polls > before, what=what)
    await pilot.pause()


def plain(widget) -> str:
    """The text a Static shows (its content rendered without styles)."""
    content = widget.content
    if isinstance(content, str):
        return content
    console = Console(width=200, file=io.StringIO(), record=True, color_system=None)
    console.print(content)
    return console.export_text()
