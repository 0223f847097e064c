"""Placement: a pure function from a snapshot to a plan.

``place(nodes, pending)`` decides which queued jobs start where and, for the
others, says in a short sentence why they wait (:mod:`floydd.scheduler.reasons`). No I/O
and no clock reads: everything it needs is in its arguments, so tests call it directly and
the leader can re-check a plan against current state before committing it.

What a job needs on each node: ``gpu_count`` free GPUs, ``cpu_milli`` thousandths of a core and
``memory`` bytes not set aside for the jobs already there (a node whose cores or memory are
not known is never short of them). A node admits jobs while it has all three.

Policy (``fifo``): jobs are taken in submission order, in two lanes. A GPU job that cannot
be placed blocks later GPU jobs (no starvation of big jobs by a stream of small ones); a
CPU-only job that waits for cores or memory blocks later CPU-only jobs the same way, but a
CPU job never waits for GPUs (nor a GPU job for a CPU job). Among nodes that fit a GPU job,
the one with the fewest free GPUs left afterwards wins (best fit keeps big holes for big
jobs); a CPU-only job goes to the healthy node running the fewest jobs (counting those
placed by the same plan). Among nodes that fit equally well, one holding the job's data
(``near``, best first) wins, then the first by name; within a node the lowest free GPU
indices are taken.

A gang job (``nodes`` > 1, distributed training) needs that many *different* nodes, each
with what it asks free (or, for CPU gangs, the least-loaded healthy nodes with room); it is
placed whole or not at all, one :class:`Placement` per part with its ``rank`` (rank 0 on the
node that fits best). A CPU gang waiting for enough nodes to be up blocks nothing.

Cost: O((nodes + jobs) log nodes), times the shapes of ask (cores, memory) in the queue:
nodes wait in heaps by free GPUs and by load (:mod:`floydd.scheduler.heaps`) rather than
being sorted again for each job, and a node that lacks a shape's cores or memory is met
once per shape, not once per job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from floydd.scheduler.heaps import BestFit, Load
from floydd.scheduler.reasons import blocked_reason, nodes_reason, why_waiting

__all__ = ["NodeSnapshot", "PendingJob", "Placement", "Plan", "place", "unplaceable"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSnapshot:
    """What placement knows of one node."""

    name: str
    gpu_ids: tuple[int, ...] = ()
    """Indices of all GPUs on the node."""
    held: dict[int, str] = field(default_factory=dict)
    """GPU index -> key of the job holding it."""
    healthy: bool = True
    draining: bool = False
    """Taking no new jobs for now (``floydd drain``): not placed on, but a job that would fit
    it waits for it rather than being refused."""
    trouble: str = ""
    """Why the node takes no new job although it is up (``disk full``, ``store failing``: what
    its heartbeat says of its store); "" when none. Such a node is not healthy."""
    load: int = 0
    """Jobs active on the node (CPU jobs go where the fewest run)."""
    cpu_milli: int | None = None
    """Thousandths of a core the node has (None: not known, never short)."""
    cpu_held: int = 0
    """Thousandths of a core set aside for the jobs active on it."""
    memory: int | None = None
    """Bytes of memory the node has (None: not known, never short)."""
    memory_held: int = 0
    """Bytes set aside for the jobs active on it."""

    @property
    def free(self) -> tuple[int, ...]:
        return tuple(g for g in self.gpu_ids if g not in self.held)


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingJob:
    key: str
    gpu_count: int = 0
    """GPUs per node."""
    nodes: int = 1
    """Nodes the job spans (a gang when > 1)."""
    cpu_milli: int = 0
    """Thousandths of a core per node."""
    memory: int = 0
    """Bytes of memory per node."""
    near: tuple[str, ...] = ()
    """Names of the nodes holding the job's data, best first: preferred among the nodes that
    fit the job equally well (so it costs the job no waiting)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    key: str
    node: str
    gpu_ids: tuple[int, ...]
    """The indices of the GPUs it is given on ``node``."""
    rank: int = 0
    """Which part of a gang this is (0 for a job on one node)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    placements: tuple[Placement, ...] = ()
    waiting: dict[str, str] = field(default_factory=dict)
    """Job key -> why it waits (one short sentence, shown by ``floyd status``)."""


def unplaceable(nodes: list[NodeSnapshot], gpu_count: int, count: int = 1, cpu_milli: int = 0,
                memory: int = 0) -> str | None:
    """Why a job wanting ``gpu_count`` GPUs, ``cpu_milli`` thousandths of a core and ``memory``
    bytes on each of ``count`` nodes can never run on these nodes (whatever runs there now),
    or None if it can."""
    if gpu_count <= 0 and count == 1 and not any(n.healthy or n.draining or n.trouble for n in nodes):
        return "no healthy node"
    if gpu_count <= 0 and count > 1 and len(nodes) < count:
        # a gang may wait for a box that is down for now; only too few boxes is hopeless
        return f"it needs {count} nodes, the cluster has {len(nodes)}"
    if sum(1 for n in nodes if _big_enough(n, gpu_count, cpu_milli, memory)) >= count:
        return None
    return nodes_reason(nodes, gpu_count, count, cpu_milli, memory)


def place(nodes: list[NodeSnapshot], pending: list[PendingJob]) -> Plan:
    """Place ``pending`` (in submission order) on ``nodes`` (each name once)."""
    healthy = [n for n in nodes if n.healthy]
    free = {n.name: [g for g in n.gpu_ids if g not in n.held] if n.held else list(n.gpu_ids) for n in healthy}
    room = _Room(healthy)
    best_fit = BestFit(free)
    load = Load({n.name: n.load for n in healthy})
    placements: list[Placement] = []
    waiting: dict[str, str] = {}
    blocked_by: dict[bool, str] = {}            # lane (wants GPUs?) -> the job it waits behind

    for job in pending:
        count, lane = max(1, job.nodes), job.gpu_count > 0
        if lane in blocked_by:
            waiting[job.key] = blocked_reason(blocked_by[lane], lane)
            continue
        fits = room.fits if job.cpu_milli or job.memory else None
        if lane:
            chosen = best_fit.take(job.gpu_count, count, job, fits)
        elif len(load.jobs) < count:
            waiting[job.key] = ("waiting for a healthy node" if count == 1 else
                                f"waiting for {count} healthy nodes ({len(load.jobs)} now)") + _troubled(nodes)
            continue
        else:
            chosen = load.least(count, job, fits)
        if chosen is None:
            waiting[job.key] = why_waiting(job, nodes, free, room.cpu, room.memory, placements)
            blocked_by[lane] = job.key
            continue
        for rank, name in enumerate(chosen):
            take: list[int] = []
            if lane:
                take, free[name] = free[name][:job.gpu_count], free[name][job.gpu_count:]
                best_fit.put(name)
                load.add(name)
            room.take(name, job)
            placements.append(Placement(key=job.key, node=name, gpu_ids=tuple(take), rank=rank))
    return Plan(placements=tuple(placements), waiting=waiting)


def _big_enough(node: NodeSnapshot, gpu_count: int, cpu_milli: int, memory: int) -> bool:
    """Whether ``node`` could ever hold one part of such a job (all its GPUs, cores, memory)."""
    return (len(node.gpu_ids) >= gpu_count and (node.cpu_milli is None or node.cpu_milli >= cpu_milli)
            and (node.memory is None or node.memory >= memory))


class _Room:
    """Cores and memory not set aside on each healthy node whose own are known."""

    def __init__(self, nodes: list[NodeSnapshot]) -> None:
        self.cpu = {n.name: n.cpu_milli - n.cpu_held for n in nodes if n.cpu_milli is not None}
        self.memory = {n.name: n.memory - n.memory_held for n in nodes if n.memory is not None}

    def fits(self, name: str, job: PendingJob) -> bool:
        return self.cpu.get(name, job.cpu_milli) >= job.cpu_milli and \
            self.memory.get(name, job.memory) >= job.memory

    def take(self, name: str, job: PendingJob) -> None:
        if job.cpu_milli and name in self.cpu:
            self.cpu[name] -= job.cpu_milli
        if job.memory and name in self.memory:
            self.memory[name] -= job.memory


def _troubled(nodes: list[NodeSnapshot]) -> str:
    """`` (box2: disk full)``: the nodes kept out by their store, for a reason; "" if none."""
    named = [f"{n.name}: {n.trouble}" for n in nodes if n.trouble and not n.draining][:3]
    return f" ({'; '.join(named)})" if named else ""
