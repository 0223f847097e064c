"""Fixtures for the security unit tests: a fake clock and a fresh cluster CA."""

from __future__ import annotations

import pytest

from floydd.security.ca import ClusterCA


class FakeClock:
    """Time as a value the test moves by hand."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ca(tmp_path, clock) -> ClusterCA:
    return ClusterCA.create(tmp_path / "ca", "lab", clock=clock)
