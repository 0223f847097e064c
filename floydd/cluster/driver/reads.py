"""Linearizable reads for the raft driver (ReadIndex, Raft thesis section 6.4).

A mixin of :class:`~floydd.cluster.driver.loop.RaftDriver`. A read asks the core for a read
index with a random context; the leader confirms it still leads with a heartbeat round and
answers with its commit index (a follower's request travels to the leader as a raft
message); the read then waits until this node has applied that index and runs on the
local state. Lost requests are retried with a new context every two election timeouts.
``stale=True`` skips all that and reads the local state as it is. Named queries
(:meth:`ClusterState.query`) can also be run by the leader itself (``via_leader``, over
``/cluster/v1/read``).

Some answers live only in the leader's memory, never in the log (why each queued job waits:
:mod:`floydd.jobs.waiting`): :meth:`ReadsMixin.serve` names such a read, which only a leader
answers, from its memory as it is (no ReadIndex: nothing there was committed).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Callable, Mapping

from floydd.cluster.driver._futures import settle
from floydd.cluster.raft import ProposalDropped
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Unavailable

__all__ = ["ReadsMixin"]


class ReadsMixin:
    """Methods of RaftDriver that serve reads."""

    async def read(self, fn: Callable[[ClusterState], Any], *, stale: bool = False,
                   timeout: float | None = None) -> Any:
        """``fn(state)`` on a state at least as new as every write committed before the call
        (ReadIndex); with ``stale`` on the local state as it is."""
        if not stale:
            await self.read_index(timeout=timeout)
        return fn(self.state)

    async def read_index(self, *, timeout: float | None = None) -> int:
        """Confirm with the leader how far a linearizable read must see; wait until applied."""
        timeout = timeout or self.config.read_timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        retry = 2 * self.config.election_timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise Unavailable(f"no linearizable read within {timeout:.1f}s (leader unknown or unreachable)",
                                  hint="retry, or read this node's possibly stale state with --stale")
            self._check_running()
            ctx = os.urandom(8)
            fut = loop.create_future()

            def ask(ctx=ctx, fut=fut) -> None:
                self._reads[ctx] = fut
                try:
                    self._node.read_index(ctx)
                except ProposalDropped as exc:
                    self._reads.pop(ctx, None)
                    settle(fut, exc)

            self._submit(ask)
            try:
                index = await asyncio.wait_for(fut, min(remaining, retry))
            except ProposalDropped:
                await self._leader_change(min(remaining, 0.2))
                continue
            except asyncio.TimeoutError:
                self._reads.pop(ctx, None)
                continue
            await self._applied_to(index, deadline - loop.time())
            return index

    def serve(self, name: str, answer: Callable[[dict], Any]) -> None:
        """Answer the named read ``name`` with ``answer(args)`` from this node's memory, while
        it leads (a read of what the leader knows and never commits)."""
        self._served[name] = answer

    @property
    def _served(self) -> dict[str, Callable[[dict], Any]]:
        served = self.__dict__.get("_served_reads")
        if served is None:
            served = self.__dict__["_served_reads"] = {}
        return served

    async def answer_read(self, name: str, args: Mapping, timeout: float) -> Any:
        """A named read forwarded to this node as the leader (``/cluster/v1/read``)."""
        self._require_leader()
        answer = self._served.get(name)
        if answer is not None:
            return answer(dict(args))
        return await self.read(lambda s: s.query(name, dict(args)), timeout=timeout)

    async def query(self, name: str, args: dict | None = None, *, stale: bool = False,
                    via_leader: bool = False, timeout: float | None = None) -> Any:
        """A named read (:meth:`ClusterState.query`, or one the leader answers from memory:
        :meth:`serve`); ``via_leader`` asks the leader to run it."""
        args = args or {}
        if name in self._served and self.is_leader:
            return self._served[name](args)
        if name in self._served and (stale or not via_leader):
            raise Unavailable(f"only the leader answers {name}", hint="ask without --stale (via the leader)")
        if via_leader and not stale and not self.is_leader:
            lead = self.leader_id
            if lead is None:
                raise Unavailable("no leader known", hint="retry after the election")
            result, _ = await self.transport.forward_read(name, args, timeout or self.config.read_timeout, peer=lead)
            return result
        return await self.read(lambda s: s.query(name, args), stale=stale, timeout=timeout)

    async def _applied_to(self, index: int, timeout: float) -> None:
        if self._applied >= index:
            return
        fut = asyncio.get_running_loop().create_future()
        self._apply_waiters.append((index, fut))
        try:
            await asyncio.wait_for(fut, max(timeout, 0.001))
        except asyncio.TimeoutError:
            raise Unavailable(f"this node has not caught up to index {index}",
                              hint="retry, or read with --stale") from None

    def _wake_readers(self) -> None:
        if not self._apply_waiters:
            return
        ready = [w for w in self._apply_waiters if w[0] <= self._applied]
        if ready:
            self._apply_waiters = [w for w in self._apply_waiters if w[0] > self._applied]
            for _, fut in ready:
                if not fut.done():
                    fut.set_result(None)
