"""Why a job waits, or can never run: short sentences that never name every node.

A plan says why each waiting job waits (``floyd status`` shows it). The job at the head of a
lane gets what it wants and what stands in the way; the jobs behind it say whom they wait
behind. On a cluster of up to :data:`LISTED` nodes each node is named with what it has::

    waiting for 1 GPU: box has 0 GPUs free (held by mnist/1)
    waiting for 2 nodes with 1 GPU free each: a has room; b has 0 GPUs free (held by p/1, p/4)

and on a bigger one the nodes are counted by what they lack::

    waiting for 2 GPUs and 4 CPUs: no node has room (37 short of GPUs, 2 of CPUs, 1 unhealthy)
    queued behind mnist/3, which waits for GPUs

so a reason stays under :data:`REASON_MAX` characters at any size (it is cut there in any
case). Reasons are computed by the leader each round and served from its memory
(:mod:`floydd.scheduler.placer`), never committed, so they may change as often as the cluster does.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from floydd.model import describe_needs, format_cpus, format_size

if TYPE_CHECKING:
    from floydd.scheduler.placement import NodeSnapshot, PendingJob, Placement

__all__ = ["LISTED", "REASON_MAX", "why_waiting", "blocked_reason", "nodes_reason"]

LISTED = 3
"""Clusters of up to this many nodes have each node named in a reason; bigger ones counted."""
REASON_MAX = 400
"""The longest reason (characters); longer ones (long node names) are cut with an ellipsis."""
_HOLDERS = 3
"""Jobs named as holding a node's GPUs; the rest are counted."""


class _Needs(NamedTuple):
    """What of a job's ask a reason names (per node)."""

    gpu_count: int
    cpu_milli: int
    memory: int


def blocked_reason(head: str, gpu_lane: bool) -> str:
    """Why a job waits behind ``head``, the first job of its lane that waits."""
    return f"queued behind {head}, which waits for {'GPUs' if gpu_lane else 'CPUs or memory'}"


def why_waiting(job: PendingJob, nodes: list[NodeSnapshot], free: dict[str, list[int]], cpu: dict[str, int],
                memory: dict[str, int], placed: list[Placement]) -> str:
    """Why ``job`` fits on too few nodes now: ``free`` GPUs, ``cpu`` and ``memory`` left on
    each healthy node once ``placed`` (this plan's placements so far) are counted."""
    count = max(1, job.nodes)
    said = _what_matters(job, [n for n in nodes if n.healthy], free, cpu, memory)
    want = describe_needs(said.gpu_count, said.cpu_milli, said.memory)
    head = f"waiting for {want}" if count == 1 else f"waiting for {count} nodes with {want} free each"
    if len(nodes) <= LISTED:
        planned: dict[str, set[str]] = {}       # node -> jobs this plan gave GPUs there
        for p in placed:
            if p.gpu_ids:
                planned.setdefault(p.node, set()).add(p.key)
        each = "; ".join(_node_now(n, job, said, free, cpu, memory, planned.get(n.name, set()))
                         for n in sorted(nodes, key=lambda n: n.name))
        return _short(f"{head}: {each or 'the cluster has no nodes'}")
    short: dict[str, int] = {"GPUs": 0, "CPUs": 0, "memory": 0, "too small": 0, "draining": 0, "unhealthy": 0}
    room = 0
    for n in nodes:
        lack = _lacks(n, job, free, cpu, memory)
        if lack is None:
            room += 1
        else:
            what = "draining" if lack == "unhealthy" and n.draining else \
                n.trouble if lack == "unhealthy" and n.trouble else lack
            short[what] = short.get(what, 0) + 1
    lacking = [(what, short[what]) for what in ("GPUs", "CPUs", "memory") if short[what]]
    counted = [f"{k} {'short of' if i == 0 else 'of'} {what}" for i, (what, k) in enumerate(lacking)]
    counted += [f"{short[what]} {what}" for what in ("too small", "draining", *_troubles(nodes), "unhealthy")
                if short.get(what)]
    lead = "no node has room" if not room else f"only {room} {'has' if room == 1 else 'have'} room"
    return _short(f"{head}: {lead}" + (f" ({', '.join(counted)})" if counted else ""))


