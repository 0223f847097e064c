"""Rebuild a catalog that cannot be trusted from what is left (``floydd repair``).

The damaged ``catalog.db`` is set aside (renamed ``catalog.db.damaged-WHEN``, never deleted)
and a new one is filled, in this order, each source only where the ones before left a gap:

1. the versions the caller knows for sure (the cluster's catalog: versions this node holds,
   under their cluster numbers), and the pins it needs (jobs' code);
2. the rows still readable in the damaged file (:func:`~floydd.store.dbfile.salvage`),
   except versions the caller says were deleted since;
3. every other tree in the store: each object is opened and the manifests among them are
   kept as versions of the dataset ``lost-found`` (``lost-found:1``, ``:2``, …), so gc keeps
   them and they can be cloned, looked at and deleted like any dataset.

A version is put back only if its tree object is in the store; the others are reported as
lost (the versions' data went with their tree). Numbers are never reused: each name's next
number is the highest any source knew of, plus one. Nothing is written with ``dry_run``.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from floydd.errors import FloyddError
from floydd.store.catalog import Catalog, DatasetVersion, check_name
from floydd.store.keys.crypto import Keys, read_secret
from floydd.store.dbfile import readable, salvage, set_aside
from floydd.store.ids import ObjectId
from floydd.store.local import LocalBackend
from floydd.store.objects import Objects
from floydd.store.tree import MAGIC, Tree

__all__ = ["Rebuilt", "rebuild_catalog", "find_trees", "LOST_FOUND"]

LOST_FOUND = "lost-found"


@dataclass(slots=True, kw_only=True)
class Rebuilt:
    """What a rebuild put back (or would), and what it could not."""

    versions: list[str] = field(default_factory=list)   # refs put back
    pins: list[str] = field(default_factory=list)       # pin holders put back
    found: list[str] = field(default_factory=list)      # lost-found:N (tree, files, bytes)
    lost: list[str] = field(default_factory=list)       # what is gone, and why
    objects: int = 0
    trees: int = 0
    damaged: int = 0                                    # objects that do not open (trees or not)
    set_aside: list[Path] = field(default_factory=list)


def rebuild_catalog(root: Path, *, versions: Iterable[DatasetVersion] = (),
                    pins: Iterable[tuple[str, ObjectId]] = (), deleted: Callable[[str, int], bool] = lambda n, v: False,
                    suffix: str = "", dry_run: bool = False, workers: int = 2) -> Rebuilt:
    """Rebuild ``root/catalog.db`` (see the module docstring)."""
    root = Path(root)
    path = root / "catalog.db"
    out = Rebuilt()
    trees, out.objects, out.damaged = find_trees(root, workers=workers)
    out.trees = len(trees)
    salvaged, salvaged_pins, nexts = _salvage(path)
    plan = _Plan(trees, out)
    for v in versions:
        plan.version(v, "the cluster's catalog")
    for v in salvaged:
        if deleted(v.name, v.version):
            continue
        plan.version(v, "the damaged catalog")
    for holder, tree in [*pins, *salvaged_pins]:
        plan.pin(holder, tree)
    plan.lost_and_found(nexts.get(LOST_FOUND, 1))
    if dry_run:
        return out
    suffix = suffix or f"damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    out.set_aside = set_aside(path, suffix)
    catalog = Catalog(path, lambda t: trees[t])
    try:
        for v in plan.versions:
            catalog.put_version(v)
        for name, number in nexts.items():
            catalog.reserve(name, number)
        for holder, tree in plan.pins:
            catalog.pin(tree, holder)
    finally:
        catalog.close()
    return out


def find_trees(root: Path, *, workers: int = 2) -> tuple[dict[ObjectId, tuple[int, int]], int, int]:
    """Every manifest in the store at ``root`` (id -> (bytes, files)), how many objects there
    are, and how many of them do not open (damaged: whether they were trees is unknown)."""
    objects = Objects(LocalBackend(Path(root) / "objects"), Keys(read_secret(Path(root) / "key")))
    ids = list(objects.backend.list())

    def look(oid: ObjectId) -> tuple[int, int] | None | bool:
        try:
            plain = objects.get(oid)
        except FloyddError:
            return False
        if MAGIC not in plain[:2 + len(MAGIC) + 2]:
            return None
        try:
            tree = Tree.decode(plain, name=f"tree {oid.short}")
        except FloyddError:
            return None
        return tree.size, tree.files

    trees: dict[ObjectId, tuple[int, int]] = {}
    damaged = 0
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="floydd-rebuild") as pool:
        for oid, found in zip(ids, pool.map(look, ids)):
            if found is False:
                damaged += 1
            elif found is not None:
                trees[oid] = found
    return trees, len(ids), damaged


# -- helpers --------------------------------------------------------------------------------

class _Plan:
    """What goes into the new catalog, each source only filling gaps."""

    def __init__(self, trees: dict[ObjectId, tuple[int, int]], out: Rebuilt) -> None:
        self.trees, self.out = trees, out
        self.versions: list[DatasetVersion] = []
        self.pins: list[tuple[str, ObjectId]] = []
        self._taken: set[tuple[str, int]] = set()
        self._named: set[ObjectId] = set()
        self._holders: set[str] = set()

    def version(self, v: DatasetVersion, source: str) -> None:
        if (v.name, v.version) in self._taken:
            return
        if v.tree not in self.trees:
            self.out.lost.append(f"{v.ref} (from {source}): its tree {v.tree.short} is not in the store, or is "
                                 "damaged")
            return
        size, files = self.trees[v.tree]
        self._taken.add((v.name, v.version))
        self._named.add(v.tree)
        self.versions.append(DatasetVersion(name=v.name, version=v.version, tree=v.tree, created=v.created,
                                            size=size, files=files, message=v.message))
        self.out.versions.append(v.ref)

    def pin(self, holder: str, tree: ObjectId) -> None:
        if holder in self._holders or tree not in self.trees:
            return
        self._holders.add(holder)
        self._named.add(tree)
        self.pins.append((holder, tree))
        self.out.pins.append(holder)

    def lost_and_found(self, first: int) -> None:
        number = max([first, *(v.version + 1 for v in self.versions if v.name == LOST_FOUND)])
        now = time.time()
        for tree in sorted(set(self.trees) - self._named):
            size, files = self.trees[tree]
            v = DatasetVersion(name=LOST_FOUND, version=number, tree=tree, created=now, size=size, files=files,
                               message=f"found by floydd repair: a tree no catalog row named ({files} files)")
            self._taken.add((LOST_FOUND, number))
            self.versions.append(v)
            self.out.found.append(f"{v.ref} (tree {tree.short}, {files} files, {size} bytes)")
            number += 1


def _salvage(path: Path) -> tuple[list[DatasetVersion], list[tuple[str, ObjectId]], dict[str, int]]:
    """The versions, unexpired pins and next numbers still readable in ``path``."""
    versions, pins, nexts = [], [], {}
    if not path.exists():
        return versions, pins, nexts
    with readable(path) as src:
        return _rows(src)


def _rows(path: Path) -> tuple[list[DatasetVersion], list[tuple[str, ObjectId]], dict[str, int]]:
    versions, pins, nexts = [], [], {}
    for row in salvage(path, "versions", "name, version, tree, created, size, files, message"):
        v = _version(row)
        if v is not None:
            versions.append(v)
    now = time.time()
    for holder, tree, expires in salvage(path, "pins", "holder, tree, expires"):
        if isinstance(holder, str) and (expires is None or (isinstance(expires, float | int) and expires > now)):
            try:
                pins.append((holder, ObjectId.from_hex(tree)))
            except FloyddError:
                continue
    for name, number in salvage(path, "datasets", "name, next"):
        if isinstance(name, str) and type(number) is int and number > 0:
            nexts[name] = max(nexts.get(name, 0), number)
    return versions, pins, nexts


def _version(row: tuple) -> DatasetVersion | None:
    name, number, tree, created, size, files, message = row
    try:
        check_name(name)
        if type(number) is not int or number < 1:
            return None
        return DatasetVersion(name=name, version=number, tree=ObjectId.from_hex(tree),
                              created=float(created) if isinstance(created, float | int) else time.time(),
                              size=0, files=0, message=message if isinstance(message, str) else "")
    except FloyddError:
        return None
