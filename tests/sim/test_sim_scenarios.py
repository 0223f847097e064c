"""Data-driven scenarios (tests/sim/testdata/*.txt); FLOYDD_REWRITE=1 rewrites them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .scenario import run_file

TESTDATA = Path(__file__).parent / "testdata"
FILES = sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario(path: Path) -> None:
    expected, actual = run_file(path)
    if os.environ.get("FLOYDD_REWRITE"):
        path.write_text(actual)
        return
    assert actual == expected


def test_figure8_catches_committing_an_old_term_entry() -> None:
    """With the rule broken, step (c) commits 2/2 and step (d) overwrites it."""
    _, actual = run_file(TESTDATA / "figure8.txt", mutations={"commit_previous_term"})
    assert "violation: committed entry 2 changed" in actual or "violation: leader completeness" in actual
