"""What this node itself knows of a job: its record, log, metrics, events, code pin and output.

Records stay local (DESIGN §5): ``records.db`` holds the jobs that ran *here* (made by the
reconciler when a job is placed here, filled by the runtime while it runs), with their
metric series, events and logs; the box's store holds their code snapshots and outputs.
The other nodes read these over mTLS (``/cluster/v1/jobs/...``).

A record whose ``attempt`` is 0 is this node's **history**: a job it ran before it joined
its cluster (or under a release that had no control plane on a lone box). The cluster
does not know those; they are listed, read, stopped and deleted from here alone.
Synchronous methods run in worker threads; the ``async`` ones are the reads the API and
the peer routes serve.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from floydd.errors import Conflict, FloyddError, NotFound
from floydd.jobs.listing import history_view
from floydd.model import FINAL_STATES, DatasetRef, JobKey, JobView, Run
from floydd.records import Records
from floydd.runtime import NodeRuntime, workspace
from floydd.store import ObjectId, Store

__all__ = ["LocalJobs", "code_pin", "output_ref", "LOG_CHUNK"]

LOG_CHUNK = 4 * 1024 * 1024
"""The most bytes of a log one read returns."""


class LocalJobs:
    def __init__(self, *, records: Records, store: Store, runtime: NodeRuntime, jobs_dir: Path) -> None:
        self.records, self.store, self.runtime = records, store, runtime
        self.jobs_dir = Path(jobs_dir)

    # -- records (synchronous: call from a thread) ------------------------------------------------

    def run(self, key: JobKey) -> Run | None:
        """The record of the job's run here, typed; None if there is none."""
        try:
            return self.records.get_run(key.project, key.number)
        except NotFound:
            return None

    def make_record(self, key: JobKey, fields: dict, *, replace: bool) -> None:
        """The record of an attempt placed here (``replace``: drop an older attempt's first)."""
        if replace:
            self.records.delete_job(key.project, key.number)
        try:
            self.records.insert_job(key.project, key.number, fields)
        except Conflict:
            pass                                     # a start again after a restart: it is there

    def end_unstarted(self, key: JobKey, state: str, reason: str) -> None:
        """Settle a record that did not start (or a start that failed): ``state`` unless it ended."""
        run = self.run(key)
        if run is not None and run.state not in FINAL_STATES:
            self.records.set_state(key.project, key.number, state, reason)

    def metric_summary(self, key: JobKey) -> dict:
        return self.records.metric_summary(key.project, key.number)

    def has_tree(self, oid: ObjectId) -> bool:
        """Is the tree and every object it names in this store?"""
        if not self.store.backend.has(oid):
            return False
        try:
            tree = self.store.read_tree(oid)
        except FloyddError:
            return False
        return all(self.store.backend.has(c) for c in tree.chunk_ids())

    def forget(self, key: JobKey) -> None:
        """The cluster deleted the job: drop this node's part of it (record, pin, output, workspace)."""
        self.store.catalog.unpin(code_pin(key))
        run = self.run(key)
        if run is not None and run.attempt > 0 and run.state in FINAL_STATES:
            self.remove(run)

    def remove(self, run: Run) -> None:
        """Delete what this node keeps of an ended job: record, code pin, output, workspace."""
        key = JobKey(run.project, run.number)
        self.records.delete_job(key.project, key.number)
        self.store.catalog.unpin(code_pin(key))
        output = DatasetRef.stored(run.output_version)
        if output is not None:
            try:
                self.store.catalog.delete(output.name)
            except NotFound:
                pass
        if run.workspace and Path(run.workspace).is_relative_to(self.jobs_dir):
            workspace.remove(Path(run.workspace))   # what the job left there: no link followed

    # -- reads (history jobs, and what peers ask of jobs run here) --------------------------------

    async def get(self, key: JobKey) -> JobView:
        """A history job with its metric summary; ``NotFound`` if this node has none (a record
        of a cluster's job that the cluster no longer knows is being forgotten: not found)."""
        return (await asyncio.to_thread(self._history_job, key))[1]

    def _history_job(self, key: JobKey) -> tuple[Run, JobView]:
        """A history job, typed and as the API shows it; ``NotFound`` if this node has none."""
        record = self.records.get_job(key.project, key.number)
        run = Run.from_row(record)
        if run.attempt != 0:
            raise NotFound(f"job {key} does not exist", code="job_not_found", hint="floyd status lists jobs")
        return run, self._history_view(run, record)

    def _history_view(self, run: Run, record: dict) -> JobView:
        """A record of this node's history as a job of the cluster is shown (API and CLI)."""
        return history_view(record, self.records.metric_summary(run.project, run.number))

    async def history(self, project: str | None, states: list[str] | None, *, since: float | None = None,
                      limit: int | None = None) -> list[JobView]:
        """This node's history jobs (attempt 0), newest first, created at or after ``since``, at
        most ``limit``, with their metric summaries (read for those alone)."""
        def query() -> list[JobView]:
            records = [(Run.from_row(r), r) for r in self.records.list_jobs(project, states)]
            ours = [(run, r) for run, r in records if run.attempt == 0 and (since is None or run.created >= since)]
            return [self._history_view(run, r) for run, r in ours[:limit]]
        return await asyncio.to_thread(query)

    async def events(self, key: JobKey) -> list[dict]:
        """What this node recorded of the job; none yet for a job placed here moments ago."""
        def read() -> list[dict]:
            try:
                return self.records.events(key.project, key.number)
            except NotFound:
                return []
        return await asyncio.to_thread(read)

    async def metrics(self, key: JobKey) -> dict:
        """Every metric series and system sample of the job (none yet for a job placed here
        moments ago)."""
        def read() -> dict:
            if self.run(key) is None:
                return {"metrics": {}, "system": []}
            series = self.records.metric_series(key.project, key.number)
            return {"metrics": {k: [list(p) for p in v] for k, v in series.items()},
                    "system": self.records.system_samples(key.project, key.number)}
        return await asyncio.to_thread(read)

    async def read_log(self, key: JobKey, offset: int, attempt: int | None = None) -> tuple[bytes, bool]:
        """Up to :data:`LOG_CHUNK` bytes of the log from ``offset``, and whether the job has
        ended (what was read then is all there will be). Placed here but without a record
        yet: nothing so far. ``attempt``: an earlier attempt's log, kept here if it ran here
        (:func:`floydd.runtime.workspace.attempt_log`); None, the latest."""
        run = await asyncio.to_thread(self.run, key)
        if run is None:
            if attempt is not None:
                raise NotFound(f"job {key} has not run on this box", code="no_such_attempt",
                               hint=f"leave out --attempt to read the latest attempt's log: floyd logs {key}")
            return b"", False
        final = run.state in FINAL_STATES
        latest = run.attempt
        if attempt is not None and attempt != latest and latest != 0:
            path = workspace.attempt_log(Path(run.workspace), attempt) if run.workspace else None
            if path is None or attempt > latest or not await asyncio.to_thread(path.exists):
                raise NotFound(f"the log of attempt {attempt} of {key} is not on this box (the latest is attempt "
                               f"{latest}; an attempt's log stays on the box that ran it)", code="no_such_attempt",
                               hint=f"floyd logs {key} reads the latest attempt; floyd info {key} lists its attempts")
            return await asyncio.to_thread(_read_from, path, offset), True
        if not run.workspace:
            return b"", final
        return await asyncio.to_thread(_read_from, Path(run.workspace) / "job.log", offset), final

    async def stop(self, key: JobKey, reason: str) -> None:
        """Stop a history job (the runtime records its end)."""
        run = await asyncio.to_thread(self.records.get_run, key.project, key.number)
        if run.state in FINAL_STATES:
            raise Conflict(f"job {key} already ended ({run.state})", hint="nothing to stop")
        if run.state == "queued" and tuple(key) not in self.runtime.running():
            await asyncio.to_thread(self.records.set_state, key.project, key.number, "stopped", reason)
        else:
            await self.runtime.stop_job(key.project, key.number, reason)

    async def delete(self, key: JobKey) -> JobView:
        """Delete a history job that ended; the job as it was."""
        run, job = await asyncio.to_thread(self._history_job, key)
        if run.state not in FINAL_STATES:
            raise Conflict(f"job {key} is {run.state}", hint=f"stop it first: floyd stop {key}")
        await asyncio.to_thread(self.remove, run)
        return job

    async def output_tree(self, view: JobView) -> ObjectId:
        return (await asyncio.to_thread(self.store.catalog.resolve, output_ref(view))).tree


def code_pin(key: JobKey) -> str:
    """The gc pin that keeps a job's code snapshot for as long as the job exists."""
    return f"job:{key}"


def output_ref(view: JobView) -> str:
    """The dataset version of a job's /output; ``NotFound`` with why when there is none."""
    if view.output_version == "" and view.state in FINAL_STATES:
        raise NotFound(f"job {view.id} saved nothing: its /output was empty when it ended", code="output_empty",
                       hint="a job keeps what it writes under /output (FLOYD_OUTPUT without a sandbox); "
                            f"its log: floyd logs {view.id}")
    if not view.output_version:
        hint = ("it has not ended yet" if view.state not in FINAL_STATES
                else f"its /output was not saved; floyd info {view.id} says why")
        raise NotFound(f"job {view.id} has no output", hint=hint)
    return view.output_version


def _read_from(path: Path, offset: int, limit: int = LOG_CHUNK) -> bytes:
    try:
        with open(path, "rb") as f:
            if offset >= os.fstat(f.fileno()).st_size:   # past the end (a seek there can fail: EINVAL)
                return b""
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""
