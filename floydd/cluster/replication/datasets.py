"""The cluster's dataset catalog, as one box serves it (DESIGN §5 "Store", §5b).

The replicated state (:mod:`floydd.cluster.state.datasets`) numbers the versions and says which
nodes hold each one; the bytes stay in each node's own store and move between nodes with
:mod:`floydd.cluster.replication.peerstore`. Each node also mirrors the versions it holds into
its local catalog under the same number (:mod:`floydd.cluster.replication.mirror`), so the
local catalog stays this node's gc roots and ``NAME:N`` means the same tree on every node.

:class:`ClusterDatasets` is what the rest of the daemon uses: listing, describing and
resolving versions (who may read which: :mod:`floydd.cluster.state.access`), registering an
upload and waiting for its copies, deleting, importing this box's own versions when it
joins. Keeping every version on R nodes is a
:class:`~floydd.cluster.replication.keeper.CopyKeeper` (the road is drawn there) over
:class:`~floydd.cluster.replication.versioncopies.VersionCopies`; which copies count and who
makes the missing ones is :mod:`floydd.cluster.replication.replicas`: a holder counts while it
was heard from within ``grace`` (the daemon's ``replica_grace``), so a dead or switched-off
holder is replaced once the grace has passed, and counts again from its first heartbeat
when it returns (the leader then trims the copy beyond R). A copy that fails here for lack
of space or a failing disk is said at once by this box's store watch (``store_watch``:
:class:`floydd.runtime.disk.StoreWatch`), so every node passes this box over
(:mod:`floydd.scheduler.storehealth`) and the next one in the order takes the copy.

An upload waits (:meth:`ClusterDatasets.wait_for_copies`) until R copies count, no other box
can take one, or its time is up, and says how many copies it has.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Callable, Iterable

from floydd import log
from floydd.cluster.state import access
from floydd.cluster.state.access import ReadRules
from floydd.cluster.state.machine import ClusterState
from floydd.cluster.replication.keeper import CopyKeeper, liveness_of
from floydd.cluster.replication.mirror import LocalMirror, cluster_version
from floydd.cluster.replication.peerstore import fetch_manifest, fetch_tree
from floydd.cluster.replication.replicas import Liveness, copies_note, counted, ranked_sources, silent
from floydd.cluster.replication.seam import Cluster, StoreWatch
from floydd.cluster.replication.versioncopies import VersionCopies
from floydd.errors import FloyddError
from floydd.store.catalog import check_name, dataset_not_found, parse_ref
from floydd.store.store import Store
from floydd.store.tree import Tree

__all__ = ["ClusterDatasets", "DEFAULT_REPLICAS", "DEFAULT_GRACE", "DEFAULT_COPY_WAIT"]

DEFAULT_REPLICAS = 2
DEFAULT_GRACE = 300.0
"""Seconds a holder may stay silent before its copies stop counting (``replica_grace``)."""
DEFAULT_COPY_WAIT = 60.0
"""Seconds an upload waits for R copies before it answers with fewer (``dataset_copy_wait``)."""
_PUBLIC = ("name", "version", "ref", "tree", "created", "size", "files", "message", "holders", "owner", "visibility")

_log = log.cluster.getChild("datasets")


class ClusterDatasets:
    """One node's view of the cluster catalog; ``start()`` after the cluster service started.
    Its parts: :attr:`mirror` (the local catalog) and :attr:`keeper` (the copies)."""

    def __init__(self, cluster: Cluster, store: Store, *, state: ClusterState, replicas: int = DEFAULT_REPLICAS,
                 grace: float = DEFAULT_GRACE,
                 copy_wait: float = DEFAULT_COPY_WAIT, retry: tuple[float, float] = (0.5, 30.0), attempts: int = 6,
                 import_marker: Path | None = None, clock: Callable[[], float] = time.time,
                 rules: ReadRules = ReadRules(), store_watch: StoreWatch | None = None) -> None:
        self.cluster = cluster
        """The service's calls it makes, copies fetched through it included
        (:class:`~floydd.cluster.replication.seam.Cluster`)."""
        self.state = state
        """The replicated state: the catalog, the nodes, the jobs that mount versions."""
        self.store_watch = store_watch
        """This box's :class:`~floydd.runtime.disk.StoreWatch` (None: its store is not watched)."""
        self.rules = rules
        """Who reads job outputs through this box (its config: :mod:`floydd.cluster.state.access`)."""
        self.store = store
        self.replicas = replicas
        self.grace = grace
        self.copy_wait = copy_wait
        self._retry = retry
        self.liveness: Callable[[], Liveness] = liveness_of(cluster, grace, clock)
        """This node's judgement of holders and takers, now (:mod:`floydd.cluster.replication.replicas`)."""
        self.mirror = LocalMirror(store, state=state, node_id=cluster.node_id, import_marker=import_marker)
        """The versions this node holds in its local catalog."""
        kind = VersionCopies(cluster, state=state, mirror=self.mirror, replicas=replicas,
                             fetch=lambda tree, holders: self.ensure_local(tree, holders))     # looked up when called
        self.keeper = CopyKeeper(kind, cluster, state=state, replicas=replicas, liveness=self.liveness, retry=retry,
                                 attempts=attempts, store_watch=store_watch)
        """Every version kept on ``replicas`` nodes."""
        self._replicating = self.keeper.replicating      # the copies under way (tests wait on it)

    @property
    def node_id(self) -> str:
        return self.cluster.node_id

    def start(self) -> None:
        """Follow committed entries from now on, and catch up with the state as it is."""
        self.keeper.start()

    async def close(self) -> None:
        await self.keeper.close()

    # -- reading the catalog ------------------------------------------------------------------

    async def list(self, name: str | None = None, *, reader: str | None = None,
                   everything: bool = False) -> list[dict]:
        """Every version (of ``name``) that ``reader`` may read (:mod:`floydd.cluster.state.access`:
        someone else's private dataset, or a job's output they may not read, is left out, its
        tree id with it), by name and number, with its holders (read through the leader);
        ``everything``: every version, for the daemon itself."""
        if name is not None:
            check_name(name)
        state = self.state
        versions = [v for v in await self.cluster.datasets() if name is None or v["name"] == name]
        if not everything:
            versions = [v for v in versions
                        if access.allowed(state, reader, access.dataset_target(state, v["name"]), "read", self.rules)]
        return [self.describe(v) for v in sorted(versions, key=lambda v: (v["name"], v["version"]))]

    def describe(self, version: dict) -> dict:
        """``version`` with its copies: the holders' names (``held_by``), those not counted now
        (``silent_holders``), how many count (``copies``) of the ``replicas`` kept (R, or fewer
        on a cluster of fewer boxes), and ``copies_note``."""
        nodes, live = self.state.nodes, self.liveness()
        holders = version["holders"]
        name = {nid: n.get("name") or nid for nid, n in nodes.items()}
        return {**_public(version), **self._visibility(version), "held_by": [name.get(h, h) for h in holders],
                "silent_holders": [name.get(h, h) for h in silent(nodes, holders, live)],
                "copies": len(counted(nodes, holders, live)), "replicas": min(self.replicas, max(1, len(nodes))),
                "copies_note": copies_note(nodes, version, self.replicas, live)}

    async def resolve(self, ref: str) -> dict:
        """``NAME``, ``NAME:N`` or ``NAME:latest`` -> the version (name, version, ref, tree,
        holders, size, files, message, created). ``NotFound`` lists what exists;
        ``Unavailable`` without a leader."""
        name, number = parse_ref(ref)
        versions = {v["version"]: v for v in await self.cluster.datasets(name=name)}
        if versions:
            found = versions.get(max(versions) if number is None else number)
            if found is not None:
                return _public(found)
        everything = await self.cluster.datasets()      # only to name what exists
        raise dataset_not_found(name, number, list(versions), sorted({v["name"] for v in everything}))

    async def resolve_readable(self, ref: str, user: str | None, verb: str = "mount", *,
                               doing: str | None = None) -> dict:
        """:meth:`resolve`, for ``user`` to ``verb`` (``read``: list the files of, ``mount``,
        ``clone``; ``doing``: the road's own word in a refusal, e.g. ``export``): refused as
        :mod:`floydd.cluster.state.access` says (someone else's private dataset; the output of
        someone else's job unless this box lets the lab read outputs)."""
        version = await self.resolve(ref)
        state = self.state
        access.check(state, user, access.dataset_target(state, version["name"], version["ref"]), verb, self.rules,
                     doing=doing)
        return version

    def check_may_add(self, name: str, user: str) -> None:
        """Refuse at once a version of ``name`` that ``user`` may not add (every box checks it
        again on apply): before an upload is read, not after it was stored."""
        state = self.state
        access.check(state, user, access.dataset_target(state, name), "add")

    def check_may_delete(self, name: str, ref: str, user: str) -> None:
        """Refuse at once a delete ``user`` may not make (checked again on apply)."""
        state = self.state
        access.check(state, user, access.dataset_target(state, name, ref), "delete")

    async def manifest(self, version: dict) -> Tree:
        """The file list of ``version``, fetching only its manifest when the tree is not here."""
        return await fetch_manifest(self.store, version["tree"], self._sources(version["holders"]),
                                    self.cluster)

    # -- moving data ---------------------------------------------------------------------------

    async def ensure_local(self, tree: str, holders: list[str], *,
                           progress: Callable[[int, int], object] | None = None) -> int:
        """Make ``tree`` complete in this node's store, fetching what is missing from its
        ``holders`` first, then from any other node; bytes fetched (0: all was here)."""
        return await fetch_tree(self.store, tree, self._sources(holders), self.cluster,
                                progress=progress)

    async def register(self, name: str, tree: str, *, size: int, files: int, message: str = "",
                       idem_key: str | None = None, user: str = "", visibility: str | None = None) -> dict:
        """Commit ``tree`` (stored here) as the next version of ``name``, held by this node,
        and mirror it into the local catalog under the cluster's number. The same
        ``idem_key`` always gives the same version."""
        check_name(name)
        fields = {} if visibility is None else {"visibility": visibility}   # None: as it is (new: lab)
        version = await self.cluster.add_dataset_version(name, tree, idem_key=idem_key, size=size, files=files,
                                                         message=message, user=user, **fields)
        await self.mirror.add(version, committed=True)
        _log.info("[%s] registered %s (tree %s)", self.node_id, version["ref"], tree[:12])
        return _public(version)

    async def wait_for_copies(self, version: dict, timeout: float | None = None) -> dict:
        """``version`` described (:meth:`describe`) once ``replicas`` copies count, no other
        box can take one, or ``timeout`` (default ``copy_wait``) seconds have passed: an upload's answer."""
        deadline = asyncio.get_running_loop().time() + (self.copy_wait if timeout is None else timeout)
        current = await self.keeper.settle((version["name"], version["version"]), deadline, default=version)
        return self.describe(current or version)

    async def delete(self, name: str, version: int | None = None, *, user: str = "") -> int:
        """Delete one version or the whole dataset, on every node, for ``user`` (who added
        them, or an admin: :mod:`floydd.cluster.state.authz`); how many versions went."""
        ref = name if version is None else f"{name}:{version}"
        await self.resolve(ref)         # NotFound with the versions there are
        gone = len([v for v in await self.cluster.datasets() if v["name"] == name]) if version is None else 1
        await self.cluster.delete_dataset(name, version, user=user)
        return gone

    async def import_local(self) -> int:
        """Once per node (``import_marker`` is written after): put the versions this node made before
        it joined into the cluster catalog, so they stay usable (``--data NAME``) and are
        replicated. A version the cluster already has (same name and tree) is skipped; one
        whose number is taken there gets the next number, said in the log. Retried until a
        leader answers; returns how many versions were imported."""
        marker = self.mirror.import_marker
        if marker is None or await asyncio.to_thread(marker.exists):
            return 0
        delay = self._retry[0]
        while True:
            try:
                imported = await self._import_local()
                break
            except FloyddError as exc:
                _log.info("[%s] importing this node's own datasets into the cluster: %s", self.node_id, exc)
                await asyncio.sleep(delay)
                delay = min(2 * delay, self._retry[1])
        await asyncio.to_thread(_touch, marker)
        return imported

    async def _import_local(self) -> int:
        known = {(v["name"], v["tree"]) for v in await self.cluster.datasets()}
        imported = 0
        for v in await asyncio.to_thread(self.store.catalog.list):
            if (v.name, str(v.tree)) in known:
                continue
            name = v.name
            if not access.allowed(self.state, "", access.dataset_target(self.state, name), "add"):
                name = f"{v.name[:44]}-from-{self.node_id[:8]}"     # the name is someone's in the cluster
                _log.warning("[%s] %s is someone else's dataset in the cluster: this box's %s goes in as %s",
                             self.node_id, v.name, v.ref, name)
            added = await self.register(name, str(v.tree), size=v.size, files=v.files, message=v.message,
                                        idem_key=f"import:{self.node_id}:{v.ref}:{v.tree}")
            known.add((v.name, str(v.tree)))
            imported += 1
            renumbered = "" if added["version"] == v.version else f" (its number here stays {v.ref})"
            _log.info("[%s] imported %s into the cluster as %s%s", self.node_id, v.ref, added["ref"], renumbered)
        return imported

    # -- helpers -------------------------------------------------------------------------------

    def _visibility(self, version: dict) -> dict:
        """A job output's ``visibility`` as this box serves it: ``private`` (its job's owner and
        the admins) unless this box's ``job_outputs`` is ``lab``; any other version's as it is."""
        if access.output_job(version["name"]) is None:
            return {}
        return {"visibility": "lab" if self.rules.job_outputs == "lab" else "private"}

    def _version(self, name: str, number: int) -> dict | None:
        return cluster_version(self.state, name, number)

    def _sources(self, holders: Iterable[str]) -> list[str]:
        """Holders that count first, then nodes heard from lately, silent ones last; never this node."""
        return ranked_sources(self.state.nodes, holders, self.liveness(), skip=self.node_id)


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("local datasets imported into the cluster catalog\n")


def _public(version: dict) -> dict:
    return {k: version[k] for k in _PUBLIC if k in version}
