"""The job service: the one road every job takes, on a lone box as in a cluster of many.

A lone box is a cluster of one (a one-voter control plane with no listener); ``floydd
init`` and ``join`` only add the mTLS listener and discovery. So every job goes::

    floyd run (any node)               leader                          node it was placed on
    ────────────────────               ──────                          ─────────────────────
    check the submission, snapshot ──► job.submit (idempotency key)
    the code here, pin its data        committed: answered
    versions in the cluster catalog    ClusterScheduler: place() over  Reconciler: decide() sees a
                                       every node ──► job.place        part here ──► local record,
                                       (fenced by its term)            inputs fetched, runtime
                                                                       starts it ──► job.update
                                       box silent (outages.py):        running / final (fenced by
                                       starting ──► queued again,      attempt and node), metrics,
                                       running ──► unknown ──► lost    the /output version,
                                       past lost_after; the restart    checkpoints of /output
                                       policy may rerun it

The replicated job carries the spec, state, placement and a summary (final metrics), so
every node lists and compares every job; the details (log, metric series, events) stay on
the node that ran it (:class:`~floydd.jobs.local.LocalJobs`) and are read from there over
mTLS. A node's history (jobs it ran before it joined its cluster) is not in the
replicated state: it is listed and handled from this node's records alone.

A submit is answered once the job is committed *and* its code is on R boxes (this one and
one more by default, as a dataset version is kept: :mod:`floydd.cluster.replication.codecopies`), or,
after ``code_copy_wait``, with a warning that says how many copies it has. A job's code is
small, so the wait is one fetch; in exchange the job can run or rerun on any box even after
the box it was submitted from is gone.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Callable, NamedTuple

import msgpack

from floydd import log
from floydd.cluster.state import versions
from floydd.cluster.state.access import ReadRules
from floydd.cluster.state.authz import check_job_owner
from floydd.cluster.replication.codecopies import CodeCopies, likely_sources
from floydd.cluster.replication.datasets import ClusterDatasets
from floydd.cluster.service import ClusterService
from floydd.errors import Conflict, NotFound, Unavailable, UserError
from floydd.jobs.adopting import adopt_queued_history, reserve_history_numbers
from floydd.jobs.codesnap import CodeUploads, snapshot_code
from floydd.jobs.admission import Admission
from floydd.scheduler.placer import ClusterScheduler
from floydd.jobs.local import LocalJobs, code_pin, output_ref
from floydd.jobs.reconcile import FetchTree, Reconciler
from floydd.jobs.listing import filtered_and_sorted, job_view, metric_views
from floydd.jobs.waiting import WaitingReasons
from floydd.model import (DEFAULT_LOST_AFTER, FINAL_STATES, Job, JobKey, JobOrder, JobView, Mount, Restart, Submission,
                          check_project)
from floydd.records import Records
from floydd.runtime import NodeRuntime
from floydd.runtime.sandboxing import Sandboxing
from floydd.store import ObjectId, Store
from floydd.tasks import cancel_and_wait

__all__ = ["JobService"]

_log = log.scheduler.getChild("jobs")


class JobService:
    """Every job of the cluster as this node serves them (see the module docstring)."""

    def __init__(self, *, config, cluster: ClusterService, datasets: ClusterDatasets, records: Records,
                 store: Store, runtime: NodeRuntime, fetch_tree: FetchTree, lost_after: float = DEFAULT_LOST_AFTER,
                 clock: Callable[[], float] = time.time) -> None:
        self.config, self.cluster, self.datasets, self.store, self.runtime = config, cluster, datasets, store, runtime
        self.node_id = cluster.node_id
        self._clock = clock
        self.local = LocalJobs(records=records, store=store, runtime=runtime, jobs_dir=config.jobs_dir)
        self.reconciler = Reconciler(cluster=cluster, local=self.local, runtime=runtime, store=store,
                                     fetch_tree=fetch_tree, node_name=config.node_name,
                                     checkpoint_interval=config.checkpoint_interval)
        self.scheduler = ClusterScheduler(cluster, lost_after=lost_after, ages=cluster.heard_ages)   # monotonic
        self.waiting = WaitingReasons(cluster, self.scheduler)
        self.admission = Admission(config=config, cluster=cluster, datasets=datasets, runtime=runtime,
                                   scheduler=self.scheduler, clock=clock)
        """What a submit is refused for before it is committed."""
        self.code = CodeCopies(cluster, store, state=cluster.state, replicas=datasets.replicas,
                               grace=datasets.grace,
                               copy_wait=config.code_copy_wait, has_tree=self.local.has_tree)
        """Every job's code kept on R boxes like a dataset version (issue 21)."""
        self.uploads = CodeUploads()
        """Code folders people sent to this box (``POST /v1/code``), by handle."""
        self.rules = ReadRules.of(config)
        """Who reads what a job made through this box (:mod:`floydd.cluster.state.access`)."""
        cluster.on_apply(self._on_apply)
        self._ended = asyncio.Condition()            # a run of this node ended (history waits)
        self._tasks: set[asyncio.Task] = set()

    # -- lifecycle --------------------------------------------------------------------------------

    def _on_apply(self, event) -> None:
        cmd = event.command
        if event.restored or (cmd is not None and cmd.get("op", "").startswith(("job.", "node."))):
            self.scheduler.wake()

    async def start(self) -> None:
        await self.runtime.reattach()
        await adopt_queued_history(self.cluster, self.local.records, self.node_id)
        self.code.start()
        self.reconciler.start()
        for name, loop in (("lead", self.scheduler.run), ("reserve", lambda: reserve_history_numbers(self.cluster, self.local.records))):
            task = asyncio.create_task(loop(), name=f"floydd.jobs.{name}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        await self.reconciler.close()
        await self.code.close()
        await cancel_and_wait(self._tasks)

    def on_finished(self, project: str, number: int) -> None:
        """The runtime ended a run of this node."""
        self.reconciler.wake()
        task = asyncio.create_task(self._notify_ended())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _notify_ended(self) -> None:
        async with self._ended:
            self._ended.notify_all()

    # -- submission ------------------------------------------------------------------------------

    async def check(self, submission: Submission, *, user: str = "") -> tuple[Submission, list[Mount], Sandboxing]:
        """What :meth:`submit` refuses before it looks at the code (:meth:`~floydd.jobs.admission.Admission.check`)."""
        return await self.admission.check(submission, user=user)

    async def submit(self, submission: Submission, *, user: str = "", code_tree: str | None = None) -> JobView:
        """Check, snapshot the code here, pin the data versions, commit; the job as committed.
        The same ``idem_key`` always gives the same job, so a client may retry. The code is the
        submission's ``code_upload`` (``user``'s own handle), its ``code_path``, or ``code_tree``:
        a tree id from inside the daemon (a restart's), never from a request."""
        if code_tree is None and submission.code_upload is not None:
            code_tree = self.uploads.tree(submission.code_upload, user)      # before anything else is looked at
        if code_tree is None and submission.code_path is None:
            raise UserError("the job has no code", hint="send code_path (a folder on the daemon's machine) or "
                                                        "code_upload (POST /v1/code); floyd run does")
        submission, mounts, sandboxing = await self.check(submission, user=user)
        if code_tree is None:
            code_tree = str(await asyncio.to_thread(snapshot_code, self.store, Path(submission.code_path),
                                                    int(self.config.max_code_mb * 1024 * 1024)))
        spec = submission.spec(code_tree=code_tree, data=tuple(mounts)).to_dict()
        held = await asyncio.to_thread(self.code.has_tree, code_tree)   # its first copy, listed with the job
        try:
            with self.admission.queue_slot(user, submission.idem_key):    # counted with the queue until committed
                job = Job.from_dict(await self.cluster.submit_job(spec, submission.idem_key or uuid.uuid4().hex,
                                                                  project=submission.project, user=user,
                                                                  code_held=held))
        except Unavailable as exc:
            raise Unavailable(f"the cluster did not take the job: {exc.message}",
                              hint="a majority of the voting boxes must be up and reachable (floydd members); "
                                   "resubmitting is safe: floyd run retries with the same key") from exc
        tree = ObjectId.from_hex(code_tree)
        if await asyncio.to_thread(self.store.backend.has, tree):   # this node holds the code: keep it
            await asyncio.to_thread(self.store.catalog.pin, tree, code_pin(JobKey.parse(job.id)))
        _log.info("submitted %s: %s", job.id, submission.command)
        self.scheduler.wake()
        # answered once its code is as durable as an uploaded version (R copies, or as many as
        # there are boxes to take them), or saying how many copies it has (issue 21)
        copies = await self.code.wait_for_copies(code_tree)
        view = self._view(job)
        warnings = tuple(w for w in (sandboxing.warning, copies) if w)
        if warnings:             # floyd run prints them on stderr, every time
            view = replace(view, warnings=warnings)
        return view

    async def restart(self, key: str, changes: Restart, *, user: str = "") -> JobView:
        """A new job from ``key`` (with ``changes``), for its owner or an admin (authz)."""
        old = await self.get(key)
        check_job_owner(self.cluster.state, user, key, old.user, "restart")
        return await self.submit(changes.submission(JobKey.parse(key), old), user=user, code_tree=old.code_tree)

    # -- reads ------------------------------------------------------------------------------------

    def _view(self, job: Job) -> JobView:
        return job_view(job, {nid: n["name"] for nid, n in self.cluster.state.nodes.items()})

    async def get(self, key: str, *, stale: bool = False) -> JobView:
        """The job, with what this node knows live of a run here; a history job from the records."""
        parsed = JobKey.parse(key)
        try:
            view = self._view(await self.cluster.job(key, stale=stale))
        except NotFound:
            return await self.local.get(parsed)       # this node's history (NotFound if none)
        [view] = await self.waiting.fill((view,), stale=stale)
        if view.node_id == self.node_id:
            view = await asyncio.to_thread(self._overlay, view)
        return view

    def _overlay(self, view: JobView) -> JobView:
        """``view`` with the live details of its run here: workspace, agent, metric summary so far."""
        key = JobKey(view.project, view.number)
        run = self.local.run(key)
        if run is None or run.attempt != view.attempt:
            return view
        return replace(view, workspace=run.workspace, agent_pid=run.agent_pid,
                       latest=None if run.latest is None else dict(run.latest),
                       metrics=metric_views(self.local.metric_summary(key)))

    async def list(self, project: str | None = None, state: str | None = None, *, stale: bool = False,
                   limit: int | None = None, offset: int = 0, since: float | None = None,
                   user: str | None = None, order: JobOrder = JobOrder(), needle: str = "") -> list[JobView]:
        """Jobs of the cluster (the hot state and the archive) and this node's history, newest
        first (by creation) or sorted by ``order``: ``limit`` of them from ``offset``, created at
        or after ``since``, submitted by ``user`` (a person's name; None: anyone's), whose text
        holds ``needle`` (:func:`~floydd.model.filter_text`).
        Each source gives at most ``offset + limit`` (the archive from an index; with ``user``,
        a ``needle`` or another order, which the archive's index does not hold, every archived
        job is read, then filtered and sorted with the others); only
        the page is turned into views; metrics come from the replicated summaries (a query per
        job only for runs here not yet ended, and this node's history)."""
        if project is not None:
            check_project(project)
        states = [s.strip() for s in state.split(",")] if state else None
        want = None if limit is None else offset + limit
        source_limit = want if user is None and not needle and order.newest_first else None

        hot = [j for j in await self.cluster.jobs(project=project, states=states, stale=stale)
               if since is None or j.created >= since]
        archived = await self.cluster.archived_jobs(project=project, states=states, since=since, limit=source_limit)
        history = await self.local.history(project, states, since=since, limit=source_limit)   # views
        rows = [_Row(j.created, j.number, j.id, j.user, j) for j in hot + archived] + \
               [_Row(v.created or 0, v.number, v.id, v.user or "", v) for v in history]
        seen: set[str] = set()
        merged = []
        for row in sorted(rows, key=lambda r: (r.created, r.number), reverse=True):   # a job both hot and in
            if row.id not in seen and (user is None or row.user == user):          # the archive (a replay):
                seen.add(row.id)                                                     # the hot one
                merged.append(row.item)
        names = {nid: n["name"] for nid, n in self.cluster.state.nodes.items()}
        if needle or not order.newest_first:
            merged = filtered_and_sorted(merged, needle, order, names, self._clock())
        page = merged[offset:want]
        views = await self.waiting.fill([job_view(item, names) if isinstance(item, Job) else item for item in page],
                                         stale=stale)

        def overlay() -> list[JobView]:
            return [self._overlay(v) if not v.history and v.node_id == self.node_id and v.state not in FINAL_STATES
                    else v for v in views]
        return await asyncio.to_thread(overlay)

    async def wait(self, key: str, timeout: float | None = None) -> JobView:
        """The job once it ended, or as it is after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        history = (await self.get(key)).history
        while True:
            changed = self.reconciler.job_changed
            if history:
                state = (await self.get(key)).state
            else:
                state = (self.cluster.state.jobs.get(key) or await self.cluster.job(key)).state  # NotFound:
            remaining = None if deadline is None else deadline - time.monotonic()                       # deleted
            if state in FINAL_STATES or (remaining is not None and remaining <= 0):
                return await self.get(key, stale=key in self.cluster.state.jobs)
            try:
                if history:
                    async with self._ended:
                        await asyncio.wait_for(self._ended.wait(), min(remaining or 1.0, 1.0))
                else:
                    await asyncio.wait_for(changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def events(self, key: str) -> list[dict]:
        """What the cluster decided (submission, placements, requeues, stops) and what the box
        that ran the job recorded, in time order."""
        parsed = JobKey.parse(key)
        try:
            job = await self.cluster.job(key, stale=True)
        except NotFound:
            return await self.local.events(parsed)    # this node's history
        decided = [{"seq": None, "ts": ts, "kind": "cluster", "message": text, "data": None}
                   for ts, text in job.history]
        ran: list[dict] = []
        if job.node == self.node_id:
            ran = await self.local.events(parsed)
        elif job.node:
            try:
                ran = await self._from_peer(job.node, f"{key}/events")
            except (Unavailable, NotFound) as exc:
                ran = [{"seq": None, "ts": self._clock(), "kind": "note", "data": None,
                        "message": f"the events of the box that ran it are unavailable: {exc.message}"}]
        said = {e["message"] for e in ran}           # a move both recorded, once
        return sorted([e for e in decided if e["message"] not in said] + ran, key=lambda e: e["ts"] or 0)

    async def metrics(self, key: str) -> dict:
        view = await self.get(key, stale=True)
        if view.history or view.node_id in (None, "", self.node_id):
            return await self.local.metrics(JobKey.parse(key))
        return await self._from_peer(view.node_id, f"{key}/metrics")

    async def _from_peer(self, node: str, what: str):
        raw, _ = await self.cluster.fetch(node, f"/cluster/v1/jobs/{what}")
        return msgpack.unpackb(raw, raw=False)

    async def read_log(self, key: str, offset: int, *, rank: int | None = None,
                       attempt: int | None = None) -> tuple[bytes, bool]:
        """Up to 4 MiB of the log from ``offset`` and whether the job has ended; ``rank``: a part
        of a distributed job (read from the box that runs it)."""
        view = await self.get(key, stale=True)        # polled while following: this node's copy
        node = self.node_id if view.history else view.node_id
        parts = view.parts
        if rank is not None and parts:
            if not 0 <= rank < len(parts):
                raise NotFound(f"job {key} has no rank {rank}", code="no_such_part",
                               hint=f"its ranks are 0-{len(parts) - 1} (floyd info {key})")
            node = parts[rank].node_id
        elif rank not in (None, 0):
            raise NotFound(f"job {key} runs on one box: it has no rank {rank}", code="no_such_part",
                           hint="leave out --rank")
        if node == self.node_id:
            return await self.local.read_log(JobKey.parse(key), offset, attempt)
        if not node or view.state == "queued":
            if attempt is not None:     # an earlier attempt's log is on the box that ran the latest, if anywhere
                raise NotFound(f"job {key} is queued: the log of attempt {attempt} is not reachable now",
                               code="no_such_attempt", hint=f"floyd logs {key} --attempt {attempt} once it runs")
            return b"", view.state in FINAL_STATES
        if attempt is not None and not versions.at_least(self.cluster.state, 3):
            raise UserError(f"the box that ran {key} may be of an older floydd, which keeps no earlier attempt's log",
                            hint="once every box runs 0.3 (floydd members), floyd logs --attempt reads it there")
        params = {"offset": str(offset), **({"attempt": str(attempt)} if attempt is not None else {})}
        raw, headers = await self.cluster.fetch(node, f"/cluster/v1/jobs/{key}/log", params=params)
        return raw, headers.get("X-Floydd-Final") == "1"

    async def tree_for(self, key: str, which: str, view: JobView | None = None) -> ObjectId:
        """The tree of the job's ``code`` or ``output``, made complete in this node's store
        (``view``: the job's, where the caller has it already)."""
        view = view if view is not None else await self.get(key)
        if view.history:
            return ObjectId.from_hex(view.code_tree) if which == "code" else await self.local.output_tree(view)
        if which == "code":
            tree = view.code_tree
            await self.reconciler.ensure_tree(tree, [*likely_sources(self.cluster.state, tree), view.origin,
                                                     view.node_id])
            return ObjectId.from_hex(tree)
        version = await self.datasets.resolve(output_ref(view))
        await self.datasets.ensure_local(version["tree"], version.get("holders") or [])
        return ObjectId.from_hex(version["tree"])

    # -- actions ----------------------------------------------------------------------------------

    async def stop(self, key: str, reason: str = "stopped by user", *, user: str = "") -> JobView:
        """Stop the job for ``user`` (its owner, or an admin: checked on apply by every box, and
        here first, so that someone else's job is refused as such whatever its state)."""
        view = await self.get(key)
        check_job_owner(self.cluster.state, user, key, view.user, "stop")   # again on apply, which decides
        if view.history:
            await self.local.stop(JobKey.parse(key), reason)
            return await self.get(key)
        if view.state in FINAL_STATES:
            raise Conflict(f"job {key} already ended ({view.state})", hint="nothing to stop")
        if view.state == "queued":
            try:
                await self.cluster.update_job(key, state="stopped", reason=reason, user=user)
                return await self.get(key)
            except Conflict:                           # placed meanwhile: ask its node
                pass
        await self.cluster.update_job(key, stop_requested=reason, user=user)
        return await self.wait(key, self.config.stop_grace + 10.0)

    async def delete(self, key: str, *, user: str = "") -> JobView:
        """Delete an ended (or queued) job for ``user``, its owner or an admin (as :meth:`stop`)."""
        view = await self.get(key)
        check_job_owner(self.cluster.state, user, key, view.user, "delete")
        if view.history:
            return await self.local.delete(JobKey.parse(key))
        if view.state not in FINAL_STATES and view.state != "queued":
            raise Conflict(f"job {key} is {view.state}", hint=f"stop it first: floyd stop {key}")
        if view.state == "queued":
            await self.stop(key, "deleted", user=user)
        await self.cluster.delete_job(key, user=user)  # every node forgets its part on apply
        if view.output_version:                       # and its /output goes with it
            try:
                await self.datasets.delete(JobKey.parse(key).output_name, user=user)
            except NotFound:
                pass
        return view

class _Row(NamedTuple):
    """A job in a listing, by what the listing sorts and filters on: a cluster job (``item`` a
    :class:`~floydd.model.Job`) or one of this node's history (``item`` its view)."""

    created: float
    number: int
    id: str
    user: str
    item: Job | JobView
