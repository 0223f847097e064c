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

The rest lives in parts the driver holds as fields, one module each, each given what it
uses in its constructor (what they use of the loop itself: :class:`~floydd.cluster.driver.seam.Loop`):
``persist``, the log on disk and a full disk (:mod:`floydd.cluster.driver.persist`);
``proposals``, proposals, forwarding and fencing (:mod:`floydd.cluster.driver.proposals`);
``applier``, applying committed entries and the ``on_apply`` hooks (:class:`Applied`)
(:mod:`floydd.cluster.driver.applied`); ``snapshots``, snapshots, compaction and the archive
streamed with them (:mod:`floydd.cluster.driver.snapshots`); ``reads``, linearizable reads
(:mod:`floydd.cluster.driver.reads`); ``membership``, membership changes, leadership
hand-over, leaving and autopilot (:mod:`floydd.cluster.driver.membership`); ``contact``, who
was heard from when (:mod:`floydd.cluster.driver.contact`); ``clock``, the ticks, stopped on a
leader alone (:mod:`floydd.cluster.driver.clock`). The driver's public methods
that are theirs delegate to them.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable

from floydd import log
from floydd.cluster.driver._futures import settle
from floydd.cluster.driver.applied import Applied, Applier
from floydd.cluster.config import DEFAULT_CLUSTER_CONFIG, ClusterConfig
from floydd.cluster.driver.autopilot import View
from floydd.cluster.driver.clock import Clock, leads_alone
from floydd.cluster.driver.contact import Contact
from floydd.cluster.driver.membership import Membership
from floydd.cluster.driver.persist import Persist
from floydd.cluster.driver.proposals import Proposals
from floydd.cluster.raft import InstallSnapshot, ProposalDropped, RaftNode, Role
from floydd.cluster.driver.reads import Reads
from floydd.cluster.driver.snapshots import Snapshots
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


