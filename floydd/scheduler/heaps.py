"""The nodes a plan chooses from, in heaps, so no job sorts every node.

:class:`BestFit` keeps healthy nodes with free GPUs by how many (GPU jobs take the node left
with the fewest); :class:`Load` keeps them by how many jobs they run (CPU-only jobs take the
least loaded). Ties go to the job's ``near`` nodes (those holding its data), then by name.

Cores and memory: a node that lacks what a job asks is passed over. Free cores and memory
only shrink during a plan, so a node that lacks what one shape of ask (cores, memory) needs
lacks it for every later job of that shape: each shape asked gets heaps of its own (a
"lane", made at its first job, O(nodes)), from which such a node is dropped for good instead
of being met again by every job of the shape (a cluster whose nodes with free GPUs have no
free cores would otherwise cost O(nodes) per job). Past :data:`MAX_LANES` shapes, further
ones share the heaps of jobs that ask for neither, and a node passed over is put back.
A node given a job is moved in every lane that still counts it: O(lanes log nodes).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from floydd.scheduler.placement import PendingJob

__all__ = ["BestFit", "Load", "MAX_LANES"]

MAX_LANES = 8
"""Shapes of ask (cores, memory) given heaps of their own in one plan."""
_OUT, _DROPPED = -1, -2
Fits = Callable[[str, "PendingJob"], bool]


class _Lane:
    """Heaps by free GPUs of the nodes that may fit one shape: ``by_free[k]`` holds the names
    of nodes with ``k`` free; ``where[name]`` is the heap a node counts in now (``_OUT``
    while taken out, ``_DROPPED`` once it lacked this shape's cores or memory). An entry
    elsewhere is stale and skipped when met (a node's free GPUs only shrink during a plan,
    so it never comes back to a heap it left)."""

    def __init__(self, free: dict[str, list[int]], size: int, keep: Callable[[str], bool]) -> None:
        self.by_free: list[list[str]] = [[] for _ in range(size)]
        self.where: dict[str, int] = {}
        for name, gpus in free.items():
            if gpus and keep(name):
                self.where[name] = len(gpus)
                self.by_free[len(gpus)].append(name)
        for names in self.by_free:
            heapify(names)

    def take(self, gpu_count: int, count: int, job: PendingJob, fits: Fits | None, drop: bool) -> tuple[list, list]:
        """(chosen, passed over and not dropped): up to ``count`` nodes, best first."""
        chosen: list[str] = []
        passed: list[str] = []
        where = self.where

        def consider(name: str) -> None:        # taken out of its heap: chosen, dropped or passed
            where[name] = _OUT
            if fits is None or fits(name, job):
                chosen.append(name)
            elif drop:
                where[name] = _DROPPED
            else:
                passed.append(name)
        for k in range(gpu_count, len(self.by_free)):
            for name in job.near:
                if len(chosen) < count and where.get(name) == k:
                    consider(name)
            names = self.by_free[k]
            while names and len(chosen) < count:
                name = heappop(names)
                if where[name] == k:
                    consider(name)
            if len(chosen) == count:
                break
        return chosen, passed

    def put(self, name: str, left: int) -> None:
        """Count ``name`` in the heap of ``left`` free GPUs (unless dropped or never here)."""
        if self.where.get(name, _DROPPED) == _DROPPED:
            return
        self.where[name] = left
        if left:
            heappush(self.by_free[left], name)


class BestFit:
    """GPU jobs' nodes: the ``count`` left with the fewest free after the job, by lane."""

    def __init__(self, free: dict[str, list[int]]) -> None:
        self.free = free
        self._size = 1 + max(map(len, free.values()), default=0)
        self.lanes: dict[tuple[int, int], _Lane] = {(0, 0): _Lane(free, self._size, lambda name: True)}

    def take(self, gpu_count: int, count: int, job: PendingJob, fits: Fits | None) -> list[str] | None:
        """The ``count`` nodes left with the fewest free after giving ``gpu_count`` on each (ties:
        ``job.near`` first, then by name) that also have the job's cores and memory (``fits``;
        None: it asks for neither), best first, taken out until :meth:`put` back; None if
        fewer fit."""
        lane, drop = self._lane(job, fits)
        chosen, passed = lane.take(gpu_count, count, job, fits, drop)
        for name in passed:
            lane.put(name, len(self.free[name]))
        if len(chosen) < count:
            for name in chosen:
                lane.put(name, len(self.free[name]))
            return None
        return chosen

    def put(self, name: str) -> None:
        """Count ``name`` again in every lane, with the free GPUs it has now."""
        left = len(self.free[name])
        for lane in self.lanes.values():
            lane.put(name, left)

    def _lane(self, job: PendingJob, fits: Fits | None) -> tuple[_Lane, bool]:
        shape = (job.cpu_milli, job.memory) if fits is not None else (0, 0)
        lane = self.lanes.get(shape)
        if lane is None:
            if len(self.lanes) > MAX_LANES:
                return self.lanes[(0, 0)], False
            lane = self.lanes[shape] = _Lane(self.free, self._size, lambda name: fits(name, job))
        return lane, shape != (0, 0)


class Load:
    """Jobs on each healthy node, the least loaded first (ties: ``job.near``, then by name),
    in a heap of (load, name) per lane, made at the first CPU job of its shape (plans of GPU
    jobs only never pay for one). A node's load only grows, so an entry older than the
    node's load is stale and dropped when met."""

    def __init__(self, jobs: dict[str, int]) -> None:
        self.jobs = jobs
        self._heaps: dict[tuple[int, int], list[tuple[int, str]]] = {}
        self._dropped: dict[tuple[int, int], set[str]] = {}

    def add(self, name: str) -> None:
        self.jobs[name] += 1
        for shape, heap in self._heaps.items():
            if name not in self._dropped[shape]:
                heappush(heap, (self.jobs[name], name))

    def least(self, count: int, job: PendingJob, fits: Fits | None) -> list[str] | None:
        """The ``count`` (at most the number of nodes) least loaded nodes with the job's cores
        and memory (``fits``), each given one job; None (and nothing given) if fewer fit."""
        heap, dropped = self._heap(job, fits)
        jobs = self.jobs
        chosen: list[str] = []
        passed: list[tuple[int, str]] = []
        seen: set[str] = set()
        while len(chosen) < count and heap:
            n, name = heappop(heap)
            if jobs[name] != n or name in seen:
                continue
            seen.add(name)
            if fits is not None and not fits(name, job):
                if dropped is None:
                    passed.append((n, name))
                else:
                    dropped.add(name)
                continue
            for near in job.near:             # a node as little loaded that holds more of the data
                if near == name:
                    break
                if near not in seen and jobs.get(near) == n and \
                        (dropped is None or near not in dropped) and (fits is None or fits(near, job)):
                    heappush(heap, (n, name))
                    seen.discard(name)
                    seen.add(near)
                    name = near
                    break
            chosen.append(name)
        for entry in passed:
            heappush(heap, entry)
        if len(chosen) < count:
            for name in chosen:
                heappush(heap, (jobs[name], name))
            return None
        for name in chosen:                     # only now: a node is chosen once per job
            self.add(name)
        return chosen

    def _heap(self, job: PendingJob, fits: Fits | None) -> tuple[list[tuple[int, str]], set[str] | None]:
        """The heap of the job's shape and the nodes dropped from it (None: passed over nodes
        go back, in the shared heap of jobs that ask nothing)."""
        shape = (job.cpu_milli, job.memory) if fits is not None else (0, 0)
        if shape not in self._heaps:
            if shape != (0, 0) and len(self._heaps) > MAX_LANES:
                return self._heap(job, None)[0], None
            heap = [(n, name) for name, n in self.jobs.items()]
            heapify(heap)
            self._heaps[shape], self._dropped[shape] = heap, set()
        return self._heaps[shape], self._dropped[shape] if shape != (0, 0) else None
