"""Sealed objects over a backend: ``get`` opens and verifies, a ``Writer`` stores.

This is the only layer that holds both keys and a backend (restic's ``repository``).
Every ``get`` authenticates and re-hashes, so wrong data is never returned. A ``Writer``
is one upload: it skips what is stored, seals and saves the rest on worker threads
(hashing and AES-GCM release the GIL), bounds the bytes in flight, and checkpoints
(commits) every ``checkpoint_bytes`` so a killed upload keeps most of its work.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from floydd.store.backend import Backend
from floydd.store.crypto import OVERHEAD, Keys
from floydd.store.ids import ObjectId

__all__ = ["Objects", "Writer", "WriteStats"]


class Objects:
    def __init__(self, backend: Backend, keys: Keys) -> None:
        self.backend = backend
        self.keys = keys

    def get(self, oid: ObjectId, *, bypass_cache: bool = False) -> bytes:
        """The plaintext of ``oid``; ``NotFound`` or ``IntegrityError`` naming it."""
        return self.keys.open(oid, self.backend.load(oid, bypass_cache=bypass_cache))

    def has(self, oid: ObjectId) -> bool:
        return self.backend.has(oid)

    def writer(self, *, workers: int = 2, checkpoint_bytes: int = 256 << 20) -> Writer:
        return Writer(self, workers=workers, checkpoint_bytes=checkpoint_bytes)


@dataclass(slots=True)
class WriteStats:
    written_objects: int = 0
    written_bytes: int = 0
    reused_objects: int = 0


class Writer:
    """Writes for one upload. ``put`` is called from one thread; use as a context manager."""

    def __init__(self, objects: Objects, *, workers: int, checkpoint_bytes: int) -> None:
        self._objects = objects
        self._keys = objects.keys
        self._backend = objects.backend
        self._batch = objects.backend.batch()
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="floydd-store")
        self._slots = threading.BoundedSemaphore(2 * max(1, workers) + 2)
        self._futures: list[Future] = []
        self._seen: set[ObjectId] = set()
        self._since_checkpoint = 0
        self._checkpoint_bytes = checkpoint_bytes
        self._closed = False
        self._tls = threading.local()
        self.stats = WriteStats()

    def put(self, data: bytes | memoryview, oid: ObjectId | None = None) -> ObjectId:
        """Store ``data`` unless it is stored already; returns its id."""
        if oid is None:
            oid = self._keys.object_id(data)
        if oid in self._seen:
            return oid
        if self._backend.has(oid):
            self._batch.uses(oid)
            self._seen.add(oid)
            self.stats.reused_objects += 1
            return oid
        self._seen.add(oid)
        payload = data if isinstance(data, bytes) else bytes(data)
        self._slots.acquire()
        try:
            future = self._pool.submit(self._store, oid, payload)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _f: self._slots.release())
        self._futures.append(future)
        self.stats.written_objects += 1
        self.stats.written_bytes += len(payload)
        self._since_checkpoint += len(payload)
        self._reap()
        if self._since_checkpoint >= self._checkpoint_bytes:
            self.checkpoint()
        return oid

    def reuse(self, oid: ObjectId) -> bool:
        """Rely on an object stored earlier (a cache hit); False if it is gone."""
        if oid in self._seen:
            return True
        if not self._backend.has(oid):
            return False
        self._batch.uses(oid)
        self._seen.add(oid)
        self.stats.reused_objects += 1
        return True

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
        finally:
            self._batch.abort()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------

    def _store(self, oid: ObjectId, plaintext: bytes) -> None:
        # per-thread buffers: no fresh memory (and page faults) for every object
        n = len(plaintext) + OVERHEAD
        sealed = self._keys.seal_into(oid, plaintext, _buffer(self._tls, "sealed", n))
        scratch = _buffer(self._tls, "plain", n)
        self._batch.save(oid, sealed, lambda stored: self._keys.check(oid, stored, scratch))

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


def _buffer(tls: threading.local, name: str, size: int) -> bytearray:
    """A per-thread buffer of at least ``size`` bytes; replaced, never resized (a view of
    the old one may still be alive, e.g. in a traceback)."""
    buf = getattr(tls, name, None)
    if buf is None or len(buf) < size:
        buf = bytearray(max(size, 1 << 20))
        setattr(tls, name, buf)
    return buf
