"""Fixtures of the in-process job pipeline tests (see :mod:`._pipeline`)."""

from __future__ import annotations

import pytest

from tests.integration.cluster.conftest import no_leaked_threads  # noqa: F401 (autouse)
from tests.integration.jobs._pipeline import Boxes, Lone


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
