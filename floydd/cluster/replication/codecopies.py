"""Jobs' code trees kept on R boxes, as dataset versions are (issue 21; DESIGN §5b "Replicas
are kept, not just made").

The replicated ``code`` table (:mod:`floydd.cluster.state.code`) says which boxes hold each
code tree; keeping each on R boxes is a :class:`~floydd.cluster.replication.keeper.CopyKeeper`
(the road is drawn there) over :class:`CodeKind`, with the datasets' R, grace and freshness
(:mod:`floydd.cluster.replication.replicas`): a holder counts while it was heard from within
``grace``, so a box that was destroyed (or is off past the grace) is replaced, and the box
chosen next by sha256(node id + tree) fetches the tree from the holders that count, then any
box. What is a code tree's own::

    job.submit (code_held: the origin's copy) / job.import (the importing box's copy) /
    code.holders
        -> the tree is checked, and a submit waiting for its copies looks again
    a copy here: the tree fetched into this box's store from :func:`likely_sources` (its
        holders, then the boxes that sent or ran jobs with it), then code.holders(holds=True)
    copies beyond R: the leader drops them at every level, never on a box running a job of
        that code, nothing while such a job is starting

The submit waits (:meth:`CodeCopies.wait_for_copies`, up to ``copy_wait``) until R copies
count or no other box can take one, and says so when it answers with fewer: the job is
acknowledged once its code is as durable as an uploaded dataset version. A job's code is
small, so the wait is one fetch. A tree stays in this node's gc roots while the table lists
this node as a holder (:func:`floydd.cluster.replication.storecare.named_trees`): the table forgets the
tree with its last job (archived jobs count: they can be rerun), and gc gives the space back.

Replication between boxes is box-to-box over mTLS, as for datasets: it opens no road to a
job's code for people (who reads it is :mod:`floydd.cluster.state.access`'s ``code`` rule, asked
where a person reads it).
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Mapping

from floydd import log
from floydd.cluster.replication.keeper import CopyKeeper, Touched, liveness_of
from floydd.cluster.replication.peerstore import fetch_tree
from floydd.cluster.replication.replicas import Liveness, copies_note, counted, extra_copies, ranked_sources
from floydd.cluster.replication.seam import Cluster
from floydd.cluster.state.machine import ClusterState
from floydd.errors import FloyddError, NotFound
from floydd.model import ACTIVE_STATES
from floydd.store.ids import ObjectId
from floydd.store.store import Store

__all__ = ["CodeCopies", "CodeKind", "DEFAULT_CODE_COPY_WAIT", "likely_sources"]

DEFAULT_CODE_COPY_WAIT = 20.0
"""Seconds a submit waits for R copies of its code before it answers with fewer (``code_copy_wait``)."""


class CodeCopies:
    """One node's part in keeping every job's code on ``replicas`` boxes; ``start()`` on the loop.
    ``cluster``: the service's calls it makes, copies fetched through it included
    (:class:`~floydd.cluster.replication.seam.Cluster`); ``state``: the replicated state (its
    code table, nodes, jobs); ``has_tree``: whether a tree is complete here (default: in
    ``store``). Its part :attr:`keeper` keeps the copies."""

    def __init__(self, cluster: Cluster, store: Store, *, state: ClusterState, replicas: int, grace: float,
                 copy_wait: float = DEFAULT_CODE_COPY_WAIT, has_tree: Callable[[ObjectId], bool] | None = None,
                 retry: tuple[float, float] = (0.5, 30.0), attempts: int = 6,
                 clock: Callable[[], float] = time.time) -> None:
        self.cluster, self.store, self.state = cluster, store, state
        self.replicas, self.grace, self.copy_wait = replicas, grace, copy_wait
        self._has_tree = has_tree or (lambda oid: _complete(store, oid))
        self.liveness: Callable[[], Liveness] = liveness_of(cluster, grace, clock)
        """This box's judgement of holders and takers, now (as datasets judge)."""
        kind = CodeKind(cluster, store, state=state, replicas=replicas, liveness=self.liveness,
                        has_tree=self.has_tree)
        self.keeper = CopyKeeper(kind, cluster, state=state, replicas=replicas, liveness=self.liveness,
                                 retry=retry, attempts=attempts)
        """Every job's code kept on ``replicas`` boxes."""

    @property
    def node_id(self) -> str:
        return self.cluster.node_id

    def start(self) -> None:
        """Follow committed entries from now on, and catch up with the table as it is."""
        self.keeper.start()

    async def close(self) -> None:
        await self.keeper.close()

    def has_tree(self, tree: str) -> bool:
        """From a thread: is ``tree`` complete in this node's store (a submit's first copy)?"""
        return self._has_tree(ObjectId.from_hex(tree))

    def extra(self, tree: str) -> list[str]:
        """The holders of ``tree`` whose copies may go now (:meth:`CodeKind.extra`)."""
        return self.keeper.extra(tree)

    async def wait_for_copies(self, tree: str, timeout: float | None = None) -> str:
        """Wait until R copies of ``tree`` (the code of a job just committed) count, no other
        box can take one, or ``timeout`` (default ``copy_wait``) has passed; "" then, or what a
        submit's answer warns of when fewer copies count than the cluster could keep. A tree
        the table does not list (a cluster below level 3) waits for nothing."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.copy_wait if timeout is None else timeout)
        try:                        # committed through the leader: applied here too, first
            await self.cluster.read_index(timeout=max(0.1, min(5.0, deadline - loop.time())))
        except FloyddError:
            return ""
        entry = await self.keeper.settle(tree, deadline)
        if entry is None:
            return ""
        nodes, live = self.state.nodes, self.liveness()
        if len(counted(nodes, entry["holders"], live)) >= min(self.replicas, len(nodes)):
            return ""
        return f"the job's code is {copies_note(nodes, entry, self.replicas, live)}"


class CodeKind:
    """The :class:`~floydd.cluster.replication.keeper.Kind` for jobs' code trees (keys: tree ids).
    ``cluster``: the command that says who holds one, the fetches; ``state``: the code table and
    the jobs that run the code; ``store``: where a copy goes; ``has_tree``: from a thread, is a
    tree complete here; ``liveness``: as the keeper judges; ``replicas``: R."""

    what = "code"
    log = log.cluster.getChild("code")
    failures = (FloyddError,)
    gone = (NotFound,)              # its last job went meanwhile

    def __init__(self, cluster: Cluster, store: Store, *, state: ClusterState, replicas: int,
                 liveness: Callable[[], Liveness], has_tree: Callable[[str], bool]) -> None:
        self.cluster, self.store, self.state = cluster, store, state
        self.replicas, self.liveness, self.has_tree = replicas, liveness, has_tree

    def items(self) -> list[tuple[str, dict]]:
        return list(getattr(self.state, "code", {}).items())

    def entry(self, tree: str) -> dict | None:
        return self.state.code.get(tree)

    def label(self, tree: str) -> str:
        return f"code tree {tree[:12]}"

    def applied(self, cmd: dict, result: object) -> Touched[str]:
        op = cmd["op"]
        if op in ("job.submit", "job.import"):
            tree = (result or {}).get("spec", {}).get("code_tree")
            return Touched(wake=True, check=(tree,) if tree else ())
        if op == "code.holders":
            return Touched(wake=True, check=(cmd["tree"],))
        return Touched()

    def windows(self, live: Liveness) -> frozenset:
        return frozenset()

    def extra(self, entry: Mapping, live: Liveness) -> list[str]:
        """Copies beyond R, trimmed as a dataset version's are
        (:func:`~floydd.cluster.replication.replicas.extra_copies`): never on a box running a job
        of that code, nothing while such a job is starting."""
        state, tree = self.state, entry["tree"]
        active = state.list_jobs(states=ACTIVE_STATES)
        return extra_copies(state.nodes, entry, self.replicas, live, jobs=active,
                            uses=lambda job: job.code_tree == tree)

    def may_trim(self) -> bool:
        return True

    def may_pass(self) -> bool:
        return False

    async def make(self, tree: str, entry: Mapping) -> int | None:
        if await asyncio.to_thread(self.has_tree, tree):
            return 0
        sources = ranked_sources(self.state.nodes, likely_sources(self.state, tree), self.liveness(),
                                 skip=self.cluster.node_id)
        return await fetch_tree(self.store, tree, sources, self.cluster)

    async def set_holder(self, tree: str, *, holds: bool, node: str | None = None, failed: str | None = None) -> None:
        await self.cluster.set_code_holder(tree, holds=holds, node=node)

    def on_repair(self) -> None:
        return None


def likely_sources(state: ClusterState, tree: str) -> list[str]:
    """Boxes likely to hold ``tree``: its holders in the code table, then the boxes that sent or
    ran jobs with it (jobs from before level 3 have no entry), in that order."""
    entry = getattr(state, "code", {}).get(tree)
    likely: list[str] = list(entry["holders"]) if entry else []
    for job in state.jobs.values():
        if job.code_tree == tree:
            likely += [job.origin, job.node or ""]
    return [n for n in dict.fromkeys(likely) if n]


def _complete(store: Store, oid: ObjectId) -> bool:
    """Is the tree and every object it names in ``store``?"""
    if not store.backend.has(oid):
        return False
    try:
        tree = store.read_tree(oid)
    except FloyddError:
        return False
    return all(store.backend.has(c) for c in tree.chunk_ids())
