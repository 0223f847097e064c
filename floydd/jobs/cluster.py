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

Each node *reconciles* (level-triggered, like a kubelet): it compares the committed
state (jobs placed on it) with its own records and acts on the difference — start what
it was given, report what its runtime did, stop what it was told to stop or what the
cluster gave up on. Every step can be repeated after a crash or a lost answer, so it is
driven by "what is" rather than by events; applied entries only wake it early.

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
from floydd.jobs.gang import free_port, gang_env, interface_for, single_box_command, torchrun_command
from floydd.jobs.leader import REPORT_TIMEOUT, ClusterScheduler, every_second_or_sooner
from floydd.jobs.service import ACTIVE_STATES, FINAL_STATES, JobService, _output_ref, _pin, check_mounts
from floydd.jobs.spec import parse_job_key
from floydd.scheduler import unplaceable
from floydd.store import ObjectId

__all__ = ["ClusterJobService", "job_view"]

_log = log.scheduler.getChild("cluster")
_SPEC_FIELDS = ("command", "params", "code_tree", "data", "resources", "env", "message", "mode", "max_runtime")
_JOB_FIELDS = ("id", "project", "number", "state", "reason", "waiting_for", "created", "started", "ended",
               "gpus", "exit_code", "output_version", "attempts", "stop_requested", "user", "origin", "endpoint")
_MAX_SUMMARY_METRICS = 64


def job_view(job: dict, node_names: dict[str, str]) -> dict:
    """A replicated job in the shape of a local job record (what the API and CLI show)."""
    view = {name: job["spec"].get(name) for name in _SPEC_FIELDS}
    view.update({name: job.get(name) for name in _JOB_FIELDS})
    view.update(node=node_names.get(job["node"], job["node"] or ""), node_id=job["node"],
                metrics=dict(job["summary"].get("metrics") or {}), workspace="", agent_pid=None,
                latest=None, attempt=job["attempts"],
                parts=[{**part, "node": node_names.get(part["node"], part["node"]), "node_id": part["node"]}
                       for part in job.get("parts") or ()])
    view["data"] = view["data"] or []
    return view


