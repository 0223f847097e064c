"""A gang part's start on this box: the rendezvous its rank 0 commits and the others wait for,
then its torchrun command and environment (:class:`~floydd.jobs.reconcile.Reconciler` starts it).
"""

from __future__ import annotations

import asyncio
from typing import Callable

from floydd import log
from floydd.cluster.service import ClusterService
from floydd.errors import Unavailable
from floydd.jobs.gang import free_port, gang_env, interface_for, torchrun_command
from floydd.model import ACTIVE_STATES, Job, JobPart
from floydd.scheduler.placer import REPORT_TIMEOUT

__all__ = ["gang_part"]

_log = log.scheduler.getChild("reconcile")


async def gang_part(cluster: ClusterService, job: Job, part: JobPart,
                job_changed: Callable[[], asyncio.Event]) -> tuple[str | None, dict | None]:
    """This part's torchrun command and environment, once the rendezvous is committed."""
    spec = job.spec
    endpoint = await _rendezvous(cluster, job, part.rank, job_changed)
    if endpoint is None:
        return None, None
    host, _, port = endpoint.rpartition(":")
    nnodes = len(job.parts)
    command = torchrun_command(spec.command, nnodes=nnodes, rank=part.rank,
                               nproc=max(1, len(part.gpu_ids)), host=host, port=int(port))
    mine = cluster.state.nodes[cluster.node_id]["address"]
    env = gang_env(nnodes=nnodes, rank=part.rank, host=host, port=int(port),
                   ifname=await asyncio.to_thread(interface_for, mine))
    for name in spec.params:       # the job's own choice wins
        env.pop(name, None)
    return command, env


async def _rendezvous(cluster: ClusterService, job: Job, rank: int,
                      job_changed: Callable[[], asyncio.Event]) -> str | None:
    """The gang's ``host:port``: rank 0 picks a free port on this box and commits it;
    the other ranks wait until it is committed. None when the attempt is over first."""
    key = job.id
    endpoint = None
    if rank == 0 and not job.endpoint:
        host = cluster.state.nodes[cluster.node_id]["address"]
        endpoint = f"{host}:{await asyncio.to_thread(free_port)}"
    while True:
        changed = job_changed()
        current = cluster.state.jobs.get(key)
        if current is None or current.attempts != job.attempts or current.state not in ACTIVE_STATES \
                or current.stop_requested:
            return None
        if current.endpoint:
            return current.endpoint
        if endpoint is not None:
            try:                                 # retried through a change of leader
                await cluster.update_job(key, attempt=job.attempts, node=cluster.node_id, rank=0,
                                         endpoint=endpoint, timeout=REPORT_TIMEOUT)
                endpoint = None                  # committed: wait below until it is applied here
                continue
            except Unavailable as exc:
                _log.info("committing the rendezvous of %s: %s (trying again)", key, exc)
        try:
            await asyncio.wait_for(changed.wait(), 1.0)
        except asyncio.TimeoutError:
            pass
