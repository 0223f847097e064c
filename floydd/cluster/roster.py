"""The nodes as this box reports them: ``floydd members``, ``floyd nodes``, who has been
heard from, and the leader's calls on a node (suspect it, remove it).

A part of :class:`~floydd.cluster.service.ClusterService` (:class:`Roster`, its ``roster``;
the service offers these calls under the same names). It reads raft's configuration and
progress from the driver, the node table from the replicated state, when each node was
last heard from on this box's monotonic clock (:mod:`floydd.cluster.heard`), and the
columns other parts add for a member (its clock, its audit chain) through ``views``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from floydd.scheduler import storehealth
from floydd.cluster.config import ClusterConfig
from floydd.cluster.driver.loop import RaftDriver
from floydd.cluster.heard import Heard
from floydd.cluster.net.transport import Transport
from floydd.cluster.state import versions
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, NotFound

__all__ = ["Roster", "node_health_word"]


class Roster:
    """The node table with each node's health and raft seat; ``propose`` commits the
    service's commands (:meth:`floydd.cluster.writes.Commands.propose`); each of ``views``
    gives the columns a part adds to a member's row."""

    def __init__(self, *, node_id: str, config: ClusterConfig, driver: RaftDriver, state: ClusterState,
                 transport: Transport, heard: Heard, propose: Callable[..., Any],
                 views: Iterable[Callable[[str], dict]], clock: Callable[[], float]) -> None:
        self.node_id, self.config = node_id, config
        self.driver, self.state, self.transport, self.heard = driver, state, transport, heard
        self._propose, self._views, self._clock = propose, tuple(views), clock

    async def nodes(self, *, stale: bool = False) -> list[dict]:
        now = self._clock()
        return await self.driver.read(lambda s: _with_health(s, now, self.config.stale_after,
                                                             self.heard_ages()), stale=stale)

    def heard_ages(self) -> dict[str, float]:
        """Node id -> seconds since this box last heard from it (its own entry applied here),
        on this box's monotonic clock, for every node in the table (:mod:`floydd.cluster.heard`)."""
        return self.heard.ages(self.state.nodes)

    def silence(self) -> dict[str, float]:
        """Leader only: node id -> seconds since this leader last heard from that member over
        raft (0 for itself; since it was elected for a member it has not heard from). Nodes
        that are not members are left out: nothing is heard from them. Empty elsewhere."""
        if not self.driver.is_leader:
            return {}
        view = self.driver.autopilot_view()
        return {m.id: view.now - (view.leader_since if m.last_contact is None
                                  else max(m.last_contact, view.leader_since)) for m in view.members}

    async def suspect(self, node_id: str, *, timeout: float | None = None) -> None:
        """Leader only: mark ``node_id`` suspect (it lost touch with it; :mod:`floydd.scheduler.outages`)."""
        await self.driver.propose({"op": "node.health", "id": node_id, "status": "suspect", "ts": self._clock()},
                                  timeout=timeout, fenced=True)

    async def remove_node(self, node_id: str, *, user: str, timeout: float | None = None) -> None:
        """``floydd remove NODE``, an admin's command: take the node out of raft, tombstone it
        and revoke its certificates (each box refuses them from then on). A join that was
        redeemed but whose box never started (a certificate recorded, not a member) is
        cancelled the same way: it can never become a member with that certificate."""
        if node_id == self.node_id:
            raise Conflict("this is the node you are on", hint="use floydd leave here instead")
        if node_id not in self.state.nodes and not self.driver.in_conf(node_id):
            trust = self.state.trust
            if node_id in self.state.removed and (node_id not in trust.certs
                                                  or trust.join_cancelled(node_id, self.state.revoked)):
                return                                      # removed, or its join cancelled, already
            if node_id not in trust.certs:                  # else a join redeemed, not started: cancelled below
                raise NotFound(f"node {node_id} is not a member", code="node_not_found",
                               hint="floydd members lists the nodes and their ids; floydd token list the joins")
        else:
            await self.driver.change_membership("remove", node_id, timeout=timeout, user=user)
        await self._propose({"op": "node.remove", "id": node_id, "user": user}, timeout=timeout)

    def members(self) -> list[dict]:
        """Raft membership as this node sees it, with each member's name, address and health
        (the same as ``floyd nodes`` shows: :meth:`ClusterState.node_health`)."""
        st = self.driver.status()
        health = self.state.node_health(self._clock(), self.config.stale_after, self.heard_ages())
        out = []
        for node_id in sorted(set(st.voters) | set(st.learners) | set(self.state.nodes)):
            record = self.state.nodes.get(node_id, {})
            pr = st.progress.get(node_id)
            row = {"id": node_id, "name": record.get("name", ""),
                   "address": self.transport.address_of(node_id) or (self.transport.advertise
                                                                     if node_id == self.node_id else None),
                   "role": "voter" if node_id in st.voters else "learner" if node_id in st.learners else "none",
                   "leader": node_id == st.leader, "status": record.get("status"),
                   "health": storehealth.health_word(node_health_word(health.get(node_id)), record),
                   "store_why": storehealth.why(record), "match": pr.match if pr else None,
                   "cert_expires": (self.state.trust.certs.get(node_id) or {}).get("not_after"),
                   "version": (record.get("labels") or {}).get(versions.VERSION_LABEL, "0.1.x") if record else None,
                   "protocol": versions.node_protocol(record) if record else None}
            for view in self._views:
                row.update(view(node_id))
            out.append(row)
        return out


def _with_health(state: ClusterState, now: float, stale_after: float, ages: Mapping[str, float]) -> list[dict]:
    health = state.node_health(now, stale_after, ages)
    return [{**n, "health": health[n["id"]]} for n in state.list_nodes()]


def node_health_word(status: str | None) -> str:
    """A node's health as ``floyd nodes`` and ``floydd members`` both show it: ``healthy``
    (up), ``suspect`` (the leader lost touch), ``stale`` (its heartbeats stopped coming), its
    status otherwise (``draining``, ``off``, ``down``), ``unknown`` before its first report."""
    return "healthy" if status == "up" else status or "unknown"
