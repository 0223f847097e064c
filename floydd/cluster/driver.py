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

The archive of finished jobs (:mod:`floydd.cluster.archive`) is not in the snapshot's data:
it lives in tables beside the log, is streamed after a snapshot sent to a peer
(``snapshot_source``), staged when one is received (``snapshot_sink``) and swapped in by the
storage in the transaction that saves that snapshot.

A write that fails for lack of space (the log is on the state folder's disk, which a job
can fill) is tried again every second until it goes through, instead of ending the loop:
the node stands still meanwhile (proposals wait, a lone box's jobs report later) and goes
on, with nothing lost, once space is freed; the runtime releases its reserve on a full
disk (:mod:`floydd.runtime.disk`) so that is soon.

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

Proposals: on the leader the command goes into the log and the caller's future resolves
when an entry at that index is applied: with the state machine's result (or its rejection)
if the entry's term is the proposal's, with :class:`ProposalDropped` if a new leader
overwrote it. On a follower the command is forwarded to the leader
(``/cluster/v1/propose``); dropped or unanswered proposals are retried until the timeout,
which is safe because commands are idempotent (``job.submit`` by its idempotency key).
A *fenced* proposal (a leader action such as ``job.place``) is stamped with the leader's
term at the instant it enters the log, is never forwarded or retried, and the state
machine refuses it unless that term is its entry's term.

Reads: :meth:`read` is linearizable by ReadIndex (the leader confirms its leadership with
a heartbeat round, the read waits until this node has applied that far); ``stale=True``
reads the local state as it is. Every node records which leader it saw in which term
(:attr:`RaftDriver.leaders_seen`), so tests can check there is at most one per term.

Reads live in :mod:`floydd.cluster.reads`; membership changes, leadership hand-over,
leaving and autopilot in :mod:`floydd.cluster.membership` (mixins of this class).
"""

from __future__ import annotations

import asyncio
import errno
import random
import sqlite3
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable

from floydd import log
from floydd.cluster import commands, versions
from floydd.cluster._futures import settle
from floydd.cluster.authz import authorize_conf, joining_may_propose
from floydd.cluster.audit import SplitSink
from floydd.cluster.config import DEFAULT_CLUSTER_CONFIG, ClusterConfig
from floydd.cluster.membership import MembershipMixin, check_conf
from floydd.cluster.raft import (ConfChange, ConfState, Entry, EntryKind, HardState, InstallSnapshot,
                                 ProposalDropped, RaftNode, Role, Snapshot)
from floydd.cluster.raft.sqlite_storage import SqliteStorage
from floydd.cluster.reads import ReadsMixin
from floydd.cluster.state import ClusterState
from floydd.cluster.transport import Transport
from floydd.errors import FloyddError, Forbidden, InternalError, InvalidSpec, Unavailable
from floydd.tasks import cancel_and_wait

__all__ = ["RaftDriver", "DriverStatus", "Applied"]

_log = log.cluster.getChild("driver")


@dataclass(frozen=True, slots=True, kw_only=True)
class Applied:
    """What an ``on_apply`` hook sees for each applied entry (or snapshot)."""

    index: int
    term: int
    command: dict | None = None          # None: a membership change or a restored snapshot
    result: Any = None
    error: FloyddError | None = None     # the state machine refused the command
    conf_change: ConfChange | None = None
    restored: bool = False               # the whole state was replaced by the leader's snapshot
    replay: bool = False
    """Re-applied at start-up, up to the commit index on disk. Entries applied before a
    crash past that index come again without the flag: hooks must be idempotent."""


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


class RaftDriver(ReadsMixin, MembershipMixin):
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
        self.state.restore(durable.snapshot.data)
        self._node = RaftNode(self.node_id, rng=self._rng, config=self.config.raft, state=durable,
                              applied=durable.snapshot.index)
        self._applied = self._snapshot_index = durable.snapshot.index
        self._replay_until = durable.hard_state.commit
        self._durable_vote = (durable.hard_state.term, durable.hard_state.vote)
        self._running = True
        conf = self._node.status().conf
        if conf.voters == {self.node_id}:
            self._submit(self._node.campaign)      # a cluster of one leads at once
        for coro, name in ((self._run(), "loop"), (self._ticker(), "tick"), (self._autopilot(), "autopilot")):
            self._spawn(coro, f"raft-{name}-{self.node_id[:6]}")
        _log.info("[%s] raft started: term %d, commit %d, voters %s, learners %s", self.node_id,
                  durable.hard_state.term, durable.hard_state.commit, sorted(conf.voters),
                  sorted(conf.learners))

    def _open(self, voters: frozenset | None) -> SqliteStorage:
        archive, audit = self.state.archive, self.state.audit

        def hook(db, snapshot):                     # a received snapshot's archive and audit are swapped in
            archive.saved(db, snapshot)
            audit.saved(db, snapshot)
        if voters:
            return SqliteStorage.bootstrap(self.path, ConfState(voters=voters), on_snapshot=hook)
        return SqliteStorage(self.path, on_snapshot=hook)

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

    def on_raft(self, peer: str, messages: list) -> None:
        self._heard(peer)
        node = self._node
        if node is not None:
            self._submit(lambda: [node.step(m) for m in messages])

    async def on_propose(self, cmd: Any, timeout: float, forwarded: bool = True, *, peer: str | None = None,
                         joining: bool = False) -> Any:
        """A command ``peer`` (the verified certificate's node id) asks this node, the leader,
        to commit. It goes in stamped with ``peer`` as its proposer, whatever the body says;
        a box whose join has not completed (``joining``) may only announce itself. Never
        relayed further (``forwarded`` is kept for older senders): a relay would be the
        proposer, so a node that is not the leader answers ProposalDropped naming it."""
        if not isinstance(cmd, dict):
            raise InvalidSpec("a proposal is a command dict")
        if "term" in cmd or cmd.get("op") in commands.FENCED_OPS:
            raise InvalidSpec(f"{cmd.get('op')} is a leader action: it is never forwarded",
                              hint="the leader proposes it itself, fenced by its term")
        proposer = peer or self.node_id
        if joining and not joining_may_propose(cmd, proposer):
            _log.warning("[%s] refused %s from %s: its join has not completed", self.node_id, cmd.get("op"), proposer)
            raise Forbidden(f"node {proposer} is not a member yet: it may only announce itself",
                            code="not_a_member", hint="start the daemon on the joined box; it completes the join")
        return await self._propose_here(cmd, False, timeout, proposer=proposer)

    async def on_read(self, query: str, args: dict, timeout: float) -> Any:
        return await self.answer_read(query, args, timeout)

    def report_unreachable(self, peer: str) -> None:
        if self._node is not None:
            self._submit(lambda: self._node.report_unreachable(peer))

    def snapshot_source(self, message: InstallSnapshot) -> AsyncIterator[bytes]:
        """What the transport streams after a snapshot's message: the archive's rows, then
        the audit chain's (:mod:`floydd.cluster.audit`)."""
        audit = self.state.audit.export() if versions.at_least(self.state, 2) else _chain()   # an 0.1 box reads none
        return _chain(self.state.archive.export(), audit)

    def snapshot_sink(self, message: InstallSnapshot):
        """Where the transport puts a received snapshot's archive, before the message itself
        reaches the core (staged on the writer thread; swapped in when the snapshot is saved)."""
        snap = message.snapshot
        return SplitSink(self.state.archive.receive(snap.index, snap.term, self._write_durably),
                         self.state.audit.receive(snap.index, snap.term, self._write_durably))

    def report_snapshot(self, peer: str, ok: bool) -> None:
        if self._node is not None:
            self._submit(lambda: self._node.report_snapshot(peer, ok))

    # -- hooks and status -----------------------------------------------------------------------

    def on_apply(self, callback: Callable[[Applied], None]) -> None:
        """Call ``callback`` (in the loop, synchronously: keep it short) for every applied entry."""
        self._on_apply.append(callback)

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

    # -- proposals -----------------------------------------------------------------------------

    async def propose(self, cmd: dict, *, timeout: float | None = None, fenced: bool = False) -> Any:
        """Commit ``cmd`` and return the state machine's result (raising its rejection).

        ``fenced``: a leader action; only the leader may propose it, its term is stamped into
        the command as it enters the log, and it is neither forwarded nor retried.

        Raises :class:`Unavailable` when it could not be committed in ``timeout``: the
        command may or may not be in the log then; retry it (idempotent commands only).
        """
        timeout = timeout or self.config.propose_timeout
        if cmd.get("op") == commands.CONF_OP:
            check_conf(cmd)
        else:
            cmd = versions.stamped(self.state, cmd)     # refused above the cluster's level; v from level 2
            if "term" in cmd or (cmd.get("op") in commands.FENCED_OPS and not fenced):
                raise InvalidSpec(f"{cmd.get('op')}: propose a leader action with fenced=True, without a term",
                                  hint="the driver stamps the term when the command enters the log")
            commands.check({**cmd, "term": 0} if fenced else cmd)
        if fenced:
            self._require_leader()
            try:
                return await self._propose_here(cmd, True, timeout)
            except asyncio.TimeoutError:
                raise Unavailable(f"{cmd['op']} was not committed within {timeout:.1f}s",
                                  hint="its outcome is unknown: read the state before deciding again") from None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pause, why = 0.005, "no leader"
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise Unavailable(f"{cmd.get('op')} was not committed within {timeout:.1f}s ({why})",
                                  hint="retry; a retry with the same idempotency key never makes a second job")
            self._check_running()
            lead = self._node.lead
            try:
                if lead == self.node_id:
                    return await self._propose_here(cmd, False, remaining)
                if lead is not None:
                    result, _ = await self.transport.forward_propose(cmd, remaining, peer=lead)
                    return result
                await self._leader_change(min(remaining, 0.2))
                continue
            except Unavailable as exc:      # dropped, the leader unreachable, or no answer in time
                why = str(exc)
            except asyncio.TimeoutError:
                why = "timed out waiting for the commit"
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            pause = min(pause * 2, 0.1)

    async def _propose_here(self, cmd: dict, fenced: bool, timeout: float, *, proposer: str | None = None) -> Any:
        """Put ``cmd`` in the log here (the leader), stamped with its ``proposer`` (this node
        unless the transport says whose proposal it took)."""
        self._check_running()
        cmd = {k: v for k, v in cmd.items() if k != "proposer"}
        if cmd.get("op") != commands.CONF_OP:
            cmd["proposer"] = proposer or self.node_id
        if cmd.get("op") == commands.CONF_OP:
            check_conf(cmd)
            if self.is_leader:      # who may change the membership (not a state-machine command)
                try:
                    authorize_conf(self.state, cmd, proposer or self.node_id, self.node_id)
                except Forbidden as exc:
                    _log.warning("[%s] refused %s %s of %s: %s", self.node_id, cmd.get("op"), cmd.get("change"),
                                 cmd.get("node"), exc)
                    raise
        elif not fenced:
            commands.check(cmd)
        fut = asyncio.get_running_loop().create_future()

        def enter() -> None:
            node = self._node
            try:
                if cmd.get("op") == commands.CONF_OP:
                    entry = self._enter_conf_change(cmd, fut)
                else:
                    entry = node.propose(commands.encode({**cmd, "term": node.term} if fenced else cmd))
            except FloyddError as exc:
                settle(fut, exc)
                return
            except Exception as exc:        # a bad proposal fails alone; the raft loop goes on
                _log.exception("[%s] proposing %s failed", self.node_id, cmd.get("op"))
                settle(fut, InternalError(f"{cmd.get('op')} could not be proposed: {exc}"))
                return
            if entry is not None:
                self._waiters[entry.index] = (entry.term, fut)

        self._submit(enter)
        return await asyncio.wait_for(fut, timeout)

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

    async def _persist(self, rd) -> None:
        """Save a ready in one transaction (one fsync), except a hard state that only moves
        the commit index: that is volatile state in Raft (figure 2 persists only the term,
        the vote and the log), so it waits for the next save instead of costing an fsync of
        its own. After a crash the commit index restarts lower and the leader re-sends it."""
        hs = rd.hard_state
        if (hs is not None and not rd.entries and rd.snapshot is None
                and (hs.term, hs.vote) == self._durable_vote):
            self._lazy_hard_state = hs
            return
        hs = hs or self._lazy_hard_state
        self._lazy_hard_state = None
        await self._write_durably(self._storage.save, hs, rd.entries, rd.snapshot)
        if hs is not None:
            self._durable_vote = (hs.term, hs.vote)

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

    def _apply(self, entries: tuple) -> None:
        for e in entries:
            event = None
            if e.kind == EntryKind.CONF_CHANGE:
                cc = ConfChange.decode(e.data)
                self._resolve(e, None, None)
                event = Applied(index=e.index, term=e.term, conf_change=cc, replay=e.index <= self._replay_until)
                _log.info("[%s] membership: %s %s (index %d)", self.node_id, cc.op.name.lower(), cc.node, e.index)
            elif e.data:
                result = error = cmd = None
                try:
                    cmd = commands.decode(e.data)
                    result = self.state.apply(cmd, index=e.index, term=e.term)
                except Forbidden as exc:     # the same refusal on every box: say who tried what
                    error = exc
                    _log.warning("[%s] refused entry %d (%s from %s): %s", self.node_id, e.index, cmd.get("op"),
                                 cmd.get("proposer"), exc)
                except FloyddError as exc:
                    error = exc
                except Exception as exc:     # a bug; deterministic, so the same on every node
                    _log.exception("[%s] applying entry %d failed", self.node_id, e.index)
                    error = InternalError(f"applying {e.index} failed: {type(exc).__name__}: {exc}")
                self._resolve(e, result, error)
                event = Applied(index=e.index, term=e.term, command=cmd, result=result, error=error,
                                replay=e.index <= self._replay_until)
            else:
                self._resolve(e, None, None)
            self._applied = e.index
            if event is not None:
                self._emit(event)
        self._wake_readers()

    def _resolve(self, e: Entry, result: Any, error: FloyddError | None) -> None:
        waiter = self._waiters.pop(e.index, None)
        if waiter is None:
            return
        term, fut = waiter
        if fut.done():
            return
        if term != e.term:
            settle(fut, ProposalDropped("the proposal was replaced by a new leader's log", leader=self._node.lead))
        elif error is not None:
            settle(fut, error)
        else:
            fut.set_result(result)

    def _install(self, snap: Snapshot) -> None:
        self.state.restore(snap.data)
        self.state.archive.installed(snap.index, snap.term)
        self.state.audit.installed(snap.index, snap.term)
        self._applied = self._snapshot_index = snap.index
        for index in [i for i in self._waiters if i <= snap.index]:
            _, fut = self._waiters.pop(index)
            settle(fut, ProposalDropped("outcome unknown: state replaced by a snapshot", leader=self._node.lead))
        _log.info("[%s] state restored from the leader's snapshot at %d", self.node_id, snap.index)
        self._emit(Applied(index=snap.index, term=snap.term, restored=True))
        self._wake_readers()

    def _leadership(self, lead: str | None, role: Role, term: int) -> None:
        if lead is not None:
            seen = self.leaders_seen.setdefault(term, set())
            seen.add(lead)
            if len(seen) > 1:
                _log.critical("[%s] two leaders in term %d: %s", self.node_id, term, sorted(seen))
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

    async def _compact(self) -> None:
        index = self._applied
        snap = self._node.compact(index, self.state.snapshot())
        self._snapshot_index = index
        await self._write_durably(self._storage.compact, snap)
        await self.state.archive.purge(index, self._write_durably)   # no replay starts before it now
        _log.debug("[%s] snapshot at %d, log compacted", self.node_id, index)

    # -- helpers -----------------------------------------------------------------------------------

    async def _write(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    async def _write_durably(self, fn, *args):
        """:meth:`_write`, tried again every second while the disk is full."""
        waited = 0
        while True:
            try:
                return await self._write(fn, *args)
            except (sqlite3.OperationalError, OSError) as exc:
                if not _disk_full(exc):
                    raise
                if waited % 60 == 0:
                    _log.error("[%s] the raft log cannot be written, the disk is full (%s); trying again "
                               "every second", self.node_id, exc)
                waited += 1
                await asyncio.sleep(1.0)

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

    def _emit(self, event: Applied) -> None:
        for callback in self._on_apply:
            try:
                callback(event)
            except Exception:
                _log.exception("[%s] on_apply hook failed at %d", self.node_id, event.index)

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.OperationalError):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


async def _chain(*sources):
    """The chunks of each source in turn (a snapshot's archive, then its audit chain)."""
    for source in sources:
        async for chunk in source:
            yield chunk
