"""The mechanics of a re-key (:mod:`floydd.store.keys.rekey`): move a store's objects from one
key to another, recording old -> new ids in the journal (:mod:`floydd.store.keys.rekey_journal`).

Memory stays bounded whatever the store's size: the journal is read a page of rows at a
time; at most ``workers + 1`` old objects are opened ahead of the writer, which holds at
most ``2 * workers + 2`` sealed buffers; a batch of at most ``BATCH_BYTES`` is made
durable (one ``commit``) before its ids are recorded. Each old object is authenticated and
re-hashed with the old key when read; each new one is read back from the disk and checked
(decrypted, re-hashed) with the new key before it is named (``objects.Writer``). A new
object already on disk (left by a run that died before recording it) is opened and
re-hashed before it is reused, and removed if it does not open.
"""

from __future__ import annotations

import shutil
from collections import deque
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator

from floydd import log
from floydd.errors import FloyddError, IntegrityError, NotFound, StoreFull, UnsafePath
from floydd.store.keys.crypto import Keys
from floydd.store.ids import ObjectId
from floydd.store.objects import Objects, Writer
from floydd.store.local import LocalBackend, fsync_dir
from floydd.store.keys.rekey_journal import Journal
from floydd.store.tree import Tree

__all__ = ["Resealer", "RekeyProgress", "Damaged", "Stopped", "BATCH_BYTES"]

BATCH_BYTES = 64 << 20     # objects made durable (one commit) before their ids are recorded
RESERVE = 64 << 20         # free space kept beyond what the copy needs


@dataclass(frozen=True, slots=True, kw_only=True)
class RekeyProgress:
    """Where a re-key is: ``plan`` counts root trees read, ``copy`` objects and sealed bytes
    re-sealed, ``drop`` old objects removed."""

    phase: str
    objects_done: int
    objects_total: int
    bytes_done: int = 0
    bytes_total: int = 0


class Damaged(Exception):
    """An old object cannot be read. Not a FloyddError on purpose: nothing on the way up may
    take it for another error; the re-key turns it into a refusal."""

    def __init__(self, oid: ObjectId, err: FloyddError) -> None:
        super().__init__(err.message)
        self.oid, self.err = oid, err


class Stopped(Exception):
    """The daemon is stopping: a re-key running while it serves (``online``) ends between
    two batches, everything recorded so far kept; the next start resumes it."""


