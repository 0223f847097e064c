"""The archive of finished jobs in SQLite, in tables of the raft log's database.

What it holds and the rules it keeps: :mod:`floydd.cluster.state.archive` (whose
:class:`~floydd.cluster.state.archive.MemoryArchive` is the model this one is held to).

Its connections, transactions and the staging of a received snapshot's rows are its part
``table``, a :class:`~floydd.cluster.tables.sidetable.SideTable`: point reads in the loop
while commands are applied (an indexed lookup each), writes on the raft writer thread
(pending rows, purges, staged snapshots, fsynced like the log), listings and export pages
in a worker thread.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any, AsyncIterator, Iterable

import msgpack

from floydd.cluster.state.archive import EXPORT_ROWS, ArchiveRules, Row, Run, decode_chunk, newest_first, row_of, visible
from floydd.cluster.tables.sidetable import SideTable, StagedSink
from floydd.model import Job

__all__ = ["SqliteArchive", "ARCHIVE_TABLES"]

ARCHIVE_TABLES = frozenset({"archive", "archive_incoming", "archive_incoming_meta"})
_COLUMNS = "id, project, number, created, state, idem_key, deleted, job"
_SCHEMA = [
    f"CREATE TABLE IF NOT EXISTS {table} (id TEXT PRIMARY KEY, project TEXT NOT NULL, number INTEGER NOT NULL, "
    "created REAL NOT NULL, state TEXT NOT NULL, idem_key TEXT, deleted INTEGER, job BLOB NOT NULL)"
    for table in ("archive", "archive_incoming")
] + [
    "CREATE INDEX IF NOT EXISTS archive_by_created ON archive (created, number)",
    "CREATE INDEX IF NOT EXISTS archive_by_project ON archive (project, created, number)",
    "CREATE INDEX IF NOT EXISTS archive_by_idem ON archive (idem_key)",
    "CREATE TABLE IF NOT EXISTS archive_incoming_meta (id INTEGER PRIMARY KEY CHECK (id = 0), "
    "idx INTEGER NOT NULL, term INTEGER NOT NULL, complete INTEGER NOT NULL)",
]


class SqliteArchive(ArchiveRules):
    """The archive in ``path`` (the raft log's database), see the module docstring."""

    def __init__(self, path: str | Path) -> None:
        self.table = SideTable(path, name="archive", columns=_COLUMNS, schema=_SCHEMA, decode_chunk=decode_chunk)
        self._pending: dict[str, Row] = {}           # rows applied, not yet written
        self._pending_idem: dict[str, set[str]] = {}  # their idempotency keys (a replay queues thousands)

    # -- what the state machine calls (in the loop) ------------------------------------------

    def put(self, row: Row) -> None:
        key = row.job.id
        self._pending[key] = row
        if row.job.idem_key:
            self._pending_idem.setdefault(row.job.idem_key, set()).add(key)

    def get(self, key: str, before: int | None = None) -> Job | None:
        """The archived job as a command at log ``before`` sees it (None: as it is now)."""
        if key in self._pending:
            return visible(self._pending[key], before)
        found = self.table.loop().execute("SELECT job FROM archive WHERE id = ?", (key,)).fetchone()
        return None if found is None else visible(Row.from_blob(found[0]), before)

    def _idem_keys(self, idem_key: str) -> set[str]:
        stored = {k for (k,) in self.table.loop().execute("SELECT id FROM archive WHERE idem_key = ?", (idem_key,))}
        return stored | self._pending_idem.get(idem_key, set())

    def count(self) -> int:
        """Archived jobs not deleted: the table's, with the pending rows laid over it. One
        statement reads both counts, so a flush committing on the writer thread meanwhile cannot
        fall between them (the rows it writes would be counted by neither)."""
        pending = self._pending
        marks = ", ".join("?" * len(pending)) or "NULL"
        live, stored = self.table.loop().execute(
            "SELECT (SELECT count(*) FROM archive WHERE deleted IS NULL), "
            f"(SELECT count(*) FROM archive WHERE deleted IS NULL AND id IN ({marks}))", list(pending)).fetchone()
        return live - stored + sum(1 for row in pending.values() if row.deleted_at is None)

    # -- reads -------------------------------------------------------------------------------

    async def page(self, *, project: str | None = None, states: Iterable[str] | None = None,
                   since: float | None = None, limit: int | None = None) -> list[Job]:
        """Archived jobs, newest first (by creation), filtered like the hot listing; the query
        runs in a worker thread, the pending rows are laid over it."""
        pending = dict(self._pending)
        states = None if states is None else list(states)
        want = None if limit is None else limit + len(pending)
        rows = await asyncio.to_thread(self._query, project, states, since, want)
        if not pending:
            return rows                      # filtered and sorted by the query
        jobs = {j.id: j for j in rows if j.id not in pending}
        jobs.update((k, row.job) for k, row in pending.items() if row.deleted_at is None)
        return newest_first(jobs.values(), project, states, since, limit)

    def _query(self, project: str | None, states: list[str] | None, since: float | None,
               limit: int | None) -> list[Job]:
        where, args = ["deleted IS NULL"], []
        if project is not None:
            where.append("project = ?")
            args.append(project)
        if states is not None:
            if not states:
                return []
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args += states
        if since is not None:
            where.append("created >= ?")
            args.append(float(since))
        sql = f"SELECT job FROM archive WHERE {' AND '.join(where)} ORDER BY created DESC, number DESC" + \
            ("" if limit is None else f" LIMIT {int(limit)}")
        with self.table.reader() as db:
            return [Row.from_blob(blob).job for (blob,) in db.execute(sql, args)]

    # -- durability ----------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        return bool(self._pending)

    async def flush(self, run: Run) -> None:
        """Write the pending rows in one fsynced transaction (``run``: on the writer thread)."""
        batch = list(self._pending.values())
        await run(self._write, batch)
        for row in batch:
            key = row.job.id
            if self._pending.get(key) is row:
                del self._pending[key]
                self._pending_idem.get(row.job.idem_key, set()).discard(key)

    def flush_now(self) -> None:
        """Write the pending rows here and now (offline tools: ``floydd recover``)."""
        self._write(list(self._pending.values()))
        self._pending, self._pending_idem = {}, {}

    async def purge(self, upto: int, run: Run) -> None:
        """Drop the tombstones of deletions at or before log ``upto`` (a durable snapshot's index)."""
        await run(self.table.transaction, [("DELETE FROM archive WHERE deleted IS NOT NULL AND deleted <= ?", (upto,))])

    def _write(self, batch: list[Row]) -> None:
        self.table.transaction([(self.table.insert("archive"), row_of(row)) for row in batch])

    # -- snapshots -----------------------------------------------------------------------------

    async def export(self, rows: int = EXPORT_ROWS) -> AsyncIterator[bytes]:
        """The archive, tombstones too, as chunks of ``rows`` rows (page by page, no long read
        transaction: a row changed meanwhile is changed again by the entries the receiver
        replays after the snapshot)."""
        after = ""
        while True:
            page = await asyncio.to_thread(self._export_page, after, rows)
            if not page:
                return
            after = page[-1][0]
            yield msgpack.packb([list(r) for r in page], use_bin_type=True)

    def _export_page(self, after: str, rows: int) -> list[tuple]:
        with self.table.reader() as db:
            return db.execute(f"SELECT {_COLUMNS} FROM archive WHERE id > ? ORDER BY id LIMIT ?",
                              (after, rows)).fetchall()

    def receive(self, index: int, term: int, run: Run) -> StagedSink:
        """Stage a received snapshot's rows (:meth:`SideTable.receive`)."""
        return self.table.receive(index, term, run)

    def saved(self, db: sqlite3.Connection, snapshot: Any) -> None:
        """SqliteStorage's ``on_snapshot`` hook: the rows staged with ``snapshot`` replace the
        table's (:meth:`SideTable.saved`)."""
        self.table.saved(db, snapshot)

    def installed(self, index: int, term: int) -> None:
        """The state was replaced by a snapshot: what was pending is superseded."""
        self._pending, self._pending_idem = {}, {}

    def close(self) -> None:
        self.table.close()
