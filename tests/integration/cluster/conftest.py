"""The one cluster fixture (STYLE 17); the harness is in :mod:`._harness`."""

from __future__ import annotations

import threading
import time

import pytest

from floydd.cluster.config import ClusterConfig
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
    deadline = time.monotonic() + 5
    while True:
        leaked = [t for t in set(threading.enumerate()) - before if t.is_alive() and t.name.startswith("raft-")]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert not leaked, f"threads left running: {leaked}"