class RaftDriver:
    def __init__(self, node_id: str, path: str | Path, *, transport: Transport,
                 state: ClusterState | None = None, config: ClusterConfig = DEFAULT_CLUSTER_CONFIG,
                 rng: random.Random | None = None) -> None:
        self.node_id = node_id
        self.path = Path(path)
        self.state = state or ClusterState()
        self.config = config
        self.transport = transport
        self.leaders_seen: dict[int, set[str]] = {}
        """term -> leaders this node saw in that term (more than one would be a safety bug)."""
        self._rng = rng or random.Random()
        self._node: RaftNode | None = None
        self._inbox: deque[Callable[[], None]] = deque()
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._leader_changed = asyncio.Event()
        self._led = False
        self._on_leader: list[Callable[[str | None, int], None]] = []
        self._failed: BaseException | None = None
        self._running = False
        self.clock = Clock(self, config.raft.tick_interval_ms / 1000, park_ticks=config.raft.election_ticks,
                           leader_heard=lambda: self.contact.followed_leader_heard(self._node),
                           stride=lambda: config.raft.heartbeat_ticks if self.is_leader else 1)
        self.persist = Persist(node_id, self.path, self.state)
        self.contact = Contact(node_id, config)
        self.proposals = Proposals(self, self.state, transport)
        self.applier = Applier(node_id, self.state, self.proposals.resolve)
        self.reads = Reads(self, self.state, transport, self.applier)
        self.snapshots = Snapshots(self, self.state, self.persist, self.applier, self.proposals)
        self.membership = Membership(self, self.contact, self.proposals.propose)
        transport.attach(self)

    def __repr__(self) -> str:
        return f"RaftDriver({self.node_id!r}, {self._node!r})"

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, *, voters: Iterable[str] | None = None) -> None:
        """Open the log and run. ``voters``: found a new cluster with these voters (a no-op
        when the log already holds state); None: restart, or join as a blank node that the
        leader will add as a learner."""
        durable = await self.persist.open(frozenset(voters) if voters else None)
        await self.persist.write(self.state.audit.starting, durable.snapshot.index)   # as stored, before the replay
        self.state.restore(durable.snapshot.data)
        self._node = RaftNode(self.node_id, rng=self._rng, config=self.config.raft, state=durable,
                              applied=durable.snapshot.index)
        self.applier.applied = self.snapshots.index = durable.snapshot.index
        self.applier.replay_until = durable.hard_state.commit
        self._running = True
        self.contact.started = asyncio.get_running_loop().time()
        conf = self._node.status().conf
        if conf.voters == {self.node_id}:
            self.submit(self._node.campaign)      # a cluster of one leads at once
        for coro, name in ((self._run(), "loop"), (self.clock.run(self._node.tick), "tick"), (self.membership.autopilot(), "autopilot")):
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
        await self.persist.close(flush=flush and self._failed is None)
        _log.info("[%s] raft stopped", self.node_id)

    # -- what the transport calls --------------------------------------------------------------

    def on_raft(self, peer: str, messages: list) -> None:
        self.contact.heard(peer)
        node = self._node
        if node is not None and peer == node.lead:      # floydd.cluster.net.leader_contact
            self.contact.heard_leader()
        if node is not None:
            self.submit(lambda: [node.step(m) for m in messages])

    async def on_propose(self, cmd: Any, timeout: float, forwarded: bool = True, *, peer: str | None = None,
                         joining: bool = False) -> Any:
        return await self.proposals.on_propose(cmd, timeout, forwarded, peer=peer, joining=joining)

    async def on_read(self, query: str, args: dict, timeout: float) -> Any:
        return await self.reads.answer_read(query, args, timeout)

    def report_unreachable(self, peer: str) -> None:
        if self._node is not None:
            self.submit(lambda: self._node.report_unreachable(peer))

    def report_snapshot(self, peer: str, ok: bool) -> None:
        self.snapshots.report_snapshot(peer, ok)

    def snapshot_source(self, message: InstallSnapshot) -> AsyncIterator[bytes]:
        return self.snapshots.snapshot_source(message)

    def snapshot_sink(self, message: InstallSnapshot):
        return self.snapshots.snapshot_sink(message)

    # -- what the rest of floydd calls, done by the parts -----------------------------------------

    async def propose(self, cmd: dict, *, timeout: float | None = None, fenced: bool = False) -> Any:
        """:meth:`Proposals.propose <floydd.cluster.driver.proposals.Proposals.propose>`."""
        return await self.proposals.propose(cmd, timeout=timeout, fenced=fenced)

    async def unless_cut_off(self, awaitable: Any, *, watch: bool = True) -> Any:
        return await self.proposals.unless_cut_off(awaitable, watch=watch)

    def leader_unreachable(self) -> Unavailable | None:
        """The refusal for a write while this box is cut off from the cluster's leader
        (:mod:`floydd.cluster.net.leader_contact`), or None."""
        if self._node is None or not self._running:
            return None
        return self.contact.refusal(self._node, leader=self.is_leader)

    def leader_silent_for(self) -> float | None:
        """Seconds since this node last heard from the leader it believes in (0 on the leader
        itself); None when it knows of no leader. A member the leader has dropped (autopilot
        removes a learner it could not reach) is never told so: only this age shows it."""
        return self.contact.leader_silent_for(self.leader_id)

    def on_apply(self, callback: Callable[[Applied], None]) -> None:
        """Call ``callback`` (in the loop, synchronously: keep it short) for every applied entry."""
        self.applier.on_apply(callback)

    async def read(self, fn: Callable[[ClusterState], Any], *, stale: bool = False,
                   timeout: float | None = None) -> Any:
        """:meth:`Reads.read <floydd.cluster.driver.reads.Reads.read>`."""
        return await self.reads.read(fn, stale=stale, timeout=timeout)

    async def read_index(self, *, timeout: float | None = None) -> int:
        return await self.reads.read_index(timeout=timeout)

    async def query(self, name: str, args: dict | None = None, *, stale: bool = False,
                    via_leader: bool = False, timeout: float | None = None) -> Any:
        """:meth:`Reads.query <floydd.cluster.driver.reads.Reads.query>`."""
        return await self.reads.query(name, args, stale=stale, via_leader=via_leader, timeout=timeout)

    def serve(self, name: str, answer: Callable[[dict], Any]) -> None:
        self.reads.serve(name, answer)

    async def answer_read(self, name: str, args: dict, timeout: float) -> Any:
        return await self.reads.answer_read(name, args, timeout)

    async def change_membership(self, change: str, node: str, *, timeout: float | None = None,
                                user: str | None = None) -> None:
        """:meth:`Membership.change_membership <floydd.cluster.driver.membership.Membership.change_membership>`."""
        await self.membership.change_membership(change, node, timeout=timeout, user=user)

    def in_conf(self, node_id: str | None) -> bool:
        return self.membership.in_conf(node_id)

    async def transfer_leadership(self, to: str | None = None, *, timeout: float = 5.0) -> str | None:
        return await self.membership.transfer_leadership(to, timeout=timeout)

    async def transfer_leadership_and_leave(self, *, timeout: float | None = None) -> bool:
        return await self.membership.transfer_leadership_and_leave(timeout=timeout)

    def autopilot_view(self) -> View:
        return self.membership.autopilot_view()

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

    @property
    def node(self) -> RaftNode | None:
        return self._node

    @property
    def alone(self) -> bool:
        """This node leads a configuration of itself only (a box alone): no election can
        happen and nobody waits for its heartbeats, so its clock stops (no ticks, no autopilot
        rounds) until a learner or a voter is added or it stops leading."""
        return leads_alone(self._node, self.node_id)

    async def until_company(self) -> None:
        """Return at once unless :attr:`alone`; else once it is no longer alone."""
        await self.clock.until_company()

    def status(self) -> DriverStatus:
        st = self._node.status()
        return DriverStatus(id=self.node_id, role=st.role.name.lower(), term=st.term, leader=st.lead,
                            commit=st.commit, applied=self.applier.applied, last_index=st.last_index,
                            snapshot_index=st.snapshot_index, voters=tuple(sorted(st.conf.voters)),
                            learners=tuple(sorted(st.conf.learners)), progress=st.progress)

    # -- the loop --------------------------------------------------------------------------------

    def submit(self, fn: Callable[[], object]) -> None:
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
                        await self.persist.save(rd)
                    if rd.messages and not rd.send_early:
                        self.transport.send(rd.messages)    # what they vouch for is durable
                    if rd.snapshot is not None:
                        self.snapshots.install(rd.snapshot)
                        self.reads.caught_up()
                    if rd.committed_entries:
                        self.applier.apply(rd.committed_entries)
                        self.reads.caught_up()
                        if self.state.archive.dirty:      # durable before any snapshot drops the entries
                            await self.state.archive.flush(self.persist.write_durably)
                        if self.state.audit.dirty:
                            await self.state.audit.flush(self.persist.write_durably)
                    self.reads.answered(rd.read_states)
                    if rd.soft_state is not None:
                        self._leadership(rd.soft_state.lead, rd.soft_state.role, term)
                    node.advance()
                    self._drain()
                self.clock.heard(self.alone)        # stops alone; starts again with a peer
                if self.applier.applied - self.snapshots.index >= self.config.snapshot_every:
                    await self.snapshots.compact()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failed = exc
            _log.critical("[%s] raft loop failed; this node stops taking part: %s", self.node_id, exc,
                          exc_info=True)
            self._fail_pending(InternalError(f"raft on node {self.node_id} failed: {exc}"))

    def _leadership(self, lead: str | None, role: Role, term: int) -> None:
        if lead is not None:
            seen = self.leaders_seen.setdefault(term, set())
            seen.add(lead)
            if len(seen) > 1:
                _log.critical("[%s] two leaders in term %d: %s", self.node_id, term, sorted(seen))
        if lead is not None or role == Role.LEADER or self._led:
            self.contact.heard_leader()     # news of a leader, or this one's step-down
        self._led = role == Role.LEADER
        if role == Role.LEADER:
            self.membership.leader_since = asyncio.get_running_loop().time()
            _log.info("[%s] leader in term %d", self.node_id, term)
        self._leader_changed.set()
        self._leader_changed = asyncio.Event()
        for callback in self._on_leader:
            try:
                callback(lead, term)
            except Exception:
                _log.exception("[%s] leader-change hook failed", self.node_id)

    # -- helpers -----------------------------------------------------------------------------------

    async def leader_change(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._leader_changed.wait(), max(timeout, 0.001))
        except asyncio.TimeoutError:
            pass

    def require_leader(self) -> None:
        self.check_running()
        if not self.is_leader:
            raise ProposalDropped(f"node {self.node_id} is not the leader", leader=self.leader_id)

    def check_running(self) -> None:
        if self._failed is not None:
            raise InternalError(f"raft on node {self.node_id} has failed: {self._failed}",
                                hint="restart the daemon; the log has the cause")
        if not self._running or self._node is None:
            raise Unavailable(f"the cluster service of node {self.node_id} is not running")

    def _fail_pending(self, exc: FloyddError) -> None:
        for fut in self.proposals.pending() + self.reads.pending():
            settle(fut, exc)

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
