"""What the checks of a database file see before anything opens it, and what salvage reads back."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from floydd.store.dbfile import inspect, readable, salvage, set_aside

TABLES = {"t"}


def _make(path: Path, rows: int = 3000, *, crash: bool = False) -> None:
    """A WAL database of ``rows`` rows; ``crash``: the writer dies without closing (its WAL stays)."""
    code = f"""
import os, sqlite3
db = sqlite3.connect({str(path)!r}, isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)")
db.execute("BEGIN")
for i in range(1, {rows} + 1):
    db.execute("INSERT INTO t VALUES (?, ?)", (i, "x" * 50 + str(i)))
db.execute("COMMIT")
{"os._exit(0)" if crash else "db.close()"}
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_missing_file_is_absent_and_a_fresh_one_is_fine(tmp_path: Path):
    found = inspect(tmp_path / "x.db", TABLES)
    assert found.ok and found.blank and not found.exists
    _make(tmp_path / "x.db", 10)
    found = inspect(tmp_path / "x.db", TABLES)
    assert found.ok and not found.blank and found.tables == {"t"}


@pytest.mark.parametrize("damage, says", [
    (lambda p: os.truncate(p, 0), "is empty (0 bytes)"),
    (lambda p: os.truncate(p, p.stat().st_size // 2), "is damaged"),
    (lambda p: _overwrite(p, 0, 16), "is not an SQLite database"),
    (lambda p: _overwrite(p, p.stat().st_size // 4096 // 2 * 4096, 4096), "is damaged"),
])
def test_damage_is_named(tmp_path: Path, damage, says):
    path = tmp_path / "x.db"
    _make(path)
    damage(path)
    assert says in inspect(path, TABLES).problem


def test_a_database_without_all_of_its_tables_is_not_trusted(tmp_path: Path):
    path = tmp_path / "x.db"
    _make(path, 10)
    assert "lacks the table(s) u" in inspect(path, {"t", "u"}).problem
    assert "holds none of floydd's tables" in inspect(path, {"v"}).problem


def test_a_wal_deleted_after_a_crash_is_seen_while_its_index_is_there(tmp_path: Path):
    path = tmp_path / "x.db"
    _make(path, 50, crash=True)
    assert inspect(path, TABLES).ok                         # a crash image with its WAL: recoverable
    wal = Path(f"{path}-wal")
    data = wal.read_bytes()
    wal.write_bytes(data[:len(data) // 2])
    assert "shorter than what was committed" in inspect(path, TABLES).problem
    wal.unlink()
    assert "lost its write-ahead log x.db-wal" in inspect(path, TABLES).problem
    Path(f"{path}-shm").unlink()                            # no trace left: this cannot be seen
    assert inspect(path, TABLES).ok


def test_a_clean_close_leaves_no_wal_and_that_is_fine(tmp_path: Path):
    path = tmp_path / "x.db"
    _make(path, 50)
    assert not Path(f"{path}-wal").exists() and inspect(path, TABLES).ok


def test_salvage_steps_over_a_damaged_page_and_reads_a_truncated_file(tmp_path: Path):
    path = tmp_path / "x.db"
    _make(path)
    pages = path.stat().st_size // 4096
    _overwrite(path, pages // 2 * 4096, 4096)
    with readable(path) as src:
        rows = [r[0] for r in salvage(src, "t", "a")]
    assert 0 < len(rows) < 3000 and rows == sorted(rows) and rows[0] == 1 and rows[-1] == 3000
    os.truncate(path, pages // 2 * 4096)
    db = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError):
        db.execute("SELECT count(*) FROM t").fetchone()
    db.close()
    with readable(path) as src:
        assert len(list(salvage(src, "t", "a"))) > 100      # padded back to its header's size
    assert not [p.name for p in tmp_path.iterdir() if "salvage" in p.name], "the scratch copy is gone"


def test_set_aside_renames_the_file_and_its_wal_never_deletes(tmp_path: Path):
    path = tmp_path / "x.db"
    _make(path, 5, crash=True)
    moved = set_aside(path, "damaged-1")
    assert [p.name for p in moved] == ["x.db.damaged-1", "x.db.damaged-1-wal", "x.db.damaged-1-shm"]
    assert not path.exists() and all(p.exists() for p in moved)


def _overwrite(path: Path, offset: int, n: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(random.Random(offset).randbytes(n))
