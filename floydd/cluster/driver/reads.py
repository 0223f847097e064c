"""Linearizable reads for the raft driver (ReadIndex, Raft thesis section 6.4).

A part of :class:`~floydd.cluster.driver.loop.RaftDriver` (its ``reads``). A read asks the core for a read
index with a random context; the leader confirms it still leads with a heartbeat round and
answers with its commit index (a follower's request travels to the leader as a raft
message); the read then waits until this node has applied that index and runs on the
local state. Lost requests are retried with a new context every two election timeouts.
``stale=True`` skips all that and reads the local state as it is. Named queries
(:meth:`ClusterState.query`) can also be run by the leader itself (``via_leader``, over
``/cluster/v1/read``).

Some answers live only in the leader's memory, never in the log (why each queued job waits:
:mod:`floydd.jobs.waiting`): :meth:`Reads.serve` names such a read, which only a leader
answers, from its memory as it is (no ReadIndex: nothing there was committed).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Callable, Mapping

from floydd.cluster.driver._futures import settle
from floydd.cluster.driver.applied import Applier
from floydd.cluster.driver.seam import Loop
from floydd.cluster.net.transport import Transport
from floydd.cluster.raft import ProposalDropped, ReadState
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Unavailable

__all__ = ["Reads"]


class Reads:
    """Serves reads of ``state`` once ``applier`` got far enough; named reads the leader
    runs travel over ``transport``."""

    def __init__(self, loop: Loop, state: ClusterState, transport: Transport, applier: Applier) -> None:
        self._loop = loop
        self.state = state
        self._transport = transport
        self._applier = applier
        self._reads: dict[bytes, asyncio.Future] = {}                 # context -> its read index
        self._apply_waiters: list[tuple[int, asyncio.Future]] = []    # (index, future) until applied
        self._served: dict[str, Callable[[dict], Any]] = {}

    async def read(self, fn: Callable[[ClusterState], Any], *, stale: bool = False,
                   timeout: float | None = None) -> Any:
        """``fn(state)`` on a state at least as new as every write committed before the call
        (ReadIndex); with ``stale`` on the local state as it is."""
        if not stale:
            await self.read_index(timeout=timeout)
        return fn(self.state)

    async def read_index(self, *, timeout: float | None = None) -> int:
        """Confirm with the leader how far a linearizable read must see; wait until applied."""
        timeout = timeout or self._loop.config.read_timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        retry = 2 * self._loop.config.election_timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise Unavailable(f"no linearizable read within {timeout:.1f}s (leader unknown or unreachable)",
                                  hint="retry, or read this node's possibly stale state with --stale")
            self._loop.check_running()
            ctx = os.urandom(8)
            fut = loop.create_future()

            def ask(ctx=ctx, fut=fut) -> None:
                self._reads[ctx] = fut
                try:
                    self._loop.node.read_index(ctx)
                except ProposalDropped as exc:
                    self._reads.pop(ctx, None)
                    settle(fut, exc)

            self._loop.submit(ask)
            try:
                index = await asyncio.wait_for(fut, min(remaining, retry))
            except ProposalDropped:
                await self._loop.leader_change(min(remaining, 0.2))
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

    async def answer_read(self, name: str, args: Mapping, timeout: float) -> Any:
        """A named read forwarded to this node as the leader (``/cluster/v1/read``)."""
        self._loop.require_leader()
        answer = self._served.get(name)
        if answer is not None:
            return answer(dict(args))
        return await self.read(lambda s: s.query(name, dict(args)), timeout=timeout)

    async def query(self, name: str, args: dict | None = None, *, stale: bool = False,
                    via_leader: bool = False, timeout: float | None = None) -> Any:
        """A named read (:meth:`ClusterState.query`, or one the leader answers from memory:
        :meth:`serve`); ``via_leader`` asks the leader to run it."""
        args = args or {}
        if name in self._served and self._loop.is_leader:
            return self._served[name](args)
        if name in self._served and (stale or not via_leader):
            raise Unavailable(f"only the leader answers {name}", hint="ask without --stale (via the leader)")
        if via_leader and not stale and not self._loop.is_leader:
            lead = self._loop.leader_id
            if lead is None:
                raise Unavailable("no leader known", hint="retry after the election")
            result, _ = await self._transport.forward_read(name, args, timeout or self._loop.config.read_timeout, peer=lead)
            return result
        return await self.read(lambda s: s.query(name, args), stale=stale, timeout=timeout)

    async def _applied_to(self, index: int, timeout: float) -> None:
        if self._applier.applied >= index:
            return
        fut = asyncio.get_running_loop().create_future()
        self._apply_waiters.append((index, fut))
        try:
            await asyncio.wait_for(fut, max(timeout, 0.001))
        except asyncio.TimeoutError:
            raise Unavailable(f"this node has not caught up to index {index}",
                              hint="retry, or read with --stale") from None

    def answered(self, read_states: tuple[ReadState, ...]) -> None:
        """The core answered these read requests with their read indexes."""
        for rs in read_states:
            fut = self._reads.pop(rs.context, None)
            if fut is not None and not fut.done():
                fut.set_result(rs.index)

    def caught_up(self) -> None:
        """The state was applied further: wake the reads waiting for it."""
        if not self._apply_waiters:
            return
        applied = self._applier.applied
        ready = [w for w in self._apply_waiters if w[0] <= applied]
        if ready:
            self._apply_waiters = [w for w in self._apply_waiters if w[0] > applied]
            for _, fut in ready:
                if not fut.done():
                    fut.set_result(None)

    def pending(self) -> list[asyncio.Future]:
        """Forget every read waiting here; their futures, for the loop to fail."""
        futures = list(self._reads.values()) + [f for _, f in self._apply_waiters]
        self._reads.clear()
        self._apply_waiters.clear()
        return futures
