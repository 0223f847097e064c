"""The audit chain (:mod:`floydd.cluster.state.audit`) in SQLite, a table of the raft log's database.

Kept like the archive (:mod:`floydd.cluster.tables.archive_db`): entries applied are pending until
the driver writes them in one fsynced transaction on its writer thread (before any snapshot
can drop the log entries they came from); a replay after a restart derives the same entries
again (keyed by log index, written with INSERT OR REPLACE); a snapshot's receiver stages the
sender's rows in ``audit_incoming`` and swaps them in within the transaction that saves the
snapshot. The chain is never purged.

Beside the rows, ``audit_head`` records the newest entry written (its log index, seq and hash),
in the same transaction as each batch of rows and each snapshot swapped in. At start, before
the replay rewrites anything, :meth:`SqliteAudit.starting` reads what it may rewrite (the
entries after the snapshot, kept for comparing with what the replay derives:
:class:`~floydd.cluster.audit_evidence.StartCheck`) and checks the stored entry at the recorded
head's index; :meth:`SqliteAudit.verify_stored` then checks the whole chain as stored with
:func:`~floydd.cluster.state.audit.verify`, in a worker thread, off the start's path.
:mod:`floydd.cluster.audit_guard` reports what differs and keeps the copy as found
(:meth:`SqliteAudit.keep_aside`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import msgpack

from floydd.cluster.state.audit import AuditRules, decode_audit_chunk
from floydd.cluster.audit_evidence import Head, StartCheck, Tamper, first_bad, marker_finding
from floydd.cluster.tables.sidetable import SideTable, StagedSink

__all__ = ["SqliteAudit", "read_chain"]

_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS audit (idx INTEGER PRIMARY KEY, seq INTEGER NOT NULL, entry TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit_incoming (idx INTEGER PRIMARY KEY, seq INTEGER NOT NULL, entry TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit_incoming_meta (id INTEGER PRIMARY KEY CHECK (id = 0), "
    "idx INTEGER NOT NULL, term INTEGER NOT NULL, complete INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit_head (id INTEGER PRIMARY KEY CHECK (id = 0), "
    "idx INTEGER NOT NULL, seq INTEGER NOT NULL, hash TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS audit_by_seq ON audit (seq)",
]
_MARK = ("INSERT INTO audit_head (id, idx, seq, hash) VALUES (0, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
         "idx = excluded.idx, seq = excluded.seq, hash = excluded.hash WHERE excluded.idx >= audit_head.idx")
"""The head record: moved to a newer entry only (a replay writes older indexes again)."""
_ROWS = 1000


def _row(entry: dict) -> tuple[int, int, str]:
    return entry["index"], entry["seq"], json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def read_chain(path: str | Path, since: float | None = None) -> list[Any]:
    """The entries in ``path`` (a raft.db) in log order, each as stored (an entry that is
    not JSON any more comes back as its text, for :func:`~floydd.cluster.state.audit.verify`)."""
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


class SqliteAudit(AuditRules):
    """The chain in ``path`` (the raft log's database), see the module docstring; its
    connections, transactions and staged snapshot rows are its part ``table``
    (:class:`~floydd.cluster.tables.sidetable.SideTable`)."""

    def __init__(self, path: str | Path) -> None:
        self.table = SideTable(path, name="audit", columns="idx, seq, entry", schema=_SCHEMA,
                               decode_chunk=decode_audit_chunk)
        self._pending: dict[int, dict] = {}
        self._last = None
        self._check: StartCheck | None = None
        self._installs = self._installs_seen = 0      # snapshots installed: a start check's rows replaced
        self._found: tuple[int, dict[int, str]] | None = None
        """(snapshot index, log index -> text) of the rows after it as stored at start: the
        copy kept aside holds them as found, though the replay has rewritten them since."""

    # -- what the state machine calls (AuditRules.around) ------------------------------------

    def _put(self, entry: dict) -> None:
        self._pending[entry["index"]] = entry
        if self._check is not None:
            self._check.derived(entry)

    def _last_before(self, index: int) -> dict | None:
        pending = [i for i in self._pending if i < index]
        row = self.table.loop().execute("SELECT idx, entry FROM audit WHERE idx < ? ORDER BY idx DESC LIMIT 1",
                                   (index,)).fetchone()
        best = max(pending) if pending else None
        if row is not None and (best is None or row[0] > best):
            return json.loads(row[1])
        return None if best is None else self._pending[best]

    # -- the chain as stored at start (floydd.cluster.audit_guard) ----------------------------

    def starting(self, after: int) -> None:
        """Before the replay (on the raft writer thread): read what the replay may rewrite, the
        entries after the snapshot (``after``: its index), and check the head record, for
        :meth:`start_findings`. Point reads and the replayed part only: the whole chain is
        checked later, off the start's path (:meth:`verify_stored`)."""
        with self.table.reader() as db:
            marker = db.execute("SELECT idx, seq, hash FROM audit_head WHERE id = 0").fetchone()
            head = None if marker is None else Head(index=marker[0], seq=marker[1], hash=marker[2])
            at_marker = None if head is None else db.execute("SELECT entry FROM audit WHERE idx = ?",
                                                              (head.index,)).fetchone()
            last = db.execute("SELECT idx, entry FROM audit ORDER BY idx DESC LIMIT 1").fetchone()
            tail = dict(db.execute("SELECT idx, entry FROM audit WHERE idx > ? ORDER BY idx", (after,)).fetchall())
        last_head = None if last is None else Head(index=last[0], seq=_seq(_parsed(last[1])),
                                                   hash=_hash(_parsed(last[1])))
        self._check = StartCheck(after=after, stored={i: _parsed(t) for i, t in tail.items()}, verified=None,
                                 marker=marker_finding(head, None if at_marker is None else _parsed(at_marker[0]),
                                                       last_head),
                                 written=0 if head is None else head.index)
        self._found = (after, tail)
        self._installs_seen = self._installs

    def verify_stored(self) -> None:
        """:func:`~floydd.cluster.state.audit.verify` over the chain as stored at start (the rows up to
        the snapshot, which no replay touches, then those read by :meth:`starting`), in a
        worker thread; a finding joins :meth:`start_findings`. Dropped if a snapshot from the
        leader replaced the rows meanwhile."""
        if self._found is None:
            return
        after, tail = self._found

        def rows(db: sqlite3.Connection) -> Iterator[Any]:
            for (text,) in db.execute("SELECT entry FROM audit WHERE idx <= ? ORDER BY idx", (after,)):
                yield _parsed(text)
            for idx in sorted(tail):
                yield _parsed(tail[idx])
        with self.table.reader() as db:
            db.execute("BEGIN")                  # one consistent read
            try:
                found = first_bad(rows(db))
            finally:
                db.execute("ROLLBACK")
        check = self._check
        if found is not None and check is not None and self._installs == self._installs_seen:
            check.found(found)

    @property
    def check_pending(self) -> int:
        """The highest log index whose stored entry is still to be compared (0: none)."""
        return 0 if self._check is None else self._check.pending

    def start_findings(self, upto: int) -> list[Tamper]:
        """What differs between the chain as stored at start and as derived, up to ``upto``."""
        return [] if self._check is None else self._check.findings(upto)

    def end_check(self) -> None:
        self._check = None
        self._found = None

    def keep_aside(self, dest: Path) -> int:
        """Write the chain as it was stored at start to ``dest`` (JSON lines, as ``floydd audit
        export`` writes: ``floydd audit verify --file`` reads it); how many entries."""
        after, tail = self._found or (0, {})
        with self.table.reader() as db:
            rows = db.execute("SELECT entry FROM audit WHERE idx <= ? ORDER BY idx", (after,)).fetchall()
        lines = [text for (text,) in rows] + [tail[i] for i in sorted(tail)]
        tmp = dest.with_name(f".{dest.name}.partial")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(line.replace("\n", " ") + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
        return len(lines)

    # -- reads ---------------------------------------------------------------------------------

    def head(self) -> Head | None:
        """The newest entry, as this box holds it now (what its heartbeat says); an unreadable
        one is no entry (the start check and verify name it); None: the table cannot be read."""
        if self._pending:
            return Head.of(self._pending[max(self._pending)])
        try:
            row = self.table.loop().execute("SELECT entry FROM audit ORDER BY idx DESC LIMIT 1").fetchone()
        except sqlite3.Error:
            return None
        entry = None if row is None else _parsed(row[0])
        if not isinstance(entry, dict) or _seq(entry) < 1 or len(_hash(entry)) != 64:
            return Head.of(None)
        return Head.of(entry)

    def entry_at_seq(self, seq: int) -> Any:
        """This box's entry ``seq`` (None: it has none), to compare another box's head with."""
        for entry in self._pending.values():
            if entry["seq"] == seq:
                return entry
        row = self.table.loop().execute("SELECT entry FROM audit WHERE seq = ? ORDER BY idx LIMIT 1", (seq,)).fetchone()
        return None if row is None else _parsed(row[0])

    async def page(self, since: float | None = None) -> list[Any]:
        """Every entry (from ``since``), in order: the table's with the pending laid over."""
        pending = dict(self._pending)
        stored = await asyncio.to_thread(read_chain, self.table.path, since)
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
        newest = max(batch, key=lambda e: e["index"])
        await run(self.table.transaction, [(self.table.insert("audit"), _row(e)) for e in batch]
                  + [(_MARK, (newest["index"], newest["seq"], newest["hash"]))])
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
        with self.table.reader() as db:
            return db.execute("SELECT idx, seq, entry FROM audit WHERE idx > ? ORDER BY idx LIMIT ?",
                              (after, _ROWS)).fetchall()

    def receive(self, index: int, term: int, run: Any) -> StagedSink:
        """Stage a received snapshot's rows (:meth:`SideTable.receive`)."""
        return self.table.receive(index, term, run)

    def saved(self, db: sqlite3.Connection, snapshot: Any) -> None:
        """The rows staged with ``snapshot`` replace the table's (:meth:`SideTable.saved`), and
        the head record is theirs."""
        for statement in self.table.schema:
            db.execute(statement)
        meta = db.execute("SELECT idx, term, complete FROM audit_incoming_meta").fetchone()
        self.table.saved(db, snapshot)
        if meta is None or tuple(meta) != (snapshot.index, snapshot.term, 1):
            return
        db.execute("DELETE FROM audit_head")
        row = db.execute("SELECT idx, seq, entry FROM audit ORDER BY idx DESC LIMIT 1").fetchone()
        if row is not None:
            db.execute(_MARK, (row[0], row[1], _hash(_parsed(row[2]))))

    def installed(self, index: int, term: int) -> None:
        super().installed(index, term)
        self._pending = {}
        self._installs += 1
        if self._check is not None:          # the rows it compared are the leader's now
            self._check = StartCheck(after=index, stored={}, verified=None, marker=None, written=0)

    def close(self) -> None:
        self.table.close()


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _seq(entry: Any) -> int:
    seq = entry.get("seq") if isinstance(entry, dict) else None
    return seq if type(seq) is int and seq >= 0 else 0


def _hash(entry: Any) -> str:
    digest = entry.get("hash") if isinstance(entry, dict) else None
    return digest if isinstance(digest, str) else ""
