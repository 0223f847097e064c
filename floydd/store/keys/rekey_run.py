"""One run of a pending re-key: where it stands, going on from there, calling it off.

:class:`Run` reads the key files, the journal and the catalog's fingerprint to see how far
the re-key got, then plans, copies (:mod:`floydd.store.keys.reseal`), switches the catalog
and the key, and drops the old objects, or calls the re-key off. The steps, the crash
behaviour and the refusals are told in :mod:`floydd.store.keys.rekey`, whose functions
start a run under the store lock.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from floydd import log
from floydd.errors import Conflict, IntegrityError, StoreError, StoreFull
from floydd.store.care import maintenance
from floydd.store.catalog import Catalog
from floydd.store.keys.crypto import Keys, read_secret
from floydd.store.ids import ObjectId
from floydd.store.local import LocalBackend, fsync_dir
from floydd.store.keys.rekey_journal import Journal, unlink_durably
from floydd.store.keys.reseal import Damaged, RekeyProgress, Resealer
from floydd.store.tree import Tree

NEXT_KEY = "key.next"
JOURNAL = "rekey.db"

Progress = Callable[[RekeyProgress], object]


class Run:
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
              should_stop: Callable[[], bool] | None = None) -> Run | None:
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
