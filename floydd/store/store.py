"""``Store``: the one object the daemon, the CLI and the runtime use.

Layout of a store folder (created on first use, mode 0700)::

    key          the store secret (0600); without it objects are noise and names unknown
    key.next     only while a re-key is pending: the secret the store moves to (rekey.py)
    keys/        the secrets of the key epochs after the first (epochs.py): seal keys only
    rekey.db     only during a re-key, and until its tree map is taken (rekey.py)
    objects/     sealed objects, objects/ab/ab12… (see local.py)
    catalog.db   dataset versions and gc pins (SQLite, WAL, synchronous=FULL)
    cache/       file-metadata cache (keyed path hashes -> chunk ids), safe to delete
    locks/       the store lock (shared: uploads, restores, verify; exclusive: gc)
    scrub.json   where the background scrub is in its pass (scrub.py), safe to delete

Synchronous and thread-safe: call it from worker threads (``asyncio.to_thread``).

**Reads repair.** A daemon in a cluster sets :attr:`Store.repairer`: a restore that meets a
damaged or missing object asks it for a good copy from another node (``heal``, blocking, from
the restore's thread) and reads on with it, so a job or a clone on a box with a damaged copy
gets correct data and the copy is repaired; an object a peer asks for is checked before it is
sent, and a damaged one is refused and reported (``damaged``) for repair in the background.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Protocol

from floydd import log
from floydd.errors import Conflict, IntegrityError, NotFound, StoreError
from floydd.store.keys import epochs, rekey
from floydd.store.care import maintenance, untrusted as trust
from floydd.store.backend import Backend
from floydd.store.catalog import UPLOAD_LEASE_S, Catalog, DatasetVersion
from floydd.store.chunker import DEFAULT_PARAMS, Chunker
from floydd.store.keys import crypto
from floydd.store.keys.crypto import Keys, load_or_create_secret
from floydd.store.ids import ObjectId
from floydd.store.ignore import Ignore
from floydd.store.local import LocalBackend
from floydd.store.locks import StoreLock
from floydd.store.objects import WORKERS, WORKERS_DIRECT, Objects, Writer
from floydd.store.care.restore import restore as _restore
from floydd.store.ingest import Progress, SnapshotResult, snapshot as _snapshot
from floydd.store.tree import Tree

__all__ = ["Store", "Repairer"]


class Repairer(Protocol):
    """What reads ask when they meet a damaged or missing object (set by the daemon)."""

    def heal(self, oid: ObjectId, tree: ObjectId | None) -> bool:
        """Store a good copy of ``oid`` (an object of ``tree``) from elsewhere now; whether one
        was stored. Blocking: called from a worker thread, never from the event loop."""

    def damaged(self, oid: ObjectId) -> None:
        """The stored copy of ``oid`` is damaged: repair it soon. Returns at once; thread-safe."""


class Store:
    def __init__(self, root: Path, keys: Keys, backend: Backend, *, workers: int = WORKERS) -> None:
        self.root = Path(root)
        self.backend = backend
        self.workers = workers
        self._keys = keys
        self._objects = Objects(backend, keys)
        self._lock = StoreLock(self.root / "locks" / "store.lock")
        self._trees: OrderedDict[ObjectId, Tree] = OrderedDict()
        self._trees_lock = threading.Lock()
        self.catalog = Catalog(self.root / "catalog.db", self.tree_stats)
        self._key_file: tuple[int, int] | None = None  # (dev, inode) of the key file open() read
        self._legacy: Keys | None = None        # during an online re-key: the old key (the scrub's)
        self.repairer: Repairer | None = None   # asked for good copies by reads (the daemon sets it)

    @classmethod
    def open(cls, root: Path, *, backend: Backend | None = None, workers: int | None = None,
             during_rekey: bool = False, direct_io: bool = False) -> Store:
        """Open the store at ``root``, creating it (key, objects/, catalog.db, cache/) on first use.
        Refused (``StoreError``) while a re-key is pending, if the catalog was re-keyed to
        another key than the key file's, or (``Untrusted``) if the catalog cannot be trusted
        (:mod:`floydd.store.care.untrusted`: never taken as "no data"). ``during_rekey``: the daemon,
        whose re-key runs online (:mod:`floydd.store.keys.rekey`): the store works under the
        secret it moves to (``key.next``) from now on, the old key only recognises old
        objects for the scrub. ``direct_io``: the local backend writes and proves objects with
        direct I/O (:mod:`floydd.store.fileio`; the daemon's ``store_direct_io``)."""
        root = Path(root)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        (root / "cache").mkdir(mode=0o700, exist_ok=True)
        moving = during_rekey and (root / rekey.NEXT_KEY).exists()
        if not during_rekey:
            rekey.refuse_if_pending(root)
        trust.check_store(root)
        key_path = root / (rekey.NEXT_KEY if moving else "key")
        keys = Keys(crypto.read_secret(key_path) if moving else load_or_create_secret(key_path),
                    epochs.load_epochs(root))
        if backend is None:
            backend = LocalBackend(root / "objects", direct=direct_io)
        if workers is None:
            workers = WORKERS_DIRECT if direct_io else WORKERS
        store = cls(root, keys, backend, workers=workers)
        store._key_file = _identity(key_path)   # key.next becomes key by a rename: the same inode
        if moving:
            store._legacy = Keys(crypto.read_secret(root / "key"))
            return store
        if during_rekey:
            return store                        # switched already: the catalog may name trees of either
        if store.catalog.key_fingerprint() not in (None, keys.fingerprint):
            store.close()
            raise StoreError(f"the catalog of {root} names trees sealed under another key than {root / 'key'}",
                             hint="put back the key file this store was re-keyed to")
        return store

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r}, {self.backend.description})"

    def close(self) -> None:
        self.catalog.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- snapshots and trees ------------------------------------------------------------

    def snapshot(self, src: Path, *, ignore: Ignore | None = None, progress: Progress | None = None,
                 dir_fd: int | None = None) -> ObjectId:
        """Store the folder ``src``; returns its tree id. The tree is pinned for a day (or
        until ``catalog.add_version``) so gc keeps it meanwhile. ``dir_fd``: the folder as
        the caller opened it (a job's /output, not followed if it is a link); ``src`` then
        only names it."""
        return self.snapshot_report(src, ignore=ignore, progress=progress, dir_fd=dir_fd).tree

    def snapshot_report(self, src: Path, *, ignore: Ignore | None = None,
                        progress: Progress | None = None, dir_fd: int | None = None) -> SnapshotResult:
        """``snapshot`` with what it cost: new objects and bytes, cache hits."""
        with self._shared():
            result = _snapshot(self._objects, Path(src), cache_path=self.root / "cache" / "files.db",
                               chunker=Chunker(DEFAULT_PARAMS, seed=self._keys.chunker_seed),
                               ignore=ignore, progress=progress, exclude=self.root, workers=self.workers,
                               dir_fd=dir_fd)
            self.catalog.pin(result.tree, f"upload:{secrets.token_hex(8)}", ttl_s=UPLOAD_LEASE_S)
        if result.manifest is not None:     # add_version's stats and a job's restore read it next
            self._remember(result.tree, result.manifest)
        return result

    def upload(self, src: Path, name: str, *, message: str = "", ignore: Ignore | None = None,
               progress: Progress | None = None) -> DatasetVersion:
        """Snapshot ``src`` and add it as the next version of dataset ``name``."""
        self.catalog.check_name(name)
        tree = self.snapshot(src, ignore=ignore, progress=progress)
        return self.catalog.add_version(name, tree, message=message)

    def restore(self, tree_id: ObjectId, dest: Path, *, progress: Progress | None = None,
                within: Path | None = None) -> None:
        """Write tree ``tree_id`` into ``dest`` (absent or empty), byte-identical. A damaged or
        missing object is fetched again through :attr:`repairer` first, when there is one.
        ``within``: a folder ``dest`` lies in, below which nothing is followed (a workspace)."""
        def get(oid: ObjectId) -> bytes:
            return self._healing(lambda: self._objects.get(oid), oid, tree_id)

        with self._shared():
            try:
                tree = self._healing(lambda: self.read_tree(tree_id), tree_id, tree_id)
                _restore(get, tree, Path(dest), progress=progress, workers=self.workers, within=within)
            except IntegrityError as e:
                raise self._explain(e) from None

    def read_tree(self, tree_id: ObjectId) -> Tree:
        """The validated manifest of ``tree_id``."""
        with self._trees_lock:
            tree = self._trees.get(tree_id)
            if tree is not None:
                self._trees.move_to_end(tree_id)
                return tree
        try:
            tree = Tree.decode(self._objects.get(tree_id), name=f"tree {tree_id.short}")
        except IntegrityError as e:
            if getattr(e, "object", None) is None:
                e.object = tree_id
            raise
        self._remember(tree_id, tree)
        return tree

    def _remember(self, tree_id: ObjectId, tree: Tree) -> None:
        with self._trees_lock:
            self._trees[tree_id] = tree
            self._trees.move_to_end(tree_id)
            while len(self._trees) > 8:
                self._trees.popitem(last=False)

    def tree_stats(self, tree_id: ObjectId) -> tuple[int, int]:
        """(bytes in files, number of files) of a tree."""
        tree = self.read_tree(tree_id)
        return tree.size, tree.files

    # -- objects from and for peer nodes (floydd.cluster.replication.peerstore) ---------------------

    def load_sealed(self, oid: ObjectId, *, verify: bool = False) -> bytes:
        """Object ``oid`` exactly as stored (sealed), for a peer that shares the secret;
        ``NotFound``. With ``verify`` it is opened first: a damaged copy is refused
        (``IntegrityError``) and reported to :attr:`repairer`, never sent."""
        sealed = self.backend.load(oid)
        if verify:
            try:
                self._keys.open(oid, sealed)
            except IntegrityError as e:
                if self.repairer is not None:
                    self.repairer.damaged(oid)
                raise IntegrityError(f"{e.message} (on this node; a good copy is being fetched)",
                                     hint="the asking node tries the other holders") from None
        return sealed

    def save_sealed(self, oid: ObjectId, sealed: bytes) -> bytes:
        """Store bytes a peer sent as object ``oid``; returns the plaintext. They are opened
        (authenticated, decrypted, re-hashed: ``IntegrityError`` before anything is written),
        then saved as a snapshot saves: write, read back, check, fsync, name, commit. A copy
        stored here that is damaged is replaced (``verify --repair`` fetches good ones)."""
        plain = self._keys.open(oid, sealed)
        if (crypto.epoch_of(sealed[:crypto.HEADER_PEEK]) or 0) < self._keys.seal_epoch:
            sealed = self._keys.seal(oid, plain)    # a peer not yet re-sealed: keep it under the newest epoch
        if not self._objects.intact(oid):       # missing, or damaged here: the good copy replaces it
            with self._shared(), self.backend.batch() as batch:
                batch.save(oid, sealed, lambda stored: self._keys.check(oid, stored, bytearray(len(plain))))
                batch.commit()
        return plain

    @contextmanager
    def holding(self, timeout: float = 600.0) -> Iterator[None]:
        """Hold the store's shared lock (gc waits): a fetch from peers holds it from its first
        ``has()`` until its tree is pinned, as a snapshot does."""
        with self._shared(timeout):
            yield

    # -- objects into and out of export files (floydd.exchange) ------------------------

    def read_object(self, oid: ObjectId, tree: ObjectId | None = None) -> bytes:
        """The plaintext of one object (authenticated and re-hashed; a damaged or missing one
        is fetched again through :attr:`repairer`, as a restore does); ``tree``: whose it is."""
        return self._healing(lambda: self._objects.get(oid), oid, tree or oid)

    @contextmanager
    def writing(self, *, direct: bool | None = None) -> Iterator[Writer]:
        """One upload of objects that come from elsewhere (an import re-seals another site's
        chunks under this store's key): a :class:`~floydd.store.objects.Writer` under the
        shared lock (gc waits), committed when the block ends cleanly, dropped otherwise. Pin
        the trees written before the block ends, as a snapshot does. ``direct``: write with
        direct I/O whatever ``store_direct_io`` says (and with :data:`~floydd.store.objects.WORKERS_DIRECT`)."""
        workers = max(self.workers, WORKERS_DIRECT) if direct else self.workers
        with self._shared(), self._objects.writer(workers=workers, direct=direct) as writer:
            yield writer
            writer.commit()

    # -- maintenance --------------------------------------------------------------------

    def check_object(self, oid: ObjectId) -> tuple[int, str]:
        """Re-read ``oid`` from the medium and open it (the scrub, under :meth:`holding`):
        (bytes read, "" or what is wrong); (0, "") when it is gone (gc removed it)."""
        try:
            sealed = self.backend.load(oid, bypass_cache=True)
        except NotFound:
            return 0, ""
        try:
            self._keys.open(oid, sealed)
        except IntegrityError as e:
            legacy = self._legacy
            if legacy is not None and legacy.intact(oid, sealed):
                return len(sealed), ""          # an old object an online re-key has yet to move
            return len(sealed), e.message
        return len(sealed), ""

    def rekey_finished(self) -> None:
        """The online re-key is over: the old key is no longer needed."""
        self._legacy = None

    def gc(self, *, keep: Iterable[ObjectId] = (), timeout: float = 600.0) -> maintenance.GcReport:
        """Remove objects no version, pin, running upload or ``keep`` tree needs (a ``keep``
        tree not stored here is skipped). Refused (``Untrusted``) while the catalog cannot be
        trusted: checked again under the exclusive lock, before anything is removed."""
        self._check_key()
        if (self.root / rekey.NEXT_KEY).exists():     # an online re-key's new objects are not named yet
            raise Conflict(f"the store {self.root} is being re-sealed under the cluster's secret: gc waits for it",
                           code="rekey_pending", hint="try again once the daemon's log says the store is re-sealed")
        with self._trees_lock:
            self._trees.clear()
        return maintenance.gc(self._objects, self.catalog, self._lock, keep=keep, timeout=timeout,
                              trusted=lambda: trust.check_store(self.root))

    def verify(self, name: str | None = None, progress: Progress | None = None) -> maintenance.VerifyReport:
        """Re-read and re-hash every object (or those of dataset ``name``)."""
        self._check_key()
        return maintenance.verify(self._objects, self.catalog, self._lock, name=name, progress=progress,
                                  workers=self.workers)

    # -- key epochs (floydd.store.keys.epochs) ------------------------------------------------

    @property
    def seal_epoch(self) -> int:
        """The key epoch new objects are sealed under here."""
        return self._keys.seal_epoch

    def key_epochs(self) -> list[int]:
        return self._keys.epochs()

    def add_epoch(self, n: int, secret: bytes, fingerprint: str) -> bool:
        """Keep the secret of epoch ``n`` (checked against the cluster's ``fingerprint``) and
        seal new objects under it if it is the newest; False if it was held already."""
        added = epochs.install_epoch(self.root, n, secret, fingerprint)
        self._keys.add_epoch(n, secret)
        return added

    def resealer(self) -> epochs.Resealer:
        """The background re-seal of this store (call its ``step`` through :meth:`reseal_step`)."""
        if not isinstance(self.backend, LocalBackend):
            raise StoreError("only a local store is re-sealed in place")
        return epochs.Resealer(self.backend, self._keys)

    def reseal_step(self, resealer: epochs.Resealer, budget: int) -> epochs.ResealPass:
        """One slice of the background re-seal, under the shared lock (gc waits one slice)."""
        with self._shared():
            return resealer.step(budget)

    def epochs_of(self, tree_id: ObjectId) -> dict[int, int] | None:
        """The objects of tree ``tree_id`` here by the key epoch they are sealed under (one
        5-byte read each); None when this store holds no copy of the tree."""
        if not isinstance(self.backend, LocalBackend) or not self.backend.has(tree_id):
            return None
        out: dict[int, int] = {}
        for oid in {tree_id, *self.read_tree(tree_id).chunk_ids()}:
            epoch = epochs.stored_epoch(self.backend, oid)
            if epoch is not None:
                out[epoch] = out.get(epoch, 0) + 1
        return out

    def epoch_counts(self) -> dict[int, int]:
        """Objects sealed under each key epoch here (one 5-byte read per object)."""
        if not isinstance(self.backend, LocalBackend):
            return {}
        return epochs.epoch_counts(self.backend)

    # -- helpers ------------------------------------------------------------------------

    @contextmanager
    def _shared(self, timeout: float = 600.0) -> Iterator[None]:
        """The shared lock, and a check that the store was not re-keyed since ``open``: a
        re-key (exclusive lock) renames a new key file over ``key``, after which this
        instance's keys neither open nor seal anything the catalog names."""
        with self._lock.shared(timeout):
            self._check_key()
            yield

    def _check_key(self) -> None:
        if self._key_file is not None and _identity(self.root / "key") != self._key_file \
                and _identity(self.root / rekey.NEXT_KEY) != self._key_file:  # an online re-key's, not switched yet
            raise StoreError(f"the store {self.root} was re-sealed under another key since it was opened",
                             hint="open it again (restart floydd)")

    def _healing(self, read, oid: ObjectId, tree: ObjectId):
        """``read()``; if ``oid`` is damaged or missing and a repairer stores a good copy, ``read()`` again."""
        try:
            return read()
        except (IntegrityError, NotFound) as e:
            if self.repairer is None or _on_event_loop():
                raise
            log.store.warning("object %s of tree %s: %s; fetching a good copy", oid.short, tree.short, e.message)
            if not self.repairer.heal(oid, tree):
                raise
        return read()

    def _explain(self, err: IntegrityError) -> IntegrityError:
        """Add the versions that use the damaged object to a read error."""
        oid = getattr(err, "object", None)
        if oid is None:
            return err
        users = maintenance.users_of(oid, self.catalog.roots(), self.read_tree)
        if not users:
            return err
        out = IntegrityError(f"{err.message}; it is used by {', '.join(users)}", hint=err.hint)
        out.object = oid
        return out


def _on_event_loop() -> bool:
    """A repair waits for the loop: never from the loop's own thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino
