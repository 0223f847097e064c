"""Sealed objects over a backend: ``get`` opens and verifies, a ``Writer`` stores.

This is the only layer that holds both keys and a backend (restic's ``repository``).
Every ``get`` authenticates and re-hashes, so wrong data is never returned. A ``Writer``
is one upload: it skips what is stored *and intact*, seals the rest on the calling thread
straight from the caller's buffer (the sealed copy is the only copy of the plaintext), and saves
them on worker threads (write, read back, check: see ``backend.Batch``), bounding the
objects in flight, and checkpoints (commits) every ``checkpoint_bytes`` so a killed
upload keeps most of its work.

**Re-uploading heals.** An object already stored is reused only once its stored copy has
been read back, opened and re-hashed (:meth:`Objects.intact`); a damaged one is written
again from the data in hand, replacing it (the backend renames the good copy over it), so
the new version never shares the damage and the old versions that named it are whole again.
This costs one read of each reused object, on the caller's thread (measured, 232 MiB
re-uploaded unchanged from the page cache, 2 cores: 0.33 s instead of 0.18 s with
metadata-cache hits, 0.65 s instead of 0.53 s when the files are read again).

Threads and the GIL: reading, FastCDC, BLAKE3, file writes, read-backs and fsync release
the GIL. AES-GCM releases it only from ``cryptography`` 50 (pyca/cryptography#15361;
measured: 49.0.0 holds it, 50.0.2 releases it); with older versions sealing and the
read-back's decryption serialise the threads, and an upload uses about one core
(``bench/README.md``). Buffers: up to ``2 * workers + 2`` sealed objects of
``BUFFER_SIZE`` in flight, reused for the whole upload.
"""

from __future__ import annotations

import mmap
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable

from floydd import log
from floydd.errors import IntegrityError, NotFound
from floydd.store.backend import Backend
from floydd.store.fileio import ALIGN, aligned_buffer
from floydd.store.keys.crypto import MAX_OVERHEAD, Keys
from floydd.store.ids import ObjectId

__all__ = ["Objects", "Writer", "WriteStats", "BUFFER_SIZE", "WORKERS", "WORKERS_DIRECT"]

