"""Admitting a job: what a submit is refused for before anything is committed, a part of
:class:`~floydd.jobs.service.JobService` (its ``check``, and the per-person queue limit counted
while a submit is in flight).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Callable, Iterator

from floydd.cluster.replication.datasets import ClusterDatasets
from floydd.cluster.service import ClusterService
from floydd.errors import StoreFull, TooMany, UserError
from floydd.jobs.gang import check_gang_command
from floydd.model import Mount, Resources, Submission, format_size
from floydd.runtime import NodeRuntime
from floydd.runtime.sandboxing import Sandboxing
from floydd.scheduler import unplaceable
from floydd.scheduler.placer import ClusterScheduler

__all__ = ["Admission"]


class Admission:
    """The checks of a submission on this box, with its config, view of the cluster and disk."""

    def __init__(self, *, config: Any, cluster: ClusterService, datasets: ClusterDatasets, runtime: NodeRuntime,
                 scheduler: ClusterScheduler, clock: Callable[[], float] = time.time) -> None:
        self.config, self.cluster, self.datasets, self.runtime = config, cluster, datasets, runtime
        self.scheduler = scheduler
        self._clock = clock
        self._submitting: dict[str, int] = {}        # person -> submits checked here and not yet committed

    async def check(self, submission: Submission, *, user: str = "") -> tuple[Submission, list[Mount], Sandboxing]:
        """Everything :meth:`~floydd.jobs.service.JobService.submit` refuses a job for before it looks at the code: no sandbox
        where one is required, a gang command torchrun cannot run, data ``user`` may not mount,
        resources no box has, a full disk. Answers the submission with this box's defaults, the
        mounts pinned to versions and the sandboxing in force. A client sending its code from
        another machine asks this first (``POST /v1/jobs/check``), so a refusal costs no upload."""
        sandboxing = await asyncio.to_thread(lambda: self.runtime.sandboxing)
        sandboxing.check()   # sandbox = require and no working bwrap: refused here, said plainly
        submission = submission.with_defaults(cpus=self.config.job_cpus, memory=self.config.job_memory_bytes)
        resources = submission.resources
        if resources.nodes > 1:
            check_gang_command(submission.command)
        if (cut_off := self.cluster.leader_unreachable()) is not None:
            raise cut_off   # issue 21: said first; a cut-off box's stale view of the others says "no healthy node"
        mounts = []
        for item in submission.mounts:         # floydd.cluster.state.access: someone else's private data or output refused
            version = await self.datasets.resolve_readable(item.ref, user, "mount")
            mounts.append(Mount(ref=version["ref"], tree=version["tree"], mount=item.mount))
        self._check_placeable(resources)
        self._check_queue(user, submission.idem_key)
        # what the runtime freed is for recording and cleaning up; look again (one statvfs) so
        # space freed a moment ago counts at once
        if self.runtime.disk.full and await asyncio.to_thread(self.runtime.disk.check):
            raise StoreFull(f"{self.runtime.disk.why()}: no new job until there is room",
                            hint="free space: floyd delete an old job, floyd data delete NAME, then floyd data gc")
        return submission, mounts, sandboxing

    @contextlib.contextmanager
    def queue_slot(self, user: str, idem_key: str | None) -> Iterator[None]:
        """Check ``user``'s queue (:meth:`_check_queue`) and count this submit with it until it is
        committed or refused, so that many submits at once cannot all pass the same count."""
        self._check_queue(user, idem_key)
        self._submitting[user] = self._submitting.get(user, 0) + 1
        try:
            yield
        finally:
            self._submitting[user] -= 1
            if not self._submitting[user]:
                del self._submitting[user]

    def _check_queue(self, user: str, idem_key: str | None) -> None:
        """Refuse a submit past ``max_queued_per_person``: ``user``'s queued jobs in the replicated
        state plus those being submitted through this box (issue 20: 200 submits in 4 s were all
        taken). Checked here, at the edge, not on apply: the limit is this box's setting, not
        replicated state; each box counts the whole cluster's queue, so a person's flood through
        boxes at once overshoots by at most what is in flight on the others. A retry of a job
        already taken (its idempotency key) is never refused."""
        limit = self.config.max_queued_per_person
        state = self.cluster.state
        if not limit or (idem_key and idem_key in state.idem):
            return
        queued = state.queued_of(user)
        queued += self._submitting.get(user, 0)
        if queued >= limit:
            who = user or "this caller"
            raise TooMany(f"{who} has {queued:,} jobs queued, the lab's limit for one person "
                          f"(max_queued_per_person = {limit:,}); this job was not submitted",
                          hint="wait for some to start or stop some: floyd stop PROJECT/N "
                               "(floyd status --all --mine lists them)", code="too_many_queued")

    def _check_placeable(self, resources: Resources) -> None:
        """Refuse a job no node could ever hold (not one that only has to wait)."""
        gpus, nodes = resources.gpu_count, resources.nodes
        why = unplaceable(list(self.scheduler.snapshots(self._clock()).values()), gpus, nodes,
                          resources.cpu_milli, resources.memory)
        if why:
            flags = [f"--gpu {gpus}" if gpus else "", f"--cpu {resources.cpus:g}" if resources.cpus else "",
                     f"--memory {format_size(resources.memory).replace(' ', '')}" if resources.memory else "",
                     f"--nodes {nodes}" if nodes > 1 else ""]
            asked = " ".join(flag for flag in flags if flag) or "these resources"
            hint = "use --cpu, or fewer GPUs, cores, memory or nodes (floyd nodes lists what every node has)"
            if nodes > len(self.cluster.state.nodes):
                hint = ("join other boxes first (floydd token create, then floydd join on each; "
                        "docs/operations.md), or ask for fewer --nodes")
            raise UserError(f"cannot run with {asked}: {why}", hint=hint, code="no_such_resources")
