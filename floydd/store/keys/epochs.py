"""Store key epochs on disk, and the background re-seal that moves old objects to the newest.

Why epochs (see :mod:`floydd.store.keys.crypto`): every member holds the store secret, so a box
that is removed could read everything sealed under it for ever. ``floydd rotate-store-key``
(and ``floydd remove``) starts a new epoch: a random secret that only the boxes that are
members then receive (:mod:`floydd.daemon.epochs` hands it over). New objects are sealed
under it; old ones are re-sealed under it here, in the background, at a bounded rate, while
the daemon serves. Object ids do not change (the id key stays): a re-seal rewrites one file
in place (write, read back, check, fsync, rename over: ``LocalBackend.batch``), so nothing
that names an object (trees, the catalog, jobs, other boxes) changes, and a reader sees the
old file or the new one, both of which open.

Files, in ``STORE/keys/`` (0700; each file 0600, the secret in hex, written durably)::

    epoch-N          the secret of epoch N (N >= 1): this box seals under the highest N
    pending-FP       a secret this box made for an epoch not yet committed (``FP``: its
                     fingerprint); renamed to ``epoch-N`` once the cluster records it

Old epochs' keys are kept: another member may still send an object it has not re-sealed yet,
and they are no secret to the removed box that the rotation is about (it had them).

The re-seal (:class:`Resealer`) walks the objects fan-out folder by folder, reads the first
five bytes of each (its epoch), and re-seals those below the newest epoch, ``budget`` bytes a
call; the caller paces the calls (a rate in bytes per second). It holds the store's shared
lock for one call at a time, so gc (exclusive) waits at most one slice. A stop or a crash
loses nothing: an object is either re-sealed (durable) or not, and the walk starts again from
the first id (reading headers is cheap: one 5-byte read per object).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from floydd import log
from floydd.errors import IntegrityError, NotFound, StoreError
from floydd.store.keys.crypto import (HEADER_PEEK, Keys, epoch_fingerprint, epoch_of, read_secret, write_secret)
from floydd.store.ids import ObjectId
from floydd.store.local import LocalBackend, fsync_dir

__all__ = ["load_epochs", "install_epoch", "write_pending", "take_pending", "epoch_secret", "Resealer",
           "ResealPass", "epoch_counts", "stored_epoch", "KEYS_DIR"]

KEYS_DIR = "keys"
_EPOCH = re.compile(r"epoch-([1-9][0-9]{0,9})")


def load_epochs(store_dir: Path) -> dict[int, bytes]:
    """Every epoch secret this store holds (``keys/epoch-N``), by epoch."""
    folder = Path(store_dir) / KEYS_DIR
    out: dict[int, bytes] = {}
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return out
    for name in names:
        m = _EPOCH.fullmatch(name)
        if m:
            out[int(m.group(1))] = read_secret(folder / name)
    return out


def epoch_secret(store_dir: Path, n: int, fingerprint: str) -> bytes | None:
    """The secret of epoch ``n`` if this store holds it (installed, or still pending under
    ``fingerprint``), else None."""
    folder = Path(store_dir) / KEYS_DIR
    for path in (folder / f"epoch-{n}", folder / f"pending-{fingerprint}"):
        try:
            secret = read_secret(path)
        except FileNotFoundError:
            continue
        if epoch_fingerprint(secret) == fingerprint:
            return secret
    return None


def install_epoch(store_dir: Path, n: int, secret: bytes, fingerprint: str) -> bool:
    """Keep ``secret`` as the key of epoch ``n`` (durably); False if it was there already.
    ``StoreError`` if it is not the secret the cluster recorded (``fingerprint``), or the
    store already holds another secret for ``n``."""
    if epoch_fingerprint(secret) != fingerprint:
        raise StoreError(f"the key received for store key epoch {n} is not the one the cluster recorded "
                         f"(fingerprint {epoch_fingerprint(secret)}, not {fingerprint})",
                         hint="it is asked for again from another member")
    folder = _folder(store_dir)
    path = folder / f"epoch-{n}"
    try:
        write_secret(path, secret)
    except FileExistsError:
        if read_secret(path) != secret:
            raise StoreError(f"{path} holds another secret than the one the cluster recorded for epoch {n}",
                             hint=f"move {path} aside and restart floydd: the key is asked for again") from None
        return False
    pending = folder / f"pending-{fingerprint}"
    if pending.exists():
        pending.unlink()
        fsync_dir(folder)
    return True


def write_pending(store_dir: Path, secret: bytes) -> str:
    """Keep a new epoch secret before the cluster records it (so a crash between the two
    cannot lose a key the cluster names); returns its fingerprint."""
    fingerprint = epoch_fingerprint(secret)
    write_secret(_folder(store_dir) / f"pending-{fingerprint}", secret)
    return fingerprint


def take_pending(store_dir: Path, fingerprint: str) -> bytes | None:
    """The pending secret of that fingerprint, if this box made it."""
    try:
        return read_secret(Path(store_dir) / KEYS_DIR / f"pending-{fingerprint}")
    except FileNotFoundError:
        return None


def _folder(store_dir: Path) -> Path:
    folder = Path(store_dir) / KEYS_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


# -- the background re-seal ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class ResealPass:
    """What one call did, and where the store stands."""

    objects: int                # re-sealed by this call
    bytes: int                  # their sealed size
    lapped: bool                # the walk came back to the first id in this call
    target: int                 # the epoch objects are moved to


class Resealer:
    """Moves a store's objects to its newest key epoch, a budget at a time (one thread)."""

    def __init__(self, backend: LocalBackend, keys: Keys) -> None:
        self.backend = backend
        self.keys = keys
        self._walk: Iterator[ObjectId] | None = None
        self._moved_this_lap = 0
        self.older = 0
        """Objects found under an older epoch in the last full lap (a lap that re-sealed none
        means the store is at :attr:`Keys.seal_epoch`)."""
        self.settled_at: int | None = None
        """The epoch of the last lap that found nothing to move (None: none yet)."""
        self.objects_done = 0
        self.bytes_done = 0

    def step(self, budget: int) -> ResealPass:
        """Re-seal objects below the newest epoch until ``budget`` sealed bytes were written or
        the walk comes back to the start (a lap)."""
        target = self.keys.seal_epoch
        moved = size = 0
        lapped = False
        if target == 0:
            return ResealPass(objects=0, bytes=0, lapped=True, target=0)
        batch = self.backend.batch()
        try:
            while size < budget:
                oid = self._next()
                if oid is None:
                    lapped = True
                    self.older = self._moved_this_lap
                    if self._moved_this_lap == 0:
                        self.settled_at = target
                    self._moved_this_lap = 0
                    break
                epoch = self._epoch(oid)
                if epoch is None or epoch >= target:
                    continue
                n = self._reseal(batch, oid, target)
                if n:
                    moved += 1
                    size += n
                    self._moved_this_lap += 1
            batch.commit()
        finally:
            batch.abort()
        self.objects_done += moved
        self.bytes_done += size
        return ResealPass(objects=moved, bytes=size, lapped=lapped, target=target)

    def _next(self) -> ObjectId | None:
        if self._walk is None:
            self._walk = self.backend.list()     # folder by folder: bounded memory
        oid = next(self._walk, None)
        if oid is None:
            self._walk = None
        return oid

    def _epoch(self, oid: ObjectId) -> int | None:
        return stored_epoch(self.backend, oid)

    def _reseal(self, batch, oid: ObjectId, target: int) -> int:
        try:
            plain = self.keys.open(oid, self.backend.load(oid))
        except NotFound:
            return 0
        except IntegrityError as e:     # the scrub and the repairs deal with damage; leave it
            log.store.warning("re-seal under key epoch %d: %s (left as it is)", target, e.message)
            return 0
        sealed = self.keys.seal(oid, plain, epoch=target)
        scratch = bytearray(len(plain))
        batch.save(oid, sealed, lambda stored: self.keys.check(oid, stored, scratch))
        return len(sealed)


def stored_epoch(backend: LocalBackend, oid: ObjectId) -> int | None:
    """The key epoch object ``oid`` is sealed under here (None: gone, or not an object)."""
    try:
        with open(backend.path(oid), "rb") as f:
            return epoch_of(f.read(HEADER_PEEK))
    except FileNotFoundError:       # gc removed it meanwhile
        return None


def epoch_counts(backend: LocalBackend) -> dict[int, int]:
    """How many objects are sealed under each epoch (one 5-byte read per object)."""
    out: dict[int, int] = {}
    for oid in backend.list():
        epoch = stored_epoch(backend, oid)
        if epoch is not None:
            out[epoch] = out.get(epoch, 0) + 1
    return out