class Resealer:
    def __init__(self, journal: Journal, backend: LocalBackend, old: Keys, new: Keys | None, *, workers: int,
                 progress: Callable[[RekeyProgress], object] | None, online: bool = False,
                 should_stop: Callable[[], bool] | None = None) -> None:
        self.online = online
        """The daemon serves meanwhile: temp files may be its uploads' (never cleaned here)."""
        self._should_stop = should_stop or (lambda: False)
        self.journal = journal
        self.backend = backend
        self.old = Objects(backend, old)
        self.new = None if new is None else Objects(backend, new)
        self.workers = workers
        self.progress = progress
        self._done = [0, 0]
        self._total = [0, 0]

    # -- plan ---------------------------------------------------------------------------------

    def plan(self, roots: list[ObjectId]) -> None:
        """Inventory, roots and their chunks, in one transaction: a crash anywhere in it
        means planning again from scratch."""
        j = self.journal
        self.backend.clean_temp()
        with j.transaction():
            j.reset()
            j.add_inventory((oid.raw, self.backend.stat(oid)) for oid in self.backend.list())
            j.add("trees", (t.raw for t in roots))
            for n, tree_id in enumerate(roots, 1):
                j.add("chunks", (c.raw for c in self.read_old_tree(tree_id).chunk_ids()))
                self._report("plan", (n, len(roots), 0, 0))
            missing = j.first_missing()
            if missing is not None:
                oid = ObjectId(missing)
                raise Damaged(oid, NotFound(f"object {oid.short} is not in the store"))
            j.phase = "planned"

    def check_space(self) -> None:
        need = self.journal.bytes_left() + RESERVE
        free = shutil.disk_usage(self.backend.root).free
        if free < need:
            raise StoreFull(f"{_mib(need)} are needed next to the old objects, {_mib(free)} are free")

    # -- copy ---------------------------------------------------------------------------------

    def copy(self) -> None:
        """Chunks, then trees (which name the chunks' new ids); then every recorded new
        object must still exist, else it is copied again."""
        self._count()
        while True:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="floydd-rekey") as pool:
                for rows in self.journal.pending("chunks"):
                    self._reseal("chunks", rows, _ahead(pool, self._open_old, rows, self.workers + 1))
            for rows in self.journal.pending("trees"):
                self._reseal("trees", rows, (self._reencode(ObjectId(old)) for old, _ in rows))
            if self._confirm():
                break
        self.journal.phase = "copied"

    def read_old_tree(self, oid: ObjectId) -> Tree:
        data = self._open_old((oid.raw, 0))
        try:
            return Tree.decode(data, name=f"tree {oid.short}")
        except (IntegrityError, UnsafePath) as e:
            raise Damaged(oid, e) from None

    def _open_old(self, row: tuple[bytes, int]) -> bytes:
        oid = ObjectId(row[0])
        try:
            return self.old.get(oid)
        except (IntegrityError, NotFound) as e:
            raise Damaged(oid, e) from None

    def _reencode(self, oid: ObjectId) -> bytes:
        tree = self.read_old_tree(oid)
        new_ids = self.journal.new_chunk_ids(tree.chunk_ids())
        return Tree(tuple(replace(e, chunks=tuple(new_ids[c] for c in e.chunks)) if e.chunks else e
                          for e in tree.entries)).encode()

    def _reseal(self, table: str, rows: list[tuple[bytes, int]], plaintexts: Iterable[bytes]) -> None:
        """Write each plaintext under the new key (``rows``: old id, sealed size); record
        old -> new after each durable commit."""
        assert self.new is not None
        done: list[tuple[bytes, bytes]] = []
        size = 0
        with self.new.writer(workers=self.workers, checkpoint_bytes=1 << 62) as writer:
            for (old, sealed), plain in zip(rows, plaintexts):
                if self._should_stop():
                    self._record(table, writer, done, size)
                    raise Stopped()
                new_id = self.new.keys.object_id(plain)
                self._check_existing(new_id)
                writer.put(plain, new_id)
                done.append((old, new_id.raw))
                size += sealed
                if size >= BATCH_BYTES:
                    self._record(table, writer, done, size)
                    done, size = [], 0
            self._record(table, writer, done, size)

    def _record(self, table: str, writer: Writer, done: list[tuple[bytes, bytes]], size: int) -> None:
        writer.commit()
        self.journal.record(table, done)
        self._done[0] += len(done)
        self._done[1] += size
        self._report("copy")

    def _check_existing(self, new_id: ObjectId) -> None:
        assert self.new is not None
        if self.backend.has(new_id):
            try:
                self.new.get(new_id)
            except (IntegrityError, NotFound) as e:
                log.store.warning("re-key: dropping a bad copy of %s: %s", new_id.short, e.message)
                self.backend.remove(new_id)

    def _confirm(self) -> bool:
        lost = 0
        for table in ("chunks", "trees"):
            for rows in self.journal.recorded(table):
                gone = [old for old, new in rows if not self.backend.has(ObjectId(new))]
                if gone:
                    self.journal.forget(table, gone)
                    lost += len(gone)
        if lost:
            log.store.warning("re-key: %d new objects vanished; copying them again", lost)
            self._count()
        return not lost

    def _count(self) -> None:
        self._done, self._total = self.journal.totals()
        self._report("copy")

    # -- removing -----------------------------------------------------------------------------

    def drop(self) -> int:
        """Remove every inventoried object that is not a new one; phase done. Returns how many."""
        j = self.journal
        total = j.drop_count()
        done = 0
        folders: set[str] = set()
        for ids in j.droppable():
            if self._should_stop():
                _fsync_folders(self.backend, folders)
                raise Stopped()
            for raw in ids:
                self._remove(ObjectId(raw), folders)
            done += len(ids)
            self._report("drop", (done, total, 0, 0))
        if not self.online:
            self.backend.clean_temp()
        _fsync_folders(self.backend, folders)
        j.finish()
        return total

    def remove_written(self) -> None:
        """Remove what the re-key wrote: objects not in the inventory that it recorded as new,
        or that open under the new key (written, not yet recorded, when it stopped)."""
        j = self.journal
        folders: set[str] = set()
        for oid in self.backend.list():
            if j.inventoried(oid.raw):
                continue
            if not j.is_new(oid.raw):
                if self.new is None:
                    continue
                try:
                    self.new.get(oid)
                except FloyddError:
                    continue  # not ours: leave it
            self._remove(oid, folders)
        _fsync_folders(self.backend, folders)

    def _remove(self, oid: ObjectId, folders: set[str]) -> None:
        self.backend.remove(oid)
        folders.add(oid.hex[:2])

    def _report(self, phase: str, counts: tuple[int, int, int, int] | None = None) -> None:
        if self.progress is None:
            return
        if counts is None:
            counts = (self._done[0], self._total[0], self._done[1], self._total[1])
        self.progress(RekeyProgress(phase=phase, objects_done=counts[0], objects_total=counts[1],
                                    bytes_done=counts[2], bytes_total=counts[3]))


def _ahead(pool: Executor, fn: Callable, items: list, depth: int) -> Iterator:
    """``map(fn, items)`` on ``pool`` with at most ``depth`` results waiting (bounded memory)."""
    waiting: deque = deque()
    try:
        for item in items:
            waiting.append(pool.submit(fn, item))
            if len(waiting) >= depth:
                yield waiting.popleft().result()
        while waiting:
            yield waiting.popleft().result()
    finally:
        for f in waiting:
            f.cancel()


def _fsync_folders(backend: LocalBackend, folders: set[str]) -> None:
    """Make removals durable: fsync the fan-out folders they were in."""
    for name in sorted(folders):
        fsync_dir(backend.root / name)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"
