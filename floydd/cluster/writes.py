"""Writes for the cluster service: the commands the daemon proposes, and how they travel.

A part of :class:`~floydd.cluster.service.ClusterService` (:class:`Commands`, its
``commands``; the service offers each of its calls under the same name): one method per
command the rest of the daemon commits (jobs, project numbers, datasets, accounts; the node
commands are the service's own), each a thin wrapper that builds the command
(:mod:`floydd.cluster.state.commands`) and proposes it. :meth:`Commands.propose` stamps the
time and the cluster's level, signs a command made for the person whose personal token this
request presented
(:mod:`floydd.cluster.net.presented`: only from cluster level 3), and goes through
the leader when one is known; a node that hears from no leader (not a member yet) asks the
members it knows of, following a refusal that names the leader straight to it. A command
of a newer level first raises the cluster's level (:meth:`Commands.raise_level`), if every
box speaks it.

Leader actions (``job.place``, a leader's ``job.update``, ``admin.grant``, a holder change
about another node) skip all that: the driver proposes them fenced by the leader's term
(:mod:`floydd.cluster.driver.proposals`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable

from floydd.cluster.config import ClusterConfig
from floydd.cluster.driver.loop import RaftDriver
from floydd.cluster.net.transport import Transport
from floydd.cluster.state import versions
from floydd.cluster.state.machine import ClusterState
from floydd.cluster.net import leader_contact
from floydd.cluster.net.leader_contact import LeaderUnreachable
from floydd.cluster.net.presented import signed
from floydd.cluster.raft import ProposalDropped
from floydd.errors import FloyddError, Unavailable

__all__ = ["Commands"]


class Commands:
    """The commands this node commits: built here, proposed through ``driver`` (the leader),
    else forwarded by ``transport`` to one of ``contacts()``; ``state`` says the cluster's
    level and signs; ``clock`` stamps them."""

    def __init__(self, *, node_id: str, state: ClusterState, driver: RaftDriver, transport: Transport,
                 contacts: Callable[[], list[str]], config: ClusterConfig, clock: Callable[[], float]) -> None:
        self.node_id = node_id
        self.state, self.driver, self.transport = state, driver, transport
        self.config = config
        self._contacts, self._clock = contacts, clock

    async def submit_job(self, spec: dict, idem_key: str, *, project: str | None = None, user: str = "",
                         number: int | None = None, timeout: float | None = None, code_held: bool = False) -> dict:
        """Commit a new job (numbered in its project, or ``number``: a job this node queued
        before it had a control plane); the same ``idem_key`` always gives the same job, so a
        client may retry after a timeout. ``code_held``: this node holds the whole code tree
        (its first copy, from level 3: :mod:`floydd.cluster.state.code`)."""
        spec = dict(spec)
        project = project or spec.pop("project", None)
        cmd = {"op": "job.submit", "idem_key": idem_key, "project": project, "spec": spec,
               "origin": self.node_id, "user": user}
        if code_held and versions.at_least(self.state, 3):
            cmd["code_held"] = True
        if number is not None:
            cmd["number"] = number
        return await self.propose(cmd, timeout=timeout)

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
        return await self.propose({"op": "job.update", "job": job, **fields}, timeout=timeout)

    async def leader_update_job(self, job: str, *, timeout: float | None = None, **fields: Any) -> dict:
        """Leader only: a job.update fenced by this leader's term (requeue, unknown, lost of the
        jobs of silent boxes): the leader speaks for no box, so only its term vouches for it."""
        return await self.driver.propose({"op": "job.update", "job": job, "ts": self._clock(), **fields},
                                         timeout=timeout, fenced=True)

    async def reserve_numbers(self, project: str, number: int, *, timeout: float | None = None) -> int:
        """Number later jobs of ``project`` above ``number``; the project's counter after it."""
        return await self.propose({"op": "project.reserve", "project": project, "number": number}, timeout=timeout)

    async def allocate_numbers(self, project: str, keys: list[str], *, timeout: float | None = None) -> dict[str, int]:
        """A job number in ``project`` for each import key (the same one for a key seen before):
        :mod:`floydd.cluster.state.imported`."""
        return await self.propose({"op": "project.allocate", "project": project, "keys": list(keys)}, timeout=timeout)

    async def import_job(self, fields: dict, *, timeout: float | None = None) -> dict:
        """Commit a finished job brought from another site, held by this node, under the number
        its key was allocated (``job.import``)."""
        return await self.propose({"op": "job.import", **fields, "node": self.node_id}, timeout=timeout)

    async def delete_job(self, job: str, *, user: str = "", timeout: float | None = None) -> None:
        await self.propose({"op": "job.delete", "job": job, "user": user}, timeout=timeout)

    async def add_dataset_version(self, name: str, tree: str, *, idem_key: str | None = None,
                                  timeout: float | None = None, **fields: Any) -> dict:
        cmd = {"op": "dataset.add_version", "name": name, "tree": tree, "node": self.node_id, **fields}
        if idem_key is not None:
            cmd["idem_key"] = idem_key
        return await self.propose(cmd, timeout=timeout)

    async def delete_dataset(self, name: str, version: int | None = None, *, user: str = "",
                             timeout: float | None = None) -> None:
        """Drop one version (or, with ``version=None``, every version) from the catalog, for
        ``user`` (who added them, or an admin)."""
        await self.propose({"op": "dataset.delete", "name": name, "version": version, "user": user},
                            timeout=timeout)

    async def set_dataset_holder(self, name: str, version: int, *, holds: bool, node: str | None = None,
                                 timeout: float | None = None, failed: str | None = None) -> dict:
        """Record that ``node`` (this one by default) holds a version's data, or no longer does;
        about another node only the leader says so (fenced by its term)."""
        cmd = {"op": "dataset.holders", "name": name, "version": version, "node": node or self.node_id,
               "holds": holds}
        if failed is not None:              # level 3: this box could not keep a copy, and why
            cmd["failed"] = failed[:300]
        if cmd["node"] != self.node_id:
            return await self.driver.propose({**cmd, "ts": self._clock()}, timeout=timeout, fenced=True)
        return await self.propose(cmd, timeout=timeout)

    async def set_code_holder(self, tree: str, *, holds: bool, node: str | None = None,
                              timeout: float | None = None) -> dict:
        """Record that ``node`` (this one by default) holds job code tree ``tree``, or no longer
        does (level 3: :mod:`floydd.cluster.state.code`); about another node only the leader."""
        cmd = {"op": "code.holders", "tree": tree, "node": node or self.node_id, "holds": holds}
        if cmd["node"] != self.node_id:
            return await self.driver.propose({**cmd, "ts": self._clock()}, timeout=timeout, fenced=True)
        return await self.propose(cmd, timeout=timeout)

    async def change_account(self, cmd: dict, *, timeout: float | None = None) -> Any:
        """A ``person.*`` (:mod:`floydd.cluster.state.people`) or ``apitoken.*`` command
        (:mod:`floydd.cluster.state.apitokens`) for the person named in its ``user``."""
        if not cmd.get("op", "").startswith(("person.", "apitoken.")):
            raise ValueError(f"not a person.* or apitoken.* command: {cmd.get('op')}")
        return await self.propose(cmd, timeout=timeout)

    async def grant_admin(self, user: str, *, timeout: float | None = None) -> list[str]:
        """Record ``user`` as the cluster's first admin (``floydd init``); the leader alone, once."""
        return await self.driver.propose({"op": "admin.grant", "user": user, "ts": self._clock()},
                                         timeout=timeout, fenced=True)

    async def raise_level(self, level: int = versions.PROTOCOL, *, timeout: float | None = None) -> int:
        """Raise the cluster's level to ``level`` if every box speaks it (:mod:`floydd.cluster.state.versions`);
        the level now, as this box has applied it."""
        if self.state.protocol < level <= versions.cluster_level(self.state):
            timeout = timeout or self.config.propose_timeout
            await self.driver.propose({"op": versions.OP, "level": level, "ts": self._clock()}, timeout=timeout)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while self.state.protocol < level and loop.time() < deadline:   # committed: applied here soon
                await asyncio.sleep(0.01)
        return self.state.protocol

    async def propose(self, cmd: dict, *, timeout: float | None = None) -> Any:
        """Through the leader when one is known; else through any member we know of (a node
        that is not a member yet hears from no leader), again and again while they know no
        leader either (an election) until the time is up. A command of a newer level first
        switches that level on, if every box speaks it (else it is refused, saying which do not)."""
        if versions.needs(cmd) > self.state.protocol:
            await self.raise_level(versions.needs(cmd), timeout=timeout)
        cmd = versions.stamped(self.state, {**cmd, "ts": self._clock()})
        cmd = signed(self.state, cmd, self.node_id)     # level 3: signed by a presented token; sign-in checked
        if self.driver.leader_id is not None or not self._contacts():
            return await self.driver.propose(cmd, timeout=timeout)
        watch = leader_contact.watched(cmd)     # not a box's own way back in (its seat, its record)
        if watch and (cut_off := self.driver.leader_unreachable()) is not None:
            raise cut_off               # a member on the wrong side of a cut: say so now (leader_contact)
        timeout = timeout or self.config.propose_timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: FloyddError = Unavailable("no member reachable")
        while True:                         # until a member takes it, or the time is up
            election = False                # a member knew no leader: ask again once there is one
            for address in self._contacts():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    result, _ = await self.driver.unless_cut_off(
                        self.transport.forward_propose(cmd, remaining, address=address, forwarded=False), watch=watch)
                    return result
                except LeaderUnreachable:
                    raise
                except ProposalDropped as exc:  # not the leader: it named the leader, and where it is
                    last = exc
                    election = election or exc.leader is None
                    if exc.leader is None or self.transport.address_of(exc.leader) is None:
                        continue
                    try:                        # straight to the leader: a relay would be the proposer
                        result, _ = await self.driver.unless_cut_off(
                            self.transport.forward_propose(cmd, remaining, peer=exc.leader), watch=watch)
                        return result
                    except LeaderUnreachable:
                        raise
                    except Unavailable as again:
                        last = again
                except Unavailable as exc:
                    last = exc
            remaining = deadline - loop.time()
            if remaining <= 0 or not election:
                raise last              # unreachable members, or a refusal: nothing to wait for
            if self.driver.leader_id is not None:       # the election ended: this box hears the leader
                return await self.driver.propose(cmd, timeout=remaining)
            await asyncio.sleep(min(0.1, remaining))    # the members know no leader yet: an election
