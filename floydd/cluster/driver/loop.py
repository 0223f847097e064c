"""RaftDriver: the thin asyncio loop around the pure raft core.

One task owns the :class:`~floydd.cluster.raft.RaftNode`; everything else (ticks, messages
from the transport, proposals, reads, membership changes) reaches the core as a closure
queued for that task, so the core is never re-entered. Each cycle::

    drain the inbox (tick, step, propose, read_index, ...)
    while node.has_ready():
        rd = node.ready()
        if rd.send_early: transport.send(rd.messages)       # the leader's, see below
        persist rd (hard state, entries, snapshot) in ONE SQLite transaction, on the
            writer thread (awaited; a hard state that only moves the commit index rides
            along with the next save)
        if not rd.send_early: transport.send(rd.messages)   # votes, acks: once durable
        restore the state machine from rd.snapshot; apply rd.committed_entries
            (resolving proposal futures by (index, term)); write the archive rows they
            changed (one fsynced transaction); serve rd.read_states
        node.advance(); drain the inbox again (what came in during the fsync batches up)
    snapshot + compact every ``snapshot_every`` applied entries (then purge the archive's
    tombstones the snapshot made useless)

Persist, then send: a follower acknowledges entries, and a candidate asks for votes,
only once what the message vouches for is on disk. The leader is the exception
(``rd.send_early``, Raft thesis 10.2.1, as etcd does): its AppendEntries go out while
it writes the same entries itself, so its fsync and the followers' overlap instead of
adding up. That loses nothing acknowledged: the core counts the leader's own copy
toward the quorum only in ``advance()``, after the save, so before then an entry
commits only on a quorum of followers that fsynced it; and a proposal is answered only
when its entry is applied, which is after this ready's save. A leader that crashes
mid-save loses only its own copy: what committed is on a quorum of followers, what did
not was never reported (tests/sim models this crash; see ``count_self_unsynced``).

Every node records which leader it saw in which term (:attr:`RaftDriver.leaders_seen`),
so tests can check there is at most one per term.

The rest lives in mixins of this class, one module each: the log on disk and a full disk
in :mod:`floydd.cluster.driver.persist`; proposals, forwarding and fencing in
:mod:`floydd.cluster.driver.proposals`; applying committed entries and the ``on_apply`` hooks
(:class:`Applied`) in :mod:`floydd.cluster.driver.applied`; snapshots, compaction and the
archive streamed with them in :mod:`floydd.cluster.driver.snapshots`; linearizable reads in
:mod:`floydd.cluster.driver.reads`; membership changes, leadership hand-over, leaving and
autopilot in :mod:`floydd.cluster.driver.membership`.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from floydd import log
from floydd.cluster.driver._futures import settle
from floydd.cluster.driver.applied import Applied, AppliedMixin
from floydd.cluster.config import DEFAULT_CLUSTER_CONFIG, ClusterConfig
from floydd.cluster.driver.membership import MembershipMixin
from floydd.cluster.driver.persist import PersistMixin
from floydd.cluster.driver.proposals import ProposalsMixin
from floydd.cluster.raft import HardState, ProposalDropped, RaftNode, Role
from floydd.cluster.raft.sqlite_storage import SqliteStorage
from floydd.cluster.driver.reads import ReadsMixin
from floydd.cluster.driver.snapshots import SnapshotsMixin
from floydd.cluster.state.machine import ClusterState
from floydd.cluster.net.transport import Transport
from floydd.errors import FloyddError, InternalError, Unavailable
from floydd.tasks import cancel_and_wait

__all__ = ["RaftDriver", "DriverStatus", "Applied"]

_log = log.cluster.getChild("driver")



@dataclass(frozen=True, slots=True, kw_only=True)
class DriverStatus:
    id: str
    role: str
    term: int
    leader: str | None
    commit: int
    applied: int
    last_index: int
    snapshot_index: int
    voters: tuple[str, ...]
    learners: tuple[str, ...]
    progress: dict = field(default_factory=dict)   # leader only: id -> PeerStatus


class RaftDriver(ProposalsMixin, AppliedMixin, SnapshotsMixin, ReadsMixin, MembershipMixin, PersistMixin):
    def __init__(self, node_id: str, path: str | Path, *, transport: Transport,
                 state: ClusterState | None = None, config: ClusterConfig = DEFAULT_CLUSTER_CONFIG,
                 rng: random.Random | None = None) -> None:
        self.node_id = node_id
        self.path = Path(path)
        self.state = state or ClusterState()
        self.config = config
        self.transport = transport
        transport.attach(self)
        self.leaders_seen: dict[int, set[str]] = {}
        """term -> leaders this node saw in that term (more than one would be a safety bug)."""
        self._rng = rng or random.Random()
        self._node: RaftNode | None = None
        self._storage: SqliteStorage | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._inbox: deque[Callable[[], None]] = deque()
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._waiters: dict[int, tuple[int, asyncio.Future]] = {}
        self._reads: dict[bytes, asyncio.Future] = {}
        self._apply_waiters: list[tuple[int, asyncio.Future]] = []
        self._applied = 0
        self._snapshot_index = 0
        self._replay_until = 0
        self._durable_vote: tuple = (0, None)      # (term, vote) on disk
        self._lazy_hard_state: HardState | None = None
        self._leader_changed = asyncio.Event()
        self._leader_since = 0.0
        self._contact: dict[str, tuple[float, float]] = {}
        self._leader_heard: float | None = None     # loop time of the last word from a leader
        self._started = 0.0
        self._led = False
        self._on_apply: list[Callable[[Applied], None]] = []
        self._on_leader: list[Callable[[str | None, int], None]] = []
        self._failed: BaseException | None = None
        self._running = False

    def __repr__(self) -> str:
        return f"RaftDriver({self.node_id!r}, {self._node!r})"

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, *, voters: Iterable[str] | None = None) -> None:
        """Open the log and run. ``voters``: found a new cluster with these voters (a no-op
        when the log already holds state); None: restart, or join as a blank node that the
        leader will add as a learner."""
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"raft-log-{self.node_id[:6]}")
        voters = frozenset(voters) if voters else None
        self._storage = await self._write(self._open, voters)
        durable = await self._write(self._storage.load)
        await self._write(self.state.audit.starting, durable.snapshot.index)   # as stored, before the replay
        self.state.restore(durable.snapshot.data)
        self._node = RaftNode(self.node_id, rng=self._rng, config=self.config.raft, state=durable,
                              applied=durable.snapshot.index)
        self._applied = self._snapshot_index = durable.snapshot.index
        self._replay_until = durable.hard_state.commit
        self._durable_vote = (durable.hard_state.term, durable.hard_state.vote)
        self._running = True
        self._started = asyncio.get_running_loop().time()
        conf = self._node.status().conf
        if conf.voters == {self.node_id}:
            self._submit(self._node.campaign)      # a cluster of one leads at once
        for coro, name in ((self._run(), "loop"), (self._ticker(), "tick"), (self._autopilot(), "autopilot")):
            self._spawn(coro, f"raft-{name}-{self.node_id[:6]}")
        _log.info("[%s] raft started: term %d, commit %d, voters %s, learners %s", self.node_id,
                  durable.hard_state.term, durable.hard_state.commit, sorted(conf.voters),
                  sorted(conf.learners))

    async def close(self, *, flush: bool = True) -> None:
        """Stop at once (no leave; see :meth:`transfer_leadership_and_leave`). Also what a
        crash looks like to the others; ``flush=False`` also leaves the disk as a crash
        would (a commit index not yet written stays unwritten)."""
        self._running = False
        await cancel_and_wait(self._tasks)
        self._fail_pending(Unavailable(f"node {self.node_id} is shutting down", hint="retry on another node"))
        if self._writer is not None:
            if self._storage is not None:
                if flush and self._lazy_hard_state is not None and self._failed is None:
                    await self._write(self._storage.save, self._lazy_hard_state, (), None)
                await self._write(self._storage.close)
            await self._write(self.state.archive.close)
            await self._write(self.state.audit.close)
            self._writer.shutdown(wait=True)
            self._writer = None
        _log.info("[%s] raft stopped", self.node_id)

    # -- what the transport calls --------------------------------------------------------------
    # (and on_propose: floydd.cluster.driver.proposals; snapshot_source, snapshot_sink, report_snapshot:
    # floydd.cluster.driver.snapshots)

    def on_raft(self, peer: str, messages: list) -> None:
        self._heard(peer)
        node = self._node
        if node is not None and peer == node.lead:      # floydd.cluster.net.leader_contact
            self._leader_heard = asyncio.get_running_loop().time()
        if node is not None:
            self._submit(lambda: [node.step(m) for m in messages])

    async def on_read(self, query: str, args: dict, timeout: float) -> Any:
        return await self.answer_read(query, args, timeout)

    def report_unreachable(self, peer: str) -> None:
        if self._node is not None:
            self._submit(lambda: self._node.report_unreachable(peer))

    # -- hooks and status -----------------------------------------------------------------------

    def on_leader_change(self, callback: Callable[[str | None, int], None]) -> None:
        self._on_leader.append(callback)

    @property
    def is_leader(self) -> bool:
        return self._node is not None and self._node.role == Role.LEADER

    @property
    def leader_id(self) -> str | None:
        return self._node.lead if self._node is not None else None

    @property
    def running(self) -> bool:
        return self._running and self._failed is None

    def status(self) -> DriverStatus:
        st = self._node.status()
        return DriverStatus(id=self.node_id, role=st.role.name.lower(), term=st.term, leader=st.lead,
                            commit=st.commit, applied=self._applied, last_index=st.last_index,
                            snapshot_index=st.snapshot_index, voters=tuple(sorted(st.conf.voters)),
                            learners=tuple(sorted(st.conf.learners)), progress=st.progress)

    # -- the loop --------------------------------------------------------------------------------

    def _submit(self, fn: Callable[[], object]) -> None:
        self._inbox.append(fn)
        self._wake.set()

    def _drain(self) -> None:
        inbox = self._inbox
        while inbox:
            inbox.popleft()()

    async def _run(self) -> None:
        node = self._node
        try:
            while True:
                await self._wake.wait()
                await asyncio.sleep(0)      # let requests already read off the sockets queue up too
                self._wake.clear()
                self._drain()
                while node.has_ready():
                    rd = node.ready()
                    term = node.term
                    if rd.send_early and rd.messages:
                        self.transport.send(rd.messages)    # in parallel with our own fsync
                    if rd.must_sync:
                        await self._persist(rd)
                    if rd.messages and not rd.send_early:
                        self.transport.send(rd.messages)    # what they vouch for is durable
                    if rd.snapshot is not None:
                        self._install(rd.snapshot)
                    if rd.committed_entries:
                        self._apply(rd.committed_entries)
                        if self.state.archive.dirty:      # durable before any snapshot drops the entries
                            await self.state.archive.flush(self._write_durably)
                        if self.state.audit.dirty:
                            await self.state.audit.flush(self._write_durably)
                    for rs in rd.read_states:
                        fut = self._reads.pop(rs.context, None)
                        if fut is not None and not fut.done():
                            fut.set_result(rs.index)
                    if rd.soft_state is not None:
                        self._leadership(rd.soft_state.lead, rd.soft_state.role, term)
                    node.advance()
                    self._drain()
                if self._applied - self._snapshot_index >= self.config.snapshot_every:
                    await self._compact()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failed = exc
            _log.critical("[%s] raft loop failed; this node stops taking part: %s", self.node_id, exc,
                          exc_info=True)
            self._fail_pending(InternalError(f"raft on node {self.node_id} failed: {exc}"))

    async def _ticker(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.config.raft.tick_interval_ms / 1000
        tick = self._node.tick
        due = loop.time()
        while True:
            due += interval
            delay = due - loop.time()
            if delay < -5 * interval:       # the loop stalled: do not fire a burst of ticks
                due, delay = loop.time(), 0.0
            await asyncio.sleep(max(0.0, delay))
            self._submit(tick)

    def _leadership(self, lead: str | None, role: Role, term: int) -> None:
        if lead is not None:
            seen = self.leaders_seen.setdefault(term, set())
            seen.add(lead)
            if len(seen) > 1:
                _log.critical("[%s] two leaders in term %d: %s", self.node_id, term, sorted(seen))
        if lead is not None or role == Role.LEADER or self._led:
            self._leader_heard = asyncio.get_running_loop().time()     # news of a leader, or this one's step-down
        self._led = role == Role.LEADER
        if role == Role.LEADER:
            self._leader_since = asyncio.get_running_loop().time()
            _log.info("[%s] leader in term %d", self.node_id, term)
        self._leader_changed.set()
        self._leader_changed = asyncio.Event()
        for callback in self._on_leader:
            try:
                callback(lead, term)
            except Exception:
                _log.exception("[%s] leader-change hook failed", self.node_id)

    # -- helpers -----------------------------------------------------------------------------------

    async def _leader_change(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._leader_changed.wait(), max(timeout, 0.001))
        except asyncio.TimeoutError:
            pass

    def _require_leader(self) -> None:
        self._check_running()
        if not self.is_leader:
            raise ProposalDropped(f"node {self.node_id} is not the leader", leader=self.leader_id)

    def _check_running(self) -> None:
        if self._failed is not None:
            raise InternalError(f"raft on node {self.node_id} has failed: {self._failed}",
                                hint="restart the daemon; the log has the cause")
        if not self._running or self._node is None:
            raise Unavailable(f"the cluster service of node {self.node_id} is not running")

    def _fail_pending(self, exc: FloyddError) -> None:
        futures = [f for _, f in self._waiters.values()] + list(self._reads.values()) + \
            [f for _, f in self._apply_waiters]
        self._waiters.clear()
        self._reads.clear()
        self._apply_waiters.clear()
        for fut in futures:
            settle(fut, exc)

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
