"""``inspect_log``: a stopped node's raft state is checked before the daemon trusts it."""

from __future__ import annotations

import sqlite3

import msgpack
import pytest

from floydd.cluster.raft import ConfState, Entry, HardState
from floydd.cluster.raft.sqlite_storage import SqliteStorage, inspect_log

CONF = ConfState(voters=frozenset({"a"}))


def _log(path, entries: int = 5) -> None:
    s = SqliteStorage.bootstrap(path, CONF)
    s.save(HardState(2, "a", 1 + entries), [Entry(2, i, msgpack.packb({"op": "x"})) for i in range(2, 2 + entries)],
           None)
    s.close()


def test_a_healthy_log_and_a_blank_one(tmp_path) -> None:
    _log(tmp_path / "r.db")
    found = inspect_log(tmp_path / "r.db", decode=msgpack.unpackb)
    assert found.problem == "" and (found.snapshot, found.last, found.entries) == (1, 6, 5)
    SqliteStorage(tmp_path / "blank.db").close()
    assert inspect_log(tmp_path / "blank.db").blank


@pytest.mark.parametrize("sql, says", [
    ("DELETE FROM raft_log WHERE idx = 4", "has a gap in its log: entry 3 is followed by entry 5"),
    ("UPDATE raft_hard_state SET commit_index = 99", "says entry 99 is committed, but its log ends at entry 6"),
    ("UPDATE raft_log SET term = 1 WHERE idx = 5", "has entry 5 with term 1, below the term 2"),
    ("UPDATE raft_log SET data = x'c1c1c1' WHERE idx = 3", "has entry 3 whose command does not decode"),
    ("UPDATE raft_snapshot SET conf = x'c1'", "whose membership does not decode"),
    ("DELETE FROM raft_hard_state", "has log entries but no hard state"),
])
def test_what_makes_a_log_untrustworthy_is_named(tmp_path, sql, says) -> None:
    path = tmp_path / "r.db"
    _log(path)
    db = sqlite3.connect(path)
    with db:
        db.execute(sql)
    db.close()
    assert says in inspect_log(path, decode=msgpack.unpackb).problem
