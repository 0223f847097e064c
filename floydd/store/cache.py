"""The file-metadata cache: unchanged files are not read again (restic's "changed" test).

``cache/files.db`` maps a keyed hash of a file's absolute path (never the name itself) to
its (device, inode, size, mtime_ns, ctime_ns), chunk ids and pack offset. A later snapshot that finds
all five equal, and every chunk id still in the store, reuses the ids without opening
the file. Why a stale entry can never produce a wrong tree:

- ctime cannot be set by users, and changes with every write, chmod or rename-over;
- a file changed within the timestamp granularity of the write we read ("racily clean",
  as git calls it) is never cached: entries whose mtime or ctime is less than
  ``RACY_NS`` before the snapshot started are not recorded;
- chunk ids are checked to exist before use (gc may have removed them), else the file is
  read again;
- entries are written only after the upload's objects are durable.

It is only a cache: losing or deleting it costs one full read, never correctness.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import time
from pathlib import Path

from floydd import log
from floydd.store.keys.crypto import Keys
from floydd.store.ids import ID_SIZE, ObjectId

__all__ = ["FileCache", "Fingerprint", "RACY_NS"]

RACY_NS = 2_000_000_000

Fingerprint = tuple[int, int, int, int, int]  # dev, ino, size, mtime_ns, ctime_ns


def fingerprint(st: os.stat_result) -> Fingerprint:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class FileCache:
    """One snapshot's view of the cache; not shared between threads."""

    def __init__(self, path: Path, keys: Keys) -> None:
        self._keys = keys
        self._started_ns = time.time_ns()
        self._new: list[tuple[bytes, bytes, bytes, int | None]] = []
        self._rows: dict[bytes, tuple[bytes, bytes, int | None]] = {}
        self._prefetched = False
        self._digests: dict[bytes, bytes] = {}
        self._db = _connect(path, keys)

    def prefetch(self, abs_paths: list[bytes]) -> None:
        """Load the entries of these files in a few queries instead of one per file."""
        if self._db is None:
            return
        keys = [self._digest(p) for p in abs_paths]
        try:
            for i in range(0, len(keys), 500):
                part = keys[i:i + 500]
                marks = ",".join("?" * len(part))
                for key, fp, chunks, off in self._db.execute(
                        f"SELECT key, fp, chunks, off FROM files WHERE key IN ({marks})", part):
                    self._rows[key] = (fp, chunks, off)
        except sqlite3.Error as e:
            log.store.warning("file cache unreadable (%s); every file will be read", e)
            self._rows.clear()
        self._prefetched = True

    def lookup(self, abs_path: bytes, fp: Fingerprint) -> tuple[tuple[ObjectId, ...], int | None] | None:
        """(chunk ids, pack offset) recorded for this exact file, or None."""
        if self._db is None:
            return None
        key = self._digest(abs_path)
        if self._prefetched:
            row = self._rows.get(key)
        else:
            row = self._db.execute("SELECT fp, chunks, off FROM files WHERE key = ?", (key,)).fetchone()
        if row is None or row[0] != _pack_fp(fp):
            return None
        blob = row[1]
        if not blob or len(blob) % ID_SIZE:
            return None
        return tuple(ObjectId(blob[i:i + ID_SIZE]) for i in range(0, len(blob), ID_SIZE)), row[2]

    def record(self, abs_path: bytes, fp: Fingerprint, chunks: tuple[ObjectId, ...],
               offset: int | None = None) -> None:
        if self._started_ns - max(fp[3], fp[4]) < RACY_NS:
            return  # too recent to trust its timestamps
        self._new.append((self._digest(abs_path), _pack_fp(fp), b"".join(c.raw for c in chunks), offset))

    def _digest(self, abs_path: bytes) -> bytes:
        key = self._digests.get(abs_path)
        if key is None:
            key = self._digests[abs_path] = self._keys.path_digest(abs_path)
        return key

    def save(self) -> None:
        """Write the recorded entries; call once the objects they name are durable."""
        if self._db is None or not self._new:
            return
        try:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO files (key, fp, chunks, off) VALUES (?, ?, ?, ?)", self._new)
        except sqlite3.Error as e:
            log.store.warning("could not update the file cache: %s", e)
        self._new.clear()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _connect(path: Path, keys: Keys) -> sqlite3.Connection | None:
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        db = sqlite3.connect(path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # a cache: losing the tail costs a re-read
        db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS files (key BLOB PRIMARY KEY, fp BLOB, chunks BLOB, off INTEGER) "
                   "WITHOUT ROWID")
        row = db.execute("SELECT v FROM meta WHERE k = 'key'").fetchone()
        if row is None:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('key', ?)", (keys.fingerprint,))
        elif row[0] != keys.fingerprint:  # the store key changed: nothing in here is ours
            db.execute("DELETE FROM files")
            db.execute("UPDATE meta SET v = ? WHERE k = 'key'", (keys.fingerprint,))
        db.isolation_level = "DEFERRED"
        return db
    except sqlite3.Error as e:
        log.store.warning("file cache %s unusable (%s); every file will be read", path, e)
        return None


def _pack_fp(fp: Fingerprint) -> bytes:
    dev, ino, size, mtime, ctime = fp
    return _FP.pack(dev & _U64, ino & _U64, size & _U64, mtime & _U64, ctime & _U64)


_U64 = (1 << 64) - 1
_FP = struct.Struct("<5Q")
