"""One writer, many readers: the connections behind :class:`floydd.records.Records`.

Every write runs on the single write connection, one at a time under a lock, inside
``BEGIN IMMEDIATE`` (the write lock is taken up front, so a transaction never has to
upgrade from read to write halfway and fail with SQLITE_BUSY). Callers are already on
worker threads (``asyncio.to_thread``), so a lock serialises them with no extra thread
to own: Datasette needs a write thread because its callers are on the event loop.

Reads use one read-only connection per thread; in WAL mode they never wait for the
writer and each statement sees the last committed transaction. A thread's connection goes
when the thread does; each has a lock, taken by its own reads and by ``close()`` only, so
closing never pulls a connection from under a read in flight.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import weakref
from pathlib import Path
from typing import Any, Iterator

from floydd.errors import Unavailable
from floydd.records._schema import configure, migrate

__all__ = ["Connections"]


class _Reader:
    __slots__ = ("conn", "lock")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()


class Connections:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._closed = False
        self._writer = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            configure(self._writer, writer=True)
            self.applied = migrate(self._writer)
        except BaseException:
            self._writer.close()
            raise
        self._uri = self.path.resolve().as_uri() + "?mode=ro"
        # thread -> its read connection; an entry (and so its connection) goes with its thread
        self._readers: weakref.WeakKeyDictionary[threading.Thread, _Reader] = weakref.WeakKeyDictionary()
        self._readers_lock = threading.Lock()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """The write connection inside ``BEGIN IMMEDIATE``; commits, or rolls back on error."""
        with self._lock:
            if self._closed:
                raise _closed()
            conn = self._writer
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextlib.contextmanager
    def read(self, *, snapshot: bool = False) -> Iterator[sqlite3.Connection]:
        """This thread's read-only connection. Each statement sees the last commit; with
        ``snapshot`` the block runs in one read transaction (its queries agree)."""
        reader = self._reader()
        with reader.lock:  # only ever contended by close()
            if self._closed:
                raise _closed()
            if not snapshot:
                yield reader.conn
                return
            reader.conn.execute("BEGIN")
            try:
                yield reader.conn
            finally:
                reader.conn.execute("COMMIT")

    def _reader(self) -> _Reader:
        thread = threading.current_thread()
        reader = self._readers.get(thread)
        if reader is None:
            with self._readers_lock:
                if self._closed:
                    raise _closed()
                conn = sqlite3.connect(self._uri, uri=True, isolation_level=None, check_same_thread=False)
                configure(conn, writer=False)
                reader = self._readers[thread] = _Reader(conn)
        return reader

    def pragmas(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            if self._closed:
                raise _closed()
            writer = _pragmas(self._writer)
        with self.read() as conn:
            return {"writer": writer, "reader": _pragmas(conn)}

    def close(self) -> None:
        """Close every connection; later calls raise ``Unavailable``. Idempotent."""
        with self._lock, self._readers_lock:
            if self._closed:
                return
            self._closed = True
            for reader in list(self._readers.values()):
                with reader.lock:
                    reader.conn.close()
            self._readers.clear()
            self._writer.close()


def _pragmas(conn: sqlite3.Connection) -> dict[str, Any]:
    names = ("journal_mode", "synchronous", "foreign_keys", "busy_timeout", "query_only")
    return {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names}


def _closed() -> Unavailable:
    return Unavailable("the records database is closed", hint="floydd is shutting down; try again once it is back")
