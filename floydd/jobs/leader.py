"""The leader's half of the cluster's jobs: place queued jobs, give up on silent nodes.

Runs on every node and acts only while that node leads. Each round reads the committed
state (the leader's own copy), plans with the pure :func:`floydd.scheduler.place` over
every node and commits ``job.place`` fenced by its term; waiting jobs get their reason.
A plan that the state has moved under is refused by the state machine and made again in
the next round. :class:`~floydd.jobs.service.JobService` owns one and wakes it when job or
node entries are applied (on a box alone too: it is a cluster of one, and leads).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from floydd import log
from floydd.errors import Conflict, FloyddError
from floydd.model import ACTIVE_STATES
from floydd.scheduler import NodeSnapshot, PendingJob, node_snapshots, place

__all__ = ["ClusterScheduler", "REASON_MAX", "REPORT_TIMEOUT", "every_second_or_sooner"]

_log = log.scheduler.getChild("cluster")
REPORT_TIMEOUT = 5.0
"""Seconds a state report or a waiting reason may take to commit (it is retried next round)."""
REASON_MAX = 4096
"""Characters of a waiting reason committed: what a command's string may hold
(:mod:`floydd.cluster.commands`). A reason naming every node of a big cluster is cut there."""


class ClusterScheduler:
    def __init__(self, cluster, *, lost_after: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.lost_after = lost_after
        self._clock = clock
        self.wake_event = asyncio.Event()
        self.leading_since: float | None = None
        """When this node became leader as this loop saw it (None: it does not lead)."""

    def wake(self) -> None:
        self.wake_event.set()

    async def run(self) -> None:
        await every_second_or_sooner(self.wake_event, self._lead_if_leader, "scheduling round")

    async def _lead_if_leader(self) -> None:
        if not self.cluster.is_leader:
            self.leading_since = None
            return
        if self.leading_since is None:
            self.leading_since = self._clock()
        await self.lead_once()

    def snapshots(self, now: float) -> dict[str, NodeSnapshot]:
        """Node id -> what placement knows of it, from the committed state and its index of
        held GPUs and loads (O(nodes + held GPUs), no look at the jobs)."""
        state = self.cluster.state
        return node_snapshots(state.nodes, held={nid: state.held_gpus(nid) for nid in state.nodes},
                              load={nid: state.node_load(nid) for nid in state.nodes},
                              health=state.node_health(now, self.cluster.config.stale_after))

    async def lead_once(self) -> None:
        """One round: judge silent nodes, then place what is queued and say why the rest
        waits. Linear in nodes + jobs (one pass over the jobs); it runs on the event loop."""
        state = self.cluster.state
        now = self._clock()
        await self.give_up_on_silent_nodes(now)
        queued = [j for j in state.jobs.values() if j["state"] == "queued"]
        if not queued:
            return
        snapshots = self.snapshots(now)
        by_name = {s.name: nid for nid, s in snapshots.items()}
        pending = [_pending(j) for j in queued]
        waiting_now = {j["id"]: j["waiting_for"] for j in queued}
        plan = place(list(snapshots.values()), pending)
        gangs: dict[str, list] = {}
        for placement in plan.placements:           # a gang's parts come in rank order
            gangs.setdefault(placement.key, []).append(placement)
        for key, parts in gangs.items():
            where = [{"node": by_name[p.node], "gpus": list(p.gpus)} for p in parts]
            try:
                await self.cluster.place(key, where[0]["node"], where[0]["gpus"],
                                         parts=where if len(where) > 1 else None)
            except Conflict as exc:                 # the state moved under the plan: next round
                _log.info("placing %s on %s refused: %s", key, ", ".join(p.node for p in parts), exc)
                self.wake()
        for key, why in plan.waiting.items():
            why = _committable(why)
            if waiting_now.get(key) != why:
                try:
                    await self.cluster.update_job(key, waiting_for=why, timeout=REPORT_TIMEOUT)
                except Conflict:
                    pass

    async def give_up_on_silent_nodes(self, now: float) -> None:
        """Running jobs of a node silent for ``lost_after`` are lost; its jobs not yet started go
        back to the queue. A node that shut down cleanly (``off``) keeps its jobs: its agents run
        on and it re-adopts them when it is back. Only a leader that has led for ``lost_after``
        judges: after an election or a quorum loss every heartbeat in the state looks old."""
        if self.leading_since is None or now - self.leading_since < self.lost_after:
            return
        state = self.cluster.state
        if all(self._answers(state.nodes.get(nid), now) for nid in state.busy_nodes()):
            return                                  # the usual round: no look at the jobs
        for job in [j for j in state.jobs.values() if j["state"] in ACTIVE_STATES]:
            silent = [nid for nid in _nodes_of(job) if not self._answers(state.nodes.get(nid), now)]
            if not silent:
                continue
            node = state.nodes.get(silent[0])
            name = node["name"] if node else silent[0]
            # a gang whose parts have not started yet can be placed again whole; once any
            # part runs, the run is lost (its other parts are stopped by their boxes)
            started = job["state"] == "running" or any(p["state"] != "starting" for p in job.get("parts") or ())
            if not started:
                fields = {"state": "queued", "reason": f"node {name} went silent before the job started"}
            else:
                fields = {"state": "lost", "reason": f"node {name} went silent for {self.lost_after:.0f}s "
                                                      "while the job ran"}
            try:
                await self.cluster.update_job(job["id"], attempt=job["attempts"], timeout=REPORT_TIMEOUT, **fields)
                _log.warning("job %s: %s", job["id"], fields["reason"])
            except Conflict:
                pass

    def _answers(self, node: dict | None, now: float) -> bool:
        """A node cleanly off keeps its jobs; one that heartbeats recently is there."""
        return node is not None and (node["status"] == "off" or now - node["last_heartbeat"] < self.lost_after)


def _committable(why: str) -> str:
    return why if len(why) <= REASON_MAX else why[:REASON_MAX - 1] + "…"


def _pending(job: dict) -> PendingJob:
    resources = job["spec"].get("resources") or {}
    return PendingJob(key=job["id"], gpus=int(resources.get("gpus") or 0), nodes=int(resources.get("nodes") or 1))


def _nodes_of(job: dict) -> list[str]:
    """The nodes a placed job runs on: every part's for a gang."""
    return [p["node"] for p in job.get("parts") or ()] or [job["node"]]


async def every_second_or_sooner(wake: asyncio.Event, body: Callable[[], Any], what: str) -> None:
    """Run ``body`` when ``wake`` is set, and at least once a second; survive its failures."""
    while True:
        try:
            await asyncio.wait_for(wake.wait(), 1.0)
        except asyncio.TimeoutError:
            pass
        wake.clear()
        try:
            await body()
        except FloyddError as exc:
            _log.info("%s cut short: %s", what, exc)
        except Exception:
            _log.exception("%s failed; trying again", what)
