"""Failover with the default timing: median < 1 s, max < 2 s (DESIGN §5 targets)."""

from __future__ import annotations

import pytest

from floydd.cluster.raft import DEFAULT_CONFIG

from .failover import measure, summary


def test_failover_on_a_hundred_seeds() -> None:
    s = summary([measure(seed) for seed in range(100)])
    assert s["median_ms"] < 1000 and s["max_ms"] < 2000, s
    assert s["median_ticks"] >= DEFAULT_CONFIG.election_ticks      # no faster than a timeout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_failover_on_a_thousand_seeds() -> None:
    s = summary([measure(seed) for seed in range(1000)])
    assert s["median_ms"] < 1000 and s["max_ms"] < 2000, s
