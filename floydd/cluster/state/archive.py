"""The archive: finished jobs moved out of the hot replicated state, listed from SQLite.

The hot state (:class:`~floydd.cluster.state.machine.ClusterState`) holds live work and recent
history, in memory on every node. A ``job.archive`` command (the leader's, in bounded
batches: :mod:`floydd.cluster.archiver`) moves finished jobs into the archive: one row per
job, the job as it ended less its cluster history (its events stay on the box that ran it,
with its log and metric series). Every node applies the same commands, so every node holds
the same archive, and its memory stays flat however many jobs the archive holds::

    archive                id, project, number, created, state, idem_key, deleted, job (msgpack)
    archive_incoming       the same: a snapshot's archive being received from the leader
    archive_incoming_meta  (index, term, complete) of that snapshot

Ahead of the log. Applying a command only changes the archive's *pending* rows (reads see
them); the raft driver writes them (``SqliteArchive.flush``, one fsynced transaction on its
writer thread) before it takes the next ready, so before any snapshot drops their entries;
a crash before that loses nothing, the entries are replayed. So the table may be *ahead* of
the state being rebuilt: after a restart, or after installing a snapshot whose archive was
read later than the snapshot was taken. Two rules make a replay over it answer exactly as
the first run did:

- each row says when it was archived (``archived_at``, the log index) and, once deleted,
  when (``deleted_at``: a deleted row stays as a tombstone); a command applied at index
  ``i`` sees only rows archived before ``i`` and not deleted before ``i`` (:func:`visible`);
- a tombstone is dropped (:meth:`MemoryArchive.purge`) only once a snapshot past its
  deletion is durable: no replay can start before it any more.

A job both in the hot state and in the archive (a replay has not reached its ``job.archive``
yet) is listed once, from the hot state.

Snapshots. The hot state is the raft snapshot's ``data``; the archive rides beside it. The
leader streams its rows as they are when it sends the snapshot (:meth:`export`;
:mod:`floydd.cluster.net.transport`); the receiver stages them (:meth:`receive`) and the raft
storage swaps them in within the transaction that saves the snapshot (:meth:`saved`,
SqliteStorage's ``on_snapshot`` hook): a crash leaves the old archive and log, or the new.

:class:`MemoryArchive` is the archive in memory (the pure tests, the simulator, offline
reads); the daemon's nodes use :class:`~floydd.cluster.tables.archive_db.SqliteArchive` in
``raft.db``. This module is pure (the state machine imports it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable

import msgpack

from floydd.errors import InvalidSpec
from floydd.model import Job

__all__ = ["MemoryArchive", "ArchiveRules", "Row", "Run", "archived_form", "visible", "row_of", "decode_chunk",
           "newest_first", "EXPORT_ROWS"]

EXPORT_ROWS = 500
"""Rows per chunk of an exported archive (about 300 KB)."""

Run = Callable[..., Awaitable[Any]]
"""``await run(fn, *args)``: ``fn(*args)`` on the raft driver's writer thread."""


@dataclass(frozen=True, slots=True)
class Row:
    """An archived job as the archive keeps it: the job as it ended, less its cluster history
    (its :attr:`~floydd.model.Job.archived_at` says when it moved), and once deleted, when
    (a tombstone, until purged)."""

    job: Job
    deleted_at: int | None = None

    def stored(self) -> dict:
        """The row's job as the table and a snapshot's chunks carry it."""
        return {**self.job.to_dict(), "deleted_at": self.deleted_at}

    @classmethod
    def from_stored(cls, raw: dict) -> Row:
        return cls(Job.from_dict(raw), raw.get("deleted_at"))

    @classmethod
    def from_blob(cls, blob: bytes) -> Row:
        return cls.from_stored(msgpack.unpackb(blob, raw=False))


def archived_form(job: Job, index: int) -> Row:
    """What the archive keeps of a finished job moved at log index ``index``."""
    return Row(replace(job, history=(), archived_at=index))


def visible(row: Row | None, before: int | None = None) -> Job | None:
    """The row's job if it is in the archive as a command at log index ``before`` sees it
    (None: as it is now): archived before it and not deleted before it."""
    if row is None:
        return None
    if before is None:
        return None if row.deleted_at is not None else row.job
    if row.job.archived_at >= before or (row.deleted_at is not None and row.deleted_at < before):
        return None
    return row.job


class ArchiveRules:
    """What both archives derive from ``get``, ``put`` and ``_idem_keys`` (the keys of rows
    with an idempotency key): lookups by key and deletion as a tombstone."""

    def by_idem(self, idem_key: str, before: int | None = None) -> Job | None:
        """The archived job submitted with ``idem_key``, as a command at log ``before`` sees it."""
        for key in sorted(self._idem_keys(idem_key)):
            job = self.get(key, before)
            if job is not None and job.idem_key == idem_key:
                return job
        return None

    def drop(self, key: str, index: int) -> Job | None:
        """Delete the job (as of log ``index``): it stays as a tombstone until purged."""
        job = self.get(key, index)
        if job is not None:
            self.put(Row(job, deleted_at=index))
        return job


