"""The leader's half of the cluster's jobs: place queued jobs, give up on silent nodes.

Runs on every node and acts only while that node leads. Each round reads the committed
state (the leader's own copy), plans with the pure :func:`floydd.scheduler.place` over
every node and commits ``job.place`` fenced by its term. A plan that the state has moved
under is refused by the state machine and made again in the next round.

Why each queued job waits is the last plan's, kept in the leader's memory
(:attr:`ClusterScheduler.waiting`) and never committed: rewriting the reasons of a whole
queue through raft each time its head moved cost 21 log entries per job with 60 jobs queued
(28.5 with 150), where placing and running one costs under 8. ``floyd status`` on any node
reads them from the leader (:mod:`floydd.jobs.waiting`). :class:`~floydd.jobs.service.JobService`
owns one and wakes it when job or node entries are applied (on a box alone too: it is a
cluster of one, and leads).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Mapping

from floydd import log
from floydd.scheduler.storehealth import trouble
from floydd.errors import Conflict, FloyddError
from floydd.scheduler import outages
from floydd.model import DEFAULT_LOST_AFTER, DatasetRef, Job
from floydd.scheduler import NodeSnapshot, PendingJob, node_snapshots, place

__all__ = ["ClusterScheduler", "REPORT_TIMEOUT", "ALONE_ROUND", "every_second_or_sooner"]

_log = log.scheduler.getChild("cluster")
REPORT_TIMEOUT = 5.0
"""Seconds a state report may take to commit (it is retried next round)."""
ALONE_ROUND = 30.0
"""Seconds between the rounds of a box alone (:attr:`ClusterService.alone
<floydd.cluster.service.ClusterService.alone>`) when nothing wakes it: no other box to judge,
and every change placement depends on (a job, a node's record or heartbeat) is an applied
entry that wakes the round at once."""


class ClusterScheduler:
    def __init__(self, cluster, *, lost_after: float = DEFAULT_LOST_AFTER, clock: Callable[[], float] = time.monotonic,
                 ages: Callable[[], Mapping[str, float]] | None = None) -> None:
        self.cluster = cluster
        self.lost_after = lost_after
        self._clock = clock
        self._ages = ages
        """Node id -> seconds since this box last heard from it, on its monotonic clock
        (:meth:`ClusterService.heard_ages <floydd.cluster.service.ClusterService.heard_ages>`);
        None (tests, benchmarks over a bare state): from the heartbeats' ``ts`` and ``clock``."""
        self.wake_event = asyncio.Event()
        self.leading_since: float | None = None
        """When this node became leader as this loop saw it (None: it does not lead)."""
        self.waiting: dict[str, str] = {}
        """Job key -> why it waits, from this leader's last plan (empty on a follower)."""

    def wake(self) -> None:
        self.wake_event.set()

    async def run(self) -> None:
        await every_second_or_sooner(self.wake_event, self._lead_if_leader, "scheduling round", self._period)

    def _period(self) -> float:
        return ALONE_ROUND if self.cluster.alone else 1.0

    async def _lead_if_leader(self) -> None:
        if not self.cluster.is_leader:
            self.leading_since = None
            self.waiting = {}
            return
        if self.leading_since is None:
            self.leading_since = self._clock()
        await self.lead_once()

    def reasons(self, keys) -> dict[str, str]:
        """Why each of the jobs ``keys`` waits, of those this leader's last plan kept waiting."""
        waiting = self.waiting
        return {key: waiting[key] for key in keys if key in waiting}

    def snapshots(self, now: float) -> dict[str, NodeSnapshot]:
        """Node id -> what placement knows of it, from the committed state and its index of
        held GPUs, cores, memory and loads (O(nodes + held GPUs), no look at the jobs)."""
        state = self.cluster.state
        return node_snapshots(state.nodes, held={nid: state.held_gpus(nid) for nid in state.nodes},
                              load={nid: state.active_index.node_load(nid) for nid in state.nodes},
                              health=state.node_health(now, self.cluster.config.stale_after, self.ages(now)),
                              set_aside={nid: state.active_index.set_aside(nid) for nid in state.nodes},
                              trouble={nid: why for nid, n in state.nodes.items() if (why := trouble(n))})

    def _active_jobs(self) -> list[Job]:
        """The active jobs, typed (those the state's index counts)."""
        jobs = self.cluster.state.jobs
        return [jobs[key] for key in self.cluster.state.active_index.active]

    async def lead_once(self) -> None:
        """One round: judge silent nodes, then place what is queued and keep why the rest
        waits (in memory: nothing is committed for a job that stays queued). Linear in nodes
        + jobs (one pass over the jobs); it runs on the event loop."""
        state = self.cluster.state
        now = self._clock()
        await self.give_up_on_silent_nodes(now)
        queued = [j for j in state.jobs.values() if j.state == "queued"]
        if not queued:
            self.waiting = {}
            return
        snapshots = self.snapshots(now)
        by_name = {s.name: nid for nid, s in snapshots.items()}
        near = _Near(state.datasets, {nid: s.name for nid, s in snapshots.items()})
        plan = place(list(snapshots.values()), [_pending(j, near) for j in queued])
        self.waiting = plan.waiting
        gangs: dict[str, list] = {}
        for placement in plan.placements:           # a gang's parts come in rank order
            gangs.setdefault(placement.key, []).append(placement)
        for key, parts in gangs.items():
            where = [{"node": by_name[p.node], "gpus": list(p.gpu_ids)} for p in parts]
            try:
                await self.cluster.place(key, where[0]["node"], where[0]["gpus"],
                                         parts=where if len(where) > 1 else None)
            except Conflict as exc:                 # the state moved under the plan: next round
                _log.info("placing %s on %s refused: %s", key, ", ".join(p.node for p in parts), exc)
                self.wake()

    def ages(self, now: float) -> Mapping[str, float]:
        """Node id -> seconds since this box last heard from the node (see ``ages``)."""
        if self._ages is not None:
            return self._ages()
        return {nid: now - n.get("last_heartbeat", 0.0) for nid, n in self.cluster.state.nodes.items()}

    async def give_up_on_silent_nodes(self, now: float) -> None:
        """Judge the boxes this leader lost touch with (:mod:`floydd.scheduler.outages`): mark them
        suspect; the jobs on boxes suspect, cleanly off or removed that were not started yet
        go back to the queue, their started ones become ``unknown``, and ``lost`` once the box
        has been quiet past the job's window, all on this leader's monotonic clock. Only a
        leader that has led for ``suspect_after`` judges: a new leader has not heard from
        anyone yet."""
        suspect_after = self.cluster.config.suspect_after
        if self.leading_since is None or now - self.leading_since < suspect_after:
            return
        state = self.cluster.state
        quiet = outages.quiet(state.nodes, self.cluster.silence(), self.ages(now))
        for nid in outages.suspects(state.nodes, quiet, suspect_after):
            try:
                await self.cluster.suspect(nid, timeout=REPORT_TIMEOUT)
                _log.warning("box %s is out of touch: suspect", state.nodes[nid]["name"])
            except FloyddError as exc:
                _log.info("marking %s suspect: %s", nid, exc)
        troubled = outages.troubled(state.nodes, state.active_index.busy_nodes(), quiet, suspect_after)
        if not troubled:
            return                                  # the usual round: no look at the jobs
        for key, fields in outages.judge(self._active_jobs(), state.nodes, troubled, self.lost_after):
            try:
                await self.cluster.leader_update_job(key, timeout=REPORT_TIMEOUT, **fields)   # fenced
                _log.warning("job %s: %s", key, fields["reason"])
            except Conflict:
                pass


def _pending(job: Job, near: _Near) -> PendingJob:
    cpu, memory = job.asked_per_box
    refs = job.data_refs
    return PendingJob(key=job.id, gpu_count=job.asked_gpu_count or 0, nodes=job.asked_nodes,
                      cpu_milli=cpu, memory=memory, near=near(refs) if refs else ())


class _Near:
    """The nodes holding a job's data, by name, most bytes of it first (ties by name), from
    the dataset catalog's holders; worked out once per set of mounts in a round."""

    def __init__(self, datasets: dict, names: dict[str, str]) -> None:
        self.datasets, self.names = datasets, names
        self._seen: dict[tuple, tuple[str, ...]] = {}

    def __call__(self, refs: tuple[DatasetRef, ...]) -> tuple[str, ...]:
        if refs not in self._seen:
            held: dict[str, int] = {}
            for ref in refs:
                version = (self.datasets.get(ref.name) or {}).get("versions", {}).get(ref.version_key) or {}
                for nid in version.get("holders") or ():
                    if nid in self.names:
                        held[self.names[nid]] = held.get(self.names[nid], 0) + 1 + int(version.get("size") or 0)
            self._seen[refs] = tuple(sorted(held, key=lambda name: (-held[name], name)))
        return self._seen[refs]


async def every_second_or_sooner(wake: asyncio.Event, body: Callable[[], Any], what: str,
                                 period: Callable[[], float] | None = None) -> None:
    """Run ``body`` when ``wake`` is set, and at least once a second (or every ``period()``
    seconds, asked after each round: longer when nothing but an event can change); survive its
    failures."""
    while True:
        try:
            await asyncio.wait_for(wake.wait(), period() if period is not None else 1.0)
        except asyncio.TimeoutError:
            pass
        wake.clear()
        try:
            await body()
        except FloyddError as exc:
            _log.info("%s cut short: %s", what, exc)
        except Exception:
            _log.exception("%s failed; trying again", what)
