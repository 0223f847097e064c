"""The dataset catalog: named, numbered, immutable versions of trees (``catalog.db``).

SQLite in the store folder, WAL, ``synchronous=FULL`` (an acknowledged version survives
power loss). Names are ``[a-z0-9][a-z0-9._-]{0,63}``, or job outputs ``PROJECT/N/output``
(PROJECT a name, N a job number). Versions count 1, 2, … per name and a number is never
reused, not even after the whole dataset was deleted, so ``mnist:3`` always meant one tree.
References: ``NAME`` (= latest), ``NAME:N``, ``NAME:latest``.

The catalog also keeps **pins**: trees that gc must keep although no version names them
(yet). Every snapshot pins its tree under a lease (``upload:…``, 24 h) before it releases
the store's shared lock; ``add_version`` drops those leases. Other holders (a job's code
snapshot: ``job:mnist/12:code``) pin until they ``unpin``.

Tree ids depend on the store secret. A re-key (:mod:`floydd.store.keys.rekey`) rewrites every
tree id the catalog names in one transaction (``remap_trees``) and records there the
fingerprint of the key the catalog's trees are now sealed under (``key_fingerprint``), so
a store opened with a key that does not match its catalog is refused, not read as damage.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from floydd.errors import Conflict, InvalidName, NotFound, StoreError, StoreFull
from floydd.store.ids import ObjectId

__all__ = ["Catalog", "DatasetVersion", "check_name", "parse_ref", "dataset_not_found", "UPLOAD_LEASE_S"]

UPLOAD_LEASE_S = 24 * 3600
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_OUTPUT = re.compile(r"([a-z0-9][a-z0-9._-]{0,63})/([1-9][0-9]{0,17})/output")
_NAME_HINT = ("use lowercase letters, digits, '.', '_' and '-' (64 at most, starting with a letter or digit), "
              "or PROJECT/N/output for a job's output")


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetVersion:
    name: str
    version: int
    tree: ObjectId
    created: float          # unix seconds
    size: int               # bytes in files
    files: int
    message: str = ""

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"

    def to_dict(self) -> dict:
        return {"name": self.name, "version": self.version, "ref": self.ref, "tree": str(self.tree),
                "created": self.created, "size": self.size, "files": self.files, "message": self.message}


def check_name(name: object) -> str:
    """Return ``name`` if it is a valid dataset name, else raise ``InvalidName``."""
    if isinstance(name, str) and (_NAME.fullmatch(name) or _OUTPUT.fullmatch(name)):
        if ".." not in name:
            return name
    raise InvalidName(f"{name!r:.80} is not a valid dataset name", hint=_NAME_HINT)


class Catalog:
    """Thread-safe; one connection serialised by a lock (writes are tiny)."""

    def __init__(self, path: Path, stats: Callable[[ObjectId], tuple[int, int]]) -> None:
        self._stats = stats
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    check_name = staticmethod(check_name)

    # -- versions -----------------------------------------------------------------------

    def add_version(self, name: str, tree: ObjectId, message: str = "", *,
                    number: int | None = None) -> DatasetVersion:
        """Add ``tree`` as the next version of ``name``; or, with ``number``, as version
        ``number`` (a version the cluster numbered, mirrored here): adding the same tree under
        the same number again is a no-op, another tree under a taken number is ``Conflict``."""
        check_name(name)
        size, files = self._stats(tree)  # reads and validates the tree: it must exist
        now = time.time()
        with self._lock, _tx(self._db):
            row = self._db.execute("SELECT next FROM datasets WHERE name = ?", (name,)).fetchone()
            following = row[0] if row else 1
            if number is None:
                number = following
            elif isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise InvalidName(f"{number!r:.40} is not a version number", hint="versions count 1, 2, …")
            else:
                taken = self._db.execute(f"SELECT {_COLS} FROM versions WHERE name = ? AND version = ?",
                                         (name, number)).fetchone()
                if taken is not None:
                    if taken[2] != tree.hex:
                        raise Conflict(f"{name}:{number} is another tree in this node's catalog",
                                       hint="a dataset of this name was made here before the node joined "
                                            "the cluster; rename one of them")
                    self._db.execute("DELETE FROM pins WHERE tree = ? AND holder LIKE 'upload:%'", (tree.hex,))
                    return _version(taken)
            self._db.execute("INSERT OR REPLACE INTO datasets (name, next) VALUES (?, ?)",
                             (name, max(following, number + 1)))
            self._db.execute("INSERT INTO versions (name, version, tree, created, size, files, message) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)", (name, number, tree.hex, now, size, files, message))
            self._db.execute("DELETE FROM pins WHERE tree = ? AND holder LIKE 'upload:%'", (tree.hex,))
        return DatasetVersion(name=name, version=number, tree=tree, created=now, size=size, files=files,
                              message=message)

    def resolve(self, ref: str) -> DatasetVersion:
        name, number = parse_ref(ref)
        with self._lock:
            if number is None:
                row = self._db.execute(f"SELECT {_COLS} FROM versions WHERE name = ? "
                                       "ORDER BY version DESC LIMIT 1", (name,)).fetchone()
            else:
                row = self._db.execute(f"SELECT {_COLS} FROM versions WHERE name = ? AND version = ?",
                                       (name, number)).fetchone()
        if row is not None:
            return _version(row)
        raise self._not_found(name, number)

    def list(self, name: str | None = None) -> list[DatasetVersion]:
        with self._lock:
            if name is None:
                rows = self._db.execute(f"SELECT {_COLS} FROM versions ORDER BY name, version").fetchall()
            else:
                check_name(name)
                rows = self._db.execute(f"SELECT {_COLS} FROM versions WHERE name = ? ORDER BY version",
                                        (name,)).fetchall()
        return [_version(r) for r in rows]

    def delete(self, name: str, version: int | None = None) -> int:
        """Delete one version, or every version of ``name``; returns how many went.
        The space is given back by the next gc."""
        check_name(name)
        with self._lock, _tx(self._db):
            if version is None:
                n = self._db.execute("DELETE FROM versions WHERE name = ?", (name,)).rowcount
            else:
                n = self._db.execute("DELETE FROM versions WHERE name = ? AND version = ?",
                                     (name, int(version))).rowcount
        if n == 0:
            raise self._not_found(name, version)
        return n

    def names(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT DISTINCT name FROM versions ORDER BY name")]

    def put_version(self, v: DatasetVersion) -> bool:
        """Put back a version as it was (``floydd repair``: number, date and sizes kept, the
        tree not read). False when that number is taken already."""
        check_name(v.name)
        with self._lock, _tx(self._db):
            added = self._db.execute(
                "INSERT OR IGNORE INTO versions (name, version, tree, created, size, files, message) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (v.name, v.version, v.tree.hex, v.created, v.size, v.files, v.message)).rowcount
            self._reserve(v.name, v.version + 1)
        return bool(added)

    def reserve(self, name: str, next_number: int) -> None:
        """Make ``name``'s next version number at least ``next_number`` (numbers are never reused)."""
        check_name(name)
        with self._lock, _tx(self._db):
            self._reserve(name, next_number)

    def _reserve(self, name: str, next_number: int) -> None:
        self._db.execute("INSERT INTO datasets (name, next) VALUES (?, ?) ON CONFLICT (name) DO UPDATE "
                         "SET next = max(next, excluded.next)", (name, next_number))

    # -- pins (gc roots that are not versions) ------------------------------------------

    def pin(self, tree: ObjectId, holder: str, *, ttl_s: float | None = None) -> None:
        expires = None if ttl_s is None else time.time() + ttl_s
        with self._lock, _tx(self._db):
            self._db.execute("INSERT OR REPLACE INTO pins (holder, tree, expires) VALUES (?, ?, ?)",
                             (holder, tree.hex, expires))

    def unpin(self, holder: str) -> None:
        with self._lock, _tx(self._db):
            self._db.execute("DELETE FROM pins WHERE holder = ?", (holder,))

    def roots(self) -> dict[ObjectId, list[str]]:
        """Every tree gc must keep, with who needs it (version refs and pin holders);
        expired leases are dropped on the way."""
        out: dict[ObjectId, list[str]] = {}
        with self._lock:
            with _tx(self._db):
                self._db.execute("DELETE FROM pins WHERE expires IS NOT NULL AND expires < ?", (time.time(),))
            for name, number, tree in self._db.execute("SELECT name, version, tree FROM versions"):
                out.setdefault(ObjectId.from_hex(tree), []).append(f"{name}:{number}")
            for holder, tree in self._db.execute("SELECT holder, tree FROM pins"):
                out.setdefault(ObjectId.from_hex(tree), []).append(holder)
        return out

    # -- re-keying (floydd.store.keys.rekey) -------------------------------------------------

    def key_fingerprint(self) -> str | None:
        """The fingerprint of the key this catalog's trees were last re-keyed to (None: never)."""
        with self._lock:
            row = self._db.execute("SELECT v FROM meta WHERE k = 'key'").fetchone()
        return None if row is None else row[0]

    def remap_trees(self, mapping: Mapping[ObjectId, ObjectId], *, fingerprint: str, partial: bool = False) -> int:
        """Replace every tree id named by a version or a pin with ``mapping[id]`` and record
        ``fingerprint`` as the catalog's key, in one transaction; returns the rows changed.
        A named tree that ``mapping`` lacks is ``StoreError`` and nothing changes (it would
        name an object no key opens), unless ``partial`` (an online re-key: the daemon added
        versions and pins under the new key meanwhile): those stay as they are."""
        with self._lock, _tx(self._db):
            named = {r[0] for r in self._db.execute("SELECT tree FROM versions UNION SELECT tree FROM pins")}
            table = {old.hex: new.hex for old, new in mapping.items()}
            if partial:
                named &= table.keys()
            lacking = sorted(named - table.keys())
            if lacking:
                raise StoreError(f"the catalog names {len(lacking)} tree(s) the re-key did not re-seal "
                                 f"(first: {lacking[0][:12]}); nothing was changed",
                                 hint="versions or pins were added behind the re-key's back: cancel it "
                                      "(floydd.store.keys.rekey.cancel_rekey) and begin it again")
            changed = 0
            for old in sorted(named):
                new = table[old]
                changed += self._db.execute("UPDATE versions SET tree = ? WHERE tree = ?", (new, old)).rowcount
                changed += self._db.execute("UPDATE pins SET tree = ? WHERE tree = ?", (new, old)).rowcount
            self._db.execute("INSERT OR REPLACE INTO meta (k, v) VALUES ('key', ?)", (fingerprint,))
        return changed

    # -- helpers ------------------------------------------------------------------------

    def _not_found(self, name: str, number: int | None) -> NotFound:
        with self._lock:
            versions = [r[0] for r in self._db.execute(
                "SELECT version FROM versions WHERE name = ? ORDER BY version", (name,))]
        return dataset_not_found(name, number, versions, [] if versions else self.names())


