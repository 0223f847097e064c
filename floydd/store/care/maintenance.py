"""gc and verify.

**Why gc never removes what an upload or a live version needs.** Roots are the trees of
every catalog version, every unexpired pin, and what the caller passes as ``keep``.
Every snapshot, restore and verify holds the store lock *shared* from before its first
``has()`` until after its tree is pinned (snapshot) or its last read (restore, verify);
gc holds it *exclusive* (:mod:`floydd.store.locks`). So while gc runs no upload is
between "found this chunk already stored" and "its tree is pinned", and every tree an
upload produced is a root. A root tree that cannot be read stops gc before anything is
removed: its chunks are unknown, so nothing may be called garbage. gc also removes the
temp files of interrupted writes: with the lock exclusive, no writer owns any.

**gc never trusts a catalog that cannot be trusted** (:mod:`floydd.store.care.untrusted`): the check
runs again under the exclusive lock, and a damaged, emptied or replaced catalog stops gc
before anything is removed. ``keep`` adds the trees others still name (the daemon passes the
versions the cluster's catalog says this node holds, job outputs among them, and the jobs'
code trees), so a local catalog that lags behind them costs no data either.

**verify** re-reads every object (or those of one dataset) from the medium
(``bypass_cache``), authenticates and re-hashes it, parses trees, and reports each
damaged or missing object with the versions (and pin holders) that use it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable

from floydd import log
from floydd.errors import FloyddError, IntegrityError
from floydd.store.catalog import Catalog
from floydd.store.ids import ObjectId
from floydd.store.locks import StoreLock
from floydd.store.objects import Objects
from floydd.store.tree import Tree

__all__ = ["GcReport", "VerifyReport", "Damage", "gc", "verify", "users_of"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GcReport:
    removed_objects: int
    freed_bytes: int
    kept_objects: int
    temp_files_removed: int

    def to_dict(self) -> dict:
        return {"removed": self.removed_objects, "freed": self.freed_bytes, "kept": self.kept_objects,
                "temp_files": self.temp_files_removed}


@dataclass(frozen=True, slots=True, kw_only=True)
class Damage:
    object: ObjectId
    error: str
    versions: tuple[str, ...]   # version refs (and pin holders) whose trees use the object

    def __iter__(self):  # ``for oid, refs in report.damaged``
        return iter((self.object, list(self.versions)))

    def to_dict(self) -> dict:
        return {"object": str(self.object), "error": self.error, "versions": list(self.versions)}


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyReport:
    checked_objects: int
    checked_bytes: int
    damaged: tuple[Damage, ...]

    @property
    def ok(self) -> bool:
        return not self.damaged

    def to_dict(self) -> dict:
        return {"ok": self.ok, "objects": self.checked_objects, "bytes": self.checked_bytes,
                "damaged": [d.to_dict() for d in self.damaged]}


def gc(objects: Objects, catalog: Catalog, lock: StoreLock, *, keep: Iterable[ObjectId] = (),
       timeout: float = 600.0, trusted: Callable[[], object] = lambda: None) -> GcReport:
    backend = objects.backend
    with lock.exclusive(timeout):
        trusted()                                   # raises while the catalog cannot be trusted
        roots = catalog.roots()
        for oid in keep:
            if oid not in roots and backend.has(oid):   # kept for others (the cluster's catalog, jobs)
                roots[oid] = ["keep"]
        live: set[ObjectId] = set()
        for tree_id, holders in roots.items():
            try:
                tree = Tree.decode(objects.get(tree_id), name=f"tree {tree_id.short}")
            except FloyddError as e:
                raise IntegrityError(f"gc stopped before removing anything: tree {tree_id.short} "
                                     f"(used by {', '.join(holders)}) cannot be read: {e.message}",
                                     hint="run verify, then repair or delete those versions") from None
            live.add(tree_id)
            live.update(tree.chunk_ids())
        temp = backend.clean_temp()
        removed = freed = kept = 0
        for oid in backend.list():
            if oid in live:
                kept += 1
                continue
            try:
                size = backend.stat(oid)
            except FloyddError:
                size = 0
            backend.remove(oid)
            removed += 1
            freed += size
    report = GcReport(removed_objects=removed, freed_bytes=freed, kept_objects=kept, temp_files_removed=temp)
    log.store.info("gc: removed %d objects (%d bytes), kept %d, %d temp files", removed, freed, kept, temp)
    return report


def verify(objects: Objects, catalog: Catalog, lock: StoreLock, *, name: str | None = None,
           progress: Callable[[int, int], object] | None = None, workers: int = 2) -> VerifyReport:
    backend = objects.backend
    with lock.shared():
        if name is None:
            roots = catalog.roots()
        else:
            roots = {}
            for v in catalog.list(name):
                roots.setdefault(v.tree, []).append(v.ref)
        users: dict[ObjectId, set[str]] = {}
        damaged: dict[ObjectId, str] = {}
        for tree_id, holders in roots.items():
            users.setdefault(tree_id, set()).update(holders)
            try:
                tree = Tree.decode(objects.get(tree_id), name=f"tree {tree_id.short}")
            except FloyddError as e:
                damaged[tree_id] = e.message
                continue
            for c in tree.chunk_ids():
                users.setdefault(c, set()).update(holders)
        ids = set(users)
        if name is None:
            ids.update(backend.list())
        sizes: dict[ObjectId, int] = {}
        for oid in ids:
            try:
                sizes[oid] = backend.stat(oid)
            except FloyddError:
                sizes[oid] = 0
        total = sum(sizes.values())
        done = 0
        if progress:
            progress(0, total)

        def check(oid: ObjectId) -> str:
            try:
                objects.get(oid, bypass_cache=True)
                return ""
            except FloyddError as e:
                return e.message

        ordered = sorted(ids)
        with ThreadPoolExecutor(max(1, workers), thread_name_prefix="floydd-verify") as pool:
            for oid, problem in zip(ordered, pool.map(check, ordered)):
                if problem and oid not in damaged:
                    damaged[oid] = problem
                done += sizes[oid]
                if progress:
                    progress(done, total)
    report = VerifyReport(
        checked_objects=len(ordered), checked_bytes=total,
        damaged=tuple(Damage(object=oid, error=why, versions=tuple(sorted(users.get(oid, ()))))
                      for oid, why in sorted(damaged.items())))
    for d in report.damaged:
        log.store.error("verify: object %s: %s (used by %s)", d.object.short, d.error,
                        ", ".join(d.versions) or "nothing")
    return report


def users_of(oid: ObjectId, roots: dict[ObjectId, list[str]], read_tree: Callable[[ObjectId], Tree]) -> list[str]:
    """The version refs and pin holders (not upload leases) whose root tree is ``oid`` or
    uses it, for messages about a damaged object; trees that cannot be read are skipped."""
    users: set[str] = set()
    for tree_id, holders in roots.items():
        named = [h for h in holders if not h.startswith("upload:")]
        try:
            if tree_id == oid or oid in read_tree(tree_id).chunk_ids():
                users.update(named)
        except FloyddError:
            continue
    return sorted(users)