def nodes_reason(nodes: list[NodeSnapshot], gpu_count: int, count: int, cpu_milli: int, memory: int) -> str:
    """Why too few of ``nodes`` are big enough for such a job (:func:`~floydd.scheduler.unplaceable`)."""
    lacked = (gpu_count if any(len(n.gpu_ids) < gpu_count for n in nodes) else 0,        # say only what some node lacks
              cpu_milli if any(n.cpu_milli is not None and n.cpu_milli < cpu_milli for n in nodes) else 0,
              memory if any(n.memory is not None and n.memory < memory for n in nodes) else 0)
    if any(lacked):
        gpu_count, cpu_milli, memory = lacked
    want = describe_needs(gpu_count, cpu_milli, memory) if gpu_count or cpu_milli or memory else "room"
    if len(nodes) <= LISTED:
        have = ", ".join(f"{n.name} has {_capacity(n, gpu_count, cpu_milli, memory)}" for n in nodes) or "no nodes"
    else:
        biggest = max(nodes, key=lambda n: (len(n.gpu_ids), n.cpu_milli or 0, n.memory or 0))
        have = f"the biggest, {biggest.name}, has {_capacity(biggest, gpu_count, cpu_milli, memory)}"
    if count == 1:
        return _short(f"no node has {want} ({have})")
    return _short(f"it needs {count} nodes with {want} each ({have})")


def _what_matters(job: PendingJob, healthy: list[NodeSnapshot], free: dict[str, list[int]], cpu: dict[str, int],
                  memory: dict[str, int]) -> _Needs:
    """The kinds of ``job``'s ask that some healthy node lacks (all of them if none does):
    a GPU job asking the default core is "waiting for 1 GPU" while cores are plentiful."""
    def lacked(asked: int, left: dict[str, int]) -> int:
        return asked if any(left.get(n.name, asked) < asked for n in healthy) else 0
    said = _Needs(gpu_count=lacked(job.gpu_count, {name: len(gpus) for name, gpus in free.items()}),
                  cpu_milli=lacked(job.cpu_milli, cpu), memory=lacked(job.memory, memory))
    return said if said.gpu_count or said.cpu_milli or said.memory else _Needs(job.gpu_count, job.cpu_milli, job.memory)


def _node_now(node: NodeSnapshot, job: PendingJob, said: _Needs, free: dict[str, list[int]], cpu: dict[str, int],
              memory: dict[str, int], planned: set[str]) -> str:
    """``a has 0 GPUs free (held by p/1)``: one node, for a small cluster's reason (``said``:
    the kinds of the job's ask worth naming)."""
    lack = _lacks(node, job, free, cpu, memory)
    if lack == "unhealthy":
        if node.trouble and not node.draining:
            return f"{node.name} takes no new jobs ({node.trouble})"
        return f"{node.name} is {'draining' if node.draining else 'unhealthy'}"
    if lack is None:
        return f"{node.name} has room"
    if lack == "too small":
        return f"{node.name} has {_capacity(node, said.gpu_count, said.cpu_milli, said.memory)} in all"
    words = []
    if said.gpu_count:
        n = len(free[node.name])
        words.append(f"{n} GPU" if n == 1 else f"{n} GPUs")
    if said.cpu_milli and node.name in cpu:
        words.append(format_cpus(max(0, cpu[node.name])))
    if said.memory and node.name in memory:
        words.append(format_size(max(0, memory[node.name])))
    holders = sorted(set(node.held.values()).union(planned))
    named = ", ".join(holders[:_HOLDERS]) + (f" and {len(holders) - _HOLDERS} more" if len(holders) > _HOLDERS else "")
    return f"{node.name} has {_and(words)} free" + (f" (held by {named})" if holders and said.gpu_count else "")


def _lacks(node: NodeSnapshot, job: PendingJob, free: dict[str, list[int]], cpu: dict[str, int],
           memory: dict[str, int]) -> str | None:
    """What keeps ``job`` off ``node`` now (the first of: unhealthy, too small, GPUs, CPUs,
    memory), or None if it has room."""
    if not node.healthy:
        return "unhealthy"
    if len(node.gpu_ids) < job.gpu_count or (node.cpu_milli is not None and node.cpu_milli < job.cpu_milli) \
            or (node.memory is not None and node.memory < job.memory):
        return "too small"
    if len(free[node.name]) < job.gpu_count:
        return "GPUs"
    if cpu.get(node.name, job.cpu_milli) < job.cpu_milli:
        return "CPUs"
    if memory.get(node.name, job.memory) < job.memory:
        return "memory"
    return None


def _capacity(node: NodeSnapshot, gpu_count: int, cpu_milli: int, memory: int) -> str:
    """What ``node`` has in all, of what a job asks (``8 GPUs, 32 CPUs and 64 GiB``)."""
    total = len(node.gpu_ids)
    words = [f"{total} GPU" if total == 1 else f"{total} GPUs"] if gpu_count or not (cpu_milli or memory) else []
    if cpu_milli and node.cpu_milli is not None:
        words.append(format_cpus(node.cpu_milli))
    if memory and node.memory is not None:
        words.append(format_size(node.memory))
    return _and(words) if words else "room"


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _troubles(nodes: list[NodeSnapshot]) -> list[str]:
    """The troubles some of ``nodes`` have (``disk full``), each once, in a stable order."""
    return sorted({n.trouble for n in nodes if n.trouble and not n.draining})


def _short(text: str) -> str:
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 1] + "…"
