from __future__ import annotations

from pathlib import Path

import pytest

from floydd.store import Store


@pytest.fixture
def store(tmp_path: Path):
    s = Store.open(tmp_path / "store")
    yield s
    s.close()


@pytest.fixture
def no_racy_window(monkeypatch):
    """Let the metadata cache trust files written a moment ago (tests write them just now)."""
    from floydd.store import cache
    monkeypatch.setattr(cache, "RACY_NS", 0)
