"""The cluster's versions this box holds, mirrored into its local catalog (DESIGN §5 "Store").

Each box mirrors the versions it holds into its :class:`~floydd.store.catalog.Catalog` under
the cluster's number, so the local catalog stays this box's gc roots and ``NAME:N`` means the
same tree on every box. A local version of the same name and number but another tree (made
before this box joined) is left alone and the cluster's tree is pinned instead. Versions the
cluster deleted are dropped here (gc gives the space back), also those deleted while this box
was away (:meth:`LocalMirror.forget_deleted`). Mirrors and drops happen in order, one at a time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Mapping

from floydd import log
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, NotFound
from floydd.store.ids import ObjectId
from floydd.store.store import Store

__all__ = ["LocalMirror", "cluster_version"]

_log = log.cluster.getChild("datasets")


class LocalMirror:
    """This box's local catalog as a mirror of the cluster's versions it holds. ``store``: its
    catalog; ``state``: the cluster's catalog (:func:`cluster_version`); ``import_marker``:
    written once this box's own versions went into the cluster's (None: nothing to import)."""

    def __init__(self, store: Store, *, state: ClusterState, node_id: str, import_marker: Path | None = None) -> None:
        self.store, self.state, self.node_id, self.import_marker = store, state, node_id, import_marker
        self._lock = asyncio.Lock()

    def has(self, version: Mapping) -> bool:
        """From a thread: whether the local catalog has ``version`` (so its tree was complete here)."""
        try:
            return str(self.store.catalog.resolve(version["ref"]).tree) == version["tree"]
        except NotFound:
            return False

    async def add(self, version: Mapping, *, committed: bool = False) -> bool:
        """Add ``version`` to the local catalog (idempotent); False if the cluster deleted it
        meanwhile (``committed``: it was just committed, do not look)."""
        name, number, tree = version["name"], version["version"], ObjectId.from_hex(version["tree"])
        async with self._lock:
            if not committed and cluster_version(self.state, name, number) is None:
                return False
            try:
                await asyncio.to_thread(self.store.catalog.add_version, name, tree, version.get("message", ""),
                                        number=number)
            except Conflict as exc:
                _log.warning("[%s] %s; pinning the cluster's %s:%d instead", self.node_id, exc, name, number)
                await asyncio.to_thread(self.store.catalog.pin, tree, _pin(name, number))
        return True

    async def drop(self, name: str, numbers: list[int], *, whole: bool = False) -> None:
        """Drop versions ``numbers`` of ``name`` (``whole``: the dataset) and their pins."""
        catalog = self.store.catalog

        def drop() -> None:
            try:
                catalog.delete(name, None if whole else numbers[0])
            except NotFound:
                pass
            for n in numbers:
                catalog.unpin(_pin(name, n))
        async with self._lock:
            await asyncio.to_thread(drop)
        _log.info("[%s] dropped the local copy of %s%s", self.node_id, name, "" if whole else f":{numbers[0]}")

    async def forget_deleted(self) -> None:
        """Drop local versions that the cluster numbered and has deleted since (this box was
        away, and the log entries were compacted into a snapshot)."""
        datasets = self.state.datasets
        marker = self.import_marker
        if marker is not None and not await asyncio.to_thread(marker.exists):
            return                      # versions made before joining are not the cluster's yet
        async with self._lock:
            local = await asyncio.to_thread(self.store.catalog.list)
            gone = [v for v in local if v.version < datasets.get(v.name, {}).get("next", 1)
                    and str(v.version) not in datasets[v.name]["versions"]]
            for v in gone:
                await asyncio.to_thread(self.store.catalog.delete, v.name, v.version)
                _log.info("[%s] dropped %s: deleted in the cluster while this node was away", self.node_id, v.ref)


def cluster_version(state: ClusterState, name: str, number: int) -> dict | None:
    """Version ``number`` of ``name`` in the cluster's catalog, None if it has none."""
    return state.datasets.get(name, {}).get("versions", {}).get(str(number))


def _pin(name: str, number: int) -> str:
    return f"cluster:{name}:{number}"
