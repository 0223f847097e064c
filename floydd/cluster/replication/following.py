"""Keeping every version on R nodes: the part of :class:`~floydd.cluster.replication.datasets.ClusterDatasets`
that follows committed entries and the heartbeats' windows, and makes, passes on, or drops this
box's copies (the road is drawn in :mod:`floydd.cluster.replication.datasets`).

It owns the copies under way and what it last saw of the nodes; the catalog, its local mirror,
the liveness and the task spawner are the datasets' own.
"""

from __future__ import annotations

import asyncio
from typing import Any

from floydd import log
from floydd.cluster.driver.loop import Applied
from floydd.cluster.replication.replicas import choose_replicas, refused
from floydd.cluster.state.versions import at_least
from floydd.errors import FloyddError
from floydd.scheduler.storehealth import trouble

__all__ = ["Follower", "PASS_AFTER"]

PASS_AFTER = 3
"""Failed attempts at a copy (not the store's fault) after which a box passes it to the next."""

_log = log.cluster.getChild("datasets")


class Follower:
    """The copies ``datasets`` keeps (its cluster, versions, local mirror, liveness, task spawner)."""

    def __init__(self, datasets: Any) -> None:
        self.datasets = datasets
        self.replicating: dict[tuple[str, int], asyncio.Task] = {}
        self._statuses: dict[str, tuple[str, str]] = {}
        self._windows: tuple[frozenset, ...] | None = None
        self._polled = 0.0

    def on_apply(self, event: Applied) -> None:
        ds = self.datasets
        if ds._closed:
            return
        if event.restored:
            self.scan(repair=True)
            return
        cmd = event.command
        if cmd is None or event.error is not None:
            return
        op = cmd["op"]
        if op == "dataset.add_version":
            self._check(event.result["name"], event.result["version"])
        elif op == "dataset.holders":
            ds._holders_changed.set()
            ds._holders_changed = asyncio.Event()
            if not cmd["holds"] and cmd["node"] == ds.node_id and "failed" not in cmd:
                self._trimmed(cmd["name"], cmd["version"])
            self._check(cmd["name"], cmd["version"])
        elif op == "dataset.delete":
            self._dropped(cmd["name"], cmd.get("version"))
        elif op == "node.remove":
            if ds.cluster.is_leader:      # its copies are gone with it: say so, which re-replicates
                ds._spawn(self._forget_holder(cmd["id"]), f"datasets-forget-holder-{cmd['id'][:6]}")
            self.scan()
        elif op == "node.upsert":
            self.scan()
        elif op == "node.health" and \
                self._statuses.get(cmd["id"]) != _standing(ds.state.nodes.get(cmd["id"])):
            self.scan()

    async def watch(self) -> None:
        """Scan again whenever a node crosses a window (a holder's grace, a taker's
        freshness) without an entry saying so: a crash is silence, not a command."""
        ds = self.datasets
        period = max(0.05, min(1.0, ds.grace / 4, ds.cluster.config.stale_after / 4))   # O(nodes) a look
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            if ds.store_watch is not None and loop.time() - self._polled >= 1.0:
                self._polled = loop.time()
                if await asyncio.to_thread(ds.store_watch.poll):      # full, failing, or well again
                    _log.info("[%s] this box's store: %s", ds.node_id,
                              ds.store_watch.report()["why"] or "takes new data again")
                    ds.cluster.beat_soon()
            live, nodes = ds.liveness(), ds.state.nodes
            windows = (frozenset(n for n, node in nodes.items() if live.holds(node)),
                       frozenset(n for n, node in nodes.items() if live.takes(node)),
                       frozenset((name, v["version"], n) for name, d in ds.state.datasets.items()
                                 for v in d["versions"].values() if "refused" in v for n in refused(v, live)))
            if windows != self._windows:
                if self._windows is not None:
                    _log.info("[%s] copies counted on %d nodes, %d may take copies: checking every version",
                              ds.node_id, len(windows[0]), len(windows[1]))
                self._windows = windows
                self.scan()

    def scan(self, *, repair: bool = False) -> None:
        """Check every version; ``repair`` also re-mirrors versions this node holds (after a
        restart or a restored snapshot the local catalog may lag behind the state)."""
        ds = self.datasets
        state = ds.state
        self._statuses = {nid: _standing(n) for nid, n in state.nodes.items()}
        for name, dataset in state.datasets.items():
            for version in dataset["versions"].values():
                if repair and ds.node_id in version["holders"]:
                    self._replicate_soon(name, version["version"])
                else:
                    self._check(name, version["version"])
        if repair:
            ds._spawn(ds._forget_deleted(), f"datasets-forget-{ds.node_id[:6]}")

    def _check(self, name: str, number: int) -> None:
        ds = self.datasets
        version = ds._version(name, number)
        if version is not None and ds.node_id in choose_replicas(ds.state.nodes, version,
                                                                 ds.replicas, ds.liveness()):
            self._replicate_soon(name, number)
        if version is not None:
            ds._trimmer.check(version)

    def _trimmed(self, name: str, number: int) -> None:
        """The leader dropped this node's copy of ``name:number`` (one too many): drop the mirror."""
        ds = self.datasets
        version = ds._version(name, number)
        if version is None or ds.node_id in version["holders"]:
            return
        task = self.replicating.get((name, number))
        if task is not None:
            task.cancel()
        ds._spawn(ds._drop_local(name, [number]), f"datasets-drop-{name}:{number}")

    def _replicate_soon(self, name: str, number: int) -> None:
        ds = self.datasets
        key = (name, number)
        if key in self.replicating or ds._closed:
            return
        task = asyncio.create_task(self._replicate(name, number), name=f"datasets-replicate-{name}:{number}")
        self.replicating[key] = task
        task.add_done_callback(lambda t: self.replicating.pop(key, None) if self.replicating.get(key) is t
                               else None)

    async def _replicate(self, name: str, number: int) -> None:
        """Fetch, mirror, then tell the cluster this node holds it (each step re-checked)."""
        ds = self.datasets
        delay = ds._retry[0]
        for attempt in range(1, ds._attempts + 1):
            version = ds._version(name, number)
            if version is None:
                return
            holder = ds.node_id in version["holders"]
            if not holder and ds.node_id not in choose_replicas(ds.state.nodes, version,
                                                                ds.replicas, ds.liveness()):
                return
            try:
                fetched = 0
                if not await asyncio.to_thread(ds._mirrored, version):   # else fetched before a restart
                    fetched = await ds.ensure_local(version["tree"], version["holders"])
                    if not await ds._mirror(version):
                        return
                if ds.store_watch is not None and fetched:
                    ds.store_watch.succeeded()
                if not holder:
                    await ds.cluster.set_dataset_holder(name, number, holds=True)
                    _log.info("[%s] now holds %s:%d (%d bytes fetched)", ds.node_id, name, number, fetched)
                return
            except (FloyddError, OSError) as exc:
                said = ds.store_watch is not None and ds.store_watch.failed(exc)
                _log.warning("[%s] keeping a copy of %s:%d failed (attempt %d of %d): %s%s", ds.node_id,
                             name, number, attempt, ds._attempts, getattr(exc, "message", None) or exc,
                             "; this box takes no new copies until its store recovers" if said else "")
                if said:            # a heartbeat says so now: the next box in the order takes the copy
                    await asyncio.to_thread(ds.store_watch.poll)
                    ds.cluster.beat_soon()
                elif attempt >= PASS_AFTER and not holder and await self._pass(name, number, exc):
                    return
            await asyncio.sleep(delay)
            delay = min(2 * delay, ds._retry[1])

    async def _pass(self, name: str, number: int, exc: BaseException) -> bool:
        """Say in the version that this box could not keep a copy (level 3), so the next box in
        the order takes it (:func:`~floydd.cluster.replication.replicas.refused`); whether it was said."""
        ds = self.datasets
        if not at_least(ds.state, 3):
            return False
        why = str(getattr(exc, "message", None) or exc)
        try:
            await ds.cluster.set_dataset_holder(name, number, holds=False, failed=why)
        except FloyddError as said:
            _log.info("[%s] saying that %s:%d could not be kept here: %s", ds.node_id, name, number, said)
            return False
        _log.warning("[%s] passing the copy of %s:%d to the next box: %s", ds.node_id, name, number, why)
        return True

    def _dropped(self, name: str, number: int | None) -> None:
        ds = self.datasets
        for key, task in list(self.replicating.items()):
            if key[0] == name and (number is None or key[1] == number):
                task.cancel()
        numbers = [number] if number is not None else \
            list(range(1, ds.state.datasets.get(name, {}).get("next", 1)))
        ds._spawn(ds._drop_local(name, numbers, whole=number is None), f"datasets-drop-{name}")

    async def _forget_holder(self, node: str) -> None:
        """Drop a node that left the cluster for good from every version's holders."""
        ds = self.datasets
        for name, dataset in list(ds.state.datasets.items()):
            for version in list(dataset["versions"].values()):
                if node in version["holders"]:
                    try:
                        await ds.cluster.set_dataset_holder(name, version["version"], holds=False, node=node)
                    except FloyddError as exc:   # the next leader's scan does not retry: log it
                        _log.warning("[%s] %s:%d still lists %s as a holder: %s", ds.node_id, name,
                                     version["version"], node, exc)


def _standing(node: dict | None) -> tuple[str, str]:
    """What of a node's heartbeat changes who takes copies: its status and its store's trouble."""
    return ((node or {}).get("status", ""), trouble(node))
