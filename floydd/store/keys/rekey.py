"""Re-seal a whole store under a new secret (a box that was used alone joins a cluster).

Every id is keyed by the secret, so every id changes: each chunk gets a new id, each tree
is re-encoded with its chunks' new ids (so trees get new ids too), and the catalog's
versions and pins are rewritten to the new tree ids. Chunk boundaries stay as they are
(the chunker seed only changes what later uploads cut). The caller gets the map of old to
new tree ids, to rewrite job records that name code trees::

    begin_rekey(store, secret)  write STORE/key.next (0600, durable): the re-key is pending
    rekey(store)                run or resume it; returns {old tree hex: new tree hex}
    finish_rekey(store)         the caller has used the map: forget it (rekey.db goes)
    cancel_rekey(store)         call it off (only before the key switch): back to the old key
    rekey_pending(store)        key.next or rekey.db exists: call rekey() before Store.open

The daemon, before it opens its store: ``if rekey_pending(d): m = rekey(d); rewrite job
records with m; finish_rekey(d)``. Every step of that may be repeated after a crash.

Steps. The journal ``rekey.db`` (:mod:`floydd.store.keys.rekey_journal`) holds the phase, the
inventory of objects, and old -> new ids for chunks and for trees; the copying itself, in
bounded memory, is :mod:`floydd.store.keys.reseal`. This module decides, from the key files,
the journal and the catalog's fingerprint, where a re-key stands and what comes next::

    new ─plan─> planned ─copy─> copied ─catalog─> ─key─> ─drop─> done ─finish_rekey─> (gone)

    plan     one transaction: list every object (id, size) and the catalog's roots
             (versions, unexpired pins); read each root tree with the old key, list its
             chunks. Objects no root needs (garbage) are not re-sealed, as gc would drop them
    copy     chunks, then trees: open with the old key (authenticate, re-hash), hash with
             the new key, seal, write, read back and check, fsync (objects.Writer); only
             once a batch is durable are its old -> new ids recorded. Trees are decoded,
             their chunk ids replaced and re-encoded. Then every recorded new object is
             stat'ed; a missing one is copied again
    catalog  one transaction: versions' and pins' tree ids -> new ids, and the catalog's
             key fingerprint = the new key's (Catalog.remap_trees)
    key      drop cache/ (it maps paths to old chunk ids); rename key.next -> key, fsync
             the folder. The point of no return
    drop     remove every listed object that is not a new one (old objects, old garbage),
             fsync the fan-out folders; phase done: only the tree map stays

Crash behaviour (a kill or a power cut at any instant). At every instant one key opens
everything the catalog names: the old key until the catalog step (no old object is
removed before the key step), the new key from then on (a new object is durable before
the journal names it, the journal before the catalog changes, the catalog before the key
file). Whether the catalog and the key file were switched is read from their own
fingerprints, not from the journal, so a crash between a switch and a journal write loses
nothing. Each step may run again: a new object already there is checked and reused,
removing an object already gone is a no-op, the switches are guarded by those
fingerprints, and new ids are a function of content and key, so a run that starts over
reaches the same ids, trees and map. While
``key.next`` exists, ``Store.open`` refuses the folder (the catalog may name trees of
either key), and a ``Store`` opened before the key step refuses to work after it.
Objects written but not yet recorded when a run dies are found again by id.

Where the secrets are. The new secret is in ``key.next`` (0600) until the key step
renames it over ``key``. The old key is then gone, not archived: nothing the catalog
names needs it, and a backup of the store folder carries its own key file.

**Online** (the daemon, since issue 21: no downtime while a joining box re-seals). The daemon
calls :func:`plan_rekey` before it opens its store (the plan reads the root trees only, and
nothing else writes yet, so the inventory holds the old objects alone), then opens the store
with the new secret (``Store.open(during_rekey=True)``: new data goes under the cluster's key
at once, old objects still pass the scrub under the old one) and serves, while
``rekey(online=True)`` copies in the background under the *shared* lock (uploads and restores
go on; gc refuses while a re-key is pending). Online, the catalog step remaps the planned
trees only (versions the daemon added meanwhile are the new key's already), the key step
keeps ``cache/`` (the cache forgets rows of another key by itself), temp files are never
cleaned (they may be an upload's), and a damaged object or a full disk does not call the
re-key off (that would remove what the daemon wrote under the new key): it stays pending,
said in the log, and is tried again. ``should_stop`` ends a run between two batches (the
daemon stopping); the next start resumes it.

Refusals. The store lock is held exclusive for the whole run (busy: ``Conflict``, nothing
done). A damaged or missing object (``IntegrityError`` naming it and the versions that use
it) and a full disk (``StoreFull``) call the re-key off, since fixing them needs the store:
the catalog is switched back if it was, the new objects are removed, ``key.next`` and the
journal go, and the store works under its old key as before. A crash or any other error
leaves the re-key pending; the next ``rekey`` resumes it.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from floydd import log
from floydd.errors import Conflict, IntegrityError, NotFound, StoreError, StoreFull
from floydd.store.care import maintenance
from floydd.store.catalog import Catalog
from floydd.store.keys.crypto import Keys, load_or_create_secret, read_secret, write_secret
from floydd.store.ids import ObjectId
from floydd.store.locks import StoreLock
from floydd.store.local import LocalBackend, fsync_dir
from floydd.store.keys.rekey_journal import Journal, unlink_durably
from floydd.store.keys.reseal import Damaged, RekeyProgress, Resealer, Stopped
from floydd.store.tree import Tree

__all__ = ["RekeyProgress", "begin_rekey", "rekey", "plan_rekey", "finish_rekey", "cancel_rekey", "rekey_pending",
           "refuse_if_pending", "cluster_secret", "Stopped", "NEXT_KEY", "JOURNAL"]

NEXT_KEY = "key.next"
JOURNAL = "rekey.db"

Progress = Callable[[RekeyProgress], object]


def rekey_pending(store_dir: Path) -> bool:
    """True while a re-key was asked for and its tree map not yet taken (``finish_rekey``)."""
    root = Path(store_dir)
    return (root / NEXT_KEY).exists() or (root / JOURNAL).exists()


def refuse_if_pending(store_dir: Path) -> None:
    """``StoreError`` if the store is between keys (``Store.open`` calls this)."""
    root = Path(store_dir)
    if (root / NEXT_KEY).exists():
        raise StoreError(f"the store {root} is being re-sealed under a new secret (a re-key is under way)",
                         code="rekey_pending",
                         hint="start floydd: it finishes the re-key before it opens the store")


def begin_rekey(store_dir: Path, secret: bytes, *, timeout: float = 5.0) -> bool:
    """Ask for the store to be re-sealed under ``secret``: writes ``key.next`` (0600,
    durable). False if the store already uses ``secret`` (nothing to do). ``Conflict`` if
    another re-key is pending or the store is in use."""
    root = Path(store_dir)
    new_fp = Keys(secret).fingerprint
    with _exclusive(root, timeout):
        if read_secret(root / "key") == secret:
            return False
        try:
            pending = Keys(read_secret(root / NEXT_KEY)).fingerprint
        except FileNotFoundError:
            pending = None
        if pending is None and (root / JOURNAL).exists():
            pending = "(its tree map not yet taken)"
        if pending is not None and pending != new_fp:
            raise Conflict(f"another re-key of {root} is pending {pending}",
                           hint="let floydd finish it (restart it), or cancel it first")
        if pending is None:
            write_secret(root / NEXT_KEY, secret)
    return True


def rekey(store_dir: Path, *, progress: Progress | None = None, workers: int = 2,
          timeout: float = 5.0, online: bool = False, should_stop: Callable[[], bool] | None = None) -> dict[str, str]:
    """Run or resume the pending re-key; returns ``{old tree id: new tree id}`` (hex) for
    every root tree, the same on every call until ``finish_rekey``. ``{}`` if none was pending
    (or it was called off). ``online``: while the daemon serves (see the module's docstring);
    ``Stopped`` when ``should_stop()`` said so."""
    root = Path(store_dir)
    with _pending(root, _shared(root, timeout) if online else _exclusive(root, timeout), progress, max(1, workers),
                  online=online, should_stop=should_stop) as run:
        return run.go() if run is not None else {}


@contextmanager
def _pending(root: Path, lock, progress: Progress | None = None, workers: int = 1, **kw):
    """Under ``lock``, the pending re-key of ``root`` (None when there is none), closed after."""
    with lock:
        run = _Run.start(root, progress, workers, **kw)
        try:
            yield run
        finally:
            if run is not None:
                run.close()


def plan_rekey(store_dir: Path, *, timeout: float = 5.0) -> bool:
    """The plan step alone, before the daemon opens the store (an online re-key's start: it
    reads the root trees only). True while a re-key is pending afterwards. A damaged or
    missing root calls the re-key off, as :func:`rekey` does."""
    root = Path(store_dir)
    with _pending(root, _exclusive(root, timeout)) as run:
        if run is None:
            return False
        run.plan_only()
    return rekey_pending(root)


def cluster_secret(store_dir: Path) -> bytes:
    """The secret the store is moving to (``key.next``) while a re-key is pending, else its own:
    what this box hands a box that joins through it."""
    root = Path(store_dir)
    try:
        return read_secret(root / NEXT_KEY)
    except FileNotFoundError:
        return load_or_create_secret(root / "key")


def finish_rekey(store_dir: Path, *, timeout: float = 5.0) -> None:
    """Forget the tree map of a finished re-key (the caller has used it)."""
    root = Path(store_dir)
    with _exclusive(root, timeout):
        journal = Journal.open(root / JOURNAL)
        if journal is None:
            return
        if journal.phase != "done":
            journal.close()
            raise Conflict(f"the re-key of {root} has not finished", hint="run it to the end first (restart floydd)")
        journal.remove()


def cancel_rekey(store_dir: Path, *, timeout: float = 5.0) -> bool:
    """Call off a pending re-key: the store keeps its old key, what was written for the new
    one is removed. False if none was pending; ``Conflict`` once the key was switched."""
    root = Path(store_dir)
    with _pending(root, _exclusive(root, timeout)) as run:
        if run is None:
            return False
        if run.switched:
            raise Conflict(f"the re-key of {root} is past its point of no return (the key was switched)",
                           hint="let it finish: restart floydd")
        run.call_off()
    return True


# -- one run -------------------------------------------------------------------------------

class _Run:
    """One call on a store whose re-key is pending: works out where it stands from the key
    files, the journal and the catalog's fingerprint, and goes on from there."""

    def __init__(self, root: Path, journal: Journal, old: Keys, new: Keys | None, *, switched: bool,
                 progress: Progress | None, workers: int, online: bool = False,
                 should_stop: Callable[[], bool] | None = None) -> None:
        self.root = root
        self.journal = journal
        self.switched = switched
        self.online = online
        self.reseal = Resealer(journal, LocalBackend(root / "objects"), old, new, workers=workers,
                               progress=progress, online=online, should_stop=should_stop)

    @classmethod
    def start(cls, root: Path, progress: Progress | None, workers: int, *, online: bool = False,
              should_stop: Callable[[], bool] | None = None) -> _Run | None:
        key = read_secret(root / "key")
        try:
            nxt: bytes | None = read_secret(root / NEXT_KEY)
        except FileNotFoundError:
            nxt = None
        journal = Journal.open(root / JOURNAL)
        if journal is None:
            if nxt is None:
                return None
            if nxt == key:  # asked to re-key to the key it has
                unlink_durably(root / NEXT_KEY)
                return None
            journal = Journal.create(root / JOURNAL, old=Keys(key).fingerprint, new=Keys(nxt).fingerprint)
        try:
            old = Keys(key)
            switched = old.fingerprint == journal.new_fp
            new = old if switched else (None if nxt is None else Keys(nxt))  # switched: the old key is gone
            if not switched and old.fingerprint != journal.old_fp:
                raise StoreError(f"the key of {root} is neither the old nor the new key of the re-key under way",
                                 hint="put back the key file this store had, then start floydd again")
            if not switched and new is not None and new.fingerprint != journal.new_fp:
                raise Conflict(f"{root / NEXT_KEY} holds another secret than the re-key under way",
                               hint="put back the key.next this re-key started with, or cancel the re-key")
            return cls(root, journal, old, new, switched=switched, progress=progress, workers=workers,
                       online=online, should_stop=should_stop)
        except BaseException:
            journal.close()
            raise

    def close(self) -> None:
        self.journal.close()

    def go(self) -> dict[str, str]:
        if not self.switched:
            if self.reseal.new is None:  # key.next is gone before the switch: called off
                log.store.warning("re-key of %s: %s is gone; calling the re-key off", self.root, NEXT_KEY)
                self.call_off()
                return {}
            if self.online and self.journal.phase == "new":
                raise StoreError(f"the re-key of {self.root} was not planned before the store was opened",
                                 hint="restart floydd: it plans the re-key before it serves")
            try:
                self._to_key_switch()
            except Damaged as e:
                if self.online:         # a call-off would remove what the daemon wrote meanwhile
                    raise self._pending_damaged(e) from None
                raise self._refuse_damaged(e) from None
            except StoreFull as e:
                if self.online:
                    raise StoreFull(f"no space left on the device of {self.root} to re-seal the store under the "
                                    f"cluster's secret ({e.message}); it stays pending and is tried again",
                                    hint="free space (floyd data delete, then floyd data gc, or outside the store)") \
                        from None
                raise self._refuse_full(e) from None
            self.switched = True
        if self.journal.phase != "done":
            removed = self.reseal.drop()
            log.store.info("re-key of %s done: %d old objects removed", self.root, removed)
        return {old.hex: new.hex for old, new in self.journal.tree_map().items()}

    def plan_only(self) -> None:
        """Plan if not planned yet (a damaged or missing root calls the re-key off)."""
        if self.switched or self.journal.phase != "new":
            return
        if self.reseal.new is None:
            self.call_off()
            return
        try:
            self._plan()
        except Damaged as e:
            raise self._refuse_damaged(e) from None

    def _plan(self) -> None:
        j = self.journal
        with _catalog(self.root) as catalog:
            if catalog.key_fingerprint() not in (None, j.old_fp):
                raise StoreError(f"the catalog of {self.root} names trees of another key than the store's",
                                 hint="put back the key file this store had")
            roots = list(catalog.roots())
        self.reseal.plan(roots)
        log.store.info("re-key of %s to key %s: %d root trees", self.root, j.new_fp, len(roots))

    def _to_key_switch(self) -> None:
        j = self.journal
        if j.phase == "new":
            self._plan()
        if j.phase == "planned":
            self.reseal.check_space()
            self.reseal.copy()
        with _catalog(self.root) as catalog:
            if catalog.key_fingerprint() != j.new_fp:
                catalog.remap_trees(j.tree_map(), fingerprint=j.new_fp, partial=self.online)
        _switch_key(self.root, drop_cache=not self.online)
        log.store.info("re-key of %s: the store is sealed under key %s now", self.root, j.new_fp)

    # -- calling it off ---------------------------------------------------------------------

    def call_off(self) -> None:
        """Back to the old key; each step may be repeated (``key.next`` goes first, so an
        interrupted call-off is finished, never resumed as a re-key)."""
        unlink_durably(self.root / NEXT_KEY)
        j = self.journal
        with _catalog(self.root) as catalog:
            if catalog.key_fingerprint() == j.new_fp:
                catalog.remap_trees({new: old for old, new in j.tree_map().items()}, fingerprint=j.old_fp)
        self.reseal.remove_written()
        old_fp = j.old_fp
        j.remove()
        log.store.warning("re-key of %s called off: the store keeps key %s", self.root, old_fp)

    def _refuse_damaged(self, e: Damaged) -> IntegrityError:
        with _catalog(self.root) as catalog:
            roots = catalog.roots()
        users = maintenance.users_of(e.oid, roots, lambda t: Tree.decode(self.reseal.old.get(t)))
        self.call_off()
        used = f"; it is used by {', '.join(users)}" if users else ""
        err = IntegrityError(
            f"cannot re-key {self.root}: object {e.oid.short} cannot be read with the store's key "
            f"({e.err.message}){used}. The re-key was called off: the store keeps its old key",
            hint="run `floyd data verify` to see what is damaged, delete those versions (`floyd data delete`) "
                 "or upload them again, then join again")
        err.object = e.oid
        return err

    def _pending_damaged(self, e: Damaged) -> IntegrityError:
        err = IntegrityError(
            f"the re-seal of {self.root} under the cluster's secret stops at object {e.oid.short}, which cannot be "
            f"read with this box's old key ({e.err.message}); it stays pending and is tried again",
            hint="put back a good copy of the store from a backup, or stop floydd and run `floydd repair`")
        err.object = e.oid
        return err

    def _refuse_full(self, e: StoreFull) -> StoreFull:
        self.call_off()
        return StoreFull(f"no space left on the device of {self.root} to re-seal the store ({e.message}). "
                         "The re-key was called off: the store keeps its old key",
                         hint="free space (floyd data delete, then floyd data gc, or outside the store), "
                              "then join again")


# -- helpers ---------------------------------------------------------------------------------

@contextmanager
def _exclusive(root: Path, timeout: float) -> Iterator[None]:
    if not (root / "key").exists():
        raise NotFound(f"there is no store at {root}", hint="check the state folder (--state-dir)")
    held = False
    try:
        with StoreLock(root / "locks" / "store.lock").exclusive(timeout):
            held = True
            yield
    except Conflict:
        if held:
            raise
        raise Conflict(f"cannot re-key {root}: the store is in use (an upload, restore, verify or gc holds it)",
                       hint="stop floydd and every floyd command using this store, then try again") from None


@contextmanager
def _shared(root: Path, timeout: float) -> Iterator[None]:
    """An online re-key: uploads and restores go on; gc (exclusive) refuses while it is pending."""
    if not (root / "key").exists():
        raise NotFound(f"there is no store at {root}", hint="check the state folder (--state-dir)")
    with StoreLock(root / "locks" / "store.lock").shared(timeout):
        yield


@contextmanager
def _catalog(root: Path) -> Iterator[Catalog]:
    catalog = Catalog(root / "catalog.db", _no_stats)
    try:
        yield catalog
    finally:
        catalog.close()


def _no_stats(tree: ObjectId) -> tuple[int, int]:
    raise StoreError("the re-key adds no versions")


def _switch_key(root: Path, *, drop_cache: bool = True) -> None:
    """The point of no return: drop the cache, then key.next replaces key (atomic, durable)."""
    if drop_cache:
        _drop_cache(root / "cache")
    os.rename(root / NEXT_KEY, root / "key")
    fsync_dir(root)


def _drop_cache(cache: Path) -> None:
    """The file-metadata cache maps paths to old chunk ids (and keys paths with the old key)."""
    try:
        names = os.listdir(cache)
    except FileNotFoundError:
        return
    for name in names:
        if (cache / name).is_file():
            (cache / name).unlink(missing_ok=True)
