"""When the dataset catalog cannot be trusted, and so must not be read as "no data".

The catalog (``STORE/catalog.db``) is the only list of what the store's objects are for:
a version or pin it has lost makes its objects look like garbage to gc, and a catalog that
silently starts empty makes *every* object look like garbage. It is not trusted when:

- it is 0 bytes; or it is missing or has no tables while ``objects/`` holds objects (a fresh
  store has neither; a store whose catalog went has objects that nothing names any more);
- it is not an SQLite database, is truncated, or fails ``PRAGMA quick_check``;
- it lacks some of its tables, or holds rows no floydd writes (a tree id that is not 64 hex
  digits, a version number below 1): bytes changed inside its rows;
- its write-ahead log was lost with committed transactions in it (see
  :mod:`floydd.store.dbfile`).

Nor is a store whose ``key`` file is missing while objects exist: opening it would make a new
key, under which none of them opens.

``Store.open`` refuses such a store (:func:`check_store` raises
:class:`~floydd.errors.Untrusted`, naming the file, what is wrong and the two ways out:
restore the file from a backup, or ``floydd repair``, which rebuilds the catalog from the trees
in the store: :mod:`floydd.store.care.rebuild`); gc checks again, under its exclusive lock, before it
removes anything. What no check here can see: a catalog replaced by an older,
healthy copy of itself (its newer versions are gone without a trace in the file). In the
daemon the cluster's catalog still names those versions, and gc keeps their trees.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from floydd.errors import Untrusted
from floydd.store.dbfile import Inspection, inspect

__all__ = ["CATALOG_TABLES", "store_problems", "catalog_problem", "check_store", "holds_objects",
           "REPAIR_HINT", "KEY_HINT"]

CATALOG_TABLES = frozenset({"datasets", "versions", "pins"})  # meta came later: opening adds it
KEY_HINT = "stop floydd and put back the store's key file from your backup: without it no stored object can be read"
REPAIR_HINT = ("stop floydd and restore {path} from a backup, or run `floydd repair` (it sets the file aside "
               "and rebuilds what it can; `floydd repair --dry-run` only reports)")

_BAD_ROWS = ("SELECT (SELECT count(*) FROM versions WHERE length(tree) != 64 OR tree GLOB '*[^0-9a-f]*' "
             "OR version < 1 OR typeof(version) != 'integer') + "
             "(SELECT count(*) FROM pins WHERE length(tree) != 64 OR tree GLOB '*[^0-9a-f]*')")


def store_problems(root: Path, *, deep: bool = False) -> list[tuple[Path, str]]:
    """What makes the store at ``root`` untrustworthy: (file, what is wrong) pairs, none when
    it may be opened. Besides the catalog: a key file that is missing while objects exist
    (a new key would be made, under which no stored object opens)."""
    root = Path(root)
    found = []
    if not (root / "key").exists() and holds_objects(root / "objects"):
        found.append((root / "key", "is missing, but the store holds objects sealed under it"))
    problem = catalog_problem(root, deep=deep)
    if problem:
        found.append((root / "catalog.db", problem))
    return found


def catalog_problem(root: Path, *, deep: bool = False) -> str:
    """What makes the catalog of the store at ``root`` untrustworthy, or ""."""
    root = Path(root)
    found = inspect(root / "catalog.db", CATALOG_TABLES, deep=deep)
    if found.problem:
        return found.problem
    if found.blank:
        if holds_objects(root / "objects"):
            what = "is missing" if not found.exists else "has no tables"
            return f"{what}, but the store holds objects: the versions and pins that named them are gone"
        return ""
    return _row_problem(found)


def check_store(root: Path, *, deep: bool = False) -> None:
    """Raise :class:`Untrusted` when :func:`store_problems` finds something."""
    found = store_problems(root, deep=deep)
    if found:
        what = "; ".join(f"{path} {problem}" for path, problem in found)
        hint = KEY_HINT if found[0][0].name == "key" else REPAIR_HINT.format(path=found[0][0])
        raise Untrusted(f"the store cannot be trusted: {what}", hint=hint)


def holds_objects(objects: Path) -> bool:
    """Whether ``objects/`` holds at least one stored object (stops at the first)."""
    try:
        prefixes = os.scandir(objects)
    except FileNotFoundError:
        return False
    with prefixes:
        for prefix in prefixes:
            if len(prefix.name) != 2 or not prefix.is_dir(follow_symlinks=False):
                continue
            with os.scandir(prefix.path) as names:
                if any(n.name.startswith(prefix.name) and not n.name.startswith(".") for n in names):
                    return True
    return False


def _row_problem(found: Inspection) -> str:
    try:
        db = sqlite3.connect(found.path.absolute().as_uri() + "?mode=ro", uri=True)
        try:
            bad = db.execute(_BAD_ROWS).fetchone()[0]
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        return f"is damaged ({e})"
    return f"holds {bad} row(s) that floydd never writes (damaged values)" if bad else ""