class MemoryArchive(ArchiveRules):
    """The archive in memory (tests, the simulator, offline reads)."""

    def __init__(self) -> None:
        self._rows: dict[str, Row] = {}
        self._idem: dict[str, set[str]] = {}
        self._incoming: tuple[int, int, list[Row]] | None = None

    # -- what the state machine calls --------------------------------------------------------

    def put(self, row: Row) -> None:
        """Store a row (an :func:`archived_form` or a tombstone), replacing its key's."""
        key = row.job.id
        self._rows[key] = row
        if row.job.idem_key:
            self._idem.setdefault(row.job.idem_key, set()).add(key)

    def get(self, key: str, before: int | None = None) -> Job | None:
        return visible(self._rows.get(key), before)

    def _idem_keys(self, idem_key: str) -> set[str]:
        return self._idem.get(idem_key, set())

    def count(self) -> int:
        return sum(1 for row in self._rows.values() if row.deleted_at is None)

    # -- reads -------------------------------------------------------------------------------

    async def page(self, *, project: str | None = None, states: Iterable[str] | None = None,
                   since: float | None = None, limit: int | None = None) -> list[Job]:
        """Archived jobs, newest first (by creation), filtered like the hot listing."""
        return newest_first((row.job for row in self._rows.values() if row.deleted_at is None),
                            project, states, since, limit)

    # -- durability and snapshots (nothing to write; snapshots staged in memory) -------------

    @property
    def dirty(self) -> bool:
        return False

    async def flush(self, run: Run) -> None:
        pass

    async def purge(self, upto: int, run: Run) -> None:
        """Drop the tombstones of deletions at or before log index ``upto`` (a durable snapshot)."""
        for key in [k for k, row in self._rows.items() if row.deleted_at is not None and row.deleted_at <= upto]:
            row = self._rows.pop(key)
            self._idem.get(row.job.idem_key, set()).discard(key)

    async def export(self, rows: int = EXPORT_ROWS) -> AsyncIterator[bytes]:
        every = list(self._rows.values())
        for i in range(0, len(every), rows):
            yield msgpack.packb([list(row_of(row)) for row in every[i:i + rows]], use_bin_type=True)

    def receive(self, index: int, term: int, run: Run) -> "_MemorySink":
        return _MemorySink(self, index, term)

    def saved(self, db: Any, snapshot: Any) -> None:
        pass

    def installed(self, index: int, term: int) -> None:
        """The state was replaced by the snapshot at (index, term): take the rows staged with it."""
        incoming, self._incoming = self._incoming, None
        if incoming is not None and incoming[:2] == (index, term):
            self._rows, self._idem = {}, {}
            for row in incoming[2]:
                self.put(row)

    def close(self) -> None:
        pass


class _MemorySink:
    def __init__(self, archive: MemoryArchive, index: int, term: int) -> None:
        self._archive, self._staged = archive, (index, term, [])

    async def add(self, chunk: bytes) -> None:
        self._staged[2].extend(Row.from_blob(row[-1]) for row in decode_chunk(chunk))

    async def finish(self) -> None:
        self._archive._incoming = self._staged


def row_of(row: Row) -> tuple:
    """The table row of an archived job: id, project, number, created, state, idem_key, deleted, job."""
    job = row.job
    return (job.id, job.project, job.number, float(job.created or 0), job.state, job.idem_key, row.deleted_at,
            msgpack.packb(row.stored(), use_bin_type=True))


def decode_chunk(chunk: bytes) -> list[tuple]:
    """The rows of a chunk from a peer, checked against the job each carries."""
    try:
        out = []
        for key, project, number, created, state, idem_key, deleted, blob in msgpack.unpackb(chunk, raw=False):
            row = Row.from_blob(blob)
            job = row.job
            if not (isinstance(key, str) and job.id == key and job.project == project and job.number == number
                    and isinstance(created, (int, float)) and job.state == state
                    and job.idem_key == (idem_key or "") and row.deleted_at == deleted
                    and type(job.archived_at) is int):
                raise ValueError(f"row {key!r:.60} does not match its job")
            out.append((key, project, number, float(created), state, idem_key, deleted, blob))
        return out
    except (ValueError, TypeError, KeyError, AttributeError, msgpack.ExtraData, msgpack.FormatError,
            msgpack.StackError) as exc:
        raise InvalidSpec(f"a chunk of the archive is malformed: {exc}",
                          hint="the sender runs another version or is broken") from None


def newest_first(jobs: Iterable[Job], project: str | None, states: Iterable[str] | None, since: float | None,
                 limit: int | None) -> list[Job]:
    """``jobs`` of ``project`` in ``states`` created at or after ``since``, newest first, at most ``limit``."""
    wanted = None if states is None else set(states)
    out = [j for j in jobs if (project is None or j.project == project)
           and (wanted is None or j.state in wanted) and (since is None or (j.created or 0) >= since)]
    out.sort(key=lambda j: (j.created or 0, j.number), reverse=True)
    return out if limit is None else out[:limit]
