from __future__ import annotations

import pytest

from floydd.records import Records


@pytest.fixture
def records(tmp_path):
    with Records(tmp_path / "records.db") as r:
        yield r
