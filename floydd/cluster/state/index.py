"""The index of active jobs, derived from the replicated jobs and never serialised.

:class:`~floydd.cluster.state.machine.ClusterState` keeps it beside its jobs (rebuilt by
``restore``) so that placement reads it in O(nodes + GPUs) every round: the active jobs and,
per node id, the GPUs they hold, the cores and memory they asked for there, and how many of
them have a part there (``held_gpus``, ``set_aside``, ``node_load``, ``busy_nodes``). Every
command that moves a job into or out of an active state keeps it up to date
(:mod:`floydd.cluster.state.jobs`). Removing a node leaves it alone: the node's jobs are
still active, and should it rejoin its GPUs are still held.

Nodes report with each heartbeat the runs whose processes are alive on them (``procs``:
job, attempt, GPUs); GPUs of a run the cluster gave up or replaced count as held
(:meth:`~floydd.cluster.state.machine.ClusterState.held_gpus`, which adds them to this index's)
until the node reports them gone, so nothing new is placed on a GPU an older placement's
processes still use. The leader's ``suspect`` (it lost touch with a node) makes the node
unplaceable until its own next heartbeat, which carries them.

A part of :class:`~floydd.cluster.state.machine.ClusterState` (``state.active_index``), made
new by ``restore``; it knows nothing of the state but the jobs it is given. Pure, like the
rest of the state.
"""

from __future__ import annotations

from floydd.errors import Conflict
from floydd.model import Job, format_cpus, format_size, known_count

__all__ = ["ActiveIndex"]


class ActiveIndex:
    """The derived index of active jobs: its reads, its upkeep and the room check on it."""

    def __init__(self) -> None:
        self.active: dict[str, None] = {}
        """Ids of the jobs counted (those in ACTIVE_STATES)."""
        self.held: dict[str, dict[int, str]] = {}
        """Node id -> GPU index -> id of the active job holding it."""
        self.load: dict[str, int] = {}
        """Node id -> how many active jobs have a part there."""
        self.cpu: dict[str, int] = {}
        """Node id -> thousandths of a core asked by its active jobs."""
        self.memory: dict[str, int] = {}
        """Node id -> bytes asked by its active jobs."""

    def __contains__(self, key: str) -> bool:
        return key in self.active

    def held_on(self, node: str) -> dict[int, str]:
        """GPU index -> id of the active job holding it, on ``node`` (a copy, O(its GPUs))."""
        return dict(self.held.get(node) or {})

    def set_aside(self, node: str) -> tuple[int, int]:
        """(thousandths of a core, bytes of memory) the active jobs with a part on ``node``
        asked for there."""
        return self.cpu.get(node, 0), self.memory.get(node, 0)

    def node_load(self, node: str) -> int:
        """How many active jobs have a part on ``node``."""
        return self.load.get(node, 0)

    def busy_nodes(self) -> list[str]:
        """Ids of the nodes where active jobs have a part (removed nodes among them)."""
        return list(self.load)

    def check_room(self, job: Job, nid: str, node: dict) -> None:
        """Conflict unless ``node`` has the cores and memory ``job`` asks for on each box
        beside what its active jobs asked (a node that reported neither is never short)."""
        cpu, memory = job.asked_per_box
        resources = node["resources"]
        for asked, held, have, say in (
                (cpu, self.cpu.get(nid, 0), known_count(resources.get("cpus"), 1000), format_cpus),
                (memory, self.memory.get(nid, 0), known_count(resources.get("memory"), 1), format_size)):
            if asked and have is not None and held + asked > have:
                raise Conflict(f"node {nid} has {say(max(0, have - held))} of {say(have)} free; job {job.id} asks "
                               f"for {say(asked)}", code="no_room", hint="the leader plans again from the current state")

    def activate(self, job: Job) -> None:
        """Count an active job: a gang holds every part's GPUs, cores and memory while active."""
        key = job.id
        if key in self.active:
            return
        self.active[key] = None
        cpu, memory = job.asked_per_box
        for part in job.parts or (job,):
            nid = part.node
            self.load[nid] = self.load.get(nid, 0) + 1
            if part.gpu_ids:
                self.held.setdefault(nid, {}).update((g, key) for g in part.gpu_ids)
            if cpu:
                self.cpu[nid] = self.cpu.get(nid, 0) + cpu
            if memory:
                self.memory[nid] = self.memory.get(nid, 0) + memory

    def deactivate(self, job: Job) -> None:
        """Take a job that stops being active out of the index (``job`` as it was counted: a
        job is placed only while queued)."""
        key = job.id
        if key not in self.active:
            return
        del self.active[key]
        cpu, memory = job.asked_per_box
        for part in job.parts or (job,):
            nid = part.node
            self.load[nid] -= 1
            if not self.load[nid]:
                del self.load[nid]
            for index, asked in ((self.cpu, cpu), (self.memory, memory)):
                if asked:
                    index[nid] -= asked
                    if not index[nid]:
                        del index[nid]
            held = self.held.get(nid, {})
            for g in part.gpu_ids:
                if held.get(g) == key:
                    del held[g]
            if not held:
                self.held.pop(nid, None)
