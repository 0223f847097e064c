"""ClusterService: the control plane of one node, as the daemon hosts it.

It holds this node's identity, the raft driver (log in ``STATE/cluster/raft.db``), the
replicated :class:`~floydd.cluster.state.machine.ClusterState` and the transport, and offers the
small API the rest of the daemon calls. The wiring (``floydd/daemon/control.py``), in short::

    async def control_ctx(app):                        # a cleanup_ctx, after records/store
        identity = NodeIdentity.load_or_create(config.state_dir / "tls")
        service = ClusterService(identity, config.state_dir / "cluster", name=config.node_name,
                                 advertise="HOST:PORT" or "",    # "": a box alone, no listener
                                 resources=inventory_resources(), usage=lambda: inventory_usage())
        listen on peer_app(service, ...) with mTLS             # only after floydd init/join
        await service.start(**start_mode)                # see start(); bootstrap=True on a box alone
        Discovery(..., on_change=service.on_discovered)  # optional: mDNS peers and static seeds
        app[keys.CLUSTER] = service
        yield
        await service.close()                            # clean: hand over leadership, leave the voters

    (a box alone)    -> start(bootstrap=True)    (a one-voter cluster: leads at once, no listener)
    floydd init      -> start(bootstrap=True)
    floydd join T    -> cluster.net.join(...) then start(join=[address], rejoin=True)
    (restart)        -> start()
    floydd recover   -> start(recover=True)      (loud warning; the others must join again)
    floydd leave     -> await service.leave()    (for good: also removed from the node table)
    floydd members   -> service.members()
    job path         -> submit_job(spec, idem_key) on any node (forwarded to the leader,
                        answered once committed); the leader's scheduler calls place(...)
                        (fenced by its term); each node's reconciler acts on the jobs
                        placed on it and reports with update_job(...) (floydd.jobs).

Listing calls read through the leader (ReadIndex) unless ``stale=True``.
``python -m floydd.cluster.devnode`` runs one service alone (dev, system tests, benchmarks).

The rest lives in parts, fields of the service that receive what they use in their
constructors: the commands the daemon proposes (jobs, datasets, accounts), how they reach the
leader and the cluster's level, :class:`~floydd.cluster.writes.Commands` (``commands``; the
service offers its calls under the same names); announcing this node, its learner seat and
heartbeats, :class:`~floydd.cluster.upkeep.Upkeep` (``upkeep``); peers' addresses,
``peers.json`` and discovery, :class:`~floydd.cluster.net.addressbook.AddressBook`
(``addresses``); the audit chain's evidence (its start check, the heads the heartbeats
carry), :class:`~floydd.cluster.audit_guard.AuditGuard` (``audit_guard``); this box's clock
against the leader's, :class:`~floydd.cluster.clockwatch.ClockWatch` (``clocks``); the nodes
as this box reports them (members, health, removal), :class:`~floydd.cluster.roster.Roster`
(``roster``). Code outside the cluster package calls the service, never its driver or transport.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from aiohttp import web

from floydd import log
from floydd.cluster.state import versions
from floydd.cluster.net.addressbook import AddressBook
from floydd.cluster.tables.archive_db import SqliteArchive
from floydd.cluster.tables.audit_db import SqliteAudit
from floydd.cluster.audit_guard import AuditGuard
from floydd.cluster.archiver import Archiver
from floydd.cluster.clockwatch import ClockWatch
from floydd.cluster.config import DEFAULT_CLUSTER_CONFIG, ClusterConfig
from floydd.cluster.driver.loop import Applied, DriverStatus, RaftDriver
from floydd.cluster.heard import Heard
from floydd.cluster.recover import recover as recover_log
from floydd.cluster.roster import Roster
from floydd.cluster.state.machine import ClusterState
from floydd.cluster.net.listener import PeerListener
from floydd.cluster.net.transport import Transport
from floydd.cluster.upkeep import Upkeep
from floydd.cluster.writes import Commands
from floydd.errors import Conflict, FloyddError, Unavailable
from floydd.model import Job
from floydd.security.identity import NodeIdentity
from floydd.tasks import cancel_and_wait

__all__ = ["ClusterService"]

_log = log.cluster.getChild("service")


def _part(part: str, method: Callable) -> Callable:
    """``name = _part("commands", Commands.name)``: a call the service offers that its part
    answers (the same signature and docstring; a coroutine if the part's is)."""
    if inspect.iscoroutinefunction(method):
        async def call(self, *args: Any, **kwargs: Any) -> Any:
            return await getattr(getattr(self, part), method.__name__)(*args, **kwargs)
    else:
        def call(self, *args: Any, **kwargs: Any) -> Any:
            return getattr(getattr(self, part), method.__name__)(*args, **kwargs)
    return functools.wraps(method)(call)


class ClusterService:
    """This node's control plane: its parts as fields, the calls the daemon makes (module docstring)."""

    def __init__(self, identity: NodeIdentity, state_dir: str | Path, *, name: str | None = None,
                 advertise: str | None = None, api_port: int | None = None, resources: dict | None = None,
                 labels: dict | None = None, usage: Callable[[], dict] | None = None,
                 live: Callable[[], list[dict]] | None = None, settings: str | None = None,
                 config: ClusterConfig = DEFAULT_CLUSTER_CONFIG, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        self.identity = identity
        self.node_id = identity.node_id
        self.name = name or self.node_id
        self.state_dir = Path(state_dir)
        self.config = config
        self.api_port, self.resources = api_port, resources or {}
        self.labels = versions.labels(labels)    # with this box's release (floydd.cluster.state.versions)
        self.draining = False
        """No new placements here (``floydd drain``): said in every heartbeat until undone or the
        daemon restarts; running jobs carry on."""
        self.settings = settings
        """What this box's operator set (``k=v ...``, :func:`floydd.config.settings_line`), sent
        with each start; the audit log records a change (None: not said)."""
        self.transport = Transport(identity, advertise=advertise, queue_size=config.transport_queue,
                                   max_batch=config.transport_batch, backoff=config.transport_backoff,
                                   request_timeout=config.request_timeout)
        self.state = ClusterState(archive=SqliteArchive(self.state_dir / "raft.db"),  # finished jobs, on disk
                                  audit=SqliteAudit(self.state_dir / "raft.db"))     # the audit chain, beside them
        self.driver = RaftDriver(self.node_id, self.state_dir / "raft.db", transport=self.transport,
                                 state=self.state, config=config, rng=rng)
        self.addresses = AddressBook(node_id=self.node_id, state=self.state, transport=self.transport,
                                     folder=self.state_dir, spawn=self._spawn)
        self.driver.on_apply(self.addresses.learn)
        self.heard = Heard()
        """When this box last heard from each node, on its monotonic clock (liveness is never
        read from another box's wall clock: :mod:`floydd.cluster.heard`)."""
        self.driver.on_apply(self.heard.on_apply)
        self.commands = Commands(node_id=self.node_id, state=self.state, driver=self.driver, transport=self.transport,
                                 contacts=self.addresses.contacts, config=config, clock=clock)
        self.clocks = ClockWatch(node_id=self.node_id, driver=self.driver, state=self.state,
                                 limit=config.max_clock_skew, timeout=min(2.0, config.heartbeat_interval),
                                 clock=clock)     # this box's clock against the leader's (issue 21)
        self.audit_guard = AuditGuard(node_id=self.node_id, driver=self.driver, state=self.state,
                                      propose=self.commands.propose, folder=self.state_dir, clock=clock,
                                      retry=config.heartbeat_interval)    # the chain's evidence
        self.upkeep = Upkeep(self, node_id=self.node_id, config=config, driver=self.driver, state=self.state,
                             transport=self.transport, commands=self.commands, clocks=self.clocks,
                             usage=usage, live=live)
        self.roster = Roster(node_id=self.node_id, config=config, driver=self.driver, state=self.state,
                             transport=self.transport, heard=self.heard, propose=self.commands.propose,
                             views=(self.clocks.view, self.audit_guard.view), clock=clock)
        self.listener = PeerListener(identity, driver=self.driver, state=self.state, transport=self.transport)
        self.transport.on_peer = self.addresses.peer_learnt
        self.transport.name_of = lambda peer: (self.state.nodes.get(peer) or {}).get("name")   # in its errors
        self._clock = clock
        self._tasks: set[asyncio.Task] = set()
        self._said_off = False

    # -- the node-to-node listener (floydd.cluster.net.listener.PeerListener) ----------------------

    def routes(self) -> list[web.RouteDef]:
        """``/cluster/v1/raft``, ``/propose``, ``/read``: mount them on the mTLS app only."""
        return self.transport.routes()

    def create_app(self) -> web.Application:
        """The node-to-node app: these routes behind the protocol and peer certificate checks."""
        return self.listener.create_app()

    async def listen(self, host: str = "127.0.0.1", port: int = 0, *, advertise_host: str | None = None,
                     app: web.Application | None = None) -> str:
        """Serve ``app`` (default :meth:`create_app`) with mTLS on ``host:port`` (dev mode and
        tests; the daemon serves :func:`floydd.daemon.peers.peer_app` on its own listener).
        Returns and advertises ``host:port``."""
        return await self.listener.listen(host, port, advertise_host=advertise_host, app=app or self.create_app())

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self, *, bootstrap: bool = False, founders: Mapping[str, str] | None = None,
                    join: Iterable[str] = (), rejoin: bool = False, recover: bool = False) -> None:
        """``bootstrap``: found a cluster of this node alone (``floydd init``). ``founders``:
        found one of several voters (id -> address; tests, benchmarks). ``join``: addresses of
        members to ask for a learner seat (``floydd join``; ``rejoin`` also lifts a tombstone
        left by an earlier leave). Nothing: restart from the log. ``recover``: rewrite the log
        as a new one-node cluster first (``floydd recover``)."""
        if self.transport.advertise is None:
            raise Conflict("the cluster service needs its advertised address before it starts",
                           hint="call listen() or pass advertise=HOST:PORT")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if recover:
            await asyncio.to_thread(recover_log, self.state_dir / "raft.db", self.node_id, now=self._clock())
        known = await self.addresses.load()
        for node_id, address in {**known, **(founders or {})}.items():
            self.transport.set_peer(node_id, address)
        voters = [self.node_id] if bootstrap else list(founders) if founders else None
        self.addresses.add_seeds(join)
        self.upkeep.rejoin = rejoin
        await self.driver.start(voters=voters)
        self.addresses.learn(None)
        if set(self.driver.status().voters) == {self.node_id}:    # it leads at once: be listed before
            try:                                                  # the daemon takes requests
                await self.commands.propose(await self.upkeep.record(), timeout=self.config.propose_timeout)
                self.upkeep.announced = True
                await self.raise_level()                          # and at its level, if all boxes speak it
            except FloyddError as exc:
                _log.warning("[%s] announcing this node: %s (trying again)", self.node_id, exc)
        self._spawn(self.upkeep.keep_membership(), f"cluster-membership-{self.node_id[:6]}")
        self._spawn(self.audit_guard.check_at_start(), f"cluster-audit-check-{self.node_id[:6]}")
        self._spawn(Archiver(node_id=self.node_id, config=self.config, state=self.state, driver=self.driver,
                             clock=self._clock).run(), f"cluster-archiver-{self.node_id[:6]}")

    async def say_off(self, timeout: float | None = None) -> bool:
        """Tell the cluster this box is stopping cleanly (``off``: its jobs are judged from now
        on, :mod:`floydd.scheduler.outages`), once; the daemon says it first thing on a clean stop,
        before its other parts close (they can hold the loop up for longer than the leader's
        ``suspect_after``). True once said."""
        if self._said_off or not self.driver.running:
            return self._said_off
        await self._cancel_tasks()      # no heartbeat saying "up" after it
        try:
            await self.commands.propose({"op": "node.health", "id": self.node_id, "status": "off"},
                                timeout=timeout or min(3.0, self.config.leave_timeout))
            self._said_off = True
        except FloyddError as exc:
            _log.warning("[%s] could not mark this node off (the leader will find it silent instead): %s",
                         self.node_id, exc)
        return self._said_off

    async def close(self, *, leave: bool = True) -> None:
        """Stop. With ``leave`` (a clean shutdown) first say ``off`` (unless said already) and
        hand over leadership and leave the voters, so the rest keep their quorum."""
        await self._cancel_tasks()      # no re-joining as a learner while leaving
        if leave and self.driver.running:
            await self.say_off()
            try:
                await self.driver.transfer_leadership_and_leave()
            except FloyddError as exc:
                _log.warning("[%s] leaving the voters failed (autopilot will remove this node after its "
                             "grace period): %s", self.node_id, exc)
        await self._stop()

    async def crash(self) -> None:
        """Stop abruptly, as a killed process would (tests)."""
        await self._stop(flush=False)

    async def leave(self) -> None:
        """Leave the cluster for good (``floydd leave``): hand over leadership, leave raft,
        drop this node from the node table (its certificate is refused from then on)."""
        await self._cancel_tasks()
        await self.driver.transfer_leadership_and_leave()
        await self.driver.change_membership("remove", self.node_id)
        await self.driver.propose({"op": "node.remove", "id": self.node_id, "ts": self._clock()})
        await self._stop()

    async def _cancel_tasks(self) -> None:
        self.addresses.stop()
        await cancel_and_wait(self._tasks)

    async def _stop(self, *, flush: bool = True) -> None:
        await self._cancel_tasks()
        await self.driver.close(flush=flush)
        await self.transport.close()
        await self.listener.close()

    # -- the API the daemon calls -------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this node leads the cluster now."""
        return self.driver.is_leader

    @property
    def alone(self) -> bool:
        """This box leads a cluster of itself only (its raft configuration and its node table
        name no other box): no one to hear from nor to judge, so its loops wait for events
        and long timers rather than looking every second."""
        return self.driver.alone and all(nid == self.node_id for nid in self.state.nodes)

    @property
    def leader_id(self) -> str | None:
        """The leader this node knows of (None: none heard, e.g. during an election)."""
        return self.driver.leader_id

    def status(self) -> DriverStatus:
        """Raft as this node sees it: term, leader, voters, learners, each one's progress."""
        return self.driver.status()

    def on_apply(self, callback: Callable[[Applied], None]) -> None:
        """``callback(Applied)`` for every entry applied on this node, in log order, in the loop
        (keep it short; spawn tasks for real work). ``Applied.replay`` marks entries re-applied
        after a restart; ``Applied.restored`` a state replaced by the leader's snapshot."""
        self.driver.on_apply(callback)

    def leader_unreachable(self) -> Unavailable | None:
        """The refusal for a write while this box is cut off from the cluster's leader
        (:mod:`floydd.cluster.net.leader_contact`), or None."""
        return self.driver.leader_unreachable()

    def in_configuration(self, node_id: str) -> bool:
        """Whether ``node_id`` is a voter or learner in the raft configuration this node knows."""
        return self.driver.in_conf(node_id)

    async def change_membership(self, change: str, node_id: str, *, timeout: float | None = None,
                                user: str | None = None) -> None:
        """``add_learner`` / ``promote`` / ``remove`` ``node_id`` in raft, through the leader; a
        no-op when it is already so. ``user``: the admin whose command this is."""
        await self.driver.change_membership(change, node_id, timeout=timeout, user=user)

    async def commit(self, cmd: dict, *, timeout: float | None = None) -> Any:
        """Commit ``cmd`` as it is (its ``ts`` set by the caller; not stamped with the cluster's
        level nor signed, unlike the commands of :mod:`floydd.cluster.writes`), through the
        leader this node knows: the state machine's result, or its rejection raised."""
        return await self.driver.propose(cmd, timeout=timeout)

    async def read(self, fn: Callable[[ClusterState], Any], *, stale: bool = False,
                   timeout: float | None = None) -> Any:
        """``fn(state)`` on a state holding every write committed before the call (ReadIndex,
        confirmed with the leader); with ``stale``, on this node's state as it is."""
        return await self.driver.read(fn, stale=stale, timeout=timeout)

    async def read_index(self, *, timeout: float | None = None) -> int:
        """Wait until this node has applied every write committed before the call (confirmed
        with the leader): the index it waited for."""
        return await self.driver.read_index(timeout=timeout)

    async def query(self, name: str, args: dict | None = None, *, stale: bool = False,
                    via_leader: bool = False, timeout: float | None = None) -> Any:
        """A named read (:meth:`ClusterState.query`, or one the leader answers from memory);
        ``via_leader`` asks the leader to run it."""
        return await self.driver.query(name, args, stale=stale, via_leader=via_leader, timeout=timeout)

    # -- the node-to-node network, as the rest of the daemon sees it --------------------------------

    @property
    def advertise(self) -> str | None:
        """``host:port`` of this node's node-to-node listener, as told to peers; None (or "")
        before :meth:`listen` on a box alone, which has none."""
        return self.transport.advertise

    def learn_address(self, node_id: str, address: str) -> None:
        """Note where ``node_id`` listens (discovery): raft messages and calls to it go there."""
        self.transport.set_peer(node_id, address)

    address_of = _part("transport", Transport.address_of)
    new_connections = _part("transport", Transport.new_connections)
    fetch = _part("transport", Transport.fetch)

    # -- commands (floydd.cluster.writes.Commands answers them), heartbeats, discovery -------------

    submit_job = _part("commands", Commands.submit_job)
    place = _part("commands", Commands.place)
    update_job = _part("commands", Commands.update_job)
    leader_update_job = _part("commands", Commands.leader_update_job)
    reserve_numbers = _part("commands", Commands.reserve_numbers)
    allocate_numbers = _part("commands", Commands.allocate_numbers)
    import_job = _part("commands", Commands.import_job)
    delete_job = _part("commands", Commands.delete_job)
    add_dataset_version = _part("commands", Commands.add_dataset_version)
    delete_dataset = _part("commands", Commands.delete_dataset)
    set_dataset_holder = _part("commands", Commands.set_dataset_holder)
    set_code_holder = _part("commands", Commands.set_code_holder)
    change_account = _part("commands", Commands.change_account)
    grant_admin = _part("commands", Commands.grant_admin)
    raise_level = _part("commands", Commands.raise_level)
    _propose = _part("commands", Commands.propose)

    beat_soon = _part("upkeep", Upkeep.beat_soon)
    on_discovered = _part("addresses", AddressBook.on_discovered)     # Discovery(on_change=...)

    # -- reads, and the nodes (floydd.cluster.roster.Roster answers for them) -----------------------

    async def job(self, job: str, *, stale: bool = False) -> Job:
        return await self.driver.read(lambda s: s.job(job), stale=stale)

    async def jobs(self, *, project: str | None = None, states: Iterable[str] | None = None,
                   stale: bool = False) -> list[Job]:
        return await self.driver.read(lambda s: s.list_jobs(project, states), stale=stale)

    async def archived_jobs(self, *, project: str | None = None, states: Iterable[str] | None = None,
                            since: float | None = None, limit: int | None = None) -> list[Job]:
        """Archived jobs, newest first, from this box's copy of the archive (every box holds
        the same: :mod:`floydd.cluster.state.archive`)."""
        return await self.state.archive.page(project=project, states=states, since=since, limit=limit)

    async def datasets(self, *, stale: bool = False, name: str | None = None) -> list[dict]:
        """Every dataset version (``name``: that dataset's only)."""
        return await self.driver.read(lambda s: s.list_datasets(name), stale=stale)

    nodes = _part("roster", Roster.nodes)
    heard_ages = _part("roster", Roster.heard_ages)
    silence = _part("roster", Roster.silence)
    suspect = _part("roster", Roster.suspect)
    remove_node = _part("roster", Roster.remove_node)
    members = _part("roster", Roster.members)

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