def dataset_not_found(name: str, number: int | None, versions: list[int], names: list[str]) -> NotFound:
    """``NotFound`` for ``name[:number]`` whose hint lists the ``versions`` of ``name`` there
    are, or else the dataset ``names`` there are."""
    if versions:
        shown = ", ".join(f"{name}:{v}" for v in sorted(versions)[-10:])
        return NotFound(f"dataset {name} has no version {number}", code="dataset_not_found",
                        hint=f"versions of {name}: {shown}")
    hint = ("datasets here: " + ", ".join(names[:20]) + (" …" if len(names) > 20 else "")) if names \
        else "there are no datasets yet; upload one with `floyd data upload`"
    return NotFound(f"there is no dataset {name}", code="dataset_not_found", hint=hint)


_COLS = "name, version, tree, created, size, files, message"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS datasets (name TEXT PRIMARY KEY, next INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS versions (
    name TEXT NOT NULL, version INTEGER NOT NULL, tree TEXT NOT NULL, created REAL NOT NULL,
    size INTEGER NOT NULL, files INTEGER NOT NULL, message TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (name, version));
CREATE INDEX IF NOT EXISTS versions_tree ON versions (tree);
CREATE TABLE IF NOT EXISTS pins (holder TEXT PRIMARY KEY, tree TEXT NOT NULL, expires REAL);
CREATE INDEX IF NOT EXISTS pins_tree ON pins (tree);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
"""


def parse_ref(ref: object) -> tuple[str, int | None]:
    """``NAME``, ``NAME:N`` or ``NAME:latest`` -> (name, N or None for the latest)."""
    if not isinstance(ref, str):
        raise InvalidName(f"{ref!r:.80} is not a dataset reference", hint="write NAME, NAME:N or NAME:latest")
    name, sep, number = ref.partition(":")
    check_name(name)
    if not sep or number == "latest":
        return name, None
    if not number.isascii() or not number.isdigit() or number.startswith("0"):
        raise InvalidName(f"{ref!r:.80}: the version must be a number or 'latest'",
                          hint=f"write {name}, {name}:N or {name}:latest")
    return name, int(number)


def _version(row: tuple) -> DatasetVersion:
    name, number, tree, created, size, files, message = row
    return DatasetVersion(name=name, version=number, tree=ObjectId.from_hex(tree), created=created,
                          size=size, files=files, message=message)


class _tx:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (rollback on error) on an autocommit connection;
    SQLite's "disk full" becomes ``StoreFull``, other SQLite failures ``StoreError``."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise _translate(e) from e

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise _translate(exc) from exc
            return
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as e:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise _translate(e) from e


def _translate(e: sqlite3.Error) -> Exception:
    if "full" in str(e).lower():
        return StoreFull("no space left on the device of the dataset catalog; nothing was changed",
                         hint="free disk space (floyd data delete, then floyd data gc) and try again")
    return StoreError(f"the dataset catalog failed: {e}", hint="check the disk and the store folder's permissions")
