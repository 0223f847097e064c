"""The object backend protocol (restic's ``backend.Backend``), and what every backend obeys.

A backend keeps opaque sealed objects by id; it never sees plaintext or keys. Layers
above (:mod:`floydd.store.objects`) seal, open and verify. A backend that fetches from a
peer node, or a caching decorator, implements this same protocol and nothing above changes.

Rules every backend follows (checked by ``tests/unit/store/test_store_backends.py``):

- objects are write-once: saving an id that exists keeps one valid copy, never a mix (the
  checked new copy replaces the old one whole: that is how an upload heals a damaged copy);
- writes go through a :class:`Batch`: ``save`` stores the bytes, reads them back *from the
  medium* and hands them to ``check`` (which re-opens and re-hashes) before the object can
  become visible; ``commit`` returns only when every saved object is durable and visible;
  an aborted or crashed batch leaves nothing visible (only temp leftovers, which ``list``
  skips and ``clean_temp`` removes); ``list(prefix)`` yields only the ids whose hex starts
  with ``prefix`` (at most two hex digits: the scrub walks the store in 256 slices);
- ``uses(oid)`` tells the batch that the upload relies on an object saved earlier (maybe
  by someone else's batch); ``commit`` makes such objects durable too;
- ``load`` raises ``NotFound`` for a missing object; ``remove`` of a missing object is a
  no-op; ``list`` yields only complete objects;
- out of space is ``StoreFull``; all methods are safe to call from several threads.
"""

from __future__ import annotations

from typing import Callable, Iterator, Protocol, runtime_checkable

from floydd.store.ids import ObjectId

__all__ = ["Backend", "Batch", "Check"]

Check = Callable[[bytes | memoryview], object]
"""Called with the bytes read back after a save (a view valid during the call); raises
to refuse them."""


@runtime_checkable
class Batch(Protocol):
    def save(self, oid: ObjectId, data: bytes | memoryview, check: Check) -> None:
        """Store ``data`` under ``oid``; thread-safe. Visible after ``commit`` at the latest."""

    def uses(self, oid: ObjectId) -> None:
        """The upload references an object that already exists: make it durable at commit."""

    def commit(self) -> None:
        """Return once every saved and used object is durable and visible."""

    def abort(self) -> None:
        """Drop what was saved and not yet committed."""

    def __enter__(self) -> Batch: ...

    def __exit__(self, *exc: object) -> None:
        """Aborts unless committed."""


@runtime_checkable
class Backend(Protocol):
    description: str
    """Where objects live, for messages: ``local:/srv/floydd/store/objects``."""

    def has(self, oid: ObjectId) -> bool: ...

    def stat(self, oid: ObjectId) -> int:
        """Stored size in bytes; ``NotFound`` if missing."""

    def load(self, oid: ObjectId, *, bypass_cache: bool = False) -> bytes:
        """The stored bytes; ``bypass_cache`` asks to read the medium, not a cache."""

    def check_stored(self, oid: ObjectId, check: Check) -> None:
        """Hand ``check`` the stored bytes as the medium holds them (a view valid during the
        call, in a buffer the backend reuses: proving a reused object keeps no copy of it);
        ``NotFound`` if missing."""

    def list(self, prefix: str = "") -> Iterator[ObjectId]: ...

    def remove(self, oid: ObjectId) -> None: ...

    def batch(self, *, direct: bool | None = None) -> Batch:
        """A batch of writes; ``direct``: write large objects bypassing any cache (data not
        read again soon), where the backend can (None: its default)."""

    def clean_temp(self) -> int:
        """Remove leftovers of interrupted writes; call only while no batch is open."""
