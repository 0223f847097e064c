"""The one cluster fixture (STYLE 17); the harness is :mod:`tests.harness.cluster`."""

from __future__ import annotations

import pytest

from floydd.cluster.config import ClusterConfig
from tests.harness.cluster import Cluster, no_leaked_threads  # noqa: F401 (a fixture)


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
def _no_leaked_threads(no_leaked_threads):
    """Every test here ends with no raft thread running."""
