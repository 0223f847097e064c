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
    big = sorted((len(n.gpus) for n in nodes), reverse=True)
    if len(big) >= count and big[count - 1] >= gpus:
        return None
    have = ", ".join(f"{n.name} has {_count(len(n.gpus))}" for n in nodes) or "no nodes"
    if count == 1:
        return f"no node has {_count(gpus)} ({have})"
    return f"it needs {count} nodes with {_count(gpus)} each ({have})"


def place(nodes: list[NodeSnapshot], pending: list[PendingJob]) -> Plan:
    """Place ``pending`` (in submission order) on ``nodes``."""
    free = {n.name: list(n.free) for n in nodes if n.healthy}
    held = {n.name: dict(n.held) for n in nodes}
    placements: list[Placement] = []
    waiting: dict[str, str] = {}
    blocked_by: str | None = None
    load = {n.name: n.load for n in nodes if n.healthy}

    for job in pending:
        count = max(1, job.nodes)
        if job.gpus <= 0:
            if len(load) >= count:
                chosen = sorted(load, key=lambda n: (load[n], n))[:count]
                for rank, name in enumerate(chosen):
                    load[name] += 1
                    placements.append(Placement(key=job.key, node=name, gpus=(), rank=rank))
            else:
                waiting[job.key] = ("waiting for a healthy node" if count == 1 else
                                    f"waiting for {count} healthy nodes ({len(load)} now)")
            continue
        if blocked_by is not None:
            waiting[job.key] = f"queued behind {blocked_by}, which waits for GPUs"
            continue
        fits = sorted((name for name in free if len(free[name]) >= job.gpus),
                      key=lambda n: (len(free[n]) - job.gpus, n))
        if len(fits) < count:
            waiting[job.key] = _why_waiting(job, nodes, free, held)
            blocked_by = job.key
            continue
        for rank, name in enumerate(fits[:count]):
            take, free[name] = free[name][:job.gpus], free[name][job.gpus:]
            load[name] += 1
            for g in take:
                held[name][g] = job.key
            placements.append(Placement(key=job.key, node=name, gpus=tuple(take), rank=rank))
    return Plan(placements=tuple(placements), waiting=waiting)


def _why_waiting(job: PendingJob, nodes: list[NodeSnapshot], free: dict[str, list[int]],
                 held: dict[str, dict[int, str]]) -> str:
    parts = []
    for n in sorted(nodes, key=lambda n: n.name):
        if not n.healthy:
            parts.append(f"{n.name} is unhealthy")
            continue
        holders = sorted(set(held[n.name].values()))
        busy = f" (held by {', '.join(holders)})" if holders else ""
        parts.append(f"{n.name} has {len(free.get(n.name, []))} free{busy}")
    wanted = _count(job.gpus) if job.nodes <= 1 else f"{job.nodes} nodes with {_count(job.gpus)} free each"
    return f"waiting for {wanted}: " + "; ".join(parts)


def _count(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"
