"""Membership for the raft driver: conf changes, leadership hand-over, leaving, autopilot.

A part of :class:`~floydd.cluster.driver.loop.RaftDriver` (its ``membership``). Membership changes travel as raft conf
changes, one at a time; forwarded to the leader they are ``{"op": "raft.conf", "change":
add_learner | promote | remove, "node": id}``, idempotent (a change already in effect is
a no-op), and retried while the previous change is still being applied.

Clean shutdown (:meth:`transfer_leadership_and_leave`): the leader hands over to the most
caught-up voter in contact (TimeoutNow: the transferee campaigns at once, no election
timeout), then the node removes itself from the voters through the new leader. Autopilot
(:mod:`floydd.cluster.driver.autopilot`) runs on the leader every ``autopilot_interval`` over a
view built from raft progress and when each peer was last heard from.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from floydd import log
from floydd.cluster.state import commands
from floydd.cluster.driver.autopilot import Action, Member, View, decide
from floydd.cluster.driver.contact import Contact
from floydd.cluster.driver.seam import Loop
from floydd.cluster.raft import ConfChange, ConfChangeOp, Entry, ProposalDropped, RaftNode, Role
from floydd.errors import Conflict, FloyddError, InvalidSpec, Unavailable

__all__ = ["Membership", "check_conf", "enter_conf_change"]

_log = log.cluster.getChild("driver")
_CONF_OPS = {"add_learner": ConfChangeOp.ADD_LEARNER, "promote": ConfChangeOp.PROMOTE,
             "remove": ConfChangeOp.REMOVE}


class Membership:
    """Changes who is in the cluster through ``propose`` (:meth:`Proposals.propose
    <floydd.cluster.driver.proposals.Proposals.propose>`), hands leadership over, and runs
    autopilot on the leader over what ``contact`` heard."""

    def __init__(self, loop: Loop, contact: Contact, propose: Callable[..., Awaitable[Any]]) -> None:
        self._loop = loop
        self._contact = contact
        self._propose = propose
        self.leader_since = 0.0
        """Loop time at which this node last became the leader."""

    async def change_membership(self, change: str, node: str, *, timeout: float | None = None,
                                user: str | None = None) -> None:
        """``add_learner`` / ``promote`` / ``remove`` ``node``, through the leader; a no-op
        when it is already so. ``user``: the admin whose command this is (``floydd remove``);
        without one only the leader itself or the node about its own seat may ask
        (:func:`floydd.cluster.state.authz.authorize_conf`)."""
        cmd = {"op": commands.CONF_OP, "change": change, "node": node}
        if user is not None:
            cmd["user"] = user
        await self._propose(cmd, timeout=timeout)

    def in_conf(self, node_id: str | None) -> bool:
        """Whether ``node_id`` is a voter or learner in the configuration this node knows
        (checked on every node-to-node request: kept cheap); ``None``: whether it knows any
        configuration at all (a blank node that is joining knows none)."""
        node = self._loop.node
        if node is None:
            return False
        conf = node.tracker.conf
        if node_id is None:
            return bool(conf.voters)
        return node_id in conf.voters or node_id in conf.learners

    async def transfer_leadership(self, to: str | None = None, *, timeout: float = 5.0) -> str | None:
        """Hand leadership to ``to`` (default: the most caught-up voter in contact); returns
        the new leader, None if there is no other voter."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._loop.is_leader:
            target = to or self._transferee()
            if target is None:
                return None
            self._loop.submit(lambda: _quietly(self._loop.node.transfer_leadership, target))
            end = min(deadline, loop.time() + 2 * self._loop.config.election_timeout)
            while self._loop.is_leader and loop.time() < end:
                await self._loop.leader_change(end - loop.time())
            if loop.time() >= deadline and self._loop.is_leader:
                raise Unavailable(f"leadership was not taken over within {timeout:.1f}s")
        return self._loop.leader_id

    def _transferee(self) -> str | None:
        st = self._loop.node.status()
        others = [(pr.match, str(node)) for node, pr in st.progress.items()
                  if node != self._loop.node_id and node in st.conf.voters and pr.recent_active]
        return max(others)[1] if others else None

    async def transfer_leadership_and_leave(self, *, timeout: float | None = None) -> bool:
        """Clean shutdown: hand over leadership, then leave the voters (so turning boxes off
        one by one never costs the quorum). False when this is the last voter (it stays)."""
        timeout = timeout or self._loop.config.leave_timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        conf = self._loop.node.status().conf
        if self._loop.node_id not in conf.voters:
            return True
        if conf.voters == {self._loop.node_id}:
            if conf.learners:       # a box alone (a cluster of one) has nobody to tell
                _log.warning("[%s] last voter: stopping without leaving (the cluster is down until it is back)",
                             self._loop.node_id)
            return False
        if self._loop.is_leader:
            await self.transfer_leadership(timeout=max(0.1, deadline - loop.time()))
        await self.change_membership("remove", self._loop.node_id, timeout=max(0.1, deadline - loop.time()))
        _log.info("[%s] left the voters", self._loop.node_id)
        return True

    # -- autopilot (leader only) -------------------------------------------------------------

    def autopilot_view(self) -> View:
        st = self._loop.node.status()
        now = asyncio.get_running_loop().time()
        members = []
        for node in st.conf.members:
            pr = st.progress.get(node)
            last, since = self._contact.peers.get(node, (None, None))
            if node == self._loop.node_id:
                last = since = now
            members.append(Member(id=node, voter=node in st.conf.voters, match=pr.match if pr else 0,
                                  last_contact=last, contact_since=since))
        return View(leader=self._loop.node_id, now=now, leader_since=self.leader_since, commit=st.commit,
                    members=tuple(sorted(members, key=lambda m: str(m.id))))

    async def autopilot(self) -> None:
        while True:
            await self._loop.until_company()       # a box alone has no one to promote nor remove
            await asyncio.sleep(self._loop.config.autopilot_interval)
            if not self._loop.is_leader:
                continue
            action = decide(self.autopilot_view(), self._loop.config.autopilot)
            if action is None:
                continue
            _log.info("[%s] autopilot: %s %s: %s", self._loop.node_id, action.op, action.node, action.reason)
            try:
                await self._carry_out(action)
            except FloyddError as exc:
                _log.info("[%s] autopilot: %s %s not done: %s", self._loop.node_id, action.op, action.node, exc)

    async def _carry_out(self, action: Action) -> None:
        timeout = max(1.0, 4 * self._loop.config.election_timeout)
        if action.op == "demote":
            await self.change_membership("remove", action.node, timeout=timeout)
            await self.change_membership("add_learner", action.node, timeout=timeout)
        else:
            await self.change_membership(action.op, action.node, timeout=timeout)


def enter_conf_change(node: RaftNode, cmd: dict, fut: asyncio.Future) -> Entry | None:
    """Put the membership change ``cmd`` in ``node``'s log (in the loop, on the leader); None,
    ``fut`` answered, when it is already in effect."""
    change, target = cmd["change"], cmd["node"]
    conf = node.status().conf
    if node.role != Role.LEADER:
        raise ProposalDropped("not the leader", leader=node.lead)
    done = {"add_learner": target in conf.members, "promote": target in conf.voters,
            "remove": target not in conf.members}[change]
    if done:
        fut.set_result(None)
        return None
    if change == "remove" and conf.voters == {target}:
        raise Conflict(f"{target} is the last voter", code="last_voter",
                       hint="use `floydd recover` to restart a survivor as a new cluster")
    return node.propose_conf_change(ConfChange(_CONF_OPS[change], target))


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except ProposalDropped as exc:
        _log.debug("%s: %s", getattr(fn, "__name__", fn), exc)


def check_conf(cmd: dict) -> None:
    if cmd.get("change") not in _CONF_OPS or not isinstance(cmd.get("node"), str):
        raise InvalidSpec(f"a membership change is {{change: {'|'.join(_CONF_OPS)}, node: id}}")

