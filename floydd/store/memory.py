"""A backend in a dict: for tests, and the model the local backend is checked against."""

from __future__ import annotations

import threading
from typing import Iterator

from floydd.errors import NotFound
from floydd.store.backend import Check
from floydd.store.ids import ObjectId

__all__ = ["MemoryBackend"]


class MemoryBackend:
    description = "memory"

    def __init__(self) -> None:
        self._objects: dict[ObjectId, bytes] = {}
        self._lock = threading.Lock()

    def has(self, oid: ObjectId) -> bool:
        return oid in self._objects

    def stat(self, oid: ObjectId) -> int:
        return len(self.load(oid))

    def load(self, oid: ObjectId, *, bypass_cache: bool = False) -> bytes:
        try:
            return self._objects[oid]
        except KeyError:
            raise NotFound(f"object {oid.short} is not in the store") from None

    def check_stored(self, oid: ObjectId, check) -> None:
        check(self.load(oid))

    def list(self, prefix: str = "") -> Iterator[ObjectId]:
        with self._lock:
            ids = [oid for oid in self._objects if oid.hex.startswith(prefix)]
        return iter(ids)

    def remove(self, oid: ObjectId) -> None:
        with self._lock:
            self._objects.pop(oid, None)

    def batch(self, *, direct: bool | None = None) -> _MemoryBatch:
        return _MemoryBatch(self)

    def clean_temp(self) -> int:
        return 0

    # test hook: what a bit flip on disk would do
    def corrupt(self, oid: ObjectId, offset: int = -1) -> None:
        data = bytearray(self._objects[oid])
        data[offset] ^= 0x01
        self._objects[oid] = bytes(data)


class _MemoryBatch:
    def __init__(self, backend: MemoryBackend) -> None:
        self._backend = backend
        self._pending: dict[ObjectId, bytes] = {}
        self._lock = threading.Lock()

    def save(self, oid: ObjectId, data: bytes | memoryview, check: Check) -> None:
        stored = bytes(bytearray(data))  # a copy, as a disk would hold
        check(stored)
        with self._lock:
            self._pending[oid] = stored

    def uses(self, oid: ObjectId) -> None:
        pass

    def commit(self) -> None:
        with self._lock, self._backend._lock:
            self._backend._objects.update(self._pending)   # checked copies: a damaged one is replaced
            self._pending.clear()

    def abort(self) -> None:
        with self._lock:
            self._pending.clear()

    def __enter__(self) -> _MemoryBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()
