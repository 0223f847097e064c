"""Fixtures of the in-process job pipeline tests (see :mod:`tests.harness.pipeline`)."""

from __future__ import annotations

import pytest

from tests.harness.cluster import no_leaked_threads  # noqa: F401 (a fixture)
from tests.harness.pipeline import Boxes, Lone


@pytest.fixture(autouse=True)
def _no_leaked_threads(no_leaked_threads):
    """Every test here ends with no raft thread running."""


@pytest.fixture
async def lone(tmp_path):
    c = Lone(tmp_path)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def boxes(tmp_path):
    c = Boxes(tmp_path)
    try:
        yield c
    finally:
        await c.close()
