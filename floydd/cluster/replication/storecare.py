"""This node's store, cared for with what the cluster knows: repairs, the scrub, gc roots.

Every repair fetches a good copy of an object from another node, holders first (of the
versions or the job code that use it, those that count before silent ones: :func:`sources`),
and verifies it before it replaces the local copy (:func:`~floydd.cluster.replication.peerstore.fetch_objects`).
Repairs come from four places:

- a read (:class:`StoreCare` is the store's :attr:`~floydd.store.Store.repairer`): a restore
  that meets a damaged or missing object (a job's inputs, a clone, a job's output) waits
  for a good copy and reads on; an object a peer asks for that turns out damaged is
  refused and repaired in the background;
- the scrub (:mod:`floydd.store.care.scrub`): ``store_scrub_rate`` bytes a second, a pass at most
  every ``store_scrub_every`` seconds; what it finds damaged is repaired at once;
- ``floyd data verify --repair`` (:func:`repair_damaged`): what verify found, each with why
  not where it could not be (on a box alone there is no other source: the answer says so,
  and what does work: an upload of the same data writes good copies over damaged ones, or
  delete the versions that use it).

``floyd data gc`` (:func:`named_trees`): besides the local catalog, gc keeps every tree the
cluster still names for this node (versions it holds, jobs' code) and every tree this node's
job records name, so a local catalog that lags behind them (lost or restored from an old
copy) costs no data.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Protocol

from floydd import log
from floydd.cluster.replication.codecopies import likely_sources
from floydd.cluster.replication.peerstore import fetch_objects
from floydd.cluster.replication.replicas import Liveness, ranked_sources
from floydd.cluster.replication.seam import Cluster, StoreWatch
from floydd.cluster.state.machine import ClusterState
from floydd.errors import FloyddError, InvalidSpec
from floydd.model import Run
from floydd.store.ids import ObjectId
from floydd.store.care.maintenance import VerifyReport
from floydd.store.care.scrub import Scrub
from floydd.store.store import Store
from floydd.tasks import cancel_and_wait

__all__ = ["StoreCare", "Holdings", "repair_damaged", "named_trees", "sources", "NO_SOURCE", "HEAL_TIMEOUT"]

NO_SOURCE = ("no other node holds a copy: upload the same data again (an upload writes good copies over "
             "damaged ones), or delete the versions that use it (floyd data delete REF)")
HEAL_TIMEOUT = 300.0
"""Seconds a read waits for a good copy of one object before it fails as it would have."""

_log = log.cluster.getChild("storecare")


class Holdings(Protocol):
    """What the care of the store uses of this box's dataset catalog
    (:class:`~floydd.cluster.replication.datasets.ClusterDatasets`): the store it cares for, the
    cluster copies come through (and its heartbeat), the replicated state (who holds what),
    this box's judgement of the holders, and its store watch."""

    store: Store
    cluster: Cluster
    state: ClusterState
    store_watch: StoreWatch | None

    @property
    def node_id(self) -> str: ...

    def liveness(self) -> Liveness: ...


