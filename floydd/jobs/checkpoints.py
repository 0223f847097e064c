"""A running job's checkpoints in the cluster, and where a rerun starts from.

The reconciler's helper for restart policies (:class:`floydd.model.RestartPolicy`)::

    every checkpoint_interval while a job runs here (rank 0 of a gang)
        runtime.checkpoint  -> a tree of its /output (None: empty or unchanged)
        pin it here (gc keeps it), commit it as the next version of PROJECT/N/output
        (idempotent by job, attempt and tree; held by this box and, as any version, copied
        to a second one), report it as the job's output_version, then delete the version
        of the attempt's previous checkpoint
    the final report of the run        its final output supersedes the last checkpoint:
                                       that version is deleted and the pin dropped
    a placement of a job with an output_version (a rerun, or a placement after a requeue)
        resume_from -> that version's tree, fetched here from its holders: the run's
                       /output starts as it (floydd.runtime.workspace)

A version the cluster deleted meanwhile (or that no box can serve) leaves the rerun with
an empty /output, said in the daemon's log: a job that checkpoints must cope with starting
afresh anyway.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from floydd import log
from floydd.errors import FloyddError
from floydd.model import DatasetRef, Job, JobKey
from floydd.store import ObjectId

__all__ = ["Checkpoints"]

_log = log.scheduler.getChild("checkpoints")
_TIMEOUT = 5.0


class Checkpoints:
    def __init__(self, *, cluster, runtime, store, interval: float,
                 ensure_tree: Callable[[str, list[str]], Awaitable[None]],
                 report: Callable[..., Awaitable[None]], spawn: Callable) -> None:
        self.cluster, self.runtime, self.store, self.interval = cluster, runtime, store, interval
        self._ensure_tree, self._report, self._spawn = ensure_tree, report, spawn
        self.due: dict[str, float] = {}
        self._published: dict[str, tuple[int, str, str]] = {}    # key -> (attempt, tree, ref)
        self._saving: set[str] = set()

    def soon(self, job: Job) -> None:
        """Save a checkpoint of ``job`` (running here) if one is due and none is being saved."""
        key = job.id
        now = time.monotonic()
        if key in self._saving or self.interval <= 0:
            return
        if key not in self.due:
            self.due[key] = now + self.interval
            return
        if now >= self.due[key]:
            self._saving.add(key)
            self._spawn(self._save(job), f"floydd.jobs.checkpoint {key}")

    async def _save(self, job: Job) -> None:
        key, attempt = job.id, job.attempts
        parsed = JobKey.parse(key)
        last = self._published.get(key)
        try:
            saved = await self.runtime.checkpoint(parsed.project, parsed.number,
                                                  last[1] if last and last[0] == attempt else None)
            if saved is None:
                return
            await asyncio.to_thread(self.store.catalog.pin, ObjectId.from_hex(saved.tree), _pin(key))
            added = await self.cluster.add_dataset_version(
                parsed.output_name, saved.tree, idem_key=f"checkpoint:{key}:{attempt}:{saved.tree}",
                size=saved.size, files=saved.files, message=f"checkpoint of {key}, attempt {attempt}",
                user=job.user, timeout=_TIMEOUT)
            await self._report(job, output_version=added["ref"])
            self._published[key] = (attempt, saved.tree, added["ref"])
            if last and last[0] == attempt and last[2] != added["ref"]:
                await self._delete(last[2], job.user)
            _log.info("%s: checkpoint %s (%d files, %d bytes)", key, added["ref"], saved.files, saved.size)
        except FloyddError as exc:
            _log.info("%s: saving a checkpoint: %s (trying again later)", key, exc)
        except Exception:
            _log.exception("%s: saving a checkpoint failed", key)
        finally:
            self._saving.discard(key)
            self.due[key] = time.monotonic() + self.interval

    async def superseded(self, job: Job, final_ref: str | None) -> None:
        """The run of ``job`` ended with its final output ``final_ref``: its last checkpoint
        version goes (when there is a final output to replace it) and so does its pin."""
        key = job.id
        last = self._published.pop(key, None)
        self.due.pop(key, None)
        if last is None or not final_ref or last[2] == final_ref:
            return
        await self._delete(last[2], job.user)
        await asyncio.to_thread(self.store.catalog.unpin, _pin(key))

    async def resume_from(self, job: Job) -> str | None:
        """The tree this placement's /output starts from (its job's ``output_version``),
        complete in this store; None when it starts empty."""
        ref = DatasetRef.stored(job.output_version)
        if ref is None:
            return None
        version = (self.cluster.state.datasets.get(ref.name) or {}).get("versions", {}).get(ref.version_key)
        if version is None:
            _log.warning("%s: its last output %s is gone; this run's /output starts empty", job.id, ref)
            return None
        try:
            await self._ensure_tree(version["tree"], list(version.get("holders") or ()))
        except FloyddError as exc:
            _log.warning("%s: its last output %s cannot be fetched (%s); this run's /output starts empty",
                         job.id, ref, exc)
            return None
        _log.info("%s: attempt %d starts from %s", job.id, job.attempts, ref)
        return version["tree"]

    async def _delete(self, ref: str, user: str) -> None:
        """Delete a superseded checkpoint, for the job's ``user`` (whose version it is)."""
        try:
            version = DatasetRef.parse(ref)
            await self.cluster.delete_dataset(version.name, version.version, user=user, timeout=_TIMEOUT)
        except FloyddError as exc:
            _log.info("deleting the superseded checkpoint %s: %s", ref, exc)


def _pin(key: str) -> str:
    return f"checkpoint:{key}"
