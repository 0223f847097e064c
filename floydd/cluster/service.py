"""ClusterService: the control plane of one node, as the daemon hosts it.

It holds this node's identity, the raft driver (log in ``STATE/cluster/raft.db``), the
replicated :class:`~floydd.cluster.state.ClusterState` and the transport, and offers the
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
    floydd join T    -> security.join(...) then start(join=[address], rejoin=True)
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
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from aiohttp import web

from floydd import log
from floydd.cluster import commands, versions
from floydd.cluster.archive_db import SqliteArchive
from floydd.cluster.audit_db import SqliteAudit
from floydd.cluster.archiver import Archiver
from floydd.cluster.authz import standing
from floydd.cluster.config import DEFAULT_CLUSTER_CONFIG, ClusterConfig
from floydd.cluster.driver import Applied, DriverStatus, RaftDriver
from floydd.cluster.recover import recover as recover_log
from floydd.cluster.state import ClusterState
from floydd.cluster.raft import ProposalDropped
from floydd.cluster.transport import Transport, protocol_middleware
from floydd.errors import Conflict, FloyddError, NotFound, Unavailable
from floydd.security.identity import NodeIdentity
from floydd.security.tls import require_peer_cert, server_context
from floydd.tasks import cancel_and_wait

__all__ = ["ClusterService", "node_health_word"]

_log = log.cluster.getChild("service")


class ClusterService:
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
        self.labels = versions.labels(labels)    # with this box's release (floydd.cluster.versions)
        self.draining = False
        """No new placements here (``floydd drain``): said in every heartbeat until undone or the
        daemon restarts; running jobs carry on."""
        self.settings = settings
        """What this box's operator set (``k=v ...``, :func:`floydd.config.settings_line`), sent
        with each start; the audit log records a change (None: not said)."""
        self._seeds: list[str] = []
        self._usage, self._clock = usage, clock
        self._live = live
        self._beat_now = asyncio.Event()
        self.transport = Transport(identity, advertise=advertise, queue_size=config.transport_queue,
                                   max_batch=config.transport_batch, backoff=config.transport_backoff,
                                   request_timeout=config.request_timeout)
        self.state = ClusterState(archive=SqliteArchive(self.state_dir / "raft.db"),  # finished jobs, on disk
                                  audit=SqliteAudit(self.state_dir / "raft.db"))     # the audit chain, beside them
        self.driver = RaftDriver(self.node_id, self.state_dir / "raft.db", transport=self.transport,
                                 state=self.state, config=config, rng=rng)
        self.driver.on_apply(self._learn_addresses)
        self.transport.on_peer = self._peer_learnt
        self._peers_file = self.state_dir / "peers.json"
        self._peers_dirty = False
        self._peers_lock = asyncio.Lock()   # one writer of peers.json at a time (they share a temp file)
        self._closing = False
        self._rejoin = False
        self._tasks: set[asyncio.Task] = set()
        self._runner: web.AppRunner | None = None
        self._announced = False

    # -- the node-to-node listener --------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        """``/cluster/v1/raft``, ``/propose``, ``/read``: mount them on the mTLS app only."""
        return self.transport.routes()

    def is_member_cert(self, node_id: str) -> bool:
        """Whether ``node_id`` is a member now: in the node table or the raft configuration,
        not removed."""
        return node_id not in self.state.removed and (node_id in self.state.nodes or self.driver.in_conf(node_id))

    def peer_standing(self, node_id: str, serial: str) -> str | None:
        """For ``require_peer_cert(standing=...)``, on every node-to-node request: ``member``,
        ``joining`` (may only announce itself) or None (refused). Set lookups only.

        A node in no configuration yet (a box that has just joined, before the leader's first
        entries or snapshot reach it) knows no members: it takes whom the cluster's CA vouches
        for, as a raft learner must; it holds nothing of the cluster to give away yet."""
        if not self.driver.running:
            return None                 # not started yet (or stopped): nothing to serve anyone
        if not self.driver.in_conf(None):
            return "member"
        return standing(self.state, _Conf(self.driver), node_id, serial)

    def on_discovered(self, peers: Iterable[Any]) -> None:
        """``Discovery(on_change=service.on_discovered)``: learn peers' addresses from mDNS
        (and static seeds, which have no node id yet: they become contacts to ask)."""
        for peer in peers:
            for address in peer.addresses[:1]:
                endpoint = _join_host_port(address, peer.port)
                if peer.node_id is None:
                    if endpoint not in self._seeds:
                        self._seeds.append(endpoint)
                elif peer.node_id != self.node_id and peer.node_id not in self.state.removed:
                    self.transport.set_peer(peer.node_id, endpoint)

    def create_app(self) -> web.Application:
        app = web.Application(middlewares=[protocol_middleware, require_peer_cert(standing=self.peer_standing)],
                              client_max_size=64 << 20)     # raft batches; snapshots stream, uncapped
        app.add_routes(self.routes())
        return app

    async def listen(self, host: str = "127.0.0.1", port: int = 0, *, advertise_host: str | None = None,
                     app: web.Application | None = None) -> str:
        """Serve ``app`` (default :meth:`create_app`) with mTLS on ``host:port`` (dev mode and
        tests; the daemon serves :func:`floydd.daemon.peers.peer_app` on its own listener).
        Returns and advertises ``host:port``."""
        self._runner = web.AppRunner(app or self.create_app(), access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=server_context(self.identity))
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]
        address = _join_host_port(advertise_host or host, bound)
        self.transport.advertise = address
        return address

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
        known = await asyncio.to_thread(_read_peers, self._peers_file)
        for node_id, address in {**known, **(founders or {})}.items():
            self.transport.set_peer(node_id, address)
        voters = [self.node_id] if bootstrap else list(founders) if founders else None
        self._seeds, self._rejoin = list(dict.fromkeys([*join, *self._seeds])), rejoin
        await self.driver.start(voters=voters)
        self._learn_addresses(None)
        if set(self.driver.status().voters) == {self.node_id}:    # it leads at once: be listed before
            try:                                                  # the daemon takes requests
                await self._propose(await self._upsert(), timeout=self.config.propose_timeout)
                self._announced = True
                await self.raise_level()                          # and at its level, if all boxes speak it
            except FloyddError as exc:
                _log.warning("[%s] announcing this node: %s (trying again)", self.node_id, exc)
        self._spawn(self._keep_membership(), f"cluster-membership-{self.node_id[:6]}")
        self._spawn(Archiver(self, clock=self._clock).run(), f"cluster-archiver-{self.node_id[:6]}")

    async def close(self, *, leave: bool = True) -> None:
        """Stop. With ``leave`` (a clean shutdown) first hand over leadership and leave the
        voters, so the rest keep their quorum."""
        await self._cancel_tasks()      # no re-joining as a learner while leaving
        if leave and self.driver.running:
            try:
                await self._propose({"op": "node.health", "id": self.node_id, "status": "off"},
                                    timeout=min(1.0, self.config.leave_timeout))
            except FloyddError as exc:
                _log.info("[%s] could not mark this node off: %s", self.node_id, exc)
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
        self._closing = True
        await cancel_and_wait(self._tasks)

    async def _stop(self, *, flush: bool = True) -> None:
        await self._cancel_tasks()
        await self.driver.close(flush=flush)
        await self.transport.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- the API the daemon calls -------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.driver.is_leader

    @property
    def leader_id(self) -> str | None:
        return self.driver.leader_id

    def status(self) -> DriverStatus:
        return self.driver.status()

    def on_apply(self, callback: Callable[[Applied], None]) -> None:
        """``callback(Applied)`` for every entry applied on this node, in log order, in the loop
        (keep it short; spawn tasks for real work). ``Applied.replay`` marks entries re-applied
        after a restart; ``Applied.restored`` a state replaced by the leader's snapshot."""
        self.driver.on_apply(callback)

    async def submit_job(self, spec: dict, idem_key: str, *, project: str | None = None, user: str = "",
                         number: int | None = None, timeout: float | None = None) -> dict:
        """Commit a new job (numbered in its project, or ``number``: a job this node queued
        before it had a control plane); the same ``idem_key`` always gives the same job, so a
        client may retry after a timeout."""
        spec = dict(spec)
        project = project or spec.pop("project", None)
        cmd = {"op": "job.submit", "idem_key": idem_key, "project": project, "spec": spec,
               "origin": self.node_id, "user": user}
        if number is not None:
            cmd["number"] = number
        return await self._propose(cmd, timeout=timeout)

    async def place(self, job: str, node: str, gpus: Iterable[int], *, parts: list[dict] | None = None,
                    timeout: float | None = None) -> dict:
        """Leader only: commit a placement fenced by this leader's term (a gang's ``parts``:
        ``{node, gpus}`` by rank, rank 0 being ``node``/``gpus``)."""
        cmd = {"op": "job.place", "job": job, "node": node, "gpus": list(gpus), "ts": self._clock()}
        if parts:
            cmd["parts"] = parts
        return await self.driver.propose(cmd, timeout=timeout, fenced=True)

    async def update_job(self, job: str, *, timeout: float | None = None, **fields: Any) -> dict:
        """state, reason, exit_code, output_version, summary, waiting_for; ``attempt`` and
        ``node`` fence the update to the current placement (a box's report on its run);
        ``user``: the person asking for a stop."""
        return await self._propose({"op": "job.update", "job": job, **fields}, timeout=timeout)

    async def leader_update_job(self, job: str, *, timeout: float | None = None, **fields: Any) -> dict:
        """Leader only: a job.update fenced by this leader's term (requeue, unknown, lost of the
        jobs of silent boxes): the leader speaks for no box, so only its term vouches for it."""
        return await self.driver.propose({"op": "job.update", "job": job, "ts": self._clock(), **fields},
                                         timeout=timeout, fenced=True)

    async def reserve_numbers(self, project: str, number: int, *, timeout: float | None = None) -> int:
        """Number later jobs of ``project`` above ``number``; the project's counter after it."""
        return await self._propose({"op": "project.reserve", "project": project, "number": number}, timeout=timeout)

    async def allocate_numbers(self, project: str, keys: list[str], *, timeout: float | None = None) -> dict[str, int]:
        """A job number in ``project`` for each import key (the same one for a key seen before):
        :mod:`floydd.cluster.imported`."""
        return await self._propose({"op": "project.allocate", "project": project, "keys": list(keys)}, timeout=timeout)

    async def import_job(self, fields: dict, *, timeout: float | None = None) -> dict:
        """Commit a finished job brought from another site, held by this node, under the number
        its key was allocated (``job.import``)."""
        return await self._propose({"op": "job.import", **fields, "node": self.node_id}, timeout=timeout)

    async def delete_job(self, job: str, *, user: str = "", timeout: float | None = None) -> None:
        await self._propose({"op": "job.delete", "job": job, "user": user}, timeout=timeout)

    async def add_dataset_version(self, name: str, tree: str, *, idem_key: str | None = None,
                                  timeout: float | None = None, **fields: Any) -> dict:
        cmd = {"op": "dataset.add_version", "name": name, "tree": tree, "node": self.node_id, **fields}
        if idem_key is not None:
            cmd["idem_key"] = idem_key
        return await self._propose(cmd, timeout=timeout)

    async def delete_dataset(self, name: str, version: int | None = None, *, user: str = "",
                             timeout: float | None = None) -> None:
        """Drop one version (or, with ``version=None``, every version) from the catalog, for
        ``user`` (who added them, or an admin)."""
        await self._propose({"op": "dataset.delete", "name": name, "version": version, "user": user},
                            timeout=timeout)

    async def set_dataset_holder(self, name: str, version: int, *, holds: bool, node: str | None = None,
                                 timeout: float | None = None) -> dict:
        """Record that ``node`` (this one by default) holds a version's data, or no longer does;
        about another node only the leader says so (fenced by its term)."""
        cmd = {"op": "dataset.holders", "name": name, "version": version, "node": node or self.node_id,
               "holds": holds}
        if cmd["node"] != self.node_id:
            return await self.driver.propose({**cmd, "ts": self._clock()}, timeout=timeout, fenced=True)
        return await self._propose(cmd, timeout=timeout)

    async def job(self, job: str, *, stale: bool = False) -> dict:
        return await self.driver.read(lambda s: s.job(job), stale=stale)

    async def jobs(self, *, project: str | None = None, states: Iterable[str] | None = None,
                   stale: bool = False) -> list[dict]:
        states = tuple(states) if states else None
        return await self.driver.read(lambda s: s.list_jobs(project, states), stale=stale)

    async def nodes(self, *, stale: bool = False) -> list[dict]:
        now = self._clock()
        return await self.driver.read(lambda s: _with_health(s, now, self.config.stale_after), stale=stale)

    async def datasets(self, *, stale: bool = False) -> list[dict]:
        return await self.driver.read(lambda s: s.list_datasets(), stale=stale)

    def silence(self) -> dict[str, float]:
        """Leader only: node id -> seconds since this leader last heard from that member over
        raft (0 for itself; since it was elected for a member it has not heard from). Nodes
        that are not members are left out: nothing is heard from them. Empty elsewhere."""
        if not self.is_leader:
            return {}
        view = self.driver.autopilot_view()
        return {m.id: view.now - (view.leader_since if m.last_contact is None
                                  else max(m.last_contact, view.leader_since)) for m in view.members}

    async def suspect(self, node_id: str, *, timeout: float | None = None) -> None:
        """Leader only: mark ``node_id`` suspect (it lost touch with it; :mod:`floydd.jobs.outages`)."""
        await self.driver.propose({"op": "node.health", "id": node_id, "status": "suspect", "ts": self._clock()},
                                  timeout=timeout, fenced=True)

    async def remove_node(self, node_id: str, *, user: str, timeout: float | None = None) -> None:
        """``floydd remove NODE``, an admin's command: take the node out of raft, tombstone it
        and revoke its certificates (each box refuses them from then on)."""
        if node_id == self.node_id:
            raise Conflict("this is the node you are on", hint="use floydd leave here instead")
        if node_id not in self.state.nodes and not self.driver.in_conf(node_id):
            if node_id in self.state.removed:
                return
            raise NotFound(f"node {node_id} is not a member", code="node_not_found",
                           hint="floydd members lists the nodes and their ids")
        await self.driver.change_membership("remove", node_id, timeout=timeout, user=user)
        await self._propose({"op": "node.remove", "id": node_id, "user": user}, timeout=timeout)

    async def change_account(self, cmd: dict, *, timeout: float | None = None) -> Any:
        """A ``person.*`` (:mod:`floydd.cluster.people`) or ``apitoken.*`` command
        (:mod:`floydd.cluster.apitokens`) for the person named in its ``user``."""
        if not cmd.get("op", "").startswith(("person.", "apitoken.")):
            raise ValueError(f"not a person.* or apitoken.* command: {cmd.get('op')}")
        return await self._propose(cmd, timeout=timeout)

    async def grant_admin(self, user: str, *, timeout: float | None = None) -> list[str]:
        """Record ``user`` as the cluster's first admin (``floydd init``); the leader alone, once."""
        return await self.driver.propose({"op": "admin.grant", "user": user, "ts": self._clock()},
                                         timeout=timeout, fenced=True)

    def members(self) -> list[dict]:
        """Raft membership as this node sees it, with each member's name, address and health
        (the same as ``floyd nodes`` shows: :meth:`ClusterState.node_health`)."""
        st = self.driver.status()
        health = self.state.node_health(self._clock(), self.config.stale_after)
        out = []
        for node_id in sorted(set(st.voters) | set(st.learners) | set(self.state.nodes)):
            record = self.state.nodes.get(node_id, {})
            pr = st.progress.get(node_id)
            out.append({"id": node_id, "name": record.get("name", ""),
                        "address": self.transport.address_of(node_id) or (self.transport.advertise
                                                                          if node_id == self.node_id else None),
                        "role": "voter" if node_id in st.voters else "learner" if node_id in st.learners else "none",
                        "leader": node_id == st.leader, "status": record.get("status"),
                        "health": node_health_word(health.get(node_id)), "match": pr.match if pr else None,
                        "cert_expires": (self.state.trust.certs.get(node_id) or {}).get("not_after"),
                        "version": (record.get("labels") or {}).get(versions.VERSION_LABEL, "0.1.x") if record else None,
                        "protocol": versions.node_protocol(record) if record else None})
        return out

    # -- membership upkeep ---------------------------------------------------------------------------

    async def _keep_membership(self) -> None:
        """Announce this node (address, resources), get it a learner seat if it has none, and
        send heartbeats (``node.health``)."""
        loop = asyncio.get_running_loop()
        leaderless_since = loop.time()
        next_beat = 0.0
        while True:
            try:
                await asyncio.wait_for(self._beat_now.wait(),
                                       min(self.config.rejoin_interval, self.config.heartbeat_interval) / 2)
            except asyncio.TimeoutError:
                pass
            now = loop.time()
            # "leaderless" also covers a leader gone quiet towards us: a learner removed while
            # cut off still lists itself and its old leader, and only asking again tells
            silent = self.driver.leader_silent_for()
            if silent is not None and silent <= self.config.rejoin_interval:
                leaderless_since = now
            conf_members = set(self.driver.status().voters) | set(self.driver.status().learners)
            try:
                if self.is_leader and self.state.protocol < versions.PROTOCOL:
                    await self.raise_level(timeout=self.config.heartbeat_interval)   # every box upgraded
                record = self.state.nodes.get(self.node_id) or {}
                if self._announced and self.settings is not None and versions.at_least(self.state, 2) \
                        and record.get("config") != self.settings:
                    self._announced = False         # say the settings now the cluster takes them
                if not self._announced:
                    await self._propose(await self._upsert(), timeout=2 * self.config.rejoin_interval)
                    self._announced = True
                    next_beat = now + self.config.heartbeat_interval
                    _log.info("[%s] announced to the cluster as %s at %s", self.node_id, self.name,
                              self.transport.advertise)
                if self.node_id not in conf_members or now - leaderless_since > self.config.rejoin_interval:
                    await self._propose({"op": commands.CONF_OP, "change": "add_learner", "node": self.node_id},
                                        timeout=2 * self.config.rejoin_interval)
                    leaderless_since = loop.time()
                # a box the leader marked suspect is back in touch: say so (with its live runs) now
                suspect = (self.state.nodes.get(self.node_id) or {}).get("status") == "suspect"
                if (now >= next_beat or suspect or self._beat_now.is_set()) and self.driver.leader_id is not None:
                    self._beat_now.clear()
                    next_beat = now + self.config.heartbeat_interval
                    beat = {"op": "node.health", "id": self.node_id, "status": "draining" if self.draining else "up",
                            **await self._procs()}
                    if self._usage is not None:
                        beat["usage"] = self._usage()
                    await self._propose(beat, timeout=self.config.heartbeat_interval)
            except Conflict as exc:
                _log.error("[%s] %s (%s)", self.node_id, exc, exc.hint)
                if exc.code == "node_removed":
                    return
            except FloyddError as exc:
                _log.debug("[%s] membership upkeep: %s", self.node_id, exc)

    async def _upsert(self) -> dict:
        """This node's record (with its live runs); a box alone, with no listener, has no
        address (port 0)."""
        host, _, port = (self.transport.advertise or "").rpartition(":")
        cmd = {"op": "node.upsert", "id": self.node_id, "name": self.name, "address": host.strip("[]"),
               "cluster_port": int(port or 0), "api_port": self.api_port, "resources": self.resources,
               "labels": self.labels, **await self._procs()}
        if self._rejoin:
            cmd["rejoin"] = True
        if self.settings is not None and versions.at_least(self.state, 2):   # an 0.1 leader takes no config
            cmd["config"] = self.settings
        return cmd

    async def _procs(self) -> dict:
        """``{"procs": [{job, attempt, gpus}]}``: the runs whose processes are alive on this box
        (GPU fencing: the leader places nothing on their GPUs while the cluster no longer
        counts them); ``{}`` without a ``live`` callback (a bare control plane)."""
        if self._live is None:
            return {}
        return {"procs": await asyncio.to_thread(self._live)}

    def beat_soon(self) -> None:
        """Send a heartbeat now rather than at the next interval (a run here ended: its GPUs
        are free as soon as the cluster hears that its processes are gone)."""
        self._beat_now.set()

    async def raise_level(self, level: int = versions.PROTOCOL, *, timeout: float | None = None) -> int:
        """Raise the cluster's level to ``level`` if every box speaks it (:mod:`floydd.cluster.versions`);
        the level now, as this box has applied it."""
        if self.state.protocol < level <= versions.cluster_level(self.state):
            timeout = timeout or self.config.propose_timeout
            await self.driver.propose({"op": versions.OP, "level": level, "ts": self._clock()}, timeout=timeout)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while self.state.protocol < level and loop.time() < deadline:   # committed: applied here soon
                await asyncio.sleep(0.01)
        return self.state.protocol

    async def _propose(self, cmd: dict, *, timeout: float | None = None) -> Any:
        """Through the leader when one is known; else through any member we know of (a node
        that is not a member yet hears from no leader). A command of a newer level first
        switches that level on, if every box speaks it (else it is refused, saying which do not)."""
        if versions.needs(cmd) > self.state.protocol:
            await self.raise_level(versions.needs(cmd), timeout=timeout)
        cmd = versions.stamped(self.state, {**cmd, "ts": self._clock()})
        if self.driver.leader_id is not None or not self._contacts():
            return await self.driver.propose(cmd, timeout=timeout)
        timeout = timeout or self.config.propose_timeout
        last: FloyddError = Unavailable("no member reachable")
        for address in self._contacts():
            try:
                result, _ = await self.transport.forward_propose(cmd, timeout, address=address, forwarded=False)
                return result
            except ProposalDropped as exc:  # not the leader: it named the leader, and where it is
                last = exc
                if exc.leader is None or self.transport.address_of(exc.leader) is None:
                    continue
                try:                        # straight to the leader: a relay would be the proposer
                    result, _ = await self.transport.forward_propose(cmd, timeout, peer=exc.leader)
                    return result
                except Unavailable as again:
                    last = again
            except Unavailable as exc:
                last = exc
        raise last

    def _contacts(self) -> list[str]:
        known = [a for n, a in self.transport.peers.items() if n != self.node_id]
        return list(dict.fromkeys(self._seeds + known))

    def _learn_addresses(self, event: Applied | None) -> None:
        if event is not None and not event.restored:
            cmd = event.command
            if cmd is None or cmd.get("op") != "node.upsert" or event.error is not None:
                return
            nodes = [event.result]
        else:
            nodes = list(self.state.nodes.values())
        for n in nodes:
            if n["id"] != self.node_id and n["address"]:
                self.transport.set_peer(n["id"], _join_host_port(n["address"], n["cluster_port"]))

    def _peer_learnt(self, node_id: str, address: str) -> None:
        """Keep the address book on disk, so a restarted node can reach its peers even when
        its own log is behind (e.g. it was removed while it was away)."""
        if not self._peers_dirty and not self._closing:
            self._peers_dirty = True
            self._spawn(self._save_peers(), f"cluster-peers-{self.node_id[:6]}")

    async def _save_peers(self) -> None:
        await asyncio.sleep(0)          # batch what is learnt in the same loop iteration
        self._peers_dirty = False
        async with self._peers_lock:
            await asyncio.to_thread(_write_peers, self._peers_file, self.transport.peers)

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class _Conf:
    """The raft configuration's members, as :func:`floydd.cluster.authz.standing` asks: ``in``."""

    __slots__ = ("_driver",)

    def __init__(self, driver: RaftDriver) -> None:
        self._driver = driver

    def __contains__(self, node_id: object) -> bool:
        return isinstance(node_id, str) and self._driver.in_conf(node_id)


def _read_peers(path: Path) -> dict[str, str]:
    try:
        peers = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in peers.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(peers, dict) else {}


def _write_peers(path: Path, peers: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(peers, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _with_health(state: ClusterState, now: float, stale_after: float) -> list[dict]:
    health = state.node_health(now, stale_after)
    return [{**n, "health": health[n["id"]]} for n in state.list_nodes()]


def node_health_word(status: str | None) -> str:
    """A node's health as ``floyd nodes`` and ``floydd members`` both show it: ``healthy``
    (up), ``suspect`` (the leader lost touch), ``stale`` (its heartbeats stopped coming), its
    status otherwise (``draining``, ``off``, ``down``), ``unknown`` before its first report."""
    return "healthy" if status == "up" else status or "unknown"


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