class StoreCare:
    """Repairs for this node's store (``datasets``: its catalog, what it uses of it:
    :class:`Holdings`), and the scrub when ``scrub_rate`` (bytes a second) is above 0.
    ``start()`` on the loop."""

    def __init__(self, datasets: Holdings, *, scrub_rate: float = 0.0, scrub_every: float = 7 * 86400.0) -> None:
        self.datasets = datasets
        self.store = datasets.store
        self.scrub = Scrub(self.store, every=scrub_every) if scrub_rate > 0 else None
        self._rate = scrub_rate
        self._loop: asyncio.AbstractEventLoop | None = None
        self._saves = ThreadPoolExecutor(2, thread_name_prefix="floydd-repair")   # never the loop's own pool:
        self._pending: dict[ObjectId, asyncio.Future] = {}   # a restore holding it may be waiting for us
        self._tasks: set[asyncio.Task] = set()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.store.repairer = self
        if self.scrub is not None:
            self._spawn(self._scrubbing(), "storecare-scrub")

    async def close(self) -> None:
        if self.store.repairer is self:
            self.store.repairer = None
        await cancel_and_wait([*self._tasks])
        await asyncio.to_thread(self._saves.shutdown, wait=True)

    async def repair(self, oids: Iterable[ObjectId], *, trees: Iterable[str] = (),
                     versions: Iterable[str] = ()) -> dict[ObjectId, str]:
        """Good copies of ``oids`` (used by ``trees`` or version refs ``versions``) from other
        nodes; id -> "" when repaired, else why not. One fetch per object at a time."""
        out: dict[ObjectId, str] = {}
        order = sources(self.datasets, trees=trees, versions=versions)
        for oid in dict.fromkeys(oids):
            pending = self._pending.get(oid)
            if pending is None:
                pending = self._pending[oid] = asyncio.ensure_future(self._fetch(oid, order))
                pending.add_done_callback(lambda _f, oid=oid: self._pending.pop(oid, None))
            out[oid] = await asyncio.shield(pending)
        return out

    # -- the store's Repairer ---------------------------------------------------------------------

    def heal(self, oid: ObjectId, tree: ObjectId | None) -> bool:
        """From a worker thread (a restore): a good copy of ``oid`` now; whether it came."""
        if self._loop is None or self._loop.is_closed():
            return False
        trees = [tree.hex] if tree is not None else []
        try:
            why = asyncio.run_coroutine_threadsafe(self.repair([oid], trees=trees), self._loop).result(HEAL_TIMEOUT)
        except Exception as exc:        # the loop is closing, or the wait ran out: the read fails as it was
            _log.warning("[%s] no good copy of %s came: %s", self.datasets.node_id, oid.short, exc)
            return False
        return not why[oid]

    def damaged(self, oid: ObjectId) -> None:
        """Thread-safe: repair ``oid`` in the background."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(lambda: self._spawn(self._repair_logged([oid]), "storecare-repair"))

    # -- helpers ---------------------------------------------------------------------------------

    async def _fetch(self, oid: ObjectId, order: list[str]) -> str:
        why = NO_SOURCE
        if order:
            why = (await fetch_objects(self.store, [oid], order, self.datasets.cluster,
                                       executor=self._saves))[oid]
        if why:
            _log.error("[%s] object %s stays damaged: %s", self.datasets.node_id, oid.short, why)
        else:
            _log.warning("[%s] object %s repaired with a good copy from another node", self.datasets.node_id,
                         oid.short)
        return why

    async def _repair_logged(self, oids: list[ObjectId]) -> None:
        try:
            await self.repair(oids)
        except FloyddError as exc:          # a full disk, say: said in the log, tried again by the next read
            _log.error("[%s] repairing %s failed: %s", self.datasets.node_id, ", ".join(o.short for o in oids), exc)
            watch = self.datasets.store_watch
            if watch is not None and watch.failed(exc):     # full or failing: said in a heartbeat now
                self.datasets.cluster.beat_soon()

    async def _scrubbing(self) -> None:
        """Check ``rate`` bytes a second (a second's worth per step), repair what is damaged."""
        scrub, loop = self.scrub, asyncio.get_running_loop()
        while True:
            wait = scrub.due()
            if wait > 0:
                await asyncio.sleep(min(wait, 3600.0))
                continue
            began = loop.time()
            try:
                result = await asyncio.to_thread(scrub.step, int(self._rate))
            except FloyddError as exc:      # the store is busy (gc) or re-keyed: later
                _log.warning("[%s] scrub: %s", self.datasets.node_id, exc)
                await asyncio.sleep(60.0)
                continue
            if result.damaged:
                await self._repair_logged([oid for oid, _why in result.damaged])
            await asyncio.sleep(max(0.0, result.checked_bytes / self._rate - (loop.time() - began)))

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def sources(datasets: Holdings, *, trees: Iterable[str] = (), versions: Iterable[str] = ()) -> list[str]:
    """Nodes to ask for an object of ``trees`` / version refs ``versions``: the holders of those
    versions (and of versions with those trees) and the nodes that ran or sent jobs with that
    code, those that count first; then every other node, silent ones last; never this node."""
    state = datasets.state
    trees, refs = set(trees), set(versions)
    likely: list[str] = []
    for name, dataset in state.datasets.items():
        for number, version in dataset["versions"].items():
            if version["tree"] in trees or f"{name}:{number}" in refs:
                likely += version["holders"]
    for tree in trees:                  # a job's code: its copies' holders, then who sent and ran it
        likely += likely_sources(state, tree)
    return ranked_sources(state.nodes, likely, datasets.liveness(), skip=datasets.node_id)


async def repair_damaged(report: VerifyReport, datasets: Holdings) -> dict:
    """``report`` as a dict, after fetching good copies of what it found damaged: ``repaired``
    lists what was fixed, ``damaged`` what is still damaged, each with ``repair`` (why not)."""
    repaired, left = [], []
    for damage in report.damaged:
        order = sources(datasets, versions=damage.versions)
        why = NO_SOURCE
        if order:
            why = (await fetch_objects(datasets.store, [damage.object], order, datasets.cluster))[
                damage.object]
        if why:
            left.append({**damage.to_dict(), "repair": why})
        else:
            repaired.append({"object": str(damage.object), "versions": list(damage.versions)})
    return {**report.to_dict(), "ok": not left, "damaged": left, "repaired": repaired}


def named_trees(state: ClusterState, node_id: str, runs: Iterable[Run]) -> set[ObjectId]:
    """Trees gc must keep although the local catalog may not name them: the cluster's versions
    held by ``node_id`` (job outputs among them), the code trees it holds a copy of for the
    cluster (their jobs' archived summaries included: :mod:`floydd.cluster.state.code`), the
    code of every job in the cluster's state, and the code of this node's runs (its records: ``runs``)."""
    trees: set[str] = set()
    for dataset in state.datasets.values():
        trees.update(v["tree"] for v in dataset["versions"].values() if node_id in v.get("holders", ()))
    trees.update(tree for tree, entry in getattr(state, "code", {}).items() if node_id in entry["holders"])
    trees.update(job.code_tree or "" for job in state.jobs.values())
    trees.update(run.code_tree or "" for run in runs)
    out = set()
    for tree in trees:
        try:
            out.add(ObjectId.from_hex(tree))
        except InvalidSpec:
            continue
    return out
