"""Append-only schema migrations on plain ``sqlite3``, in the table sqlite-utils ``Migrations``
kept (``_sqlite_migrations``: id, migration_set, name, applied_at), so files written by earlier
floydd versions read the same.

It replaces sqlite-utils here (issue 23): that library, with the dateutil and pluggy modules it
loads, was ~1.3 MiB of every daemon's memory (measured on top of the rest of the start path) for
one table and a loop; the daemon imports it no more (tests/unit/test_import_contracts.py).
"""

from __future__ import annotations

import datetime
import sqlite3
from dataclasses import dataclass
from typing import Callable, Iterable

__all__ = ["Migrations", "TABLE"]

TABLE = "_sqlite_migrations"


@dataclass(frozen=True, slots=True)
class Migration:
    name: str
    fn: Callable[[sqlite3.Connection], None]


class Migrations:
    """A named, ordered set of migrations; each is a function given the connection."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._migrations: list[Migration] = []

    def __call__(self, *, name: str | None = None) -> Callable:
        def register(fn: Callable[[sqlite3.Connection], None]) -> Callable[[sqlite3.Connection], None]:
            key = name or fn.__name__
            if key in self.names():
                raise ValueError(f"migration {key!r} is already in set {self.name!r}")
            self._migrations.append(Migration(key, fn))
            return fn
        return register

    def names(self) -> list[str]:
        return [m.name for m in self._migrations]

    def applied(self, conn: sqlite3.Connection) -> list[str]:
        """Names applied to ``conn``'s file from this set, in the order they were applied."""
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)).fetchone() is None:
            return []
        return [r[0] for r in conn.execute(f"SELECT name FROM [{TABLE}] WHERE migration_set = ? ORDER BY rowid",
                                           (self.name,))]

    def pending(self, conn: sqlite3.Connection) -> list[str]:
        done = set(self.applied(conn))
        return [m.name for m in self._migrations if m.name not in done]

    def apply(self, conn: sqlite3.Connection, *, stop_before: str | Iterable[str] | None = None) -> None:
        """Apply the pending migrations in order (each with its record, in a savepoint: one that
        fails leaves nothing of itself), up to the first named in ``stop_before``."""
        stop = {stop_before} if isinstance(stop_before, str) else set(stop_before or ())
        conn.execute(f"CREATE TABLE IF NOT EXISTS [{TABLE}] ([id] INTEGER PRIMARY KEY, [migration_set] TEXT, "
                     "[name] TEXT, [applied_at] TEXT)")
        conn.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS [idx_{TABLE}_migration_set_name] "
                     f"ON [{TABLE}] ([migration_set], [name])")
        done = set(self.applied(conn))
        for m in self._migrations:
            if m.name in done:
                continue
            if m.name in stop:
                return
            conn.execute("SAVEPOINT migration")
            try:
                m.fn(conn)
                conn.execute(f"INSERT INTO [{TABLE}] (migration_set, name, applied_at) VALUES (?, ?, ?)",
                             (self.name, m.name, str(datetime.datetime.now(datetime.timezone.utc))))
            except BaseException:
                conn.execute("ROLLBACK TO migration")
                conn.execute("RELEASE migration")
                raise
            conn.execute("RELEASE migration")
