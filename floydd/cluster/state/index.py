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
(:meth:`ActiveIndex.held_gpus`) until the node reports them gone, so nothing new is placed
on a GPU an older placement's processes still use. The leader's ``suspect`` (it lost touch
with a node) makes the node unplaceable until its own next heartbeat, which carries them.

Mixed into :class:`~floydd.cluster.state.machine.ClusterState`; pure, like the rest of it.
"""

from __future__ import annotations

from floydd.errors import Conflict
from floydd.model import asked_per_box, format_cpus, format_size, known_count

__all__ = ["ActiveIndex"]


class ActiveIndex:
    """The derived index of active jobs: its reads, its upkeep and the room check on it."""

    def held_gpus(self, node: str) -> dict[int, str]:
        """GPU index -> id of the active job holding it, on ``node`` (O(its GPUs)), and the GPUs
        the node last reported in use by processes of a placement the cluster gave up or
        replaced (GPU fencing: until those processes are gone, no job is placed there)."""
        held = dict(self._held.get(node) or {})
        for proc in (self.nodes.get(node) or {}).get("procs") or ():
            if self._given_up(proc):
                for gpu in proc["gpus"]:
                    held.setdefault(gpu, f"{proc['job']} (attempt {proc['attempt']}, ending)")
        return held

    def _given_up(self, proc: dict) -> bool:
        """Whether a run a node reported (job, attempt) is one the cluster no longer counts
        as the job's placement: the job deleted, requeued, lost, or at another attempt."""
        job = self.jobs.get(proc["job"])
        return job is None or job["attempts"] != proc["attempt"] or job["state"] in ("queued", "lost")

    def set_aside(self, node: str) -> tuple[int, int]:
        """(thousandths of a core, bytes of memory) the active jobs with a part on ``node``
        asked for there."""
        return self._cpu.get(node, 0), self._memory.get(node, 0)

    def node_load(self, node: str) -> int:
        """How many active jobs have a part on ``node``."""
        return self._load.get(node, 0)

    def busy_nodes(self) -> list[str]:
        """Ids of the nodes where active jobs have a part (removed nodes among them)."""
        return list(self._load)

    def _check_room(self, key: str, nid: str, node: dict, spec: dict) -> None:
        """Conflict unless ``node`` has the cores and memory job ``key`` asks for on each box
        beside what its active jobs asked (a node that reported neither is never short)."""
        cpu, memory = asked_per_box(spec)
        resources = node["resources"]
        for asked, held, have, say in (
                (cpu, self._cpu.get(nid, 0), known_count(resources.get("cpus"), 1000), format_cpus),
                (memory, self._memory.get(nid, 0), known_count(resources.get("memory"), 1), format_size)):
            if asked and have is not None and held + asked > have:
                raise Conflict(f"node {nid} has {say(max(0, have - held))} of {say(have)} free; job {key} asks for "
                               f"{say(asked)}", code="no_room", hint="the leader plans again from the current state")

    def _activate(self, job: dict) -> None:
        """Count an active job in the derived index: a gang holds every part's GPUs, cores and
        memory while active."""
        key = job["id"]
        if key in self._active:
            return
        self._active[key] = None
        cpu, memory = asked_per_box(job["spec"])
        for part in job.get("parts") or (job,):
            nid = part["node"]
            self._load[nid] = self._load.get(nid, 0) + 1
            if part["gpus"]:
                self._held.setdefault(nid, {}).update((g, key) for g in part["gpus"])
            if cpu:
                self._cpu[nid] = self._cpu.get(nid, 0) + cpu
            if memory:
                self._memory[nid] = self._memory.get(nid, 0) + memory

    def _deactivate(self, job: dict) -> None:
        """Take a job that stops being active out of the derived index (its placement is the
        one it was counted with: a job is placed only while queued)."""
        key = job["id"]
        if key not in self._active:
            return
        del self._active[key]
        cpu, memory = asked_per_box(job["spec"])
        for part in job.get("parts") or (job,):
            nid = part["node"]
            self._load[nid] -= 1
            if not self._load[nid]:
                del self._load[nid]
            for index, asked in ((self._cpu, cpu), (self._memory, memory)):
                if asked:
                    index[nid] -= asked
                    if not index[nid]:
                        del index[nid]
            held = self._held.get(nid, {})
            for g in part["gpus"]:
                if held.get(g) == key:
                    del held[g]
            if not held:
                self._held.pop(nid, None)
