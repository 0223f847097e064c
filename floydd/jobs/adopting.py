"""A box's jobs from before its cluster: its old queue adopted into the cluster's, and the cluster's
job numbers kept above its history (:class:`~floydd.jobs.service.JobService` runs both at start).
"""

from __future__ import annotations

import asyncio

from floydd import log
from floydd.cluster.service import ClusterService
from floydd.errors import FloyddError
from floydd.model import JobKey, JobSpec
from floydd.records import Records

__all__ = ["adopt_queued_history", "reserve_history_numbers"]

_log = log.scheduler.getChild("jobs")


async def adopt_queued_history(cluster: ClusterService, records: Records, node_id: str) -> None:
    """Jobs this node queued before it had a control plane (the release before: a lone box
    kept its queue in its records) enter the cluster's queue under their own numbers."""
    queued = [j for j in await asyncio.to_thread(records.list_jobs, None, ["queued"])
              if j.get("attempt", 0) == 0]
    for record in sorted(queued, key=lambda j: (j["created"] or 0, j["number"])):
        key = JobKey(record["project"], record["number"])
        spec = JobSpec.from_dict(record).to_dict()
        try:
            await cluster.submit_job(spec, f"adopted:{node_id}:{key}", project=key.project,
                                     user=record.get("user") or "", number=key.number)
        except FloyddError as exc:              # it stays queued here; tried again at the next start
            _log.warning("job %s stays in this box's old queue for now: %s", key, exc)
            continue
        await asyncio.to_thread(records.delete_job, key.project, key.number)
        _log.info("job %s, queued before this box had a control plane, is in the cluster's queue", key)


async def reserve_history_numbers(cluster: ClusterService, records: Records) -> None:
    """Have the cluster number new jobs above this node's history (once, retried)."""
    projects = await asyncio.to_thread(records.list_projects)
    for project in projects:
        while project["last_number"] > cluster.state.counters.get(project["name"], 0):
            try:
                await cluster.reserve_numbers(project["name"], project["last_number"])
            except FloyddError as exc:
                _log.debug("reserving job numbers of %s: %s", project["name"], exc)
                await asyncio.sleep(1.0)
