"""One conformance suite for every Storage (memory, SQLite), plus SQLite's durability."""

from __future__ import annotations

import random
import sqlite3

import pytest

from floydd.cluster.raft import (ConfState, Entry, EntryKind, HardState, MemoryStorage,
                                 RaftInvariantError, RaftNode, Role, Snapshot, bootstrap_state)
from floydd.cluster.raft.sqlite_storage import SqliteStorage

CONF = ConfState(voters=frozenset({1, "b"}), learners=frozenset({3}))


@pytest.fixture(params=["memory", "sqlite"])
def make(request, tmp_path):
    def factory(state=None):
        if request.param == "memory":
            return MemoryStorage(state)
        path = tmp_path / "raft.db"
        if state is not None:
            return SqliteStorage.bootstrap(path, state.snapshot.conf)
        return SqliteStorage(path)
    return factory


def e(term, index, data=b""):
    return Entry(term, index, data)


def test_empty_storage_loads_empty(make) -> None:
    state = make().load()
    assert state.hard_state == HardState() and state.snapshot == Snapshot() and state.entries == ()


def test_bootstrap_names_the_members(make) -> None:
    state = make(bootstrap_state(CONF)).load()
    assert state.snapshot.conf == CONF and state.snapshot.index == 1
    assert state.hard_state == HardState(term=1, commit=1)


def test_save_appends_overwrites_and_keeps_hard_state(make) -> None:
    s = make(bootstrap_state(CONF))
    s.save(HardState(2, 1, 1), [e(2, 2, b"a"), e(2, 3, b"b"), e(2, 4, b"c")], None)
    s.save(HardState(3, "b", 3), [e(3, 3, b"x")], None)            # replaces 3 and 4
    st = s.load()
    assert [(x.index, x.term, x.data) for x in st.entries] == [(2, 2, b"a"), (3, 3, b"x")]
    assert st.hard_state == HardState(3, "b", 3)
    s.save(None, [e(3, 4, b"y")], None)
    assert s.load().hard_state == HardState(3, "b", 3) and len(s.load().entries) == 3


def test_entries_must_attach(make) -> None:
    s = make(bootstrap_state(CONF))
    with pytest.raises(RaftInvariantError):
        s.save(None, [e(2, 5)], None)
    with pytest.raises(RaftInvariantError):
        s.save(None, [e(2, 1)], None)          # inside the snapshot


def test_a_received_snapshot_replaces_the_log(make) -> None:
    s = make(bootstrap_state(CONF))
    s.save(None, [e(2, 2), e(2, 3)], None)
    snap = Snapshot(index=10, term=4, conf=ConfState(voters=frozenset({1})), data=b"state")
    s.save(HardState(4, None, 10), [e(4, 11, b"after")], snap)
    st = s.load()
    assert st.snapshot == snap and [x.index for x in st.entries] == [11]


def test_compact_drops_covered_entries_only(make) -> None:
    s = make(bootstrap_state(CONF))
    s.save(None, [e(2, i, b"%d" % i) for i in range(2, 7)], None)
    snap = Snapshot(index=4, term=2, conf=CONF, data=b"s4")
    s.compact(snap)
    s.compact(Snapshot(index=3, term=2, conf=CONF))              # older: ignored
    st = s.load()
    assert st.snapshot == snap and [x.index for x in st.entries] == [5, 6]


def test_conf_change_entries_keep_their_kind(make) -> None:
    s = make(bootstrap_state(CONF))
    s.save(None, [Entry(2, 2, b"cc", EntryKind.CONF_CHANGE)], None)
    assert s.load().entries[0].kind == EntryKind.CONF_CHANGE


def test_sqlite_is_wal_with_full_sync_and_one_transaction_per_save(tmp_path) -> None:
    s = SqliteStorage(tmp_path / "r.db")
    assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert s._db.execute("PRAGMA synchronous").fetchone()[0] == 2          # FULL
    statements = []
    s._db.set_trace_callback(statements.append)
    s.save(HardState(2, 1, 0), [e(2, i) for i in range(1, 50)], None)
    assert statements.count("COMMIT") == 1 and statements[0] == "BEGIN IMMEDIATE"


def test_sqlite_survives_reopening_and_rolls_back_a_failed_save(tmp_path) -> None:
    path = tmp_path / "r.db"
    s = SqliteStorage.bootstrap(path, CONF)
    s.save(HardState(2, 1, 1), [e(2, 2, b"a")], None)
    s.close()
    again = SqliteStorage(path)
    assert again.load().entries == (e(2, 2, b"a"),)

    def boom(*_):
        raise sqlite3.OperationalError("disk I/O error")
    real = again._db
    again._db = type("DB", (), {"execute": lambda self, sql, *a: boom() if sql.startswith("INSERT OR")
                                else real.execute(sql, *a),
                                "executemany": lambda self, *a: real.executemany(*a)})()
    with pytest.raises(sqlite3.OperationalError):
        again.save(HardState(3, 1, 1), [e(3, 3, b"lost")], None)
    again._db = real
    assert again.load().entries == (e(2, 2, b"a"),)            # none of the failed ready
    assert again.load().hard_state == HardState(2, 1, 1)


def test_a_node_on_sqlite_restarts_where_it_was(tmp_path) -> None:
    path = tmp_path / "node.db"
    storage = SqliteStorage.bootstrap(path, ConfState(voters=frozenset({1})))
    node = RaftNode(1, rng=random.Random(0), state=storage.load())
    node.campaign()
    for i in range(20):
        node.propose(b"%d" % i)
    applied = []
    while node.has_ready():
        rd = node.ready()
        storage.save(rd.hard_state, rd.entries, rd.snapshot)
        applied += [x.data for x in rd.committed_entries if x.data]
        node.advance()
    storage.compact(node.compact(node.log.applied - 5, b"snap"))
    storage.close()
    storage = SqliteStorage(path)
    again = RaftNode(1, rng=random.Random(0), state=storage.load())
    assert (again.term, again.log.committed, again.log.last_index()) == \
        (node.term, node.log.committed, node.log.last_index())
    assert again.log.snapshot.data == b"snap"
    again.campaign()
    assert again.role == Role.LEADER and again.term == node.term + 1
    assert applied == [b"%d" % i for i in range(20)]


def test_sqlite_runs_the_snapshot_hook_inside_the_save(tmp_path) -> None:
    """What the application stages beside a received snapshot is swapped in by the same
    transaction: the hook sees the snapshot, and a hook that fails keeps the old log."""
    seen = []

    def hook(db, snap):
        seen.append((snap.index, db.in_transaction))
        db.execute("CREATE TABLE IF NOT EXISTS beside (idx INTEGER)")
        db.execute("INSERT INTO beside VALUES (?)", (snap.index,))
        if snap.index == 9:
            raise OSError("disk went away")
    storage = SqliteStorage(tmp_path / "raft.db", on_snapshot=hook)
    storage.save(HardState(term=1, commit=0), [e(1, 1), e(1, 2)], None)
    storage.save(None, (), Snapshot(index=5, term=1, conf=CONF, data=b"s"))
    assert seen == [(5, True)]
    with pytest.raises(OSError):
        storage.save(None, (), Snapshot(index=9, term=1, conf=CONF, data=b"t"))
    assert storage.load().snapshot.index == 5
    assert [r for (r,) in sqlite3.connect(tmp_path / "raft.db").execute("SELECT idx FROM beside")] == [5]
    storage.close()
