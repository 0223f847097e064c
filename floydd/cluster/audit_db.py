"""The audit chain (:mod:`floydd.cluster.audit`) in SQLite, a table of the raft log's database.

Kept like the archive (:mod:`floydd.cluster.archive_db`): entries applied are pending until
the driver writes them in one fsynced transaction on its writer thread (before any snapshot
can drop the log entries they came from); a replay after a restart derives the same entries
again (keyed by log index, written with INSERT OR REPLACE); a snapshot's receiver stages the
sender's rows in ``audit_incoming`` and swaps them in within the transaction that saves the
snapshot. The chain is never purged.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any, AsyncIterator

import msgpack

from floydd.cluster.audit import AuditRules, decode_audit_chunk
from floydd.cluster.sidetable import SideTable

__all__ = ["SqliteAudit", "read_chain"]

_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS audit (idx INTEGER PRIMARY KEY, seq INTEGER NOT NULL, entry TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit_incoming (idx INTEGER PRIMARY KEY, seq INTEGER NOT NULL, entry TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit_incoming_meta (id INTEGER PRIMARY KEY CHECK (id = 0), "
    "idx INTEGER NOT NULL, term INTEGER NOT NULL, complete INTEGER NOT NULL)",
]
_ROWS = 1000


def _row(entry: dict) -> tuple[int, int, str]:
    return entry["index"], entry["seq"], json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def read_chain(path: str | Path, since: float | None = None) -> list[Any]:
    """The entries in ``path`` (a raft.db) in log order, each as stored (an entry that is
    not JSON any more comes back as its text, for :func:`~floydd.cluster.audit.verify`)."""
    db = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
    try:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'audit'").fetchone() is None:
            return []
        out = []
        for (text,) in db.execute("SELECT entry FROM audit ORDER BY idx"):
            try:
                entry = json.loads(text)
            except ValueError:
                entry = text
            if since is None or not isinstance(entry, dict) or entry.get("ts", 0) >= since:
                out.append(entry)
        return out
    finally:
        db.close()


class SqliteAudit(SideTable, AuditRules):
    """The chain in ``path`` (the raft log's database), see the module docstring."""

    TABLE, COLUMNS, SCHEMA = "audit", "idx, seq, entry", _SCHEMA

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._pending: dict[int, dict] = {}
        self._last = None

    # -- what the state machine calls (AuditRules.around) ------------------------------------

    def _put(self, entry: dict) -> None:
        self._pending[entry["index"]] = entry

    def _last_before(self, index: int) -> dict | None:
        pending = [i for i in self._pending if i < index]
        row = self._loop().execute("SELECT idx, entry FROM audit WHERE idx < ? ORDER BY idx DESC LIMIT 1",
                                   (index,)).fetchone()
        best = max(pending) if pending else None
        if row is not None and (best is None or row[0] > best):
            return json.loads(row[1])
        return None if best is None else self._pending[best]

    # -- reads ---------------------------------------------------------------------------------

    async def page(self, since: float | None = None) -> list[Any]:
        """Every entry (from ``since``), in order: the table's with the pending laid over."""
        pending = dict(self._pending)
        stored = await asyncio.to_thread(read_chain, self.path, since)
        if not pending:
            return stored
        have = {e["index"]: e for e in stored if isinstance(e, dict)}
        have.update((i, e) for i, e in pending.items() if since is None or e["ts"] >= since)
        broken = [e for e in stored if not isinstance(e, dict)]
        return broken + [e for _, e in sorted(have.items())]

    # -- durability ----------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        return bool(self._pending)

    async def flush(self, run: Any) -> None:
        batch = list(self._pending.values())
        await run(self._transaction, [(self.insert("audit"), _row(e)) for e in batch])
        for entry in batch:
            if self._pending.get(entry["index"]) is entry:
                del self._pending[entry["index"]]

    # -- snapshots -----------------------------------------------------------------------------

    async def export(self) -> AsyncIterator[bytes]:
        after = 0
        while True:
            page = await asyncio.to_thread(self._export_page, after)
            if not page:
                return
            after = page[-1][0]
            yield msgpack.packb({"audit": [list(r) for r in page]}, use_bin_type=True)

    def _export_page(self, after: int) -> list[tuple]:
        with self._reader() as db:
            return db.execute("SELECT idx, seq, entry FROM audit WHERE idx > ? ORDER BY idx LIMIT ?",
                              (after, _ROWS)).fetchall()

    def decode_chunk(self, chunk: bytes) -> list[tuple]:
        return decode_audit_chunk(chunk)

    def installed(self, index: int, term: int) -> None:
        super().installed(index, term)
        self._pending = {}
