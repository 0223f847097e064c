"""Keeping every item on R boxes: the one road dataset versions and jobs' code trees share
(DESIGN §5b "Replicas are kept, not just made"; issues 12 and 21).

An item is a dataset version (:mod:`floydd.cluster.replication.versioncopies`) or a job's code
tree (:mod:`floydd.cluster.replication.codecopies`): an entry of the replicated state with its
``tree``, its ``holders`` and (a version, level 3) the boxes that ``refused`` it. What differs
between the two is a :class:`Kind`: the items an entry touches, an item's entry, how a copy
is made here, the command that says who holds it, the jobs that keep a copy in place. Which
copies count and who makes the missing ones is :mod:`floydd.cluster.replication.replicas`;
the rest is here, one :class:`CopyKeeper` per kind on every box::

    an entry touching items (Kind.applied) / node.remove / node.upsert /
    a node's standing changed (its status, its store's trouble) / a holder or a taker crossing
    its window, or a refusal running out (the watch) / a restored snapshot / start
        -> for each item touched: counted holders < R?          (replicas.choose_replicas)
           -> this node among the takers: make the copy here (Kind.make: fetch from the
              holders that count, then any node), then propose holds=True (Kind.set_holder)
           -> a copy that failed here for lack of space or a failing disk (``store_watch``):
              a heartbeat says so at once; every box passes this one over, the next takes it
           -> one that failed PASS_AFTER times otherwise (Kind.may_pass, level 3):
              holds=False failed=why, and the next box in the order takes it
        -> the leader, for an item with copies beyond R (Kind.extra): holds=False for the
           extra holders, one at a time, each re-checked
    node.remove, on the leader -> the node is dropped from every item's holders

A copy task looks at the state again before each step, and a tree complete here is not
fetched again, so entries replayed after a restart cost no transfer. A failed copy is retried
with backoff ``attempts`` times, and again on the next entry that touches the item. Waits for
copies (an upload's, a submit's) wake when an entry changes holders (:meth:`CopyKeeper.settle`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Generic, Hashable, Iterable, Mapping, Protocol, TypeVar

from floydd.cluster.driver.applied import Applied
from floydd.cluster.replication.replicas import Liveness, choose_replicas
from floydd.cluster.replication.seam import Cluster, StoreWatch
from floydd.cluster.state.machine import ClusterState
from floydd.errors import FloyddError
from floydd.scheduler.storehealth import trouble
from floydd.tasks import cancel_and_wait

__all__ = ["CopyKeeper", "Kind", "Touched", "PASS_AFTER", "ALONE_WATCH", "WATCH_EVERY", "STORE_POLL", "liveness_of"]

PASS_AFTER = 3
"""Failed attempts at a copy (not the store's fault) after which a box passes it to the next."""

ALONE_WATCH = 5.0
"""Seconds between the watch's looks on a box alone (issue 23: an idle box wakes rarely): no
other box's window to cross; its own store's health is polled as often."""

WATCH_EVERY = 5.0
"""The most seconds between looks for a window crossed (a quarter of the shorter window, at
most this: a crossing is seen within a quarter of its window; issue 23: it looked every second)."""

STORE_POLL = 5.0
"""Seconds between looks at this box's free space (statvfs, on a worker thread) by the watch
(issue 23: it looked every second; a store write that fails for space is seen at once anyway)."""

K = TypeVar("K", bound=Hashable)
"""An item's key: a version's (name, number), a code tree's id."""


@dataclass(frozen=True)                 # no slots: a generic with slots cannot be built as Touched[K](...)
class Touched(Generic[K]):
    """What an applied entry means for a kind's items (:meth:`Kind.applied`), done in this order."""

    wake: bool = False
    """Holders changed: the waits for copies look again."""
    cancel: Callable[[K], bool] | None = None
    """The copies under way to stop (their item went from this box)."""
    then: Callable[[], Awaitable[None]] | None = None
    """Work to start (named ``what``): drop a local mirror, say."""
    what: str = ""
    check: tuple[K, ...] = ()
    """Items to look at again (copies missing here, or beyond R on the leader)."""


class Kind(Protocol[K]):
    """What differs between the kinds of item a :class:`CopyKeeper` keeps on R boxes."""

    what: str
    """Names its tasks (``datasets``, ``code``)."""
    log: logging.Logger
    failures: tuple[type[BaseException], ...]
    """What a failed copy raises (logged and retried)."""
    gone: tuple[type[BaseException], ...]
    """What says the item went meanwhile (nothing to retry)."""

    def items(self) -> Iterable[tuple[K, Mapping]]:
        """Every item and its entry (``tree``, ``holders``, ``refused``)."""

    def entry(self, key: K) -> Mapping | None:
        """The item's entry now; None once it is gone."""

    def label(self, key: K) -> str:
        """The item in a log line: ``mnist:1``, ``code tree 0a1b2c3d4e5f``."""

    def applied(self, cmd: dict, result: object) -> Touched[K]:
        """What a committed command (not a ``node.*`` one) means for the items."""

    def windows(self, live: Liveness) -> frozenset:
        """Besides the nodes' windows, what the watch rescans on when it changes."""

    def extra(self, entry: Mapping, live: Liveness) -> list[str]:
        """The holders whose copies may go now (the leader's view)."""

    def may_trim(self) -> bool:
        """Whether the cluster's level lets the leader drop copies of this kind."""

    def may_pass(self) -> bool:
        """Whether a box may say it could not keep a copy (``failed``)."""

    async def make(self, key: K, entry: Mapping) -> int | None:
        """Make the copy complete here (fetch what is missing); bytes fetched, None if the
        item went meanwhile."""

    async def set_holder(self, key: K, *, holds: bool, node: str | None = None,
                         failed: str | None = None) -> None:
        """Propose who holds the item (``node``: this box when None)."""

    def on_repair(self) -> Awaitable[None] | None:
        """Work after a scan that repairs (start, a restored snapshot), if any."""


def liveness_of(cluster: Cluster, grace: float, clock: Callable[[], float] = time.time) -> Callable[[], Liveness]:
    """This box's judgement of holders and takers, now (:mod:`floydd.cluster.replication.replicas`):
    ages on this box's monotonic clock (issue 21), ``grace`` for holders, ``stale_after`` for takers."""
    def liveness() -> Liveness:
        return Liveness(now=clock(), grace=grace, fresh=cluster.config.stale_after, ages=cluster.heard_ages())
    return liveness


class CopyKeeper(Generic[K]):
    """One box's part in keeping every item of ``kind`` on ``replicas`` boxes; ``start()`` on the
    loop. ``cluster``: who this box is, whether it leads, the entries as they are applied;
    ``state``: the replicated state (its nodes); ``liveness``: :func:`liveness_of`;
    ``store_watch``: this box's store's health, told of each copy's outcome (None: not watched)."""

    def __init__(self, kind: Kind[K], cluster: Cluster, *, state: ClusterState, replicas: int,
                 liveness: Callable[[], Liveness], retry: tuple[float, float] = (0.5, 30.0), attempts: int = 6,
                 store_watch: StoreWatch | None = None) -> None:
        self.kind, self.cluster, self.state = kind, cluster, state
        self.replicas, self.liveness, self.store_watch = replicas, liveness, store_watch
        self._retry, self._attempts = retry, attempts
        self.replicating: dict[K, asyncio.Task] = {}
        """The copies under way, by item."""
        self._changed = asyncio.Event()
        self._trimming: set[K] = set()
        self._standings: dict[str, tuple[str, str]] = {}
        self._windows: tuple[frozenset, ...] | None = None
        self._polled = 0.0
        self._tasks: set[asyncio.Task] = set()
        self._closed = False

    @property
    def node_id(self) -> str:
        return self.cluster.node_id

    def start(self) -> None:
        """Follow committed entries from now on, and catch up with the state as it is."""
        self.cluster.on_apply(self.on_apply)
        self.scan(repair=True)
        self.spawn(self._watch(), f"{self.kind.what}-watch-{self.node_id[:6]}")

    async def close(self) -> None:
        self._closed = True
        await cancel_and_wait([*self._tasks, *self.replicating.values()])

    async def settle(self, key: K, deadline: float, default: Mapping | None = None) -> Mapping | None:
        """The item's entry (``default`` while there is none) once ``replicas`` copies count, no
        other box can take one, or the loop's clock passed ``deadline``; None if it is gone."""
        loop = asyncio.get_running_loop()
        while True:
            changed = self._changed
            entry = self.kind.entry(key) or default
            if entry is None:
                return None
            if loop.time() >= deadline or not choose_replicas(self.state.nodes, entry, self.replicas,
                                                              self.liveness()):
                return entry
            try:                        # also look again now and then: a taker may go stale
                await asyncio.wait_for(changed.wait(), min(1.0, max(0.0, deadline - loop.time())))
            except asyncio.TimeoutError:
                pass

    def extra(self, key: K) -> list[str]:
        """The holders of the item whose copies may go now (:meth:`Kind.extra`)."""
        entry = self.kind.entry(key)
        return self.kind.extra(entry, self.liveness()) if entry is not None else []

    def spawn(self, coro, name: str) -> None:
        """Run ``coro`` as a task this keeper owns (cancelled on close)."""
        if self._closed:
            coro.close()
            return
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- following the log and the heartbeats -----------------------------------------------------

    def on_apply(self, event: Applied) -> None:
        if self._closed:
            return
        if event.restored:
            self.scan(repair=True)
            return
        cmd = event.command
        if cmd is None or event.error is not None:
            return
        op = cmd["op"]
        if op == "node.remove":
            if self.cluster.is_leader:      # its copies are gone with it: say so, which re-replicates
                self.spawn(self._forget_holder(cmd["id"]), f"{self.kind.what}-forget-holder-{cmd['id'][:6]}")
            self.scan()
        elif op == "node.upsert":
            self.scan()
        elif op == "node.health":
            if self._standings.get(cmd["id"]) != _standing(self.state.nodes.get(cmd["id"])):
                self.scan()
        else:
            self._touched(self.kind.applied(cmd, event.result))

    def _touched(self, touched: Touched[K]) -> None:
        if touched.wake:
            self._changed.set()
            self._changed = asyncio.Event()
        if touched.cancel is not None:
            for key, task in list(self.replicating.items()):
                if touched.cancel(key):
                    task.cancel()
        if touched.then is not None:
            self.spawn(touched.then(), f"{self.kind.what}-{touched.what}")
        for key in touched.check:
            self.check(key)

    async def _watch(self) -> None:
        """Scan again whenever a node crosses a window (a holder's grace, a taker's freshness)
        without an entry saying so: a crash is silence, not a command. Polls the store watch
        every ``STORE_POLL`` seconds.
        A box alone (no other box to hold or take a copy) looks every ``ALONE_WATCH`` seconds."""
        period = max(0.05, min(WATCH_EVERY, self.liveness().grace / 4, self.cluster.config.stale_after / 4))
        loop = asyncio.get_running_loop()
        log = self.kind.log
        while True:
            await asyncio.sleep(ALONE_WATCH if self.cluster.alone else period)
            watch = self.store_watch
            if watch is not None and loop.time() - self._polled >= STORE_POLL:
                self._polled = loop.time()
                if await asyncio.to_thread(watch.poll):      # full, failing, or well again
                    log.info("[%s] this box's store: %s", self.node_id, watch.report()["why"] or "takes new data again")
                    self.cluster.beat_soon()
            live, nodes = self.liveness(), self.state.nodes     # O(nodes) a look
            windows = (frozenset(n for n, node in nodes.items() if live.holds(node)),
                       frozenset(n for n, node in nodes.items() if live.takes(node)),
                       self.kind.windows(live))
            if windows != self._windows:
                if self._windows is not None:
                    log.info("[%s] copies counted on %d nodes, %d may take copies: checking every %s copy",
                             self.node_id, len(windows[0]), len(windows[1]), self.kind.what)
                self._windows = windows
                self.scan()

    def scan(self, *, repair: bool = False) -> None:
        """Check every item; ``repair``: also look again at those this node is listed for (after
        a restart or a restored snapshot its store or catalog may lag behind the state)."""
        self._standings = {nid: _standing(n) for nid, n in self.state.nodes.items()}
        for key, entry in self.kind.items():
            if repair and self.node_id in entry["holders"]:
                self._replicate_soon(key)
            else:
                self.check(key)
        if repair and (work := self.kind.on_repair()) is not None:
            self.spawn(work, f"{self.kind.what}-repair-{self.node_id[:6]}")

    def check(self, key: K) -> None:
        """Start a copy here if this node is among the takers; on the leader, start trimming
        copies beyond R (cheap otherwise)."""
        entry = self.kind.entry(key)
        if entry is None:
            return
        if self.node_id in choose_replicas(self.state.nodes, entry, self.replicas, self.liveness()):
            self._replicate_soon(key)
        if len(entry["holders"]) > self.replicas and self.cluster.is_leader and key not in self._trimming \
                and self.kind.may_trim() and self.extra(key):
            self._trimming.add(key)
            self.spawn(self._trim(key), f"{self.kind.what}-trim-{self.kind.label(key)}")

    # -- the work -------------------------------------------------------------------------------

    def _replicate_soon(self, key: K) -> None:
        if key in self.replicating or self._closed:
            return
        task = asyncio.create_task(self._replicate(key), name=f"{self.kind.what}-replicate-{self.kind.label(key)}")
        self.replicating[key] = task
        task.add_done_callback(lambda t: self.replicating.pop(key, None) if self.replicating.get(key) is t
                               else None)

    async def _replicate(self, key: K) -> None:
        """Make the copy here, then tell the cluster this node holds it (each step re-checked)."""
        kind, log, watch = self.kind, self.kind.log, self.store_watch
        delay = self._retry[0]
        for attempt in range(1, self._attempts + 1):
            entry = kind.entry(key)
            if entry is None:
                return
            holder = self.node_id in entry["holders"]
            if not holder and self.node_id not in choose_replicas(self.state.nodes, entry, self.replicas,
                                                                  self.liveness()):
                return
            try:
                fetched = await kind.make(key, entry)
                if fetched is None:
                    return
                if watch is not None and fetched:
                    watch.succeeded()
                if not holder:
                    await kind.set_holder(key, holds=True)
                    log.info("[%s] now holds %s (%d bytes fetched)", self.node_id, kind.label(key), fetched)
                elif fetched:
                    log.warning("[%s] %s was missing here: fetched again (%d bytes)", self.node_id, kind.label(key),
                                fetched)
                return
            except kind.gone:                   # e.g. a code tree's last job went meanwhile
                return
            except kind.failures as exc:
                said = watch is not None and watch.failed(exc)
                log.warning("[%s] keeping a copy of %s failed (attempt %d of %d): %s%s", self.node_id,
                            kind.label(key), attempt, self._attempts, getattr(exc, "message", None) or exc,
                            "; this box takes no new copies until its store recovers" if said else "")
                if said:            # a heartbeat says so now: the next box in the order takes the copy
                    await asyncio.to_thread(watch.poll)
                    self.cluster.beat_soon()
                elif attempt >= PASS_AFTER and not holder and await self._pass(key, exc):
                    return
            await asyncio.sleep(delay)
            delay = min(2 * delay, self._retry[1])

    async def _pass(self, key: K, exc: BaseException) -> bool:
        """Say in the item that this box could not keep a copy (level 3), so the next box in the
        order takes it (:func:`~floydd.cluster.replication.replicas.refused`); whether it was said."""
        kind = self.kind
        if not kind.may_pass():
            return False
        why = str(getattr(exc, "message", None) or exc)
        try:
            await kind.set_holder(key, holds=False, failed=why)
        except FloyddError as said:
            kind.log.info("[%s] saying that %s could not be kept here: %s", self.node_id, kind.label(key), said)
            return False
        kind.log.warning("[%s] passing the copy of %s to the next box: %s", self.node_id, kind.label(key), why)
        return True

    async def _trim(self, key: K) -> None:
        """On the leader: drop the copies beyond R, one holder at a time, each re-checked (two
        takers racing, or a holder judged silent that came back, make a third)."""
        kind = self.kind
        try:
            while self.cluster.is_leader and not self._closed:
                entry = kind.entry(key)
                extra = kind.extra(entry, self.liveness()) if entry is not None else []
                if not extra:
                    return
                await kind.set_holder(key, holds=False, node=extra[0])
                kind.log.info("[%s] %s had %d copies (%d kept): dropped the one on %s", self.node_id, kind.label(key),
                              len(entry["holders"]), self.replicas,
                              self.state.nodes.get(extra[0], {}).get("name") or extra[0])
        except FloyddError as exc:          # not the leader any more, or no quorum: the next check tries again
            kind.log.info("[%s] trimming the copies of %s: %s", self.node_id, kind.label(key), exc)
        finally:
            self._trimming.discard(key)

    async def _forget_holder(self, node: str) -> None:
        """Drop a node that left the cluster for good from every item's holders."""
        for key, entry in list(self.kind.items()):
            if node in entry["holders"]:
                try:
                    await self.kind.set_holder(key, holds=False, node=node)
                except FloyddError as exc:   # the next leader's scan does not retry: log it
                    self.kind.log.warning("[%s] %s still lists %s as a holder: %s", self.node_id,
                                          self.kind.label(key), node, exc)


def _standing(node: dict | None) -> tuple[str, str]:
    """What of a node's heartbeat changes who takes copies: its status and its store's trouble."""
    return ((node or {}).get("status", ""), trouble(node))
