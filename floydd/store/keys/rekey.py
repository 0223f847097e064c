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

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from floydd.errors import Conflict, NotFound, StoreError
from floydd.store.keys.crypto import Keys, load_or_create_secret, read_secret, write_secret
from floydd.store.locks import StoreLock
from floydd.store.keys.rekey_journal import Journal
from floydd.store.keys.rekey_run import JOURNAL, NEXT_KEY, Progress, Run
from floydd.store.keys.reseal import RekeyProgress, Stopped

__all__ = ["RekeyProgress", "begin_rekey", "rekey", "plan_rekey", "finish_rekey", "cancel_rekey", "rekey_pending",
           "refuse_if_pending", "cluster_secret", "Stopped", "NEXT_KEY", "JOURNAL"]

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
        run = Run.start(root, progress, workers, **kw)
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
