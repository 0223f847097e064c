"""Who this node has heard from, and when: the driver's record for autopilot and for refusing
writes while cut off from the leader.

A part of :class:`~floydd.cluster.driver.loop.RaftDriver` (its ``contact``): the loop notes
every peer a raft message comes from and every word from (or news of) a leader; autopilot
(:mod:`floydd.cluster.driver.membership`) reads how long each member has been in touch, and
a write is refused at once while this box is cut off (:mod:`floydd.cluster.net.leader_contact`,
which this feeds with the times on the loop's clock).
"""

from __future__ import annotations

import asyncio

from floydd.cluster.config import ClusterConfig
from floydd.cluster.net import leader_contact
from floydd.cluster.raft import RaftNode, Role
from floydd.errors import Unavailable

__all__ = ["Contact"]


class Contact:
    def __init__(self, node_id: str, config: ClusterConfig) -> None:
        self.node_id = node_id
        self.config = config
        self.peers: dict[str, tuple[float, float]] = {}
        """peer -> (loop time of its last message, since when it has been in touch)."""
        self.leader_heard: float | None = None      # loop time of the last word from a leader
        self.started = 0.0

    def heard(self, peer: str) -> None:
        now = asyncio.get_running_loop().time()
        last, since = self.peers.get(peer, (None, now))
        if last is None or now - last > self.config.autopilot.contact_timeout:
            since = now
        self.peers[peer] = (now, since)

    def heard_leader(self) -> None:
        self.leader_heard = asyncio.get_running_loop().time()

    def followed_leader_heard(self, node: RaftNode | None) -> float | None:
        """For the raft clock: loop time of the last message from the leader ``node`` follows;
        None unless it is a follower of a leader it has heard."""
        if node is None or node.role != Role.FOLLOWER or node.lead is None or node.lead == self.node_id:
            return None
        return self.peers.get(node.lead, (None, None))[0]

    def leader_silent_for(self, lead: str | None) -> float | None:
        """Seconds since this node last heard from ``lead``, the leader it believes in (0 if
        that is itself); None when it knows of no leader."""
        if lead is None:
            return None
        if lead == self.node_id:
            return 0.0
        last = self.peers.get(lead, (None, None))[0]
        return None if last is None else asyncio.get_running_loop().time() - last

    def refusal(self, node: RaftNode, *, leader: bool) -> Unavailable | None:
        """The refusal for a write while ``node`` (this box's raft core, running) is cut off
        from the cluster's leader, or None."""
        conf = node.status().conf
        now = asyncio.get_running_loop().time()
        silent = leader_contact.silent_for(
            me=self.node_id, now=now, leader=leader, voters=conf.voters, members=conf.members,
            heard={peer: last for peer, (last, _since) in self.peers.items()},
            leader_heard=self.leader_heard, started=self.started, after=self.config.leader_lost_after)
        return None if silent is None else leader_contact.refusal(silent, ever=self.leader_heard is not None)
