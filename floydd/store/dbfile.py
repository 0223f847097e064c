"""SQLite files that may be damaged: what can be seen before trusting one, and salvaging rows.

floydd keeps three databases whose loss is loss of data: the store's ``catalog.db`` (checked
here, :mod:`floydd.store.care.untrusted`), and ``records.db`` and ``cluster/raft.db`` (checked by
:mod:`floydd.daemon.integrity`). :func:`inspect` looks at one file *before* anything opens
it for writing (an open would create a missing file, or run WAL recovery over the evidence)
and says what is wrong, in words an operator can act on. Measured on SQLite 3.40:

- **absent** is a fresh box, or a deleted file: only the caller knows which (is there data
  elsewhere that this file should describe?).
- **0 bytes**: SQLite opens it as a new empty database; it is never that after floydd made
  it (the first ``PRAGMA journal_mode=WAL`` writes page 1), so it is "empty", not "new".
- **not a database** (its first 16 bytes are not SQLite's header) and **truncated** files
  fail on the first read ("file is not a database", "database disk image is malformed").
- **random bytes in the middle**: ``PRAGMA quick_check`` finds them in b-tree structure
  (page numbers, cell offsets, free space); ``integrity_check`` also finds index entries that
  disagree with their table. Bytes changed *inside a stored value* are not seen by either:
  SQLite keeps no checksum of its pages. Only the callers' row checks (a tree id that is not
  hex, a log entry that does not decode) can notice those.
- **a deleted WAL**: after a clean close SQLite checkpoints the WAL into the file and deletes
  it, so its absence is normal. After a crash the committed transactions since the last
  checkpoint live only in ``NAME-wal``. Deleting it then loses them, and the database left
  is consistent, only older. That *can* be seen while ``NAME-shm`` (the WAL index) is still
  there: its header counts the committed frames (``mxFrame``) and how many of them were
  copied into the file (``nBackfill``); more committed than copied, and no WAL (or a WAL
  holding fewer frames) means committed transactions are gone. Once the ``-shm`` is deleted
  too, or any SQLite connection has opened the file since, nothing on disk says what was lost:
  that case cannot be detected here (the callers' cross-checks catch some of it).
- **a WAL cut short** is seen the same way: the ``-shm`` counts more committed frames than
  the file holds. **Random bytes in the WAL** are not: SQLite checks each frame's checksum
  and silently stops at the first bad one, as after a torn write, and the frames after it are
  lost without a trace that this check reads.

:func:`salvage` reads what rows it still can out of a damaged file (a :func:`readable` copy of
it), skipping damaged pages, and :func:`copy_rows` puts them into a new one (``floydd repair``). This is not SQLite's
``.recover`` (which also walks free pages and rows its b-trees lost track of): a row on a
page that cannot be reached from its table's b-tree is lost here.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

__all__ = ["Inspection", "inspect", "salvage", "copy_rows", "readable", "set_aside", "tables_of",
           "lost_wal_frames", "SQLITE_HEADER"]

SQLITE_HEADER = b"SQLite format 3\x00"
_WAL_HEADER = 32
_WAL_FRAME_HEADER = 24
_SHM_HEADER = 136
_ROWID_MAX = 2**63 - 1
_PAD_MAX = 1 << 30          # a header claiming more missing bytes than this is not believed


@dataclass(frozen=True, slots=True, kw_only=True)
class Inspection:
    """What :func:`inspect` found; ``problem`` is empty when the file may be opened."""

    path: Path
    exists: bool
    problem: str = ""
    tables: frozenset[str] = field(default_factory=frozenset)

    @property
    def ok(self) -> bool:
        return not self.problem

    @property
    def blank(self) -> bool:
        """Absent, or a database with no tables at all: holds nothing (the caller decides
        whether that is a fresh box or a loss)."""
        return self.ok and not self.tables


def inspect(path: Path, tables: Iterable[str], *, deep: bool = False) -> Inspection:
    """Check ``path`` without changing it: size, header, lost WAL frames, ``quick_check``
    (``integrity_check`` with ``deep``), and that ``tables`` are all there when any table is."""
    path = Path(path)
    wal = _sibling(path, "-wal")
    if not path.exists():
        if wal.exists() and wal.stat().st_size > 0:
            return Inspection(path=path, exists=False,
                              problem=f"is missing, but its write-ahead log {wal.name} is there")
        return Inspection(path=path, exists=False)
    size = path.stat().st_size
    if size == 0 and not (wal.exists() and wal.stat().st_size > 0):
        return Inspection(path=path, exists=True, problem="is empty (0 bytes)")
    if size:
        with open(path, "rb") as f:
            if f.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                return Inspection(path=path, exists=True, problem="is not an SQLite database (its header is wrong)")
    lost = lost_wal_frames(path)
    if lost:
        return Inspection(path=path, exists=True, problem=lost)
    try:
        with _readonly(path) as db:
            check = "integrity_check" if deep else "quick_check"
            rows = [r[0] for r in db.execute(f"PRAGMA {check}(20)")]
            if rows != ["ok"]:
                first = " ".join(str(rows[0]).replace("*** in database main ***", "").split())
                return Inspection(path=path, exists=True, problem=f"is damaged ({check}: {first[:200]})")
            present = tables_of(db)
    except sqlite3.DatabaseError as e:
        return Inspection(path=path, exists=True, problem=f"is damaged ({e})")
    wanted = frozenset(tables)
    lacking = sorted(wanted - present)
    if present & wanted and lacking:
        return Inspection(path=path, exists=True, tables=present,
                          problem=f"lacks the table(s) {', '.join(lacking)}")
    if present and not present & wanted:
        return Inspection(path=path, exists=True, tables=present,
                          problem=f"holds none of floydd's tables (it has {', '.join(sorted(present)[:5])})")
    return Inspection(path=path, exists=True, tables=present)


def lost_wal_frames(path: Path) -> str:
    """Why committed transactions of ``path`` are known to be lost with its WAL (see the
    module docstring), or "" when nothing says so."""
    shm, wal = _sibling(path, "-shm"), _sibling(path, "-wal")
    try:
        with open(shm, "rb") as f:
            header = f.read(_SHM_HEADER)
    except OSError:
        return ""
    if len(header) < _SHM_HEADER:
        return ""
    version, _unused, _change, is_init, _big_endian, page_size, max_frame = struct.unpack("=IIIBBHI", header[:20])
    backfilled = struct.unpack("=I", header[96:100])[0]
    if version != 3007000 or not is_init or max_frame <= backfilled:
        return ""
    page_size = 65536 if page_size == 1 else page_size
    try:
        frames = max(0, wal.stat().st_size - _WAL_HEADER) // (_WAL_FRAME_HEADER + page_size)
    except FileNotFoundError:
        return (f"lost its write-ahead log {wal.name}: it held {max_frame - backfilled} committed page "
                "write(s) not yet copied into the file (floydd did not stop cleanly, and the log was "
                "deleted since)")
    if frames < max_frame:
        return (f"has a write-ahead log {wal.name} shorter than what was committed to it ({frames} of "
                f"{max_frame} frames): it was cut or overwritten")
    return ""


def tables_of(db: sqlite3.Connection) -> frozenset[str]:
    return frozenset(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))


def salvage(path: Path, table: str, columns: str = "*") -> Iterator[tuple]:
    """The rows of ``table`` that can still be read (rowid order), stepping over damaged
    pages; nothing when the file or its schema cannot be read. Rows skipped are lost."""
    try:
        db = sqlite3.connect(_ro_uri(path), uri=True)
    except sqlite3.DatabaseError:
        return
    try:
        after, step = -_ROWID_MAX - 1, 1
        while after < _ROWID_MAX:
            try:
                for row in db.execute(f'SELECT rowid, {columns} FROM "{table}" WHERE rowid > ? ORDER BY rowid',
                                      (after,)):
                    after, step = row[0], 1
                    yield row[1:]
                return
            except sqlite3.DatabaseError:
                if after == -_ROWID_MAX - 1:
                    after = 0           # rowids floydd makes start at 1: skip the negative range at once
                    continue
                after = min(_ROWID_MAX, after + step)
                step *= 2
    finally:
        db.close()


def copy_rows(src: Path, dest: sqlite3.Connection, table: str) -> tuple[int, int]:
    """Copy the rows of ``table`` still readable in ``src`` into the same table of ``dest``
    (the columns both have; rows that clash with ``dest``'s are skipped): (copied, read)."""
    try:
        with _readonly(src) as db:
            old = {r[1] for r in db.execute(f'PRAGMA table_info("{table}")')}
    except sqlite3.DatabaseError:
        return 0, 0
    columns = [r[1] for r in dest.execute(f'PRAGMA table_info("{table}")') if r[1] in old]
    if not columns:
        return 0, 0
    names = ", ".join(f'"{c}"' for c in columns)
    copied = read = 0
    insert = f'INSERT OR IGNORE INTO "{table}" ({names}) VALUES ({", ".join("?" * len(columns))})'
    for row in salvage(src, table, names):
        read += 1
        copied += dest.execute(insert, row).rowcount
    return copied, read


@contextmanager
def readable(path: Path) -> Iterator[Path]:
    """A scratch copy of ``path`` (and its WAL) to salvage from, beside it, removed after. A
    truncated file is padded back to the size its header gives: SQLite refuses a schema whose
    tables start past the end of the file, and with the padding every table that still has
    its pages can be read (measured: a records.db cut in half gave back its jobs)."""
    path = Path(path)
    scratch = path.with_name(f".{path.name}.salvage-{secrets.token_hex(4)}")
    try:
        if path.exists():
            shutil.copyfile(path, scratch)
            if _sibling(path, "-wal").exists():
                shutil.copyfile(_sibling(path, "-wal"), _sibling(scratch, "-wal"))
            _pad(scratch)
        yield scratch
    finally:
        for ext in ("", "-wal", "-shm"):
            _sibling(scratch, ext).unlink(missing_ok=True)


def set_aside(path: Path, suffix: str) -> list[Path]:
    """Rename ``path`` and its ``-wal``/``-shm`` to ``NAME.SUFFIX`` (and ``-wal``/``-shm``);
    never deletes. Returns the new paths."""
    moved = []
    for ext in ("", "-wal", "-shm"):
        src = _sibling(path, ext)
        if src.exists():
            dest = src.with_name(f"{path.name}.{suffix}{ext}")
            os.rename(src, dest)
            moved.append(dest)
    return moved


# -- helpers ----------------------------------------------------------------------------

def _pad(path: Path) -> None:
    with open(path, "r+b") as f:
        header = f.read(100)
        if len(header) < 100 or not header.startswith(SQLITE_HEADER):
            return
        page_size = struct.unpack(">H", header[16:18])[0]
        page_size = 65536 if page_size == 1 else page_size
        pages = struct.unpack(">I", header[28:32])[0]
        size = os.fstat(f.fileno()).st_size
        if size < pages * page_size <= size + _PAD_MAX:
            f.truncate(pages * page_size)


def _sibling(path: Path, ext: str) -> Path:
    return path.with_name(path.name + ext)


def _ro_uri(path: Path) -> str:
    return Path(path).absolute().as_uri() + "?mode=ro"


class _readonly:
    """A read-only connection (it never checkpoints, never creates the file)."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(_ro_uri(path), uri=True)

    def __enter__(self) -> sqlite3.Connection:
        return self._db

    def __exit__(self, *exc: object) -> None:
        self._db.close()
