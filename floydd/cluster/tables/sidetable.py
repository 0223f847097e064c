"""A table kept beside the raft log, in its database: what the archive of finished jobs
(:mod:`floydd.cluster.tables.archive_db`) and the audit chain (:mod:`floydd.cluster.tables.audit_db`)
share. Each holds a :class:`SideTable` as a part (its ``table``), made with the table's name,
columns and schema and the one thing only its owner knows: how to decode a streamed chunk.

Both are written as commands are applied, not carried in the snapshot's data but streamed
beside it in chunks, and staged on the receiving box in ``<table>_incoming`` until the
snapshot they came with is saved:

    NAME              the rows
    NAME_incoming     a received snapshot's rows, staged (same columns)
    NAME_incoming_meta    (idx, term, complete) of the snapshot being received

:meth:`SideTable.saved` runs inside the transaction that saves a snapshot: the staged rows
replace the table's when they came complete with that snapshot, and are dropped otherwise.

Three kinds of connection: the loop's (point reads while commands are applied,
:meth:`SideTable.loop`), the raft writer thread's (fsynced like the log,
:meth:`SideTable.transaction`) and a short-lived one per listing or export page, in a worker
thread (:meth:`SideTable.reader`).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

__all__ = ["SideTable", "StagedSink", "Run"]

Run = Callable[..., Awaitable[Any]]
"""Runs a function on the raft writer thread, durably (the driver's ``_write_durably``)."""


class SideTable:
    """The connections, transactions and snapshot staging of table ``name`` in ``path``:
    its ``columns`` (as in an INSERT), its ``schema`` (every CREATE statement: the table, its
    incoming twin with the same columns, the meta table), and ``decode_chunk``, which gives
    the rows of a chunk a peer streamed (each checked) as ``columns`` tuples."""

    def __init__(self, path: str | Path, *, name: str, columns: str, schema: list[str],
                 decode_chunk: Callable[[bytes], list[tuple]]) -> None:
        self.path = Path(path)
        self.name, self.columns, self.schema = name, columns, schema
        self.decode_chunk = decode_chunk
        self._loop_db: sqlite3.Connection | None = None
        self._write_db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def insert(self, table: str) -> str:
        """``INSERT OR REPLACE`` of one row of :attr:`columns` into ``table``."""
        marks = ", ".join("?" * len(self.columns.split(",")))
        return f"INSERT OR REPLACE INTO {table} ({self.columns}) VALUES ({marks})"

    # -- snapshots -----------------------------------------------------------------------------

    def receive(self, index: int, term: int, run: Run) -> StagedSink:
        """Stage a snapshot's rows (on the writer thread), for :meth:`saved`."""
        return StagedSink(self, index, term, run)

    def saved(self, db: sqlite3.Connection, snapshot: Any) -> None:
        """SqliteStorage's ``on_snapshot`` hook, inside the transaction that saves ``snapshot``:
        the rows staged with it replace the table's; anything else staged is dropped."""
        for statement in self.schema:
            db.execute(statement)
        meta = db.execute(f"SELECT idx, term, complete FROM {self.name}_incoming_meta").fetchone()
        if meta is None:
            return
        if tuple(meta) == (snapshot.index, snapshot.term, 1):
            db.execute(f"DELETE FROM {self.name}")
            db.execute(f"INSERT INTO {self.name} ({self.columns}) SELECT {self.columns} FROM {self.name}_incoming")
        db.execute(f"DELETE FROM {self.name}_incoming")
        db.execute(f"DELETE FROM {self.name}_incoming_meta")

    # -- connections ---------------------------------------------------------------------------

    def transaction(self, statements: list[tuple[str, tuple]]) -> None:
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

    def loop(self) -> sqlite3.Connection:
        """The loop's connection (point reads while commands are applied)."""
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
    def reader(self) -> Iterator[sqlite3.Connection]:
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
            for statement in self.schema:
                db.execute(statement)
        return db

    def close(self) -> None:
        for db in (self._loop_db, self._write_db):
            if db is not None:
                db.close()
        self._loop_db = self._write_db = None


class StagedSink:
    """Where a received snapshot's chunks of one table go: ``NAME_incoming``, marked
    complete by :meth:`finish` (what :meth:`SideTable.saved` looks for)."""

    def __init__(self, table: SideTable, index: int, term: int, run: Run) -> None:
        self._table, self._index, self._term, self._run = table, index, term, run
        self._begun = False
        self._meta = (f"INSERT OR REPLACE INTO {table.name}_incoming_meta (id, idx, term, complete) "
                      "VALUES (0, ?, ?, ?)")

    async def add(self, chunk: bytes) -> None:
        rows = self._table.decode_chunk(chunk)
        await self._begin()
        insert = self._table.insert(f"{self._table.name}_incoming")
        await self._run(self._table.transaction, [(insert, row) for row in rows])

    async def finish(self) -> None:
        await self._begin()
        await self._run(self._table.transaction, [(self._meta, (self._index, self._term, 1))])

    async def _begin(self) -> None:
        if not self._begun:
            self._begun = True
            await self._run(self._table.transaction, [(f"DELETE FROM {self._table.name}_incoming", ()),
                                                      (self._meta, (self._index, self._term, 0))])