class ClusterJobService(JobService):
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

    async def submit(self, body: dict[str, Any], *, user: str = "") -> dict:
        idem_key = body.get("idem_key") or uuid.uuid4().hex
        if not isinstance(idem_key, str) or not 8 <= len(idem_key) <= 128:
            raise InvalidSpec("idem_key must be a string of 8-128 characters",
                              hint="leave it out; the CLI sends a fresh one per floyd run")
        project, fields = await self._prepare(body, user)
        return await self._register(project, fields, {**body, "idem_key": idem_key})

    async def _register(self, project: str, fields: dict, body: dict[str, Any]) -> dict:
        spec = {name: fields[name] for name in _SPEC_FIELDS}
        try:
            job = await self.cluster.submit_job(spec, body["idem_key"], project=project, user=fields["user"])
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

    async def _resolve_mounts(self, items: list) -> list[dict]:
        """As on a single box, but NAME[:VERSION] is looked up in the cluster's catalog."""
        if self.datasets is None:
            return await super()._resolve_mounts(items)
        mounts: list[dict] = []
        for spec in check_mounts(items):
            version = await self.datasets.resolve(spec["ref"])
            mounts.append({"ref": version["ref"], "tree": version["tree"], "mount": spec["mount"]})
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

    # -- this node: reconcile the committed state with the runtime -----------------------------------

    async def _reconcile_forever(self) -> None:
        await every_second_or_sooner(self._reconcile_wake, self._reconcile, "reconciling this node's jobs")

    async def _reconcile(self) -> None:
        state = self.cluster.state
        mine = [state.job(k) for k, j in list(state.jobs.items()) if _unsettled(j, self.node_id)]
        for job in mine:
            await self._reconcile_job(job)
        active = {j["id"] for j in mine}
        for memo in (self._reported, self._summary_due):   # forget jobs no longer active here
            for key in [k for k in memo if k not in active]:
                del memo[key]
        held = self.runtime.running()
        for project, number in list(held):         # runs here that the cluster no longer wants here
            key = f"{project}/{number}"
            job = state.jobs.get(key)
            local = await asyncio.to_thread(self.records.get_job, project, number)
            if local.get("attempt", 0) == 0 or key in self._stopping:
                continue
            if job is not None and job["attempts"] == local["attempt"] and job["state"] in FINAL_STATES \
                    and job.get("parts"):
                self._spawn(self._stop_local(key, f"the job ended ({job['reason'] or job['state']})"))
            elif job is None or _part_of(job, self.node_id) is None or job["attempts"] != local["attempt"] \
                    or job["state"] in FINAL_STATES:
                why = "the cluster gave this run up (its node was out of touch) and may run it elsewhere"
                self._spawn(self._stop_local(key, why))

    async def _reconcile_job(self, job: dict) -> None:
        key = job["id"]
        project, number = job["project"], job["number"]
        part = _part_of(job, self.node_id)
        if key in self._launching:
            return
        try:
            local = await asyncio.to_thread(self.records.get_job, project, number)
        except NotFound:
            local = None
        if local is not None and local.get("attempt", 0) == 0:
            await self._report(job, state="failed", reason=f"node {self.cluster.name} already has a job "
                               f"{key} from before it joined the cluster; submit it again")
            return
        if job["state"] in FINAL_STATES:            # a gang that ended: settle this part's report
            never = "the job ended before this part started"
            if local is None or local["attempt"] < job["attempts"]:
                await self._report(job, state="stopped", reason=never)
            elif local["attempt"] != job["attempts"]:
                pass
            elif local["state"] in FINAL_STATES:
                await self._report_final(job, local)
            elif local["state"] == "queued" and (project, number) not in self.runtime.running():
                await asyncio.to_thread(self.records.set_state, project, number, "stopped", never)
                self.wake()
            return
        if local is None or (local["attempt"] < job["attempts"] and local["state"] in FINAL_STATES):
            self._launching.add(key)
            self._spawn(self._launch(job, replace=local is not None))
            return
        if local["attempt"] != job["attempts"]:
            return
        if job["stop_requested"] and local["state"] not in FINAL_STATES and key not in self._stopping:
            self._spawn(self._stop_local(key, job["stop_requested"]))
        if local["state"] == "queued" and (project, number) not in self.runtime.running():
            self._launching.add(key)                # a launch cut short by a restart
            self._spawn(self._launch(job, replace=False))
        elif local["state"] == "running" and part["state"] == "starting":
            await self._report(job, state="running")
        elif local["state"] == "running" and part["rank"] in (None, 0) \
                and time.monotonic() >= self._summary_due.get(key, 0.0):
            # metrics so far, so every box lists them (3 heartbeats apart: a few raft writes a minute)
            self._summary_due[key] = time.monotonic() + 3 * self.cluster.config.heartbeat_interval
            await self._report(job, summary=await self._summary(job))
        elif local["state"] in FINAL_STATES:
            await self._report_final(job, local)

    async def _launch(self, job: dict, *, replace: bool) -> None:
        """Make the local record of this placement, bring its inputs here, start it."""
        key, project, number = job["id"], job["project"], job["number"]
        try:
            if replace:
                await asyncio.to_thread(self.records.delete_job, project, number)
            spec = job["spec"]
            fields = {name: spec[name] for name in _SPEC_FIELDS if spec.get(name) is not None}
            fields.update(attempt=job["attempts"], user=job["user"], node=self.config.node_name,
                          created=job["created"])
            try:
                await asyncio.to_thread(self.records.insert_job, project, number, fields)
            except Conflict:
                pass                                # a relaunch after a restart: the record is there
            try:
                await self._fetch_inputs(job)
            except FloyddError as exc:
                await asyncio.to_thread(self.records.set_state, project, number, "failed",
                                        f"could not bring its inputs to {self.config.node_name}: {exc.message}")
                return
            current = self.cluster.state.jobs.get(key) or {}
            if current.get("stop_requested"):
                await asyncio.to_thread(self.records.set_state, project, number, "stopped", current["stop_requested"])
                return
            part = _part_of(job, self.node_id)
            command, env = single_box_command(spec["command"], len(part["gpus"])), None
            if part["rank"] is not None:
                endpoint = await self._rendezvous(job, part["rank"])
                if endpoint is None:
                    await asyncio.to_thread(self.records.set_state, project, number, "stopped",
                                            "the job ended or was stopped before this part started")
                    return
                host, _, port = endpoint.rpartition(":")
                nnodes = len(job["parts"])
                command = torchrun_command(spec["command"], nnodes=nnodes, rank=part["rank"],
                                           nproc=max(1, len(part["gpus"])), host=host, port=int(port))
                mine = self.cluster.state.nodes[self.node_id]["address"]
                env = gang_env(nnodes=nnodes, rank=part["rank"], host=host, port=int(port),
                               ifname=await asyncio.to_thread(interface_for, mine))
                for name in spec.get("params") or {}:   # the job's own choice wins
                    env.pop(name, None)
            await self.runtime.start_job(project, number, list(part["gpus"]), command=command, env=env)
        except Exception as exc:
            _log.exception("starting %s failed", key)
            try:
                local = await asyncio.to_thread(self.records.get_job, project, number)
                if local["state"] not in FINAL_STATES:
                    await asyncio.to_thread(self.records.set_state, project, number, "failed",
                                            f"could not start: {exc}")
            except FloyddError:
                pass
        finally:
            self._launching.discard(key)
            self.wake()

    async def _rendezvous(self, job: dict, rank: int) -> str | None:
        """The gang's ``host:port``: rank 0 picks a free port on this box and commits it;
        the other ranks wait until it is committed. None when the attempt is over first."""
        key = job["id"]
        endpoint = None
        if rank == 0 and not job.get("endpoint"):
            host = self.cluster.state.nodes[self.node_id]["address"]
            endpoint = f"{host}:{await asyncio.to_thread(free_port)}"
        while True:
            changed = self._job_changed
            current = self.cluster.state.jobs.get(key)
            if current is None or current["attempts"] != job["attempts"] or current["state"] not in ACTIVE_STATES \
                    or current["stop_requested"]:
                return None
            if current.get("endpoint"):
                return current["endpoint"]
            if endpoint is not None:
                try:                                # retried through a change of leader
                    await self.cluster.update_job(key, attempt=job["attempts"], node=self.node_id, rank=0,
                                                  endpoint=endpoint, timeout=REPORT_TIMEOUT)
                    endpoint = None                 # committed: wait below until it is applied here
                    continue
                except Unavailable as exc:
                    _log.info("committing the rendezvous of %s: %s (trying again)", key, exc)
            try:
                await asyncio.wait_for(changed.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    async def _fetch_inputs(self, job: dict) -> None:
        spec = job["spec"]
        tree = spec["code_tree"]
        await self._ensure_tree(tree, self._code_sources(tree))
        await asyncio.to_thread(self.store.catalog.pin, ObjectId.from_hex(tree), _pin(job["project"], job["number"]))
        for mount in spec.get("data") or ():
            if self.datasets is not None:
                await self.datasets.ensure_local(mount["tree"], self._holders(mount["ref"]))
            else:
                await self._ensure_tree(mount["tree"], self._holders(mount["ref"]))

    def _code_sources(self, tree: str) -> list[str]:
        """Nodes likely to hold a code tree: where jobs with it were submitted, then where they ran."""
        jobs = [j for j in self.cluster.state.jobs.values() if j["spec"].get("code_tree") == tree]
        ids = [j["origin"] for j in jobs] + [j["node"] for j in jobs]
        return [n for n in dict.fromkeys(ids) if n and n != self.node_id]

    def _holders(self, ref: str) -> list[str]:
        name, _, number = ref.rpartition(":")
        version = self.cluster.state.datasets.get(name, {}).get("versions", {}).get(number, {})
        return [n for n in version.get("holders", []) if n != self.node_id]

    async def _ensure_tree(self, tree: str, sources: list[str]) -> None:
        oid = ObjectId.from_hex(tree)
        if await asyncio.to_thread(self._has_tree, oid):
            return
        if self._fetch_tree is None:
            raise Unavailable(f"tree {tree[:12]} is not on this node and no peer fetch is configured")
        others = [n for n in self.cluster.state.nodes if n != self.node_id and n not in sources]
        await self._fetch_tree(self.store, tree, sources + others, self.cluster.transport)

    def _has_tree(self, oid: ObjectId) -> bool:
        if not self.store.backend.has(oid):
            return False
        try:
            tree = self.store.read_tree(oid)
        except FloyddError:
            return False
        return all(self.store.backend.has(c) for c in tree.chunk_ids())

    async def _stop_local(self, key: str, reason: str) -> None:
        project, number = parse_job_key(key)
        self._stopping.add(key)
        try:
            if (project, number) in self.runtime.running():
                await self.runtime.stop_job(project, number, reason)
        except FloyddError as exc:
            _log.warning("stopping %s here: %s", key, exc)
        finally:
            self._stopping.discard(key)
            self.wake()

    async def _report(self, job: dict, **fields: Any) -> None:
        """Tell the cluster what happened to this node's attempt (fenced by attempt and node)."""
        key = job["id"]
        rank = (_part_of(job, self.node_id) or {}).get("rank")
        if rank is not None:
            fields["rank"] = rank
        stamp = (job["attempts"], tuple(sorted((k, repr(v)) for k, v in fields.items())))
        if self._reported.get(key) == stamp:        # sent and not yet seen applied: not again yet
            return
        self._reported[key] = stamp
        try:
            await self.cluster.update_job(key, attempt=job["attempts"], node=self.node_id,
                                          timeout=REPORT_TIMEOUT, **fields)
        except Conflict as exc:
            _log.info("report on %s refused: %s", key, exc)
        except FloyddError as exc:
            _log.info("report on %s not committed (will retry): %s", key, exc)
            self._reported.pop(key, None)

    async def _report_final(self, job: dict, local: dict) -> None:
        part = _part_of(job, self.node_id)
        if part["state"] == "starting" and local["state"] in ("success", "timeout"):
            await self._report(job, state="running")  # it ran and ended between two looks
        fields: dict[str, Any] = {"state": local["state"], "reason": local["reason"] or "",
                                  "exit_code": local["exit_code"]}
        if part["rank"] in (None, 0):                 # rank 0 speaks for a gang: metrics, /output
            fields["summary"] = await self._summary(job)
            if local.get("output_version"):
                fields["output_version"] = await self._publish_output(job, local["output_version"])
        await self._report(job, **fields)

    async def _summary(self, job: dict) -> dict:
        summary = await asyncio.to_thread(self.records.metric_summary, job["project"], job["number"])
        return {"metrics": dict(list(summary.items())[:_MAX_SUMMARY_METRICS]), "ran_on": self.cluster.name}

    async def _publish_output(self, job: dict, ref: str) -> str:
        """Put the job's /output version in the cluster catalog (this node holds it)."""
        version = await asyncio.to_thread(self.store.catalog.resolve, ref)
        try:
            added = await self.cluster.add_dataset_version(
                version.name, str(version.tree), idem_key=f"output:{job['id']}:{job['attempts']}",
                size=int(version.size or 0), files=int(version.files or 0), message=f"output of {job['id']}",
                timeout=REPORT_TIMEOUT)
            return added["ref"]
        except FloyddError as exc:
            _log.info("publishing the output of %s: %s", job["id"], exc)
            return ref

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


def _part_of(job: dict, node_id: str) -> dict | None:
    """``node_id``'s part of a placed job: rank (None for a job on one node), node, gpus, state."""
    parts = job.get("parts") or ()
    for part in parts:
        if part["node"] == node_id:
            return part
    if not parts and job["node"] == node_id:
        return {"rank": None, "node": node_id, "gpus": job["gpus"], "state": job["state"]}
    return None


def _unsettled(job: dict, node_id: str) -> bool:
    """Is there something for ``node_id`` to do about this job: run or report its part (a
    gang's part is reported even after the job ended, so every part ends up final)?"""
    part = _part_of(job, node_id)
    if part is None:
        return False
    return job["state"] in ACTIVE_STATES or (part["rank"] is not None and part["state"] in ACTIVE_STATES)


def _history(job: dict) -> bool:
    """A job from this node's records of before it joined (not in the cluster's state)."""
    return "node_id" not in job
