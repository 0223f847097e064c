"""Fixtures shared by every test folder."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Callable

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis's timing checks judge the machine, not the code: on a loaded CI box (two cores,
# several workers, daemons of other tests) generation is "slow" and a deadline is missed.
settings.register_profile("floydd", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("floydd")


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
                           details: Callable[[], str] | None = None) -> object:
    """:func:`wait_until` for async tests: polls without blocking the loop (``in_thread``: call
    ``cond`` in a thread, for conditions that read files or databases). ``details()`` is added
    to the failure message."""
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(cond) if in_thread else cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}" + (f"; {details()}" if details else ""))
        await asyncio.sleep(interval)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free on ``host`` now (all held open while picked, so no two are the
    same). A test that starts a box binds every port it picks: ``--listen`` and ``--api-listen``
    both (the API's default is 7655 whatever ``--listen`` says, so two boxes would collide)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", help="also run tests marked slow (CI always does)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow system tests run in CI (CI set) or with --slow; locally the default run stays fast."""
    if config.getoption("--slow") or os.environ.get("CI"):
        return
    skip = pytest.mark.skip(reason="slow: runs in CI, or locally with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _no_saved_login(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A developer's own ``floyd login`` must not send the tests' commands (and the processes
    they start, which inherit the environment) to their lab."""
    os.environ["FLOYD_CONFIG_DIR"] = str(tmp_path_factory.mktemp("floyd-config"))
