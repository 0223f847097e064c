"""Dataset versions as a kind of item a :class:`~floydd.cluster.replication.keeper.CopyKeeper`
keeps on R boxes (the road is drawn there; the catalog is
:mod:`floydd.cluster.replication.datasets`).

What is a version's own: the entries that touch it (``dataset.add_version``,
``dataset.holders``, ``dataset.delete``); a copy here is the tree fetched and the version
mirrored into the local catalog (:mod:`floydd.cluster.replication.mirror`); a box the leader
dropped as a holder (a copy beyond R) or a version deleted drops the mirror (gc frees the
space); a box that could not keep a copy says so (``failed``), and the leader trims, only
from cluster level 3 (a box of an older release would not drop its mirror); a copy stays
on a box running a job that mounts the version.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Mapping

from floydd import log
from floydd.cluster.replication.keeper import Touched
from floydd.cluster.replication.mirror import LocalMirror, cluster_version
from floydd.cluster.replication.replicas import Liveness, extra_copies, refused
from floydd.cluster.replication.seam import Cluster
from floydd.cluster.state.machine import ClusterState
from floydd.cluster.state.versions import at_least
from floydd.errors import FloyddError
from floydd.model import ACTIVE_STATES

__all__ = ["VersionCopies"]

Key = tuple[str, int]
"""A version: (dataset name, number)."""


class VersionCopies:
    """The :class:`~floydd.cluster.replication.keeper.Kind` for dataset versions. ``cluster``: the
    command that says who holds one; ``state``: the catalog and the jobs that mount versions;
    ``mirror``: this box's local catalog; ``fetch(tree, holders)``: make a tree complete here
    (bytes fetched; :meth:`~floydd.cluster.replication.datasets.ClusterDatasets.ensure_local`);
    ``replicas``: R."""

    what = "datasets"
    log = log.cluster.getChild("datasets")
    failures = (FloyddError, OSError)
    gone = ()

    def __init__(self, cluster: Cluster, *, state: ClusterState, mirror: LocalMirror, replicas: int,
                 fetch: Callable[[str, list[str]], Awaitable[int]]) -> None:
        self.cluster, self.state, self.mirror = cluster, state, mirror
        self.replicas, self.fetch = replicas, fetch

    def items(self) -> list[tuple[Key, dict]]:
        return [((name, version["version"]), version) for name, dataset in list(self.state.datasets.items())
                for version in list(dataset["versions"].values())]

    def entry(self, key: Key) -> dict | None:
        return cluster_version(self.state, *key)

    def label(self, key: Key) -> str:
        return f"{key[0]}:{key[1]}"

    def applied(self, cmd: dict, result: object) -> Touched[Key]:
        op = cmd["op"]
        if op == "dataset.add_version":
            return Touched(check=((result["name"], result["version"]),))
        if op == "dataset.holders":
            key = (cmd["name"], cmd["version"])
            if not cmd["holds"] and cmd["node"] == self.cluster.node_id and "failed" not in cmd:
                version = self.entry(key)        # the leader dropped this box's copy (one too many)
                if version is not None and self.cluster.node_id not in version["holders"]:
                    return Touched(wake=True, cancel=lambda k: k == key, check=(key,),
                                   then=lambda: self.mirror.drop(key[0], [key[1]]), what=f"drop-{self.label(key)}")
            return Touched(wake=True, check=(key,))
        if op == "dataset.delete":
            name, number = cmd["name"], cmd.get("version")
            numbers = [number] if number is not None else \
                list(range(1, self.state.datasets.get(name, {}).get("next", 1)))
            return Touched(cancel=lambda k: k[0] == name and (number is None or k[1] == number),
                           then=lambda: self.mirror.drop(name, numbers, whole=number is None), what=f"drop-{name}")
        return Touched()

    def windows(self, live: Liveness) -> frozenset:
        """The refusals in force: one running out brings its box back into the order."""
        return frozenset((name, number, n) for (name, number), v in self.items() if "refused" in v
                         for n in refused(v, live))

    def extra(self, entry: Mapping, live: Liveness) -> list[str]:
        state = self.state
        active = [j for j in state.list_jobs(states=ACTIVE_STATES) if j.data_trees]
        return extra_copies(state.nodes, entry, self.replicas, live, jobs=active)

    def may_trim(self) -> bool:
        return at_least(self.state, 3)

    def may_pass(self) -> bool:
        return at_least(self.state, 3)

    async def make(self, key: Key, version: Mapping) -> int | None:
        if await asyncio.to_thread(self.mirror.has, version):       # fetched before a restart
            return 0
        fetched = await self.fetch(version["tree"], version["holders"])
        return fetched if await self.mirror.add(version) else None

    async def set_holder(self, key: Key, *, holds: bool, node: str | None = None, failed: str | None = None) -> None:
        await self.cluster.set_dataset_holder(key[0], key[1], holds=holds, node=node, failed=failed)

    def on_repair(self) -> Awaitable[None]:
        """Drop the local versions the cluster deleted while this box was away."""
        return self.mirror.forget_deleted()
