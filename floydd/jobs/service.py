"""The job service: submit, queue, place, stop, restart, delete.

Submission is synchronous up to the record: the code folder is snapshotted into
the store and every data reference resolved to an exact version *before* the job
exists, so a job never starts with inputs that changed after ``floyd run``.
Afterwards one scheduler task (woken on submit, finish and stop) feeds queued
jobs, in order, through :func:`floydd.scheduler.place` and hands placements to
the node runtime. The runtime owns a job from ``starting`` to its final state.

    submit ──► queued ──(placed)──► runtime: starting → running → final
                 │                                         │
                 └──(stop)──► stopped          on_finished ┘──► wake the queue
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

from floydd import log
from floydd.errors import Conflict, InvalidSpec, NotFound, UserError
from floydd.jobs.codesnap import snapshot_code
from floydd.jobs.gang import check_gang_command, single_box_command
from floydd.model import FINAL_STATES, Mount, MountRequest, Restart, Submission, check_project, parse_job_key
from floydd.scheduler import NodeSnapshot, PendingJob, place, unplaceable
from floydd.store import ObjectId
from floydd.tasks import cancel_and_wait

__all__ = ["JobService"]


class JobService:
    """Owns the queue of this node; all blocking work goes to threads."""

    def __init__(self, *, config, records, store, runtime, inventory_state) -> None:
        self.config = config
        self.records = records
        self.store = store
        self.runtime = runtime
        self._inventory = inventory_state  # object with .latest (NodeInfo | None)
        self._wake = asyncio.Event()
        self._starting: dict[tuple[str, int], tuple[int, ...]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._loop_task: asyncio.Task | None = None
        self._finished = asyncio.Condition()

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        await self.runtime.reattach()
        self._loop_task = asyncio.create_task(self._schedule_forever(), name="floydd.scheduler")
        self.wake()

    async def close(self) -> None:
        if self._loop_task:
            await cancel_and_wait([self._loop_task])
        await cancel_and_wait(self._tasks)

    def wake(self) -> None:
        self._wake.set()

    def on_finished(self, project: str, number: int) -> None:
        """Called by the runtime when a job reached its final state."""
        self.wake()
        self._spawn(self._notify_finished())

    async def _notify_finished(self) -> None:
        async with self._finished:
            self._finished.notify_all()

    # -- submission -----------------------------------------------------------------------

    async def submit(self, submission: Submission, *, user: str = "") -> dict:
        project, fields = await self._prepare(submission, user)
        return await self._register(project, fields, submission)

    async def _prepare(self, submission: Submission, user: str) -> tuple[str, dict]:
        """Snapshot a checked submission's code and pin its data versions: the job's fields."""
        resources = submission.resources
        if resources.nodes > 1:
            check_gang_command(submission.command)
        mounts = await self._resolve_mounts(submission.mounts)
        self._check_placeable(resources.gpus, resources.nodes)
        code_tree = submission.code_tree
        if code_tree is None:
            code_tree = str(await asyncio.to_thread(snapshot_code, self.store, Path(submission.code_path),
                                                    int(self.config.max_code_mb * 1024 * 1024)))
        spec = submission.spec(code_tree=code_tree, data=tuple(mounts))
        return submission.project, dict(spec.to_dict(), created=time.time(), user=user, node=self.config.node_name)

    async def _register(self, project: str, fields: dict, submission: Submission) -> dict:
        """Give the prepared job its number and queue it."""
        await asyncio.to_thread(self.records.ensure_project, project, owner=fields["user"])
        number = await asyncio.to_thread(self._allocate, project, fields, fields["code_tree"])
        log.scheduler.info("submitted %s/%d: %s", project, number, fields["command"])
        self.wake()
        return await self.get(f"{project}/{number}")

    def _allocate(self, project: str, fields: dict, code_tree) -> int:
        number = self.records.allocate_job(project, fields)
        # the code snapshot is a gc root for as long as the job exists
        self.store.catalog.pin(ObjectId.from_hex(str(code_tree)), _pin(project, number))
        return number

    async def _resolve_mounts(self, items: list[MountRequest]) -> list[Mount]:
        return await asyncio.to_thread(self._resolve_data, items)

    def _resolve_data(self, items: list[MountRequest]) -> list[Mount]:
        mounts = []
        for item in items:
            version = self.store.catalog.resolve(item.ref)
            mounts.append(Mount(ref=version.ref, tree=str(version.tree), mount=item.mount))
        return mounts

    def _check_placeable(self, gpus: int, nodes: int = 1) -> None:
        if nodes > 1:
            raise UserError(f"--nodes {nodes}: this box is not in a cluster, so a job runs on it alone",
                            hint="join other boxes first (floydd token create, then floydd join on each; "
                                 "docs/operations.md), or leave out --nodes", code="no_such_resources")
        why = unplaceable([self._node_snapshot()], gpus)
        if why:
            raise UserError(f"cannot run with --gpu {gpus}: {why}",
                            hint="use --cpu, or a smaller --gpu count (floyd nodes lists the GPUs)",
                            code="no_such_resources")

    # -- queue ------------------------------------------------------------------------------

    def _node_snapshot(self) -> NodeSnapshot:
        info = self._inventory.latest
        held: dict[int, str] = {}
        for (project, number), gpus in {**self.runtime.running(), **self._starting}.items():
            for g in gpus:
                held[g] = f"{project}/{number}"
        return NodeSnapshot(name=self.config.node_name,
                            gpus=tuple(g.index for g in info.gpus) if info else (), held=held)

    async def _schedule_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._schedule_once()
            except Exception:  # keep the queue alive; the cause is in the log
                log.scheduler.exception("scheduling pass failed")

    async def _schedule_once(self) -> None:
        queued = await asyncio.to_thread(self.records.list_jobs, None, ["queued"])
        queued.sort(key=lambda j: (j["created"] or 0, j["project"], j["number"]))
        if not queued:
            return
        pending = [PendingJob(key=j["id"], gpus=int(j["resources"].get("gpus", 0))) for j in queued]
        plan = place([self._node_snapshot()], pending)
        by_key = {j["id"]: j for j in queued}
        for key, why in plan.waiting.items():
            if by_key[key].get("waiting_for") != why:
                project, number = parse_job_key(key)
                await asyncio.to_thread(self.records.update_job, project, number, waiting_for=why)
        for placement in plan.placements:
            project, number = parse_job_key(placement.key)
            self._starting[(project, number)] = placement.gpus
            if by_key[placement.key].get("waiting_for"):
                await asyncio.to_thread(self.records.update_job, project, number, waiting_for="")
            command = single_box_command(by_key[placement.key]["command"], len(placement.gpus))
            self._spawn(self._start(project, number, list(placement.gpus), command))

    async def _start(self, project: str, number: int, gpus: list[int], command: str | None = None) -> None:
        try:
            await self.runtime.start_job(project, number, gpus, command=command)
        except Exception as exc:
            log.runtime.exception("starting %s/%d failed", project, number)
            job = await asyncio.to_thread(self.records.get_job, project, number)
            if job["state"] not in FINAL_STATES:
                await asyncio.to_thread(self.records.set_state, project, number, "failed",
                                        f"could not start: {exc}")
            self.on_finished(project, number)
        finally:
            self._starting.pop((project, number), None)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- queries and actions ------------------------------------------------------------------

    async def get(self, key: str, *, stale: bool = False) -> dict:
        """The job with its metric summary (``stale`` matters only in a cluster)."""
        project, number = parse_job_key(key)
        return await asyncio.to_thread(self._get_full, project, number)

    def _get_full(self, project: str, number: int) -> dict:
        job = self.records.get_job(project, number)
        job["metrics"] = self.records.metric_summary(project, number)
        return job

    async def list(self, project: str | None = None, state: str | None = None, *, stale: bool = False) -> list[dict]:
        if project is not None:
            check_project(project)
        states = [s.strip() for s in state.split(",")] if state else None

        def query() -> list[dict]:
            jobs = self.records.list_jobs(project, states)
            for job in jobs:
                job["metrics"] = self.records.metric_summary(job["project"], job["number"])
            return jobs
        return await asyncio.to_thread(query)

    async def events(self, key: str) -> list[dict]:
        project, number = parse_job_key(key)
        return await asyncio.to_thread(self.records.events, project, number)

    async def metrics(self, key: str) -> dict:
        """Every metric series and system sample of the job."""
        project, number = parse_job_key(key)
        await asyncio.to_thread(self.records.get_job, project, number)
        series = await asyncio.to_thread(self.records.metric_series, project, number)
        samples = await asyncio.to_thread(self.records.system_samples, project, number)
        return {"metrics": {k: [list(p) for p in v] for k, v in series.items()}, "system": samples}

    async def read_log(self, key: str, offset: int, *, rank: int | None = None) -> tuple[bytes, bool]:
        """Up to 4 MiB of the job's log from ``offset``, and whether the job has ended (what
        was read then is all there will be). ``rank``: a part of a distributed job."""
        if rank not in (None, 0):
            raise NotFound(f"job {key} runs on one box: it has no rank {rank}", code="no_such_part",
                           hint="leave out --rank")
        return await self._read_log(await self.get(key), offset)

    async def read_local_log(self, key: str, offset: int) -> tuple[bytes, bool]:
        """:meth:`read_log` from this box's own record of ``key`` (in a cluster: its part of
        the job, which the other boxes read through /cluster/v1)."""
        try:
            local = await JobService.get(self, key)
        except NotFound:                           # placed here, not made into a record yet
            return b"", False
        return await self._read_log(local, offset)

    async def _read_log(self, job: dict, offset: int) -> tuple[bytes, bool]:
        final = job["state"] in FINAL_STATES
        if not job.get("workspace"):
            return b"", final
        return await asyncio.to_thread(_read_from, Path(job["workspace"]) / "job.log", offset), final

    async def tree_for(self, key: str, which: str) -> ObjectId:
        """The tree of the job's ``code`` or ``output``, present in this node's store."""
        job = await self.get(key)
        if which == "code":
            return ObjectId.from_hex(job["code_tree"])
        return (await asyncio.to_thread(self.store.catalog.resolve, _output_ref(job))).tree

    async def stop(self, key: str, reason: str = "stopped by user") -> dict:
        project, number = parse_job_key(key)
        job = await asyncio.to_thread(self.records.get_job, project, number)
        if job["state"] in FINAL_STATES:
            raise Conflict(f"job {key} already ended ({job['state']})", hint="nothing to stop")
        if job["state"] == "queued" and (project, number) not in self._starting:
            await asyncio.to_thread(self.records.set_state, project, number, "stopped", reason)
            self.wake()
        else:
            await self.runtime.stop_job(project, number, reason)
        return await self.get(key)

    async def wait(self, key: str, timeout: float | None = None) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = await self.get(key)
            if job["state"] in FINAL_STATES:
                return job
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return job
            async with self._finished:
                try:
                    await asyncio.wait_for(self._finished.wait(), min(remaining or 1.0, 1.0))
                except asyncio.TimeoutError:
                    pass

    async def restart(self, key: str, changes: Restart, *, user: str = "") -> dict:
        old = await self.get(key)
        return await self.submit(changes.submission(parse_job_key(key), old), user=user)

    async def delete(self, key: str) -> dict:
        project, number = parse_job_key(key)
        job = await asyncio.to_thread(self.records.get_job, project, number)
        if job["state"] not in FINAL_STATES and job["state"] != "queued":
            raise Conflict(f"job {key} is {job['state']}", hint=f"stop it first: floyd stop {key}")
        if job["state"] == "queued":
            await self.stop(key, "deleted")

        await asyncio.to_thread(self._remove_local, job)
        return job

    def _remove_local(self, job: dict) -> None:
        """Delete what this node keeps of an ended job: record, code pin, output, workspace."""
        project, number = job["project"], job["number"]
        self.records.delete_job(project, number)
        self.store.catalog.unpin(_pin(project, number))
        if job.get("output_version"):
            try:
                self.store.catalog.delete(job["output_version"].rpartition(":")[0])
            except NotFound:
                pass
        ws = job.get("workspace")
        if ws and Path(ws).is_relative_to(self.config.jobs_dir):
            shutil.rmtree(ws, ignore_errors=True)


def _output_ref(job: dict) -> str:
    if not job.get("output_version"):
        hint = "it has not ended yet" if job["state"] not in FINAL_STATES else "it saved nothing to /output"
        raise NotFound(f"job {job['id']} has no output", hint=hint)
    return job["output_version"]


def _pin(project: str, number: int) -> str:
    return f"job:{project}/{number}"


def _read_from(path: Path, offset: int, limit: int = 4 * 1024 * 1024) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""
