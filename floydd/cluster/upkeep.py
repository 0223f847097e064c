"""Membership upkeep for the cluster service: announce this node, keep its seat, beat.

A part of :class:`~floydd.cluster.service.ClusterService` (:class:`Upkeep`, its ``upkeep``),
reading what the node says of itself through :class:`Member`. One task per node
(:meth:`Upkeep.keep_membership`) wakes every half of the shorter of
``rejoin_interval`` and ``heartbeat_interval`` (a leader alone, which has no seat to keep: when
its next heartbeat is due), or at once after :meth:`beat_soon`, and::

    leader, and the cluster below the level every box speaks  -> raise_level
    not announced yet (or its settings changed)               -> node.upsert (this node's record)
    in no raft configuration, or no leader heard for ``rejoin_interval``
                                                              -> ask for a learner seat
    heartbeat due, marked suspect, or beat_soon               -> node.health (up | draining,
                                                                 usage, live runs: ``procs``,
                                                                 from level 3 its audit chain's
                                                                 head: ``audit_head``, and its
                                                                 clock against the leader's,
                                                                 measured just before: ``clock``)

A refusal that says this node was removed ends the task; any other failure is logged and
tried again on the next round. The cluster's level (:mod:`floydd.cluster.state.versions`) is
raised by :meth:`floydd.cluster.writes.Commands.raise_level`, once every box speaks the new one.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Protocol

from floydd import log
from floydd.cluster.clockwatch import ClockWatch
from floydd.cluster.config import ClusterConfig
from floydd.cluster.driver.loop import RaftDriver
from floydd.cluster.net.transport import Transport
from floydd.cluster.state import commands, versions
from floydd.cluster.state.machine import ClusterState
from floydd.cluster.writes import Commands
from floydd.errors import Conflict, FloyddError

__all__ = ["Upkeep", "Member"]

_log = log.cluster.getChild("service")


class Member(Protocol):
    """What the upkeep reads of the node it keeps, each time it says it (the service)."""

    name: str
    api_port: int | None
    resources: dict
    labels: dict
    settings: str | None
    draining: bool


class Upkeep:
    """Keeps ``node`` a member and says how it is: its record and heartbeats, committed by
    ``commands``; ``driver`` says whether it has a seat and hears a leader, ``transport``
    where it listens, ``clocks`` its clock against the leader's; ``usage`` and ``live``
    (optional) what its heartbeats carry."""

    def __init__(self, node: Member, *, node_id: str, config: ClusterConfig, driver: RaftDriver,
                 state: ClusterState, transport: Transport, commands: Commands, clocks: ClockWatch,
                 usage: Callable[[], dict] | None = None, live: Callable[[], list[dict]] | None = None) -> None:
        self.node, self.node_id, self.config = node, node_id, config
        self.driver, self.state, self.transport = driver, state, transport
        self.commands, self.clocks = commands, clocks
        self.usage = usage
        """This box's usage for its heartbeats (None: none said)."""
        self._live = live
        self.announced = False
        """This node's record is committed (with its settings as they are)."""
        self.rejoin = False
        """Its record lifts a tombstone an earlier leave left (``floydd join`` again)."""
        self._beat_now = asyncio.Event()

    async def keep_membership(self) -> None:
        """Announce this node (address, resources), get it a learner seat if it has none, and
        send heartbeats (``node.health``)."""
        loop = asyncio.get_running_loop()
        leaderless_since = loop.time()
        next_beat = 0.0
        period = min(self.config.rejoin_interval, self.config.heartbeat_interval) / 2
        while True:
            wait = period
            if self.announced and self.driver.alone:    # no seat to keep, no leader to lose: the beat
                wait = max(period, next_beat - loop.time())
            try:
                await asyncio.wait_for(self._beat_now.wait(), wait)
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
                if self.driver.is_leader and self.state.protocol < versions.PROTOCOL:
                    await self.commands.raise_level(timeout=self.config.heartbeat_interval)   # every box upgraded
                record = self.state.nodes.get(self.node_id) or {}
                if self.announced and self.node.settings is not None and versions.at_least(self.state, 2) \
                        and record.get("config") != self.node.settings:
                    self.announced = False         # say the settings now the cluster takes them
                if not self.announced:
                    await self.commands.propose(await self.record(), timeout=2 * self.config.rejoin_interval)
                    self.announced = True
                    next_beat = now + self.config.heartbeat_interval
                    _log.info("[%s] announced to the cluster as %s at %s", self.node_id, self.node.name,
                              self.transport.advertise)
                if self.node_id not in conf_members or now - leaderless_since > self.config.rejoin_interval:
                    await self.commands.propose({"op": commands.CONF_OP, "change": "add_learner",
                                                 "node": self.node_id}, timeout=2 * self.config.rejoin_interval)
                    leaderless_since = loop.time()
                # a box the leader marked suspect is back in touch: say so (with its live runs) now
                suspect = (self.state.nodes.get(self.node_id) or {}).get("status") == "suspect"
                if (now >= next_beat or suspect or self._beat_now.is_set()) and self.driver.leader_id is not None:
                    self._beat_now.clear()
                    next_beat = now + self.config.heartbeat_interval
                    beat = {"op": "node.health", "id": self.node_id,
                            "status": "draining" if self.node.draining else "up", **await self._procs()}
                    if self.usage is not None:
                        beat["usage"] = self.usage()
                    head = self.state.audit.head() if versions.at_least(self.state, 3) else None
                    if head is not None:                     # compared by each box (floydd.cluster.audit_guard)
                        beat["audit_head"] = head.wire()
                    clock = await self.clocks.measure() if versions.at_least(self.state, 3) else None
                    if clock is not None:                    # shown, never decided on (floydd.cluster.clockskew)
                        beat["clock"] = clock.wire()
                    await self.commands.propose(beat, timeout=self.config.heartbeat_interval)
            except Conflict as exc:
                _log.error("[%s] %s (%s)", self.node_id, exc, exc.hint)
                if exc.code == "node_removed":
                    return
            except FloyddError as exc:
                _log.debug("[%s] membership upkeep: %s", self.node_id, exc)

    async def record(self) -> dict:
        """This node's record (with its live runs); a box alone, with no listener, has no
        address (port 0)."""
        host, _, port = (self.transport.advertise or "").rpartition(":")
        cmd = {"op": "node.upsert", "id": self.node_id, "name": self.node.name, "address": host.strip("[]"),
               "cluster_port": int(port or 0), "api_port": self.node.api_port, "resources": self.node.resources,
               "labels": self.node.labels, **await self._procs()}
        if self.rejoin:
            cmd["rejoin"] = True
        if self.node.settings is not None and versions.at_least(self.state, 2):   # an 0.1 leader takes no config
            cmd["config"] = self.node.settings
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
