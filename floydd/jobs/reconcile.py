"""This node's half of the job pipeline: carry out what :func:`~floydd.jobs.decide.decide` says.

The :class:`Reconciler` runs one loop (woken by applied job and node entries and by the
runtime when a run ends, and at least once a second). Each round it asks ``decide`` about
every job that has a part here or that the runtime holds, and carries the actions out:

    Start        make the local record of the attempt, fetch its code and data from the boxes
                 holding them, agree a gang's rendezvous, hand it to the runtime
    Stop         ask the runtime to stop the run (it records the final state)
    EndLocal     settle a local record that never started
    Report...    ``job.update`` fenced by attempt, node and rank: running, final state, exit
                 code, metrics (every few heartbeats while it runs), the /output version

and, for the outages and reruns of DESIGN §5b:

    GPU fencing  a GPU is taken while any process of another run (job, attempt) uses it,
                 whether the runtime holds that run or not (:mod:`floydd.runtime.fence`);
                 every heartbeat interval a sweep kills what is left of runs nobody holds
    stop noted   a run stopped here because the cluster gave it up or replaced it while this
                 box was out of touch is said so in the job's history (``job.update`` note)
    resume       a placement of a job that has an ``output_version`` (a rerun) starts with
                 that tree as its /output
    checkpoints  every ``checkpoint_interval`` a running job's /output is snapshotted and
                 published as the next version of PROJECT/N/output (the previous checkpoint
                 version of the attempt is deleted; the final output supersedes the last)

Every step can be repeated after a crash or a lost answer: the round is driven by what is
(the committed state, the records, the runtime), not by events, so a report that did not
commit is simply decided again. Starts and stops run as tasks; a job being started or
stopped here is left alone by the next rounds until its task ends, except that a start
the cluster calls off meanwhile (:func:`~floydd.jobs.decide.call_off`: a stop requested,
the job ended) is called off in the runtime at once, so the job never runs. When the
cluster deletes a job, the node forgets its part (record, code pin, output, workspace).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

from floydd import __version__, log
from floydd.cluster.replication.codecopies import likely_sources
from floydd.cluster.driver.loop import Applied
from floydd.cluster.replication.replicas import Liveness, ranked_sources
from floydd.cluster.service import ClusterService
from floydd.errors import Conflict, FloyddError
from floydd.jobs.decide import (GIVEN_UP, Action, EndLocal, Local, Report, ReportFinal, ReportProgress, Start,
                                Stop, call_off, decide)
from floydd.jobs.checkpoints import Checkpoints
from floydd.jobs.gang import single_box_command
from floydd.jobs.rendezvous import gang_part
from floydd.scheduler.placer import REPORT_TIMEOUT, every_second_or_sooner
from floydd.jobs.local import LocalJobs, code_pin
from floydd.model import (ACTIVE_STATES, DEFAULT_CHECKPOINT_INTERVAL, RECORD_FIELDS, DatasetRef, Job, JobKey, Run,
                          unsettled_on)
from floydd.runtime import fence
from floydd.runtime import NodeRuntime
from floydd.store import ObjectId, Store
from floydd.tasks import cancel_and_wait

__all__ = ["Reconciler"]

_log = log.scheduler.getChild("reconcile")
_MAX_SUMMARY_METRICS = 64
IDLE_SWEEP = 60.0
"""Seconds between the sweeps for leftover job processes once this box has had no job for as
long (every heartbeat interval before): a run's processes appear only when the runtime starts
one, and the first round after a start sweeps what an earlier daemon left. An idle box's
rounds wait for an event (a job or node entry applied, a run ending) or the next sweep."""

FetchTree = Callable[[Store, str, list[str]], Awaitable[Any]]
"""``fetch(store, tree, sources)``: make a tree complete in this store from those nodes."""


class Reconciler:
    """Carries out :func:`decide` for this node (see the module docstring)."""

    def __init__(self, *, cluster: ClusterService, local: LocalJobs, runtime: NodeRuntime, store: Store,
                 fetch_tree: FetchTree, node_name: str,
                 checkpoint_interval: float = DEFAULT_CHECKPOINT_INTERVAL) -> None:
        self.cluster, self.local, self.runtime, self.store = cluster, local, runtime, store
        self.node_id = cluster.node_id
        self.node_name = node_name
        self._fetch_tree = fetch_tree
        self._wake = asyncio.Event()
        self._busy: set[str] = set()                 # being started or stopped by a task
        self._starting: dict[str, int] = {}          # being started by a task: the attempt
        self._reported: dict[str, tuple] = {}        # sent and not yet seen applied
        self._progress_due: dict[str, float] = {}
        self._waiting: dict[str, list[str]] = {}     # placed here, its GPUs held by other runs
        self._sweep_due = 0.0
        self._active_at = -IDLE_SWEEP               # monotonic time of the last round with a job here
        self.checkpoints = Checkpoints(cluster=cluster, runtime=runtime, store=store, interval=checkpoint_interval,
                                       ensure_tree=self.ensure_tree, report=self._report, spawn=self._spawn)
        self._tasks: set[asyncio.Task] = set()
        self.job_changed = asyncio.Event()
        """Set (and replaced) whenever a job or node entry is applied; waiters hold the old one."""
        cluster.on_apply(self._on_apply)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._spawn(every_second_or_sooner(self._wake, self.round, "reconciling this node's jobs", self._period),
                    "floydd.jobs.reconcile")

    def _period(self) -> float:
        """Every second while this box has jobs (or had one within ``IDLE_SWEEP``), else until
        the next sweep: what a round looks at without a job here changes only by events."""
        if self._busy or time.monotonic() - self._active_at < IDLE_SWEEP:
            return 1.0
        return max(1.0, self._sweep_due - time.monotonic())

    async def close(self) -> None:
        await cancel_and_wait(self._tasks)

    def wake(self) -> None:
        self._wake.set()

    def _on_apply(self, event: Applied) -> None:
        cmd = event.command
        if event.restored or (cmd is not None and cmd.get("op", "").startswith(("job.", "node."))):
            self._wake.set()
            changed, self.job_changed = self.job_changed, asyncio.Event()
            changed.set()
        if cmd is not None and cmd.get("op") == "job.delete" and event.error is None:
            self._spawn(asyncio.to_thread(self.local.forget, JobKey.parse(cmd["job"])), "floydd.jobs.forget")

    # -- one round --------------------------------------------------------------------------------

    async def round(self) -> None:
        state = self.cluster.state
        await self._sweep()
        running = self.runtime.running()
        held = {f"{p}/{n}" for p, n in running}
        gpu_holder = {g: f"{p}/{n}" for (p, n), gpus in running.items() for g in gpus}
        keys = [k for k, j in list(state.jobs.items()) if unsettled_on(j, self.node_id)]
        keys += sorted(held - set(keys))
        if keys or self._busy:                       # sweeps every heartbeat interval again
            self._active_at = time.monotonic()
            self._sweep_due = min(self._sweep_due, self._active_at + self.cluster.config.heartbeat_interval)
        self._call_off_starts(held)
        scanned: dict | None = None                  # the processes of every run here, looked at once
        for key in keys:
            if key in self._busy:
                continue
            job = self._committed(key)
            run = await asyncio.to_thread(self.local.run, JobKey.parse(key))
            local = None if run is None else Local(run.state, run.attempt)
            part = job.part_on(self.node_id) if job is not None else None
            gpus = part.gpu_ids if part is not None else ()
            taken = sorted({gpu_holder[g] for g in gpus if gpu_holder.get(g, key) != key})
            if gpus and not taken and key not in held and job.state in ACTIVE_STATES:
                scanned = await self.runtime.scan_runs() if scanned is None else scanned
                taken = fence.taken(scanned, key, job.attempts, gpus)
            if taken:
                self._note_waiting(key, taken)
            for action in decide(job, local, self.node_id, held=key in held, gpus_taken=bool(taken)):
                await self._do(action, key, run)
        active = set(keys)
        for memo in (self._reported, self._progress_due, self._waiting, self.checkpoints.due):
            for key in [k for k in memo if k not in active]:   # forget jobs no longer active here
                del memo[key]

    async def _sweep(self) -> None:
        """Every heartbeat interval (every ``IDLE_SWEEP`` on a box without jobs): kill what is
        left of runs the runtime does not hold (their GPUs are fenced until then) and, if there
        was any, tell the cluster at once."""
        now = time.monotonic()
        if now < self._sweep_due:
            return
        idle = not self._busy and now - self._active_at >= IDLE_SWEEP
        self._sweep_due = now + (IDLE_SWEEP if idle else self.cluster.config.heartbeat_interval)
        try:
            if await self.runtime.sweep():
                self.cluster.beat_soon()
        except OSError as exc:
            _log.warning("looking for leftover job processes: %s", exc)

    async def _do(self, action: Action, key: str, run: Run | None) -> None:
        job = self._committed(key)
        if isinstance(action, Start):
            self._busy.add(key)
            self._starting[key] = job.attempts
            self._spawn(self._start(job, replace=action.replace), f"floydd.jobs.start {key}")
        elif isinstance(action, Stop):
            self._busy.add(key)
            replaced = action.reason == GIVEN_UP or " was replaced by attempt " in action.reason
            attempt = run.attempt if replaced and run is not None else 0
            self._spawn(self._stop(key, action.reason, noted=attempt), f"floydd.jobs.stop {key}")
        elif isinstance(action, EndLocal):
            await asyncio.to_thread(self.local.end_unstarted, JobKey.parse(key), action.state, action.reason)
            self.wake()
        elif isinstance(action, Report):
            await self._report(job, state=action.state, reason=action.reason)
        elif isinstance(action, ReportProgress):
            if time.monotonic() >= self._progress_due.get(key, 0.0):
                # a few raft writes a minute: every third heartbeat
                self._progress_due[key] = time.monotonic() + 3 * self.cluster.config.heartbeat_interval
                await self._report(job, summary=await self._summary(job))
            self.checkpoints.soon(job)
        elif isinstance(action, ReportFinal):
            await self._report_final(job, run)

    def _note_waiting(self, key: str, holders: list[str]) -> None:
        if self._waiting.get(key) != holders:
            self._waiting[key] = holders
            _log.warning("%s waits to start here: its GPUs are still held by %s", key, ", ".join(holders))

    # -- starting ---------------------------------------------------------------------------------

    async def _start(self, job: Job, *, replace: bool) -> None:
        """Make the local record of this placement, bring its inputs here, start it."""
        key = JobKey.parse(job.id)
        try:
            spec = job.spec
            if spec is None:
                raise FloyddError(f"this box's floydd ({__version__}) cannot read the job's spec: upgrade it")
            stored = spec.to_dict()
            fields = {name: stored[name] for name in RECORD_FIELDS if stored[name] is not None}
            fields.update(attempt=job.attempts, user=job.user, node=self.node_name, created=job.created)
            await asyncio.to_thread(self.local.make_record, key, fields, replace=replace)
            try:
                await self._fetch_inputs(job)
            except FloyddError as exc:
                await asyncio.to_thread(self.local.end_unstarted, key, "failed",
                                        f"could not bring its inputs to {self.node_name}: {exc.message}")
                return
            if await self._called_off(job):
                return
            resume = await self.checkpoints.resume_from(job)
            part = job.part_on(self.node_id)
            command, env = single_box_command(spec.command, len(part.gpu_ids)), None
            if part.rank is not None:
                command, env = await gang_part(self.cluster, job, part, lambda: self.job_changed)
                if command is None:
                    await asyncio.to_thread(self.local.end_unstarted, key, "stopped",
                                            "the job ended or was stopped before this part started")
                    return
                if await self._called_off(job):
                    return
            # no await between the last look and the runtime holding the job: a stop committed
            # from here on is passed to the runtime by the rounds (_call_off_starts)
            await self.runtime.start_job(key.project, key.number, part.gpu_ids, command=command, env=env,
                                         resume=resume)
        except Exception as exc:
            if isinstance(exc, FloyddError):      # said in words (e.g. a spec this version cannot read)
                _log.warning("starting %s failed: %s", key, exc.message)
            else:
                _log.exception("starting %s failed", key)
            try:
                await asyncio.to_thread(self.local.end_unstarted, key, "failed", f"could not start: {exc}")
            except FloyddError:
                pass
        finally:
            self._busy.discard(job.id)
            self._starting.pop(job.id, None)
            self.wake()

    def _committed(self, key: str) -> Job | None:
        """The job as the committed state has it now (None: it has none)."""
        return self.cluster.state.jobs.get(key)

    async def _called_off(self, job: Job) -> bool:
        """End the local record of a start the cluster called off meanwhile (True), if it did."""
        why = call_off(self._committed(job.id), self.node_id, job.attempts)
        if why:
            await asyncio.to_thread(self.local.end_unstarted, JobKey.parse(job.id), "stopped", why)
        return bool(why)

    def _call_off_starts(self, held: set[str]) -> None:
        """Starts in progress that the cluster called off: the runtime ends them before the job
        runs (it holds them from its first step; until then ``_start`` looks itself)."""
        for key, attempt in list(self._starting.items()):
            why = call_off(self._committed(key), self.node_id, attempt)
            if why and key in held:
                project, number = JobKey.parse(key)
                if self.runtime.request_stop(project, number, why):
                    _log.info("%s: its start here is called off: %s", key, why)

    async def _fetch_inputs(self, job: Job) -> None:
        spec = job.spec
        tree = spec.code_tree
        state = self.cluster.state
        await self.ensure_tree(tree, likely_sources(state, tree))   # its copies' holders first (issue 21)
        await asyncio.to_thread(self.store.catalog.pin, ObjectId.from_hex(tree), code_pin(JobKey.parse(job.id)))
        for mount in spec.data:
            ref = DatasetRef.stored(mount.ref)
            version = state.datasets.get(ref.name, {}).get("versions", {}).get(ref.version_key, {}) if ref else {}
            await self.ensure_tree(mount.tree, version.get("holders", []))

    async def ensure_tree(self, tree: str, likely: list[str]) -> None:
        """Make ``tree`` complete here: from the ``likely`` holders first, then any node; those
        not heard from lately last (issue 12, replicas kept: a silent holder asked first could
        hold the fetch up for a connect timeout). A damaged copy here is healed by the restore
        that meets it (``Store.repairer``)."""
        if await asyncio.to_thread(self.local.has_tree, ObjectId.from_hex(tree)):
            return
        fresh = self.cluster.config.stale_after
        nodes = ranked_sources(self.cluster.state.nodes, likely, Liveness(now=time.time(), grace=fresh, fresh=fresh,
                                                                           ages=self.cluster.heard_ages()),
                               skip=self.node_id)
        await self._fetch_tree(self.store, tree, nodes)

    # -- stopping ---------------------------------------------------------------------------------

    async def _stop(self, key: str, reason: str, *, noted: int = 0) -> None:
        """Stop the run held here; ``noted``: the attempt of a run the cluster gave up or
        replaced, which the job's history is told about once it is stopped."""
        project, number = JobKey.parse(key)
        try:
            if (project, number) in self.runtime.running():
                await self.runtime.stop_job(project, number, reason)
                if noted:
                    await self.cluster.update_job(key, attempt=noted, node=self.node_id, timeout=REPORT_TIMEOUT,
                                                  note=f"stopped its run of attempt {noted}: {reason}")
        except FloyddError as exc:
            _log.warning("stopping %s here: %s", key, exc)
        finally:
            self._busy.discard(key)
            self.cluster.beat_soon()                 # its GPUs are free once the cluster hears so
            self.wake()

    # -- reporting --------------------------------------------------------------------------------

    async def _report(self, job: Job, **fields: Any) -> None:
        """Tell the cluster what happened to this node's attempt (fenced by attempt and node)."""
        key = job.id
        part = job.part_on(self.node_id)
        rank = part.rank if part is not None else None
        if rank is not None:
            fields["rank"] = rank
        # sent, and the job has not changed since: not again yet (once it changed, a report that
        # is still due is due again: e.g. its state went back while this box was away)
        stamp = (job.attempts, job.updated, tuple(sorted((k, repr(v)) for k, v in fields.items())))
        if self._reported.get(key) == stamp:
            return
        self._reported[key] = stamp
        try:
            await self.cluster.update_job(key, attempt=job.attempts, node=self.node_id,
                                          timeout=REPORT_TIMEOUT, **fields)
        except Conflict as exc:
            _log.info("report on %s refused: %s", key, exc)
        except FloyddError as exc:
            _log.info("report on %s not committed (will retry): %s", key, exc)
            self._reported.pop(key, None)

    async def _report_final(self, job: Job, run: Run) -> None:
        part = job.part_on(self.node_id)
        if part.state == "starting" and run.state in ("success", "timeout"):
            await self._report(job, state="running")  # it ran and ended between two looks
        fields: dict[str, Any] = {"state": run.state, "reason": run.reason, "exit_code": run.exit_code}
        if part.rank in (None, 0):                 # rank 0 speaks for a gang: metrics, /output
            fields["summary"] = await self._summary(job)
            if run.output_version:
                fields["output_version"] = await self._publish_output(job, run.output_version)
            elif run.output_version == "":     # /output was empty: no version (issue 12)
                fields["output_version"] = ""
        await self._report(job, **fields)
        if part.rank in (None, 0):
            await self.checkpoints.superseded(job, fields.get("output_version"))

    def summary_caught_up(self, project: str, number: int) -> None:
        """The rest of an ended run's log is recorded here (its final state did not wait for it,
        :mod:`floydd.runtime.watch`): tell the cluster the job's metrics again."""
        self._spawn(self._report_summary(JobKey(project, number)), f"floydd.jobs.summary {project}/{number}")

    async def _report_summary(self, key: JobKey) -> None:
        job = self._committed(str(key))
        run = await asyncio.to_thread(self.local.run, key)
        part = job.part_on(self.node_id) if job is not None else None
        if part is None or run is None or run.attempt != job.attempts or part.rank not in (None, 0):
            return                                   # not this box's run (any more), or not its rank 0
        await self._report(job, summary=await self._summary(job))

    async def _summary(self, job: Job) -> dict:
        summary = await asyncio.to_thread(self.local.metric_summary, JobKey.parse(job.id))
        return {"metrics": dict(list(summary.items())[:_MAX_SUMMARY_METRICS]), "ran_on": self.cluster.name}

    async def _publish_output(self, job: Job, ref: str) -> str:
        """Put the job's /output version in the cluster catalog (this node holds it)."""
        version = await asyncio.to_thread(self.store.catalog.resolve, ref)
        try:
            added = await self.cluster.add_dataset_version(
                version.name, str(version.tree), idem_key=f"output:{job.id}:{job.attempts}",
                size=int(version.size or 0), files=int(version.files or 0), message=f"output of {job.id}",
                user=job.user, timeout=REPORT_TIMEOUT)
            return added["ref"]
        except FloyddError as exc:
            _log.info("publishing the output of %s: %s", job.id, exc)
            return ref

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

