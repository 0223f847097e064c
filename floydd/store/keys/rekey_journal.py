"""The journal of a re-key (``STORE/rekey.db``, see :mod:`floydd.store.keys.rekey`).

SQLite, WAL, ``synchronous=FULL``: a row that names a new object is written only once the
object is durable, and the journal is durable before the catalog changes. Tables::

    meta       old, new (key fingerprints), phase (new, planned, copied, done)
    inventory  every object the store held when the re-key was planned, with its size:
               what the drop step removes (but for new objects)
    chunks     old id -> new id (NULL until re-sealed) of every chunk a root tree names
    trees      old id -> new id of every root tree; this table alone outlives the drop step

Chunks and trees are apart because one object can be both (a file whose bytes are a tree):
as a chunk it keeps its bytes, as a tree it is re-encoded, so it gets two new ids. Readers
page through tables by key (``_pages``), so nothing holds a whole table in memory.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from floydd.errors import FloyddError, StoreError, StoreFull
from floydd.store.ids import ObjectId
from floydd.store.local import fsync_dir

__all__ = ["Journal", "unlink_durably"]

PAGE = 256  # rows read at a time


class Journal:
    """One connection; used by one thread (the re-key's)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # a recorded id means a durable object
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as e:
            self._db.close()
            raise _translate(e) from e

    @classmethod
    def open(cls, path: Path) -> Journal | None:
        if not path.exists():
            return None
        journal = cls(path)
        if journal._get("new") is None:  # died while being created
            journal.remove()
            return None
        return journal

    @classmethod
    def create(cls, path: Path, *, old: str, new: str) -> Journal:
        journal = cls(path)
        try:
            with journal.transaction():
                journal._db.executemany("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)",
                                        [("old", old), ("new", new), ("phase", "new")])
        except BaseException:
            journal.close()
            raise
        return journal

    def close(self) -> None:
        self._db.close()

    def remove(self) -> None:
        """Delete the journal (no -wal file may outlive it: it would be replayed into a new one)."""
        self._db.execute("PRAGMA journal_mode=DELETE")
        self._db.close()
        unlink_durably(self.path)

    @property
    def old_fp(self) -> str:
        return self._get("old")

    @property
    def new_fp(self) -> str:
        return self._get("new")

    @property
    def phase(self) -> str:
        return self._get("phase")

    @phase.setter
    def phase(self, value: str) -> None:
        with self.transaction():
            self._db.execute("UPDATE meta SET v = ? WHERE k = 'phase'", (value,))

    # -- plan

    def reset(self) -> None:
        with self.transaction():
            for table in ("inventory", "chunks", "trees"):
                self._db.execute(f"DELETE FROM {table}")

    def add_inventory(self, rows: Iterable[tuple[bytes, int]]) -> None:
        self._insert("INSERT OR IGNORE INTO inventory (id, size) VALUES (?, ?)", rows)

    def add(self, table: str, ids: Iterable[bytes]) -> None:
        self._insert(f"INSERT OR IGNORE INTO {table} (old) VALUES (?)", ((i,) for i in ids))

    def first_missing(self) -> bytes | None:
        row = self._db.execute(
            "SELECT old FROM chunks WHERE NOT EXISTS (SELECT 1 FROM inventory WHERE id = old) UNION ALL "
            "SELECT old FROM trees WHERE NOT EXISTS (SELECT 1 FROM inventory WHERE id = old) LIMIT 1").fetchone()
        return None if row is None else row[0]

    # -- copy

    def totals(self) -> tuple[list[int], list[int]]:
        done, total = [0, 0], [0, 0]
        for table in ("chunks", "trees"):
            for is_done, n, size in self._db.execute(
                    f"SELECT t.new IS NOT NULL, COUNT(*), COALESCE(SUM(i.size), 0) FROM {table} t "
                    "JOIN inventory i ON i.id = t.old GROUP BY 1"):
                total[0] += n
                total[1] += size
                if is_done:
                    done[0] += n
                    done[1] += size
        return done, total

    def bytes_left(self) -> int:
        return sum(self._db.execute(f"SELECT COALESCE(SUM(i.size), 0) FROM {table} t JOIN inventory i "
                                    "ON i.id = t.old WHERE t.new IS NULL").fetchone()[0]
                   for table in ("chunks", "trees"))

    def pending(self, table: str) -> Iterator[list[tuple[bytes, int]]]:
        """Pages of (old id, sealed size) not yet re-sealed."""
        return self._pages(f"SELECT t.old, i.size FROM {table} t JOIN inventory i ON i.id = t.old "
                           "WHERE t.old > ? AND t.new IS NULL ORDER BY t.old LIMIT ?")

    def recorded(self, table: str) -> Iterator[list[tuple[bytes, bytes]]]:
        """Pages of (old id, new id) already re-sealed."""
        return self._pages(f"SELECT old, new FROM {table} WHERE old > ? AND new IS NOT NULL ORDER BY old LIMIT ?")

    def record(self, table: str, pairs: list[tuple[bytes, bytes]]) -> None:
        with self.transaction():
            self._db.executemany(f"UPDATE {table} SET new = ? WHERE old = ?", [(n, o) for o, n in pairs])

    def forget(self, table: str, olds: list[bytes]) -> None:
        with self.transaction():
            self._db.executemany(f"UPDATE {table} SET new = NULL WHERE old = ?", [(o,) for o in olds])

    def new_chunk_ids(self, olds: Iterable[ObjectId]) -> dict[ObjectId, ObjectId]:
        ids = [o.raw for o in olds]
        out: dict[ObjectId, ObjectId] = {}
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            for old, new in self._db.execute(f"SELECT old, new FROM chunks WHERE old IN ({','.join('?' * len(part))})"
                                             " AND new IS NOT NULL", part):
                out[ObjectId(old)] = ObjectId(new)
        if len(out) != len(ids):
            raise StoreError("re-key: a tree's chunks were not all re-sealed before it",
                             hint="this is a bug; run the re-key again")
        return out

    def tree_map(self) -> dict[ObjectId, ObjectId]:
        return {ObjectId(o): ObjectId(n) for o, n in self._db.execute("SELECT old, new FROM trees")
                if n is not None}

    def inventoried(self, oid: bytes) -> bool:
        return self._db.execute("SELECT 1 FROM inventory WHERE id = ?", (oid,)).fetchone() is not None

    def is_new(self, oid: bytes) -> bool:
        return self._db.execute("SELECT 1 WHERE EXISTS (SELECT 1 FROM chunks WHERE new = ?1) "
                                "OR EXISTS (SELECT 1 FROM trees WHERE new = ?1)", (oid,)).fetchone() is not None

    # -- drop

    def drop_count(self) -> int:
        return self._db.execute(f"SELECT COUNT(*) FROM inventory WHERE {_NOT_NEW}").fetchone()[0]

    def droppable(self) -> Iterator[list[bytes]]:
        """Pages of inventoried ids that are not new objects."""
        for rows in self._pages(f"SELECT id, 0 FROM inventory WHERE id > ? AND {_NOT_NEW} ORDER BY id LIMIT ?"):
            yield [r[0] for r in rows]

    def finish(self) -> None:
        with self.transaction():
            self._db.execute("DROP TABLE inventory")
            self._db.execute("DROP TABLE chunks")
            self._db.execute("UPDATE meta SET v = 'done' WHERE k = 'phase'")
        self._db.execute("VACUUM")

    # -- helpers

    def _get(self, key: str):
        row = self._db.execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def _pages(self, sql: str) -> Iterator[list[tuple]]:
        after = b""
        while rows := self._db.execute(sql, (after, PAGE)).fetchall():
            yield rows
            after = rows[-1][0]

    def _insert(self, sql: str, rows: Iterable[tuple]) -> None:
        it = iter(rows)
        while True:
            part = [row for _, row in zip(range(10_000), it)]
            if not part:
                return
            with self.transaction():
                self._db.executemany(sql, part)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; inside another one, part of it."""
        if self._db.in_transaction:
            yield
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as e:
            raise _translate(e) from e


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS inventory (id BLOB PRIMARY KEY, size INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks (old BLOB PRIMARY KEY, new BLOB) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trees (old BLOB PRIMARY KEY, new BLOB) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS chunks_new ON chunks (new);
CREATE INDEX IF NOT EXISTS trees_new ON trees (new);
"""
_NOT_NEW = ("NOT EXISTS (SELECT 1 FROM chunks WHERE new = id) AND NOT EXISTS (SELECT 1 FROM trees WHERE new = id)")


def unlink_durably(path: Path) -> None:
    """Remove ``path`` (if there) and fsync its folder."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    fsync_dir(path.parent)


def _translate(e: sqlite3.Error) -> FloyddError:
    if "full" in str(e).lower():
        return StoreFull(f"no space left for the re-key journal: {e}")
    return StoreError(f"the re-key journal failed: {e}", hint="check the disk and the store folder's permissions")
