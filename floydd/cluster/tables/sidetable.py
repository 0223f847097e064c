"""A table kept beside the raft log, in its database: what the archive of finished jobs
(:mod:`floydd.cluster.tables.archive_db`) and the audit chain (:mod:`floydd.cluster.tables.audit_db`)
share.

Both are written as commands are applied, not carried in the snapshot's data but streamed
beside it in chunks, and staged on the receiving box in ``<table>_incoming`` until the
snapshot they came with is saved:

    TABLE             the rows
    TABLE_incoming    a received snapshot's rows, staged (same columns)
    TABLE_incoming_meta   (idx, term, complete) of the snapshot being received

:meth:`SideTable.saved` runs inside the transaction that saves a snapshot: the staged rows
replace the table's when they came complete with that snapshot, and are dropped otherwise.

Three kinds of connection: the loop's (point reads while commands are applied), the raft
writer thread's (fsynced like the log, :meth:`SideTable._transaction`) and a short-lived
one per listing or export page, in a worker thread (:meth:`SideTable._reader`).
"""

from __future__ import annotations

import abc
import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

__all__ = ["SideTable", "StagedSink", "Run"]

Run = Callable[..., Awaitable[Any]]
"""Runs a function on the raft writer thread, durably (the driver's ``_write_durably``)."""


class SideTable(abc.ABC):
    """The connections, transactions and snapshot staging of one table in ``path``.

    A subclass names ``TABLE``, its ``COLUMNS`` (as in an INSERT) and ``SCHEMA`` (every
    CREATE statement: the table, its incoming twin with the same columns, the meta table)."""

    TABLE: str = ""
    COLUMNS: str = ""
    SCHEMA: list[str] = []

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._loop_db: sqlite3.Connection | None = None
        self._write_db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def insert(self, table: str) -> str:
        """``INSERT OR REPLACE`` of one row of :attr:`COLUMNS` into ``table``."""
        marks = ", ".join("?" * len(self.COLUMNS.split(",")))
        return f"INSERT OR REPLACE INTO {table} ({self.COLUMNS}) VALUES ({marks})"

    # -- snapshots -----------------------------------------------------------------------------

    def receive(self, index: int, term: int, run: Run) -> StagedSink:
        """Stage a snapshot's rows (on the writer thread), for :meth:`saved`."""
        return StagedSink(self, index, term, run)

    @abc.abstractmethod
    def decode_chunk(self, chunk: bytes) -> list[tuple]:
        """The rows of a chunk a peer streamed (each checked), as :attr:`COLUMNS` tuples."""

    def saved(self, db: sqlite3.Connection, snapshot: Any) -> None:
        """SqliteStorage's ``on_snapshot`` hook, inside the transaction that saves ``snapshot``:
        the rows staged with it replace the table's; anything else staged is dropped."""
        for statement in self.SCHEMA:
            db.execute(statement)
        meta = db.execute(f"SELECT idx, term, complete FROM {self.TABLE}_incoming_meta").fetchone()
        if meta is None:
            return
        if tuple(meta) == (snapshot.index, snapshot.term, 1):
            db.execute(f"DELETE FROM {self.TABLE}")
            db.execute(f"INSERT INTO {self.TABLE} ({self.COLUMNS}) SELECT {self.COLUMNS} FROM {self.TABLE}_incoming")
        db.execute(f"DELETE FROM {self.TABLE}_incoming")
        db.execute(f"DELETE FROM {self.TABLE}_incoming_meta")

    # -- connections ---------------------------------------------------------------------------

    def _transaction(self, statements: list[tuple[str, tuple]]) -> None:
        """Run ``statements`` in one ``BEGIN IMMEDIATE`` transaction (the writer thread)."""
        db = self._writer()
        db.execute("BEGIN IMMEDIATE")
        try:
            for sql, args in statements:
                db.execute(sql, args)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _loop(self) -> sqlite3.Connection:
        if self._loop_db is None:
            self._loop_db = self._connect()
        return self._loop_db

    def _writer(self) -> sqlite3.Connection:
        if self._write_db is None:
            db = self._connect()
            db.execute("PRAGMA synchronous=FULL")
            self._write_db = db
        return self._write_db

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        """A short-lived connection for one listing or export page (worker threads)."""
        db = self._connect()
        try:
            yield db
        finally:
            db.close()

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA busy_timeout=10000")
        with self._lock:
            db.execute("PRAGMA journal_mode=WAL")
            for statement in self.SCHEMA:
                db.execute(statement)
        return db

    def close(self) -> None:
        for db in (self._loop_db, self._write_db):
            if db is not None:
                db.close()
        self._loop_db = self._write_db = None


class StagedSink:
    """Where a received snapshot's chunks of one table go: ``TABLE_incoming``, marked
    complete by :meth:`finish` (what :meth:`SideTable.saved` looks for)."""

    def __init__(self, table: SideTable, index: int, term: int, run: Run) -> None:
        self._table, self._index, self._term, self._run = table, index, term, run
        self._begun = False
        self._meta = (f"INSERT OR REPLACE INTO {table.TABLE}_incoming_meta (id, idx, term, complete) "
                      "VALUES (0, ?, ?, ?)")

    async def add(self, chunk: bytes) -> None:
        rows = self._table.decode_chunk(chunk)
        await self._begin()
        insert = self._table.insert(f"{self._table.TABLE}_incoming")
        await self._run(self._table._transaction, [(insert, row) for row in rows])

    async def finish(self) -> None:
        await self._begin()
        await self._run(self._table._transaction, [(self._meta, (self._index, self._term, 1))])

    async def _begin(self) -> None:
        if not self._begun:
            self._begun = True
            await self._run(self._table._transaction, [(f"DELETE FROM {self._table.TABLE}_incoming", ()),
                                                       (self._meta, (self._index, self._term, 0))])
