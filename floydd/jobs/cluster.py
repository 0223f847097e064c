"""Jobs across the boxes of a cluster: one queue in the replicated state, placed by the leader.

A node that is part of a cluster (``STATE/cluster.json``) runs :class:`ClusterJobService`
instead of the single-box :class:`~floydd.jobs.service.JobService`. What changes::

    floyd run (any node)                          leader                    node it was placed on
    ───────────────────                           ──────                    ─────────────────────
    check, snapshot code into this node's   ──►  job.submit (idem key)
    store, resolve data in the cluster           committed: answered
                                                  scheduler: place() over   reconcile: job.place names
                                                  every node ──► job.place  this node ──► local record,
                                                  (fenced by its term)      fetch code/data from peers,
                                                                            runtime.start_job ...
                                                                            job.update running/final
                                                  node silent > lost_after: (fenced by attempt + node)
                                                  running ──► lost,
                                                  starting ──► queued again

Each node *reconciles* the committed state with its records and runtime
(:mod:`floydd.jobs.reconcile`, a mixin of the service).

Records stay local (DESIGN §5): each node's ``records.db`` holds the jobs that ran there,
with their metric series, events and logs; the replicated job carries the spec, state,
placement and a summary (final metrics), so every node can list and compare every job.
Logs, metrics and events of a job that ran elsewhere are read from its node over mTLS
(``/cluster/v1/jobs/...``, :mod:`floydd.jobs.peer`). The leader's half (placement, silent
nodes) is :mod:`floydd.jobs.leader`. Jobs a node ran before it joined stay in
its records (``attempt`` 0) and are listed with the cluster's; ``project.reserve`` keeps
the cluster from numbering new jobs over them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Callable

import msgpack

from floydd import log
from floydd.errors import Conflict, FloyddError, InvalidSpec, NotFound, Unavailable, UserError
from floydd.jobs.leader import ClusterScheduler
from floydd.jobs.reconcile import Reconciler
from floydd.jobs.service import JobService, _output_ref, _pin
from floydd.model import FINAL_STATES, SPEC_FIELDS, Mount, MountRequest, Submission, parse_job_key
from floydd.scheduler import unplaceable
from floydd.store import ObjectId

__all__ = ["ClusterJobService", "job_view"]

_log = log.scheduler.getChild("cluster")
_JOB_FIELDS = ("id", "project", "number", "state", "reason", "waiting_for", "created", "started", "ended",
               "gpus", "exit_code", "output_version", "attempts", "stop_requested", "user", "origin", "endpoint")


def job_view(job: dict, node_names: dict[str, str]) -> dict:
    """A replicated job in the shape of a local job record (what the API and CLI show)."""
    view = {name: job["spec"].get(name) for name in SPEC_FIELDS}
    view.update({name: job.get(name) for name in _JOB_FIELDS})
    view.update(node=node_names.get(job["node"], job["node"] or ""), node_id=job["node"],
                metrics=dict(job["summary"].get("metrics") or {}), workspace="", agent_pid=None,
                latest=None, attempt=job["attempts"],
                parts=[{**part, "node": node_names.get(part["node"], part["node"]), "node_id": part["node"]}
                       for part in job.get("parts") or ()])
    view["data"] = view["data"] or []
    return view


class ClusterJobService(Reconciler, JobService):
    """The job service of a cluster member (see the module docstring)."""

    def __init__(self, *, cluster, datasets=None, fetch_tree: Callable | None = None,
                 lost_after: float = 60.0, clock: Callable[[], float] = time.time, **kw: Any) -> None:
        super().__init__(**kw)
        self.cluster = cluster
        self.datasets = datasets
        self.node_id = cluster.node_id
        self._fetch_tree = fetch_tree
        self._clock = clock
        self._reconcile_wake = asyncio.Event()
        self.scheduler = ClusterScheduler(cluster, lost_after=lost_after, clock=clock)
        self._job_changed = asyncio.Event()
        self._launching: set[str] = set()
        self._stopping: set[str] = set()
        self._reported: dict[str, tuple] = {}
        self._summary_due: dict[str, float] = {}
        cluster.on_apply(self._on_apply)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.runtime.reattach()
        for name, loop in (("reconcile", self._reconcile_forever), ("lead", self.scheduler.run),
                           ("reserve", self._reserve_local_numbers)):
            self._spawn(loop()).set_name(f"floydd.jobs.{name}")
        self.wake()

    def wake(self) -> None:
        self._reconcile_wake.set()

    def _on_apply(self, event) -> None:
        cmd = event.command
        if event.restored or (cmd is not None and cmd.get("op", "").startswith(("job.", "node."))):
            self._reconcile_wake.set()
            self.scheduler.wake()
            self._job_changed.set()
            self._job_changed = asyncio.Event()      # waiters hold the one just set
        if cmd is not None and cmd.get("op") == "job.delete" and event.error is None:
            self._spawn(self._forget_local(cmd["job"]))

    # -- submission -------------------------------------------------------------------------------

    async def submit(self, submission: Submission, *, user: str = "") -> dict:
        project, fields = await self._prepare(submission, user)
        return await self._register(project, fields, submission)

    async def _register(self, project: str, fields: dict, submission: Submission) -> dict:
        spec = {name: fields[name] for name in SPEC_FIELDS}
        try:
            job = await self.cluster.submit_job(spec, submission.idem_key or uuid.uuid4().hex, project=project,
                                                user=fields["user"])
        except Unavailable as exc:
            raise Unavailable(f"the cluster did not take the job: {exc.message}",
                              hint="a majority of the voting boxes must be up and reachable (floydd members); "
                                   "resubmitting is safe: floyd run retries with the same key") from exc
        tree = ObjectId.from_hex(fields["code_tree"])
        if await asyncio.to_thread(self.store.backend.has, tree):   # this node holds the code: keep it
            await asyncio.to_thread(self.store.catalog.pin, tree, _pin(project, job["number"]))
        _log.info("submitted %s to the cluster: %s", job["id"], fields["command"])
        self.scheduler.wake()
        return self._view(job)

    async def _resolve_mounts(self, items: list[MountRequest]) -> list[Mount]:
        """As on a single box, but NAME[:VERSION] is looked up in the cluster's catalog."""
        if self.datasets is None:
            return await super()._resolve_mounts(items)
        mounts: list[Mount] = []
        for item in items:
            version = await self.datasets.resolve(item.ref)
            mounts.append(Mount(ref=version["ref"], tree=version["tree"], mount=item.mount))
        return mounts

    def _check_placeable(self, gpus: int, nodes: int = 1) -> None:
        why = unplaceable(list(self.scheduler.snapshots(self._clock()).values()), gpus, nodes)
        if why:
            asked = f"--gpu {gpus}" + (f" --nodes {nodes}" if nodes > 1 else "")
            raise UserError(f"cannot run with {asked}: {why}",
                            hint="use --cpu, or fewer GPUs or nodes (floyd nodes lists every node's GPUs)",
                            code="no_such_resources")

    # -- reads ------------------------------------------------------------------------------------

    def _names(self) -> dict[str, str]:
        return {nid: n["name"] for nid, n in self.cluster.state.nodes.items()}

    def _view(self, job: dict) -> dict:
        return job_view(job, self._names())

    async def get(self, key: str, *, stale: bool = False) -> dict:
        parse_job_key(key)
        try:
            job = self._view(await self.cluster.job(key, stale=stale))
        except NotFound:
            return await super().get(key)          # this node's history from before it joined
        if job["node_id"] == self.node_id:
            await asyncio.to_thread(self._overlay_local, job)
        return job

    def _overlay_local(self, job: dict) -> None:
        """Live details of a job running here: workspace, agent, metric summary so far."""
        try:
            local = self.records.get_job(job["project"], job["number"])
        except NotFound:
            return
        if local.get("attempt") == job["attempt"]:
            job.update(workspace=local["workspace"], agent_pid=local["agent_pid"], latest=local["latest"],
                       metrics=self.records.metric_summary(job["project"], job["number"]))

    async def list(self, project: str | None = None, state: str | None = None, *, stale: bool = False) -> list[dict]:
        local = await super().list(project, state)
        states = [s.strip() for s in state.split(",")] if state else None
        jobs = [self._view(j) for j in await self.cluster.jobs(project=project, states=states, stale=stale)]
        by_key = {j["id"]: j for j in local}
        for job in jobs:
            mine = by_key.get(job["id"])
            if job["node_id"] == self.node_id and mine is not None and mine.get("attempt") == job["attempt"]:
                job.update(workspace=mine["workspace"], agent_pid=mine["agent_pid"], metrics=mine["metrics"])
        known = {j["id"] for j in jobs}
        history = [j for j in local if j.get("attempt", 0) == 0 and j["id"] not in known]
        return sorted(jobs + history, key=lambda j: j.get("created") or 0, reverse=True)

    async def wait(self, key: str, timeout: float | None = None) -> dict:
        if _history(await self.get(key)):
            return await super().wait(key, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            changed = self._job_changed
            job = self.cluster.state.jobs.get(key)
            if job is None:                        # this node's copy lags behind, or it was deleted
                job = await self.cluster.job(key)  # NotFound if deleted
            remaining = None if deadline is None else deadline - time.monotonic()
            if job["state"] in FINAL_STATES or (remaining is not None and remaining <= 0):
                return await self.get(key, stale=key in self.cluster.state.jobs)
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def events(self, key: str) -> list[dict]:
        """What the cluster decided (submission, placements, requeues, stops) and what the box
        that ran the job recorded, in time order."""
        try:
            job = await self.cluster.job(key, stale=True)
        except NotFound:
            return await super().events(key)       # this node's history from before it joined
        decided = [{"seq": None, "ts": ts, "kind": "cluster", "message": text, "data": None}
                   for ts, text in job.get("history") or ()]
        ran: list[dict] = []
        if job["node"] == self.node_id:
            ran = await super().events(key)
        elif job["node"]:
            try:
                raw, _ = await self.cluster.transport.fetch(job["node"], f"/cluster/v1/jobs/{key}/events")
                ran = msgpack.unpackb(raw, raw=False)
            except (Unavailable, NotFound) as exc:
                ran = [{"seq": None, "ts": self._clock(), "kind": "note", "data": None,
                        "message": f"the events of the box that ran it are unavailable: {exc.message}"}]
        return sorted(decided + ran, key=lambda e: e["ts"] or 0)

    async def metrics(self, key: str) -> dict:
        job = await self.get(key, stale=True)
        if job.get("node_id") in (None, "", self.node_id):
            return await super().metrics(key)
        raw, _ = await self.cluster.transport.fetch(job["node_id"], f"/cluster/v1/jobs/{key}/metrics")
        return msgpack.unpackb(raw, raw=False)

    async def read_log(self, key: str, offset: int, *, rank: int | None = None) -> tuple[bytes, bool]:
        job = await self.get(key, stale=True)      # polled while following: this node's copy
        if _history(job):
            return await super().read_log(key, offset, rank=rank)
        node = job["node_id"]
        if rank is not None and job["parts"]:
            if not 0 <= rank < len(job["parts"]):
                raise NotFound(f"job {key} has no rank {rank}", code="no_such_part",
                               hint=f"its ranks are 0-{len(job['parts']) - 1} (floyd info {key})")
            node = job["parts"][rank]["node_id"]
        elif rank not in (None, 0):
            raise NotFound(f"job {key} runs on one box: it has no rank {rank}", code="no_such_part",
                           hint="leave out --rank")
        if node == self.node_id:
            return await self.read_local_log(key, offset)
        if not node or job["state"] == "queued":
            return b"", job["state"] in FINAL_STATES
        raw, headers = await self.cluster.transport.fetch(node, f"/cluster/v1/jobs/{key}/log",
                                                          params={"offset": str(offset)})
        return raw, headers.get("X-Floydd-Final") == "1"

    async def tree_for(self, key: str, which: str) -> ObjectId:
        job = await self.get(key)
        if which == "code":
            tree = job["code_tree"]
            await self._ensure_tree(tree, self._code_sources(tree))
            return ObjectId.from_hex(tree)
        ref = _output_ref(job)
        if self.datasets is None or _history(job):
            return await super().tree_for(key, which)
        version = await self.datasets.resolve(ref)
        await self.datasets.ensure_local(version["tree"], version.get("holders") or [])
        return ObjectId.from_hex(version["tree"])

    # -- actions -----------------------------------------------------------------------------------

    async def stop(self, key: str, reason: str = "stopped by user") -> dict:
        job = await self.get(key)
        if _history(job):
            return await super().stop(key, reason)
        if job["state"] in FINAL_STATES:
            raise Conflict(f"job {key} already ended ({job['state']})", hint="nothing to stop")
        if job["state"] == "queued":
            try:
                await self.cluster.update_job(key, state="stopped", reason=reason)
                return await self.get(key)
            except Conflict:                       # placed meanwhile: ask its node
                pass
        await self.cluster.update_job(key, stop_requested=reason)
        return await self.wait(key, self.config.stop_grace + 10.0)

    async def delete(self, key: str) -> dict:
        job = await self.get(key)
        if _history(job):
            return await super().delete(key)
        if job["state"] not in FINAL_STATES and job["state"] != "queued":
            raise Conflict(f"job {key} is {job['state']}", hint=f"stop it first: floyd stop {key}")
        if job["state"] == "queued":
            await self.stop(key, "deleted")
        await self.cluster.delete_job(key)        # every node forgets its part on apply
        return job

    async def _forget_local(self, key: str) -> None:
        project, number = parse_job_key(key)

        def remove() -> None:
            self.store.catalog.unpin(_pin(project, number))
            try:
                local = self.records.get_job(project, number)
            except NotFound:
                return
            if local.get("attempt", 0) > 0 and local["state"] in FINAL_STATES:
                self._remove_local(local)
        await asyncio.to_thread(remove)

    async def _reserve_local_numbers(self) -> None:
        """Have the cluster number new jobs above this node's own earlier ones (once, retried)."""
        projects = await asyncio.to_thread(self.records.list_projects)
        for project in projects:
            while project["last_number"] > self.cluster.state.counters.get(project["name"], 0):
                try:
                    await self.cluster.reserve_numbers(project["name"], project["last_number"])
                except FloyddError as exc:
                    _log.debug("reserving job numbers of %s: %s", project["name"], exc)
                    await asyncio.sleep(1.0)


def _history(job: dict) -> bool:
    """A job from this node's records of before it joined (not in the cluster's state)."""
    return "node_id" not in job
