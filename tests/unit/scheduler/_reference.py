"""The placement code as it was before it was made fast (issue 10), kept only to prove the
new code decides the same and to measure against: ``place``, ``_why_waiting`` and
``unplaceable`` copied verbatim from floydd/scheduler/placement.py at 26a4a85, and the
leader's node snapshots and ``held_gpus`` of that time (every active job looked at once per
node). Tests and bench/ import it; floydd never does."""

from __future__ import annotations

from floydd.model import ACTIVE_STATES  # the job model's, which grew ``unknown`` (issue 12)
from floydd.scheduler import NodeSnapshot, PendingJob, Placement, Plan


def held_gpus(state, node: str) -> dict[int, str]:
    """``ClusterState.held_gpus`` before the index: GPU index -> id of the active job holding it."""
    held: dict[int, str] = {}
    for key in state.active_index.active:
        job = state.jobs[key].to_dict()
        for part in job.get("parts") or (job,):     # a gang holds every part's GPUs while active
            if part["node"] == node:
                held.update((g, key) for g in part["gpus"])
    return held


def snapshots(state, now: float, stale_after: float) -> dict[str, NodeSnapshot]:
    """``ClusterScheduler.snapshots`` before the index (one look at every active job per node)."""
    health = state.node_health(now, stale_after)
    names = [n["name"] for n in state.nodes.values()]
    load: dict[str, int] = {}
    for job in (j.to_dict() for j in state.jobs.values()):
        if job["state"] in ACTIVE_STATES:
            for nid in [p["node"] for p in job.get("parts") or ()] or [job["node"]]:
                load[nid] = load.get(nid, 0) + 1
    out = {}
    for nid, node in state.nodes.items():
        name = node["name"] if names.count(node["name"]) == 1 else f"{node['name']}({nid[:8]})"
        gpus = tuple(g["index"] if isinstance(g, dict) else g for g in node["resources"].get("gpus") or ())
        out[nid] = NodeSnapshot(name=name, gpu_ids=gpus, held=held_gpus(state, nid), healthy=health[nid] == "up",
                                draining=health[nid] == "draining", load=load.get(nid, 0))
    return out


def unplaceable(nodes: list[NodeSnapshot], gpus: int, count: int = 1) -> str | None:
    """Why a job wanting ``gpus`` GPUs on each of ``count`` nodes can never run on these
    nodes, or None if it can."""
    if gpus <= 0:
        if count == 1:
            return None if any(n.healthy or n.draining for n in nodes) else "no healthy node"
        # a gang may wait for a box that is down for now; only too few boxes is hopeless
        return None if len(nodes) >= count else f"it needs {count} nodes, the cluster has {len(nodes)}"
    big = sorted((len(n.gpu_ids) for n in nodes), reverse=True)
    if len(big) >= count and big[count - 1] >= gpus:
        return None
    have = ", ".join(f"{n.name} has {_count(len(n.gpu_ids))}" for n in nodes) or "no nodes"
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
        if job.gpu_count <= 0:
            if len(load) >= count:
                chosen = sorted(load, key=lambda n: (load[n], n))[:count]
                for rank, name in enumerate(chosen):
                    load[name] += 1
                    placements.append(Placement(key=job.key, node=name, gpu_ids=(), rank=rank))
            else:
                waiting[job.key] = ("waiting for a healthy node" if count == 1 else
                                    f"waiting for {count} healthy nodes ({len(load)} now)")
            continue
        if blocked_by is not None:
            waiting[job.key] = f"queued behind {blocked_by}, which waits for GPUs"
            continue
        fits = sorted((name for name in free if len(free[name]) >= job.gpu_count),
                      key=lambda n: (len(free[n]) - job.gpu_count, n))
        if len(fits) < count:
            waiting[job.key] = _why_waiting(job, nodes, free, held)
            blocked_by = job.key
            continue
        for rank, name in enumerate(fits[:count]):
            take, free[name] = free[name][:job.gpu_count], free[name][job.gpu_count:]
            load[name] += 1
            for g in take:
                held[name][g] = job.key
            placements.append(Placement(key=job.key, node=name, gpu_ids=tuple(take), rank=rank))
    return Plan(placements=tuple(placements), waiting=waiting)


def _why_waiting(job: PendingJob, nodes: list[NodeSnapshot], free: dict[str, list[int]],
                 held: dict[str, dict[int, str]]) -> str:
    parts = []
    for n in sorted(nodes, key=lambda n: n.name):
        if not n.healthy:
            parts.append(f"{n.name} is {'draining' if n.draining else 'unhealthy'}")
            continue
        holders = sorted(set(held[n.name].values()))
        busy = f" (held by {', '.join(holders)})" if holders else ""
        parts.append(f"{n.name} has {len(free.get(n.name, []))} free{busy}")
    wanted = _count(job.gpu_count) if job.nodes <= 1 else f"{job.nodes} nodes with {_count(job.gpu_count)} free each"
    return f"waiting for {wanted}: " + "; ".join(parts)


def _count(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"
