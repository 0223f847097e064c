"""Jobs' code trees kept on R boxes, as dataset versions are (issue 21; DESIGN §5b "Replicas
are kept, not just made").

The replicated ``code`` table (:mod:`floydd.cluster.state.code`) says which boxes hold each
code tree; the bytes move between boxes with :mod:`floydd.cluster.replication.peerstore`, and which copies
count and who makes the missing ones is :mod:`floydd.cluster.replication.replicas`, with the datasets'
R, grace and freshness: a holder counts while it was heard from within ``grace``, so a box
that was destroyed (or is off past the grace) is replaced, and the box chosen next by
sha256(node id + tree) fetches the tree from the holders that count, then any box::

    job.submit (code_held: the origin's copy) / job.import (the importing box's copy) /
    code.holders / node.upsert / node.remove /
    a node's status change / a node crossing its window (the watch) / a restored snapshot / start
        -> for each tree touched: counted holders < R?
           -> this node among the takers: fetch the tree, then propose code.holders(holds=True)

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
from typing import Any, Callable

from floydd import log
from floydd.cluster.driver.loop import Applied
from floydd.cluster.replication.peerstore import fetch_tree
from floydd.cluster.replication.replicas import Liveness, choose_replicas, copies_note, counted, extra_copies, ranked_sources
from floydd.cluster.replication.seam import Cluster
from floydd.cluster.state.machine import ClusterState
from floydd.errors import FloyddError, NotFound
from floydd.model import ACTIVE_STATES
from floydd.store.ids import ObjectId
from floydd.store.store import Store
from floydd.tasks import cancel_and_wait

__all__ = ["CodeCopies", "DEFAULT_CODE_COPY_WAIT", "likely_sources"]

DEFAULT_CODE_COPY_WAIT = 20.0
"""Seconds a submit waits for R copies of its code before it answers with fewer (``code_copy_wait``)."""

_log = log.cluster.getChild("code")


class CodeCopies:
    """One node's part in keeping every job's code on ``replicas`` boxes; ``start()`` on the loop.
    ``cluster``: the service's calls it makes, copies fetched through it included
    (:class:`~floydd.cluster.replication.seam.Cluster`); ``state``: the replicated state (its
    code table, nodes, jobs)."""

    def __init__(self, cluster: Cluster, store: Store, *, state: ClusterState, replicas: int, grace: float,
                 copy_wait: float = DEFAULT_CODE_COPY_WAIT, has_tree: Callable[[ObjectId], bool] | None = None,
                 retry: tuple[float, float] = (0.5, 30.0), attempts: int = 6,
                 clock: Callable[[], float] = time.time) -> None:
        self.cluster, self.store, self.state = cluster, store, state
        self.replicas, self.grace, self.copy_wait = replicas, grace, copy_wait
        self._has_tree = has_tree or (lambda oid: _complete(store, oid))
        self._retry, self._attempts, self._clock = retry, attempts, clock
        self._changed = asyncio.Event()
        self._windows: tuple[frozenset, frozenset] | None = None
        self._statuses: dict[str, str] = {}
        self._replicating: dict[str, asyncio.Task] = {}
        self._trimming: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self._closed = False

    @property
    def node_id(self) -> str:
        return self.cluster.node_id

    def start(self) -> None:
        """Follow committed entries from now on, and catch up with the table as it is."""
        self.cluster.on_apply(self._on_apply)
        self._scan(repair=True)
        self._spawn(self._watch(), f"code-watch-{self.node_id[:6]}")

    async def close(self) -> None:
        self._closed = True
        await cancel_and_wait([*self._tasks, *self._replicating.values()])

    def liveness(self) -> Liveness:
        return Liveness(now=self._clock(), grace=self.grace, fresh=self.cluster.config.stale_after,
                        ages=self.cluster.heard_ages())     # this box's monotonic clock, as datasets judge

    def has_tree(self, tree: str) -> bool:
        """From a thread: is ``tree`` complete in this node's store (a submit's first copy)?"""
        return self._has_tree(ObjectId.from_hex(tree))

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
        while True:
            changed = self._changed
            entry = self.state.code.get(tree)
            if entry is None:
                return ""
            nodes, live = self.state.nodes, self.liveness()
            if loop.time() >= deadline or not choose_replicas(nodes, entry, self.replicas, live):
                good = len(counted(nodes, entry["holders"], live))
                if good >= min(self.replicas, len(nodes)):
                    return ""
                return f"the job's code is {copies_note(nodes, entry, self.replicas, live)}"
            try:                        # also look again now and then: a taker may go stale
                await asyncio.wait_for(changed.wait(), min(1.0, max(0.0, deadline - loop.time())))
            except asyncio.TimeoutError:
                pass

    # -- following the log ---------------------------------------------------------------------

    def _on_apply(self, event: Applied) -> None:
        if self._closed:
            return
        if event.restored:
            self._scan(repair=True)
            return
        cmd = event.command
        if cmd is None or event.error is not None:
            return
        op = cmd["op"]
        if op in ("job.submit", "job.import"):
            self._wake()
            tree = (event.result or {}).get("spec", {}).get("code_tree")
            if tree:
                self._check(tree)
        elif op == "code.holders":
            self._wake()
            self._check(cmd["tree"])
        elif op == "node.remove":
            if self.cluster.is_leader:      # its copies are gone with it: say so
                self._spawn(self._forget_holder(cmd["id"]), f"code-forget-holder-{cmd['id'][:6]}")
            self._scan()
        elif op == "node.upsert" or (op == "node.health" and self._statuses.get(cmd["id"]) != cmd["status"]):
            self._scan()

    def _wake(self) -> None:
        """Wake the submits waiting for copies (:meth:`wait_for_copies`)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _watch(self) -> None:
        """Scan again whenever a node crosses a window (a holder's grace, a taker's freshness)
        without an entry saying so: a crash is silence, not a command."""
        period = max(0.05, min(1.0, self.grace / 4, self.cluster.config.stale_after / 4))
        while True:
            await asyncio.sleep(period)
            live, nodes = self.liveness(), self.state.nodes
            windows = (frozenset(n for n, node in nodes.items() if live.holds(node)),
                       frozenset(n for n, node in nodes.items() if live.takes(node)))
            if windows != self._windows:
                self._windows = windows
                self._scan()

    def _scan(self, *, repair: bool = False) -> None:
        """Check every tree; ``repair``: also look again at the trees this node is listed for
        (after a restart its store may have lost one: it is fetched again)."""
        state = self.state
        self._statuses = {nid: n.get("status", "") for nid, n in state.nodes.items()}
        for tree, entry in getattr(state, "code", {}).items():
            if repair and self.node_id in entry["holders"]:
                self._replicate_soon(tree)
            else:
                self._check(tree)

    def _check(self, tree: str) -> None:
        entry = self.state.code.get(tree)
        if entry is None:
            return
        if self.node_id in choose_replicas(self.state.nodes, entry, self.replicas, self.liveness()):
            self._replicate_soon(tree)
        elif len(entry["holders"]) > self.replicas and self.cluster.is_leader and tree not in self._trimming \
                and self.extra(tree):
            self._trimming.add(tree)
            self._spawn(self._trim(tree), f"code-trim-{tree[:12]}")

    def extra(self, tree: str) -> list[str]:
        """The holders of ``tree`` whose copies may go now (copies beyond R, as a dataset
        version's are trimmed: :func:`~floydd.cluster.replication.replicas.extra_copies`), never on a box
        running a job of that code, nothing while such a job is starting."""
        state = self.state
        entry = state.code.get(tree)
        if entry is None:
            return []
        active = (j for j in state.jobs.values() if j.state in ACTIVE_STATES)
        return extra_copies(state.nodes, entry, self.replicas, self.liveness(), jobs=active,
                            uses=lambda job: job.code_tree == tree)

    async def _trim(self, tree: str) -> None:
        """On the leader: drop the copies of ``tree`` beyond R, one holder at a time, each
        re-checked (two takers racing, or a holder judged silent that came back, make a third)."""
        try:
            while self.cluster.is_leader and not self._closed:
                extra = self.extra(tree)
                if not extra:
                    return
                await self.cluster.set_code_holder(tree, holds=False, node=extra[0])
                _log.info("[%s] code tree %s had a copy more than %d: dropped the one on %s", self.node_id,
                          tree[:12], self.replicas, extra[0])
        except FloyddError as exc:          # not the leader any more, or no quorum: the next check tries again
            _log.info("[%s] trimming the copies of code tree %s: %s", self.node_id, tree[:12], exc)
        finally:
            self._trimming.discard(tree)

    def _replicate_soon(self, tree: str) -> None:
        if tree in self._replicating or self._closed:
            return
        task = asyncio.create_task(self._replicate(tree), name=f"code-replicate-{tree[:12]}")
        self._replicating[tree] = task
        task.add_done_callback(lambda t: self._replicating.pop(tree, None) if self._replicating.get(tree) is t
                               else None)

    async def _replicate(self, tree: str) -> None:
        """Fetch the tree, then tell the cluster this node holds it (each step re-checked)."""
        delay = self._retry[0]
        for attempt in range(1, self._attempts + 1):
            state = self.state
            entry = state.code.get(tree)
            if entry is None:
                return
            holder = self.node_id in entry["holders"]
            if not holder and self.node_id not in choose_replicas(state.nodes, entry, self.replicas,
                                                                  self.liveness()):
                return
            try:
                fetched = 0
                if not await asyncio.to_thread(self.has_tree, tree):
                    sources = ranked_sources(state.nodes, likely_sources(state, tree), self.liveness(),
                                             skip=self.node_id)
                    fetched = await fetch_tree(self.store, tree, sources, self.cluster)
                if not holder:
                    await self.cluster.set_code_holder(tree, holds=True)
                    _log.info("[%s] now holds code tree %s (%d bytes fetched)", self.node_id, tree[:12], fetched)
                elif fetched:
                    _log.warning("[%s] code tree %s was missing here: fetched again (%d bytes)", self.node_id,
                                 tree[:12], fetched)
                return
            except NotFound:                # its last job went meanwhile
                return
            except FloyddError as exc:
                _log.warning("[%s] keeping a copy of code tree %s failed (attempt %d of %d): %s", self.node_id,
                             tree[:12], attempt, self._attempts, exc)
            await asyncio.sleep(delay)
            delay = min(2 * delay, self._retry[1])

    async def _forget_holder(self, node: str) -> None:
        """Drop a node that left the cluster for good from every tree's holders."""
        for tree, entry in list(self.state.code.items()):
            if node in entry["holders"]:
                try:
                    await self.cluster.set_code_holder(tree, holds=False, node=node)
                except FloyddError as exc:
                    _log.warning("[%s] code tree %s still lists %s as a holder: %s", self.node_id, tree[:12],
                                 node, exc)

    def _spawn(self, coro, name: str) -> None:
        if self._closed:
            coro.close()
            return
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def likely_sources(state: Any, tree: str) -> list[str]:
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
