"""The one cluster fixture (STYLE 17); the harness is in :mod:`._harness`."""

from __future__ import annotations

import threading

import pytest

from floydd.cluster.config import ClusterConfig
from tests.conftest import wait_until
from tests.integration.cluster._harness import Cluster


@pytest.fixture
async def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def make_cluster(tmp_path):
    """``make_cluster(config)``: a cluster with other settings than TEST_CONFIG."""
    made: list[Cluster] = []

    def make(config: ClusterConfig) -> Cluster:
        made.append(Cluster(tmp_path / f"c{len(made)}", config))
        return made[-1]

    try:
        yield make
    finally:
        for c in made:
            await c.close()


@pytest.fixture(autouse=True)
def no_leaked_threads():
    before = set(threading.enumerate())
    yield

    def leaked() -> list:
        return [t for t in set(threading.enumerate()) - before if t.is_alive() and t.name.startswith("raft-")]
    wait_until(lambda: not leaked(), 5, what="raft threads to end", details=lambda: f"threads left running: {leaked()}")
