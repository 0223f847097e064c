"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import socket

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis's timing checks judge the machine, not the code: on a loaded CI box (two cores,
# several workers, daemons of other tests) generation is "slow" and a deadline is missed.
settings.register_profile("floydd", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("floydd")

from tests.harness import leftovers
from tests.harness.wait import wait_until, wait_until_async

__all__ = ["wait_until", "wait_until_async", "free_ports"]


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


@pytest.fixture(autouse=True, scope="session")
def _no_process_left(tmp_path_factory: pytest.TempPathFactory):
    """No test leaves a floydd daemon, agent or sandbox running (:mod:`tests.harness.leftovers`):
    checked once this test process's tests are done (each xdist worker checks its own)."""
    leftovers.watch(tmp_path_factory.getbasetemp())
    yield
    try:
        wait_until(lambda: not leftovers.leftovers(), 10, interval=0.2,
                   what="the daemons, agents and sandboxes the tests started to end",
                   details=lambda: "still running:\n" + leftovers.describe(leftovers.leftovers()))
    finally:
        leftovers.kill(leftovers.leftovers())
