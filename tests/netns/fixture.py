"""The ``netns`` pytest fixture: ``net = netns(3)`` gives 3 hosts, torn down after the test.

Register it where it is used: ``from tests.netns.fixture import netns  # noqa: F401`` in a
conftest.py (or test module), or ``pytest_plugins = ["tests.netns.fixture"]`` in the root
tests/conftest.py. Tests skip, saying why, only when not root or without ``ip netns``.
"""

from __future__ import annotations

import pytest

from tests.netns.network import TestNetwork, netns_unavailable_reason

__all__ = ["netns"]


@pytest.fixture
def netns():
    """Factory: ``netns(n, **kw)`` -> an up :class:`TestNetwork`; everything goes at teardown."""
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"multi-host tests {reason}")
    made: list[TestNetwork] = []

    def make(n: int, **kw) -> TestNetwork:
        net = TestNetwork(**kw)
        made.append(net)
        return net.up(n)

    try:
        yield make
    finally:
        for net in made:
            net.down()
