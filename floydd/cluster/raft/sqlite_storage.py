"""Raft's durable state in SQLite: WAL, ``synchronous=FULL``, one transaction per ready.

Tables (a database of its own, or tables beside others in one file)::

    raft_hard_state  one row: term, vote, commit
    raft_snapshot    one row: index, term, voters/learners (msgpack), data
    raft_log         one row per entry: idx (primary key), term, kind, data

:meth:`SqliteStorage.save` writes a whole ready in one ``BEGIN IMMEDIATE ...
COMMIT``: with WAL and ``synchronous=FULL`` the commit is one fsync of the WAL,
and a crash leaves either all of the ready or none of it. Entries are bytes the
caller encoded; nothing is pickled. The connection is not thread-safe: the
driver uses it from one writer thread.

``on_snapshot(db, snapshot)``, when given, runs inside the transaction that saves a snapshot
(one received from the leader, or a founding one): the application swaps in what it staged
beside it in tables of the same file (:mod:`floydd.cluster.state.archive`: the archive of finished
jobs, which is not in the snapshot's data), so a crash keeps both or neither.

:func:`inspect_log` reads a stopped node's file without changing it and says what makes it
untrustworthy (``floydd.daemon.integrity`` runs it before the daemon opens the log): rows
that do not decode, a log that does not run on from its snapshot without a gap, terms that
go down, a commit index past the last entry. SQLite's own checks of the
file come first (:mod:`floydd.store.dbfile`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import msgpack

from .codec import decode_conf, encode_conf
from .errors import RaftInvariantError
from .messages import ConfState, Entry, EntryKind, HardState, Snapshot
from .storage import DurableState, bootstrap_state, check_save

__all__ = ["SqliteStorage", "LogInspection", "inspect_log", "TABLES"]

TABLES = frozenset({"raft_hard_state", "raft_snapshot", "raft_log"})
_SCHEMA = """
CREATE TABLE IF NOT EXISTS raft_hard_state (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    term INTEGER NOT NULL, vote, commit_index INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS raft_snapshot (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    idx INTEGER NOT NULL, term INTEGER NOT NULL, conf BLOB NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS raft_log (
    idx INTEGER PRIMARY KEY, term INTEGER NOT NULL, kind INTEGER NOT NULL, data BLOB NOT NULL);
"""


class SqliteStorage:
    def __init__(self, path: str | Path, *, check_same_thread: bool = True,
                 on_snapshot: Callable[[sqlite3.Connection, Snapshot], None] | None = None) -> None:
        self.path = str(path)
        self._on_snapshot = on_snapshot
        self._db = sqlite3.connect(self.path, isolation_level=None,
                                   check_same_thread=check_same_thread)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        snap = self._load_snapshot()
        self._snapshot_index = snap.index
        row = self._db.execute("SELECT max(idx) FROM raft_log").fetchone()
        self._last_index = row[0] if row[0] is not None else snap.index

    @classmethod
    def bootstrap(cls, path: str | Path, conf: ConfState, **kwargs) -> "SqliteStorage":
        """Open ``path`` for a founding member: record the initial membership unless
        the database already holds state."""
        storage = cls(path, **kwargs)
        if storage._db.execute("SELECT count(*) FROM raft_snapshot").fetchone()[0] == 0:
            state = bootstrap_state(conf)
            storage.save(state.hard_state, (), state.snapshot)
        return storage

    def load(self) -> DurableState:
        db = self._db
        row = db.execute("SELECT term, vote, commit_index FROM raft_hard_state").fetchone()
        hs = HardState(*row) if row else HardState()
        snap = self._load_snapshot()
        entries = tuple(Entry(term, idx, bytes(data), EntryKind(kind)) for idx, term, kind, data
                        in db.execute("SELECT idx, term, kind, data FROM raft_log "
                                      "WHERE idx > ? ORDER BY idx", (snap.index,)))
        return DurableState(hard_state=hs, snapshot=snap, entries=entries)

    def save(self, hard_state: HardState | None, entries: Sequence[Entry],
             snapshot: Snapshot | None) -> None:
        if hard_state is None and not entries and snapshot is None:
            return
        db = self._db
        snapshot_index, last_index = self._snapshot_index, self._last_index
        if snapshot is not None:
            snapshot_index = last_index = snapshot.index
        check_save(last_index, snapshot_index, entries)
        db.execute("BEGIN IMMEDIATE")
        try:
            if snapshot is not None:
                self._write_snapshot(snapshot)
                db.execute("DELETE FROM raft_log")
                if self._on_snapshot is not None:
                    self._on_snapshot(db, snapshot)
            if entries:
                first = entries[0].index
                if first <= last_index:
                    db.execute("DELETE FROM raft_log WHERE idx >= ?", (first,))
                db.executemany("INSERT INTO raft_log (idx, term, kind, data) VALUES (?, ?, ?, ?)",
                               [(e.index, e.term, int(e.kind), e.data) for e in entries])
                last_index = entries[-1].index
            if hard_state is not None:
                db.execute("INSERT OR REPLACE INTO raft_hard_state (id, term, vote, commit_index) "
                           "VALUES (0, ?, ?, ?)",
                           (hard_state.term, hard_state.vote, hard_state.commit))
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise
        self._snapshot_index, self._last_index = snapshot_index, last_index

    def compact(self, snapshot: Snapshot) -> None:
        if snapshot.index <= self._snapshot_index:
            return
        if snapshot.index > self._last_index:
            raise RaftInvariantError(f"cannot compact at {snapshot.index}: log ends at {self._last_index}")
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            self._write_snapshot(snapshot)
            db.execute("DELETE FROM raft_log WHERE idx <= ?", (snapshot.index,))
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise
        self._snapshot_index = snapshot.index

    def close(self) -> None:
        self._db.close()

    def _write_snapshot(self, snapshot: Snapshot) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO raft_snapshot (id, idx, term, conf, data) VALUES (0, ?, ?, ?, ?)",
            (snapshot.index, snapshot.term, msgpack.packb(encode_conf(snapshot.conf)), snapshot.data))

    def _load_snapshot(self) -> Snapshot:
        row = self._db.execute("SELECT idx, term, conf, data FROM raft_snapshot").fetchone()
        if row is None:
            return Snapshot()
        idx, term, conf, data = row
        return Snapshot(index=idx, term=term, conf=decode_conf(msgpack.unpackb(conf)), data=bytes(data))


@dataclass(frozen=True, slots=True, kw_only=True)
class LogInspection:
    problem: str = ""       # "" when the state may be trusted
    snapshot: int = 0       # the snapshot's index (0: none)
    last: int = 0           # the last entry's index (the snapshot's when the log is empty)
    entries: int = 0        # entries after the snapshot

    @property
    def blank(self) -> bool:
        """Holds nothing: no snapshot, no entries (a node that has not joined anything yet)."""
        return not self.problem and self.last == 0


def inspect_log(path: str | Path, *, decode: Callable[[bytes], object] | None = None,
                restore: Callable[[bytes], object] | None = None) -> LogInspection:
    """Check the raft state in ``path`` (read-only; its tables must exist). ``decode`` is tried
    on the data of every normal entry, ``restore`` on the snapshot's data."""
    db = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=ro", uri=True)
    try:
        return _inspect(db, decode, restore)
    except sqlite3.DatabaseError as e:
        return LogInspection(problem=f"is damaged ({e})")
    finally:
        db.close()


def _inspect(db: sqlite3.Connection, decode: Callable[[bytes], object] | None,
             restore: Callable[[bytes], object] | None) -> LogInspection:
    hard = db.execute("SELECT term, vote, commit_index FROM raft_hard_state").fetchall()
    snap = db.execute("SELECT idx, term, conf, data FROM raft_snapshot").fetchall()
    index = term = 0
    if snap:
        index, term, conf, data = snap[0]
        if not (_count(index) and _count(term)):
            return LogInspection(problem="has a snapshot with a malformed index or term")
        try:
            decode_conf(msgpack.unpackb(conf))
        except Exception:  # noqa: BLE001 - msgpack and the codec raise several unrelated types
            return LogInspection(problem=f"has a snapshot (at entry {index}) whose membership does not decode")
        try:
            if restore is not None:
                restore(bytes(data))
        except Exception:  # noqa: BLE001 - whatever the state raises, the snapshot is damaged
            return LogInspection(problem=f"has a snapshot (at entry {index}) whose state does not decode")
    expected, last_term, entries = index + 1, term, 0
    for idx, entry_term, kind, data in db.execute(
            "SELECT idx, term, kind, data FROM raft_log WHERE idx > ? ORDER BY idx", (index,)):
        if idx != expected:
            return LogInspection(problem=f"has a gap in its log: entry {expected - 1} is followed by entry {idx}")
        if not _count(entry_term) or entry_term < last_term:
            return LogInspection(problem=f"has entry {idx} with term {entry_term!r}, below the term "
                                         f"{last_term} of the entry before it")
        if kind not in (int(EntryKind.NORMAL), int(EntryKind.CONF_CHANGE)) or not isinstance(data, bytes):
            return LogInspection(problem=f"has entry {idx} of an unknown kind")
        if decode is not None and kind == int(EntryKind.NORMAL) and data:
            try:
                decode(data)
            except Exception:  # noqa: BLE001 - whatever the decoder raises, the entry is damaged
                return LogInspection(problem=f"has entry {idx} whose command does not decode")
        expected, last_term, entries = idx + 1, entry_term, entries + 1
    last = expected - 1
    if hard:
        hard_term, vote, commit = hard[0]
        if not (_count(hard_term) and _count(commit)) or (vote is not None and not isinstance(vote, str)):
            return LogInspection(problem="has a malformed hard state (term, vote, commit)")
        if commit > last:
            return LogInspection(problem=f"says entry {commit} is committed, but its log ends at entry {last}")
        if hard_term < last_term:
            return LogInspection(problem=f"is at term {hard_term}, below the term {last_term} of its last entry")
    elif last:
        return LogInspection(problem="has log entries but no hard state (term, vote, commit)")
    return LogInspection(snapshot=index, last=last, entries=entries)


def _rollback(db: sqlite3.Connection) -> None:
    try:
        db.execute("ROLLBACK")
    except sqlite3.OperationalError:  # SQLite ended the transaction itself (a disk full at COMMIT)
        pass


def _count(value: object) -> bool:
    return type(value) is int and value >= 0
