"""Snapshot: store a folder's files as chunks and its manifest as one tree object.

Steps: (1) walk the folder once (:mod:`floydd.store.walk`: special files and links that
leave the tree are refused before anything is written, and ``total`` is known before any
byte is read); (2) for each file, reuse the chunk ids of the metadata cache if the file
is unchanged and its chunks are still stored, else read it; (3) store the tree, commit
(durable), and only then update the cache. The caller holds the store's shared lock.

How files become objects: files under ``PACK_FILE_MAX`` (256 KiB) are read in one call
and appended to a *pack*, one object of ~1 MiB holding many small files back to back
(restic packs blobs for the same reason: 10k small files cost ~100 object writes, not
10k creates, fsyncs and renames). Pack boundaries are content-defined (see
``_cut_pack_after``), so a copied folder makes the same packs and dedups. Files up to
``WHOLE_MAX`` (1 MiB) are one object each; larger files are cut by FastCDC.

A file that changes while it is read is read again (twice at most), then refused with
``Conflict``: a snapshot never mixes two versions of one file.

Nothing below the root is opened by path: the walk and every read go through directory
descriptors without following a link (:mod:`floydd.security.beneath`), so a job that swaps
a folder of its ``/output`` for a link while the daemon reads it gets a ``Conflict`` (the
checkpoint is tried again later), never a file from outside the folder in its output.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from floydd import log
from floydd.errors import Conflict
from floydd.store.cache import FileCache, Fingerprint, fingerprint
from floydd.store.chunker import WHOLE_MAX, Chunker
from floydd.store.ids import ObjectId
from floydd.store.ignore import Ignore
from floydd.store.objects import Objects, Writer, WriteStats
from floydd.store.tree import Entry, Kind, Tree
from floydd.store.walk import Files, Item, open_source, walk

__all__ = ["snapshot", "SnapshotResult", "Progress"]

Progress = Callable[[int, int], object]

_READ_TRIES = 3
PACK_FILE_MAX = 256 << 10   # files smaller than this are packed together
PACK_MIN = 256 << 10        # a pack is cut only past this size ...
PACK_TARGET = 640 << 10     # ... with a chance growing with its size (mean ~1 MiB) ...
PACK_MAX = 4 << 20          # ... and always past this one


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotResult:
    tree: ObjectId
    size: int
    files: int
    stats: WriteStats
    cache_hits: int
    manifest: Tree | None = field(default=None, repr=False, compare=False)
    """The tree as built (so the caller need not read back and decode what it just wrote)."""

    def to_dict(self) -> dict:
        return {"tree": str(self.tree), "size": self.size, "files": self.files, "cache_hits": self.cache_hits,
                "written_objects": self.stats.written_objects, "written_bytes": self.stats.written_bytes,
                "reused_objects": self.stats.reused_objects}


def snapshot(objects: Objects, src: Path, *, cache_path: Path | None, chunker: Chunker,
             ignore: Ignore | None = None, progress: Progress | None = None,
             exclude: Path | None = None, workers: int = 2, dir_fd: int | None = None) -> SnapshotResult:
    """Store the folder ``src``. With ``dir_fd`` (a descriptor of it the caller opened, e.g.
    a job's ``/output`` opened without following a link) that folder is what is read and
    ``src`` only names it; else ``src`` is opened here (a link to a folder is followed: a
    person names their own folder). Below the root nothing is opened by path."""
    if dir_fd is None:
        root_fd, root = open_source(src)
    else:
        root_fd, root = os.dup(dir_fd), os.fsencode(os.path.abspath(src))
    try:
        return _snapshot(objects, root_fd, root, cache_path=cache_path, chunker=chunker, ignore=ignore,
                         progress=progress, exclude=exclude, workers=workers)
    finally:
        os.close(root_fd)


def _snapshot(objects: Objects, root_fd: int, root: bytes, *, cache_path: Path | None, chunker: Chunker,
              ignore: Ignore | None, progress: Progress | None, exclude: Path | None,
              workers: int) -> SnapshotResult:
    items = walk(root_fd, root, ignore, exclude)
    total = sum(it.fp[2] for it in items if it.kind is Kind.FILE)
    if progress:
        progress(0, total)
    cache = FileCache(cache_path, objects.keys) if cache_path is not None else None
    if cache is not None:
        cache.prefetch([it.abs for it in items if it.kind is Kind.FILE and it.fp[2]])
    files = Files(root_fd)
    try:
        with objects.writer(workers=workers) as writer:
            ingest = _Ingest(writer, cache, chunker, progress, total, objects.keys.object_id, files)
            for it in items:
                ingest.add(it)
            entries = ingest.finish()
            tree = Tree(tuple(sorted(entries, key=lambda e: e.raw_path)))
            tree_id = writer.put(tree.encode())
            writer.commit()
            stats = writer.stats
        if cache is not None:
            cache.save()
    finally:
        files.close()
        if cache is not None:
            cache.close()
    log.store.info("snapshot %s: %d files, %d bytes, %d new objects (%d bytes), %d cached files",
                   tree_id.short, tree.files, tree.size, stats.written_objects, stats.written_bytes,
                   ingest.hits)
    return SnapshotResult(tree=tree_id, size=tree.size, files=tree.files, stats=stats, cache_hits=ingest.hits,
                          manifest=tree)


class _Ingest:
    """Turns walked items into entries: cache hits, packed small files, chunked large ones."""

    def __init__(self, writer: Writer, cache: FileCache | None, chunker: Chunker,
                 progress: Progress | None, total: int, hash_fn: Callable[[bytes], ObjectId],
                 files: Files) -> None:
        self.writer = writer
        self.files = files
        self.cache = cache
        self.chunker = chunker
        self.progress = progress
        self.total = total
        self.done = 0
        self.hits = 0
        self._hash = hash_fn
        self.entries: list[Entry | None] = []
        self._pack = bytearray()
        self._members: list[tuple[int, int, Item, Fingerprint, int]] = []  # index, offset, item, fp, size

    def add(self, it: Item) -> None:
        if it.kind is not Kind.FILE:
            self.entries.append(Entry(path=os.fsdecode(it.rel), kind=it.kind, mode=it.mode,
                                      target=os.fsdecode(it.target)))
            return
        if it.fp[2] == 0:  # empty when walked: nothing to read
            self._file_done(it, it.mode, 0, (), None)
            return
        if self._from_cache(it):
            return
        if it.fp[2] < PACK_FILE_MAX:
            data, fp, mode = _read_small(self.files, it)
            if data is not None:
                self._add_small(it, data, fp, mode)
                return
        chunks, fp, mode = _ingest_large(self.files, it, self.writer, self.chunker, self._report_partial)
        if self.cache is not None and fp[2]:
            self.cache.record(it.abs, fp, chunks)
        self._file_done(it, mode, fp[2], chunks, None)

    def finish(self) -> list[Entry]:
        self._flush_pack()
        assert all(e is not None for e in self.entries)
        return self.entries  # type: ignore[return-value]

    def _from_cache(self, it: Item) -> bool:
        if self.cache is None or not it.fp[2]:
            return False
        hit = self.cache.lookup(it.abs, it.fp)
        if hit is None:
            return False
        chunks, offset = hit
        if not self.writer.reuse_all(chunks):
            return False
        self.hits += 1
        self._file_done(it, it.mode, it.fp[2], chunks, offset)
        return True

    def _add_small(self, it: Item, data: bytes, fp: Fingerprint, mode: int) -> None:
        if not data:
            self._file_done(it, mode, 0, (), None)
            return
        self._members.append((len(self.entries), len(self._pack), it, fp, mode))
        self.entries.append(None)
        self._pack += data
        self.done += len(data)
        if self.progress:
            self.progress(self.done, self.total)
        if _cut_pack_after(self._hash(data).raw, len(data), len(self._pack)):
            self._flush_pack()

    def _flush_pack(self) -> None:
        if not self._members:
            return
        pack_id = self.writer.put(self._pack)  # sealed (copied) before put returns
        end = len(self._pack)
        for index, offset, it, fp, mode in reversed(self._members):
            size = end - offset
            end = offset
            self.entries[index] = Entry(path=os.fsdecode(it.rel), kind=Kind.FILE, mode=mode, size=size,
                                        chunks=(pack_id,), offset=offset)
            if self.cache is not None:
                self.cache.record(it.abs, fp, (pack_id,), offset)
        self._pack = bytearray()
        self._members.clear()

    def _file_done(self, it: Item, mode: int, size: int, chunks: tuple[ObjectId, ...],
                   offset: int | None) -> None:
        self.entries.append(Entry(path=os.fsdecode(it.rel), kind=Kind.FILE, mode=mode, size=size,
                                  chunks=chunks, offset=offset))
        self.done += size
        if self.progress:
            self.progress(self.done, self.total)

    def _report_partial(self, got: int) -> None:
        if self.progress:
            self.progress(self.done + got, self.total)


def _cut_pack_after(file_hash: bytes, file_size: int, pack_size: int) -> bool:
    """Content-defined pack boundaries: the same small files in the same order make the
    same packs (a copied folder dedups), and one added file changes one pack.

    Past ``PACK_MIN`` the chance to cut after a file is ``file_size * pack_size / T**2``
    (a hazard per byte growing with the pack), decided by the file's own hash; packs
    then average about ``PACK_MIN + 1.25 T`` whatever the file sizes."""
    if pack_size >= PACK_MAX:
        return True
    if pack_size < PACK_MIN:
        return False
    chance = (file_size * (pack_size - PACK_MIN) << 32) // (PACK_TARGET * PACK_TARGET)
    return int.from_bytes(file_hash[:4], "little") < chance


# -- reading files ----------------------------------------------------------------------

def _open_checked(files: Files, it: Item) -> tuple[int, os.stat_result]:
    fd = files.open(it)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Conflict(f"{os.fsdecode(it.abs)} was replaced while being snapshotted", hint="run the snapshot again")
    return fd, st


def _read_small(files: Files, it: Item) -> tuple[bytes | None, Fingerprint, int]:
    """The whole content of a small file; ``None`` if it has grown past the pack limit."""
    for _ in range(_READ_TRIES):
        fd, before = _open_checked(files, it)
        try:
            if before.st_size >= PACK_FILE_MAX:
                return None, fingerprint(before), 0
            data = _read_exact(fd, before.st_size + 1)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        fp = fingerprint(after)
        if len(data) == before.st_size and fp == fingerprint(before):
            return data, fp, stat.S_IMODE(after.st_mode) & 0o777
        log.store.info("%s changed while being read; reading it again", os.fsdecode(it.abs))
    raise _kept_changing(it)


def _ingest_large(files: Files, it: Item, writer: Writer, chunker: Chunker,
                  partial: Callable[[int], object]) -> tuple[tuple[ObjectId, ...], Fingerprint, int]:
    for _ in range(_READ_TRIES):
        fd, before = _open_checked(files, it)
        try:
            size = before.st_size
            if size <= WHOLE_MAX:
                data = _read_exact(fd, size + 1)
                chunks = (writer.put(data),) if data else ()
                got = len(data)
            else:
                chunks, got = _ingest_stream(fd, size, writer, chunker, partial)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        fp = fingerprint(after)
        if got == size and fp == fingerprint(before):
            return chunks, fp, stat.S_IMODE(after.st_mode) & 0o777
        log.store.info("%s changed while being read; reading it again", os.fsdecode(it.abs))
    raise _kept_changing(it)


def _kept_changing(it: Item) -> Conflict:
    return Conflict(f"{os.fsdecode(it.abs)} kept changing while being snapshotted",
                    hint="stop whatever writes to it, then run the snapshot again")


def _ingest_stream(fd: int, size: int, writer: Writer, chunker: Chunker,
                   partial: Callable[[int], object]) -> tuple[tuple[ObjectId, ...], int]:
    chunks: list[ObjectId] = []
    got = 0
    with open(fd, "rb", buffering=0, closefd=False) as f:
        for view in chunker.cut_stream(f, size + 1):
            chunks.append(writer.put(view))
            got += len(view)
            partial(min(got, size))
    return tuple(chunks), got


def _read_exact(fd: int, n: int) -> bytes:
    data = os.read(fd, n)
    if len(data) == n or not data:
        return data
    parts = [data]
    left = n - len(data)
    while left > 0:
        more = os.read(fd, left)
        if not more:
            break
        parts.append(more)
        left -= len(more)
    return b"".join(parts)
