"""Reads of the replicated state (:class:`~floydd.cluster.state.machine.ClusterState`): copies.

The state itself is only changed by ``apply``; every read here hands out a deep copy
(:func:`copy_of`), so a caller can never change the state by changing what it was given.
``query`` names the reads a follower forwards to the leader (``/cluster/v1/read``,
:mod:`floydd.cluster.driver.reads`). The reads of the derived index of active jobs (``held_gpus``,
``set_aside``, ...) are :mod:`floydd.cluster.state.index`'s.

Mixed into :class:`~floydd.cluster.state.machine.ClusterState`; pure, like the rest of it.
"""

from __future__ import annotations

from typing import Any, Mapping

import msgpack

from floydd.cluster.state import people
from floydd.errors import InvalidSpec

__all__ = ["Queries", "copy_of"]


class Queries:
    """The reads of :class:`~floydd.cluster.state.machine.ClusterState` (copies)."""

    @property
    def admins(self) -> list[str]:
        """The admins' names (people with role admin): none in a lab of one."""
        return people.admins(self.people)

    def job(self, key: str) -> dict:
        """The job, from the hot state or else the archive (NotFound if in neither)."""
        job = self.jobs.get(key)
        if job is None:
            job = self.archive.get(key)
        return copy_of(job if job is not None else self._job(key))

    def list_jobs(self, project: str | None = None, states=None) -> list[dict]:
        """Jobs in submission order."""
        return copy_of([j for j in self.jobs.values()
                      if (project is None or j["project"] == project) and (not states or j["state"] in states)])

    def list_nodes(self) -> list[dict]:
        return copy_of(list(self.nodes.values()))

    def list_datasets(self) -> list[dict]:
        return copy_of([v for d in self.datasets.values() for v in d["versions"].values()])

    def node_health(self, now: float, stale_after: float, ages: Mapping[str, float] | None = None) -> dict[str, str]:
        """Each node's status (``suspect``: the leader lost touch with it), ``stale`` when it
        says it is up but was last heard from over ``stale_after`` seconds ago: by ``ages``
        (node id -> seconds, this box's monotonic clock: :class:`floydd.cluster.heard.Heard`)
        when given, else by its last heartbeat's ``ts`` against ``now`` (same clock only)."""
        def age(nid: str, n: dict) -> float:
            return ages[nid] if ages is not None and nid in ages else now - n["last_heartbeat"]
        return {nid: ("stale" if n["status"] == "up" and age(nid, n) > stale_after
                      else n["status"]) for nid, n in self.nodes.items()}

    def query(self, name: str, args: dict | None = None) -> Any:
        """A named read, for reads forwarded to the leader (``/cluster/v1/read``)."""
        args = args or {}
        if name == "jobs":
            return self.list_jobs(args.get("project"), args.get("states"))
        if name == "job":
            return self.job(str(args.get("job")))
        if name == "nodes":
            return self.list_nodes()
        if name == "datasets":
            return self.list_datasets()
        if name == "tokens":
            return copy_of(self.trust.list_tokens())
        if name == "counts":
            return {"nodes": len(self.nodes), "jobs": len(self.jobs), "archived": self.archive.count(),
                    "datasets": sum(len(d["versions"]) for d in self.datasets.values())}
        raise InvalidSpec(f"unknown query {name!r}", hint="queries: jobs, job, nodes, datasets, counts, tokens")


def copy_of(value: Any) -> Any:
    """A deep copy of plain data (dicts, lists, scalars): callers never hold the state's own."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)