BUFFER_SIZE = (4 << 20) + (256 << 10) + MAX_OVERHEAD
"""A sealed object of the largest size a snapshot makes: a 4 MiB chunk (chunker
``max_size``) or a pack (under ``snapshot.PACK_MAX + PACK_FILE_MAX``). Writers reuse
buffers of this size; a larger object (a tree of a huge folder) gets a one-off buffer.
They are page-aligned (:func:`floydd.store.fileio.aligned_buffer`) with room to pad, so a
direct write goes from them as they are."""
_BUFFER_ALIGNED = -(-BUFFER_SIZE // ALIGN) * ALIGN
WORKERS = 2
"""Threads that write, read back and check an upload's objects (and restore files)."""
WORKERS_DIRECT = 4
"""The same with direct I/O: each write waits for the device, so more in flight than
cores keeps the disk busy (1 GiB in process, 2 cores: 4.5 s with 2, 3.6 s with 4)."""
_PROVERS = 4
"""Reused objects proven at once (reads from the device, then AES-GCM and BLAKE3, which
release the GIL)."""


class Objects:
    def __init__(self, backend: Backend, keys: Keys) -> None:
        self.backend = backend
        self.keys = keys

    def get(self, oid: ObjectId, *, bypass_cache: bool = False) -> bytes:
        """The plaintext of ``oid``; ``NotFound`` or ``IntegrityError`` naming it."""
        return self.keys.open(oid, self.backend.load(oid, bypass_cache=bypass_cache))

    def has(self, oid: ObjectId) -> bool:
        return self.backend.has(oid)

    def intact(self, oid: ObjectId) -> bool:
        """Whether the stored copy of ``oid`` opens and re-hashes (False also when it is
        missing). Read into the backend's buffer and opened into this thread's: no copy kept."""
        try:
            self.backend.check_stored(oid, lambda stored: self.keys.check(
                oid, stored, _buffer(_intact_tls, "plain", len(stored))))
        except (IntegrityError, NotFound):
            return False
        return True

    def writer(self, *, workers: int = WORKERS, checkpoint_bytes: int = 256 << 20, direct: bool | None = None) -> Writer:
        """``direct``: the backend's batch writes large objects bypassing its cache (None: its
        default; :meth:`Backend.batch <floydd.store.backend.Backend.batch>`)."""
        return Writer(self, workers=workers, checkpoint_bytes=checkpoint_bytes, direct=direct)


@dataclass(slots=True)
class WriteStats:
    written_objects: int = 0
    written_bytes: int = 0
    reused_objects: int = 0
    healed_objects: int = 0     # stored copies found damaged and written again (see Writer.put)


class Writer:
    """Writes for one upload. ``put`` is called from one thread; use as a context manager."""

    def __init__(self, objects: Objects, *, workers: int, checkpoint_bytes: int, direct: bool | None = None) -> None:
        self._objects = objects
        self._keys = objects.keys
        self._backend = objects.backend
        self._batch = objects.backend.batch(direct=direct)
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="floydd-store")
        self._slots = threading.BoundedSemaphore(2 * max(1, workers) + 2)  # objects in flight
        self._free: list[mmap.mmap] = []  # sealed-object buffers of BUFFER_SIZE, reused
        self._futures: list[Future] = []
        self._seen: set[ObjectId] = set()
        self._since_checkpoint = 0
        self._checkpoint_bytes = checkpoint_bytes
        self._closed = False
        self._tls = threading.local()
        self._provers: ThreadPoolExecutor | None = None     # proofs of reused objects (reuse_all)
        self.stats = WriteStats()

    def put(self, data: bytes | memoryview, oid: ObjectId | None = None) -> ObjectId:
        """Store ``data`` unless it is stored already; returns its id."""
        if oid is None:
            oid = self._keys.object_id(data)
        if oid in self._seen:
            return oid
        if self._backend.has(oid):
            if self._objects.intact(oid):
                self._batch.uses(oid)
                self._seen.add(oid)
                self.stats.reused_objects += 1
                return oid
            self.stats.healed_objects += 1      # the stored copy is damaged: write a good one over it
            log.store.warning("object %s is stored but damaged; writing a good copy over it", oid.short)
        self._seen.add(oid)
        self.stats.written_objects += 1
        self.stats.written_bytes += len(data)
        self._since_checkpoint += len(data)
        self._submit(oid, data)
        if self._since_checkpoint >= self._checkpoint_bytes:
            self.checkpoint()
        return oid

    def _submit(self, oid: ObjectId, data: bytes | memoryview) -> None:
        """Seal on this thread into a free buffer (``data`` may be a view the chunker
        reuses as soon as we return), then write and check on a worker thread."""
        self._slots.acquire()
        buf = None
        try:
            n = len(data) + MAX_OVERHEAD
            buf = self._free.pop() if self._free and n <= BUFFER_SIZE else aligned_buffer(max(n, BUFFER_SIZE))
            sealed = self._keys.seal_into(oid, data, buf)
            future = self._pool.submit(self._save, oid, sealed, buf)
        except BaseException:
            self._release(buf)
            raise
        self._futures.append(future)
        self._reap()

    def _save(self, oid: ObjectId, sealed: memoryview, buf: mmap.mmap) -> None:
        try:
            scratch = _buffer(self._tls, "plain", len(sealed))
            self._batch.save(oid, sealed, lambda stored: self._keys.check(oid, stored, scratch))
        finally:
            del sealed
            self._release(buf)

    def _release(self, buf: mmap.mmap | None) -> None:
        if buf is not None and len(buf) == _BUFFER_ALIGNED:
            self._free.append(buf)  # (list.append/pop are atomic)
        self._slots.release()

    def reuse(self, oid: ObjectId) -> bool:
        """Rely on an object stored earlier (a cache hit); False if it is gone."""
        return self.reuse_all((oid,))

    def reuse_all(self, oids: Iterable[ObjectId]) -> bool:
        """Rely on objects stored earlier (a file's chunks, from the metadata cache), each
        proven (read, authenticated, re-hashed) first, several at once: a proof reads from
        the device (``Backend.check_stored``), so one at a time the disk would idle between
        them. False if any is gone or damaged: the caller reads the file again and puts it
        (the ones proven stay relied on; a damaged one is written again by ``put``)."""
        todo = [oid for oid in dict.fromkeys(oids) if oid not in self._seen]
        if len(todo) > 1:
            if self._provers is None:
                self._provers = ThreadPoolExecutor(max_workers=_PROVERS, thread_name_prefix="floydd-store-prove")
            proven = list(self._provers.map(self._proven, todo))
        else:
            proven = [self._proven(oid) for oid in todo]
        for oid, ok in zip(todo, proven):
            if ok:
                self._batch.uses(oid)
                self._seen.add(oid)
                self.stats.reused_objects += 1
        return all(proven)

    def _proven(self, oid: ObjectId) -> bool:
        return self._backend.has(oid) and self._objects.intact(oid)

    def checkpoint(self) -> None:
        """Wait for every write so far and make it durable and visible."""
        self._drain()
        self._batch.commit()
        self._since_checkpoint = 0

    commit = checkpoint

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            for f in self._futures:
                f.cancel()
            self._pool.shutdown(wait=True)
            if self._provers is not None:
                self._provers.shutdown(wait=True)
        finally:
            self._batch.abort()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------

    def _reap(self) -> None:
        """Drop finished writes; the first failure (disk full, ...) is raised at once."""
        done, pending = [], []
        for f in self._futures:
            (done if f.done() else pending).append(f)
        if done:
            self._futures = pending
            for f in done:
                f.result()

    def _drain(self) -> None:
        futures, self._futures = self._futures, []
        for f in futures:
            f.result()


_intact_tls = threading.local()


def _buffer(tls: threading.local, name: str, size: int) -> bytearray:
    """A per-thread buffer of at least ``size`` bytes; replaced, never resized (a view of
    the old one may still be alive, e.g. in a traceback)."""
    buf = getattr(tls, name, None)
    if buf is None or len(buf) < size:
        buf = bytearray(max(size, BUFFER_SIZE))
        setattr(tls, name, buf)
    return buf
