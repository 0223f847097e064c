"""Placement: a pure function from a snapshot to a plan.

``place(nodes, pending)`` decides which queued jobs start where and, for the
others, says in words why they wait. No I/O and no clock reads: everything it
needs is in its arguments, so tests call it directly and the leader can re-check
a plan against current state before committing it.

Policy (``fifo``): jobs are taken in submission order. A GPU job that cannot be
placed blocks later GPU jobs (no starvation of big jobs by a stream of small
ones); CPU-only jobs never wait for GPUs and go to the healthy node running the fewest
jobs (counting those placed by the same plan), ties broken by name. Among nodes that fit, the one with the
fewest free GPUs left afterwards wins (best fit keeps big holes for big jobs),
ties broken by name; within a node the lowest free GPU indices are taken.

A gang job (``nodes`` > 1, distributed training) needs that many *different* nodes, each
with ``gpus`` free GPUs (or, for CPU gangs, the least-loaded healthy nodes); it is placed
whole or not at all, one :class:`Placement` per part with its ``rank`` (rank 0 on the node
that fits best), and a GPU gang that waits blocks later GPU jobs like any GPU job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush

__all__ = ["NodeSnapshot", "PendingJob", "Placement", "Plan", "place", "unplaceable"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSnapshot:
    """What placement knows of one node."""

    name: str
    gpus: tuple[int, ...] = ()
    """Indices of all GPUs on the node."""
    held: dict[int, str] = field(default_factory=dict)
    """GPU index -> key of the job holding it."""
    healthy: bool = True
    load: int = 0
    """Jobs active on the node (CPU jobs go where the fewest run)."""

    @property
    def free(self) -> tuple[int, ...]:
        return tuple(g for g in self.gpus if g not in self.held)


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingJob:
    key: str
    gpus: int = 0
    """GPUs per node."""
    nodes: int = 1
    """Nodes the job spans (a gang when > 1)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    key: str
    node: str
    gpus: tuple[int, ...]
    rank: int = 0
    """Which part of a gang this is (0 for a job on one node)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    placements: tuple[Placement, ...] = ()
    waiting: dict[str, str] = field(default_factory=dict)
    """Job key -> why it waits (one sentence, shown by ``floyd status``)."""


def unplaceable(nodes: list[NodeSnapshot], gpus: int, count: int = 1) -> str | None:
    """Why a job wanting ``gpus`` GPUs on each of ``count`` nodes can never run on these
    nodes, or None if it can."""
    if gpus <= 0:
        if count == 1:
            return None if any(n.healthy for n in nodes) else "no healthy node"
        # a gang may wait for a box that is down for now; only too few boxes is hopeless
        return None if len(nodes) >= count else f"it needs {count} nodes, the cluster has {len(nodes)}"
    if sum(1 for n in nodes if len(n.gpus) >= gpus) >= count:
        return None
    have = ", ".join(f"{n.name} has {_count(len(n.gpus))}" for n in nodes) or "no nodes"
    if count == 1:
        return f"no node has {_count(gpus)} ({have})"
    return f"it needs {count} nodes with {_count(gpus)} each ({have})"


def place(nodes: list[NodeSnapshot], pending: list[PendingJob]) -> Plan:
    """Place ``pending`` (in submission order) on ``nodes`` (each name once).

    Takes O((nodes + jobs) log nodes): nodes wait in heaps by free GPUs and by load, rather
    than being sorted again for each job."""
    free = {n.name: [g for g in n.gpus if g not in n.held] if n.held else list(n.gpus)
            for n in nodes if n.healthy}
    best_fit = _BestFit(free)
    load = _Load({n.name: n.load for n in nodes if n.healthy})
    placements: list[Placement] = []
    waiting: dict[str, str] = {}
    blocked_by: str | None = None

    for job in pending:
        count = max(1, job.nodes)
        if job.gpus <= 0:
            if len(load.jobs) >= count:
                for rank, name in enumerate(load.least(count)):
                    placements.append(Placement(key=job.key, node=name, gpus=(), rank=rank))
            else:
                waiting[job.key] = ("waiting for a healthy node" if count == 1 else
                                    f"waiting for {count} healthy nodes ({len(load.jobs)} now)")
            continue
        if blocked_by is not None:
            waiting[job.key] = f"queued behind {blocked_by}, which waits for GPUs"
            continue
        fits = best_fit.take(job.gpus, count)
        if fits is None:
            waiting[job.key] = _why_waiting(job, nodes, free, placements)
            blocked_by = job.key
            continue
        for rank, name in enumerate(fits):
            take, free[name] = free[name][:job.gpus], free[name][job.gpus:]
            best_fit.put(name)
            load.add(name)
            placements.append(Placement(key=job.key, node=name, gpus=tuple(take), rank=rank))
    return Plan(placements=tuple(placements), waiting=waiting)


class _BestFit:
    """Healthy nodes with free GPUs by how many: ``by_free[k]`` is a heap of the names of
    nodes with ``k`` free, so the best fit for a job is the first name of the first non-empty
    heap from its size up, without sorting every node for every job. A node chosen is taken
    out of its heap and put back in the one of what it has left."""

    def __init__(self, free: dict[str, list[int]]) -> None:
        self.free = free
        self.by_free: list[list[str]] = [[] for _ in range(1 + max(map(len, free.values()), default=0))]
        for name, gpus in free.items():
            if gpus:
                self.by_free[len(gpus)].append(name)
        for names in self.by_free:
            heapify(names)

    def take(self, gpus: int, count: int) -> list[str] | None:
        """The ``count`` nodes left with the fewest free after giving ``gpus`` on each (ties by
        name), best first, taken out until :meth:`put` back; None if fewer fit."""
        fits: list[str] = []
        for k in range(gpus, len(self.by_free)):
            names = self.by_free[k]
            while names and len(fits) < count:
                fits.append(heappop(names))
            if len(fits) == count:
                return fits
        for name in fits:
            self.put(name)
        return None

    def put(self, name: str) -> None:
        """Count ``name`` again, with the free GPUs it has now."""
        if self.free[name]:
            heappush(self.by_free[len(self.free[name])], name)


class _Load:
    """Jobs on each healthy node, the least loaded first (ties by name). Its heap is made at
    the first CPU job, so plans of GPU jobs only never pay for it; a node's load only grows,
    so an entry older than the node's load is stale and dropped when met."""

    def __init__(self, jobs: dict[str, int]) -> None:
        self.jobs = jobs
        self._heap: list[tuple[int, str]] | None = None

    def add(self, name: str) -> None:
        self.jobs[name] += 1
        if self._heap is not None:
            heappush(self._heap, (self.jobs[name], name))

    def least(self, count: int) -> list[str]:
        """The ``count`` (at most the number of nodes) least loaded nodes, each given one job."""
        if self._heap is None:
            self._heap = [(n, name) for name, n in self.jobs.items()]
            heapify(self._heap)
        chosen: list[str] = []
        while len(chosen) < count:
            n, name = heappop(self._heap)
            if self.jobs[name] == n:
                chosen.append(name)
        for name in chosen:                     # only now: a node is chosen once per job
            self.add(name)
        return chosen


def _why_waiting(job: PendingJob, nodes: list[NodeSnapshot], free: dict[str, list[int]],
                 placed: list[Placement]) -> str:
    planned: dict[str, set[str]] = {}           # node -> jobs this plan gave GPUs there
    for p in placed:
        if p.gpus:
            planned.setdefault(p.node, set()).add(p.key)
    parts = []
    for n in sorted(nodes, key=lambda n: n.name):
        if not n.healthy:
            parts.append(f"{n.name} is unhealthy")
            continue
        holders = sorted(set(n.held.values()).union(planned.get(n.name, ())))
        busy = f" (held by {', '.join(holders)})" if holders else ""
        parts.append(f"{n.name} has {len(free.get(n.name, []))} free{busy}")
    wanted = _count(job.gpus) if job.nodes <= 1 else f"{job.nodes} nodes with {_count(job.gpus)} free each"
    return f"waiting for {wanted}: " + "; ".join(parts)


def _count(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"
