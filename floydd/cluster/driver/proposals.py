"""Proposals for the raft driver: committing a command, forwarding it, fencing a leader action.

A part of :class:`~floydd.cluster.driver.loop.RaftDriver` (its ``proposals``). On the leader the command goes into
the log and the caller's future resolves when an entry at that index is applied: with the
state machine's result (or its rejection) if the entry's term is the proposal's, with
:class:`ProposalDropped` if a new leader overwrote it. On a follower the command is
forwarded to the leader (``/cluster/v1/propose``, answered here by :meth:`on_propose`);
dropped or unanswered proposals are retried until the timeout, which is safe because
commands are idempotent (``job.submit`` by its idempotency key). Every command is stamped
with its proposer (this node, or the verified certificate of the node that forwarded it).
A command made for a person is first signed by the personal token presented for the request
being served, if any, and refused at once if this box may not act for that person
(:func:`floydd.cluster.net.presented.signed`; every box checks again on apply).

A box cut off from the leader (:mod:`floydd.cluster.net.leader_contact`: no word from a leader,
nor from a majority of the voters, for a few election timeouts) refuses a write at once, and
gives up on one already waiting as soon as it finds itself cut off, saying so instead of
waiting out the timeout.

A *fenced* proposal (a leader action such as ``job.place``) is stamped with the leader's
term at the instant it enters the log, is never forwarded or retried, and the state
machine refuses it unless that term is its entry's term.
"""

from __future__ import annotations

import asyncio
from typing import Any

from floydd import log
from floydd.cluster.state import commands, versions
from floydd.cluster.net import leader_contact
from floydd.cluster.driver._futures import settle
from floydd.cluster.state.authz import authorize_conf, joining_may_propose
from floydd.cluster.driver.membership import check_conf, enter_conf_change
from floydd.cluster.driver.seam import Loop
from floydd.cluster.net.presented import signed
from floydd.cluster.net.transport import Transport
from floydd.cluster.raft import Entry, ProposalDropped
from floydd.cluster.state.machine import ClusterState
from floydd.errors import FloyddError, Forbidden, InternalError, InvalidSpec, Unavailable

__all__ = ["Proposals"]

_WATCH = 0.1
"""Seconds between looks at the leader's contact while a write waits."""

_log = log.cluster.getChild("driver")


class Proposals:
    """Puts commands in the log, here or through the leader (``transport``), and answers
    each proposal's caller when its entry is applied (:meth:`resolve`)."""

    def __init__(self, loop: Loop, state: ClusterState, transport: Transport) -> None:
        self._loop = loop
        self.state = state
        self._transport = transport
        self._waiters: dict[int, tuple[int, asyncio.Future]] = {}
        """log index -> (term, future) of a proposal entered here."""

    async def propose(self, cmd: dict, *, timeout: float | None = None, fenced: bool = False) -> Any:
        """Commit ``cmd`` and return the state machine's result (raising its rejection).

        ``fenced``: a leader action; only the leader may propose it, its term is stamped into
        the command as it enters the log, and it is neither forwarded nor retried.

        Raises :class:`Unavailable` when it could not be committed in ``timeout``: the
        command may or may not be in the log then; retry it (idempotent commands only).
        """
        timeout = timeout or self._loop.config.propose_timeout
        if cmd.get("op") == commands.CONF_OP:
            check_conf(cmd)
        else:
            cmd = versions.stamped(self.state, cmd)     # refused above the cluster's level; v from level 2
            if "term" in cmd or (cmd.get("op") in commands.FENCED_OPS and not fenced):
                raise InvalidSpec(f"{cmd.get('op')}: propose a leader action with fenced=True, without a term",
                                  hint="the driver stamps the term when the command enters the log")
            commands.check({**cmd, "term": 0} if fenced else cmd)
        cmd = signed(self.state, cmd, self._loop.node_id)     # level 3: a presented token signs; sign-in checked here
        if fenced:
            self._loop.require_leader()
            try:
                return await self._propose_here(cmd, True, timeout)
            except asyncio.TimeoutError:
                raise Unavailable(f"{cmd['op']} was not committed within {timeout:.1f}s",
                                  hint="its outcome is unknown: read the state before deciding again") from None
        watch = leader_contact.watched(cmd)    # a box's own way back in is never cut short
        if watch:
            self._refuse_if_cut_off()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pause, why = 0.005, "no leader"
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise Unavailable(f"{cmd.get('op')} was not committed within {timeout:.1f}s ({why})",
                                  hint="retry; a retry with the same idempotency key never makes a second job")
            self._loop.check_running()
            if watch:
                self._refuse_if_cut_off()
            lead = self._loop.node.lead
            try:
                if lead == self._loop.node_id:
                    return await self.unless_cut_off(self._propose_here(cmd, False, remaining), watch=watch)
                if lead is not None:
                    result, _ = await self.unless_cut_off(self._transport.forward_propose(cmd, remaining, peer=lead),
                                                          watch=watch)
                    return result
                await self._loop.leader_change(min(remaining, 0.2))
                continue
            except leader_contact.LeaderUnreachable:
                raise
            except Unavailable as exc:      # dropped, the leader unreachable, or no answer in time
                why = str(exc)
            except asyncio.TimeoutError:
                why = "timed out waiting for the commit"
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            pause = min(pause * 2, 0.1)

    async def unless_cut_off(self, awaitable: Any, *, watch: bool = True) -> Any:
        """Await ``awaitable``, giving up with the loop's :meth:`~floydd.cluster.driver.seam.Loop.leader_unreachable` refusal as soon as
        this box finds itself cut off (a forward to a leader behind a cut otherwise waits out
        its whole timeout). What was sent may still be committed: the refusal says a retry is
        safe. ``watch=False``: just await it (:data:`leader_contact.UPKEEP_OPS`)."""
        if not watch or self._loop.is_leader and self._loop.node.status().conf.voters <= {self._loop.node_id}:
            return await awaitable          # a box alone: nobody to be cut off from
        task = asyncio.ensure_future(awaitable)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=_WATCH)
                if done:
                    return task.result()
                refusal = self._loop.leader_unreachable()
                if refusal is not None:
                    raise refusal
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def _refuse_if_cut_off(self) -> None:
        refusal = self._loop.leader_unreachable()
        if refusal is not None:
            raise refusal

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
        proposer = peer or self._loop.node_id
        if joining and not joining_may_propose(cmd, proposer):
            _log.warning("[%s] refused %s from %s: its join has not completed", self._loop.node_id, cmd.get("op"), proposer)
            raise Forbidden(f"node {proposer} is not a member yet: it may only announce itself",
                            code="not_a_member", hint="start the daemon on the joined box; it completes the join")
        return await self._propose_here(cmd, False, timeout, proposer=proposer)

    async def _propose_here(self, cmd: dict, fenced: bool, timeout: float, *, proposer: str | None = None) -> Any:
        """Put ``cmd`` in the log here (the leader), stamped with its ``proposer`` (this node
        unless the transport says whose proposal it took)."""
        self._loop.check_running()
        cmd = {k: v for k, v in cmd.items() if k != "proposer"}
        if cmd.get("op") != commands.CONF_OP:
            cmd["proposer"] = proposer or self._loop.node_id
        if cmd.get("op") == commands.CONF_OP:
            check_conf(cmd)
            if self._loop.is_leader:      # who may change the membership (not a state-machine command)
                try:
                    authorize_conf(self.state, cmd, proposer or self._loop.node_id, self._loop.node_id)
                except Forbidden as exc:
                    _log.warning("[%s] refused %s %s of %s: %s", self._loop.node_id, cmd.get("op"), cmd.get("change"),
                                 cmd.get("node"), exc)
                    raise
        elif not fenced:
            commands.check(cmd)
        fut = asyncio.get_running_loop().create_future()

        def enter() -> None:
            node = self._loop.node
            try:
                if cmd.get("op") == commands.CONF_OP:
                    entry = enter_conf_change(node, cmd, fut)
                else:
                    entry = node.propose(commands.encode({**cmd, "term": node.term} if fenced else cmd))
            except FloyddError as exc:
                settle(fut, exc)
                return
            except Exception as exc:        # a bad proposal fails alone; the raft loop goes on
                _log.exception("[%s] proposing %s failed", self._loop.node_id, cmd.get("op"))
                settle(fut, InternalError(f"{cmd.get('op')} could not be proposed: {exc}"))
                return
            if entry is not None:
                self._waiters[entry.index] = (entry.term, fut)

        self._loop.submit(enter)
        return await asyncio.wait_for(fut, timeout)

    def resolve(self, e: Entry, result: Any, error: FloyddError | None) -> None:
        """Answer the proposal waiting on ``e``'s index, if any, by (index, term)."""
        waiter = self._waiters.pop(e.index, None)
        if waiter is None:
            return
        term, fut = waiter
        if fut.done():
            return
        if term != e.term:
            settle(fut, ProposalDropped("the proposal was replaced by a new leader's log", leader=self._loop.node.lead))
        elif error is not None:
            settle(fut, error)
        else:
            fut.set_result(result)

    def drop_through(self, index: int) -> None:
        """The state was replaced by a snapshot at ``index``: the proposals waiting on
        indexes it covers learn only that their outcome is unknown."""
        for i in [i for i in self._waiters if i <= index]:
            _, fut = self._waiters.pop(i)
            settle(fut, ProposalDropped("outcome unknown: state replaced by a snapshot", leader=self._loop.node.lead))

    def pending(self) -> list[asyncio.Future]:
        """Forget every proposal waiting here; their futures, for the loop to fail."""
        futures = [f for _, f in self._waiters.values()]
        self._waiters.clear()
        return futures
