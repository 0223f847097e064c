"""A placed job's parts: where each runs and on which GPUs, as the replicated state keeps them
(``job.place``). One box's part is what it starts, reports and stops; a job on one box has one
part, rank None (a gang's parts are ranked from 0, rank 0 speaking for the job)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["JobPart"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPart:
    """One box's part of a placed job."""

    rank: int | None
    """Its rank in a gang; None for a job on one box."""
    node: str
    """The id of the box it runs on."""
    gpu_ids: tuple[int, ...] = ()
    """The indices of the GPUs the placement gave it there (a job asks for a count of GPUs,
    :attr:`~floydd.model.Resources.gpu_count`; this is which ones it holds)."""
    state: str
    """Its state (a job on one box: the job's)."""

    @classmethod
    def of(cls, job: Mapping[str, Any], node: str) -> JobPart | None:
        """``node``'s part of ``job`` as the replicated state stores it (a dict: ``parts`` for
        a gang, else ``node``/``gpus``/``state``), or None if it has none there. The state
        checked the GPU indices when it committed the placement."""
        parts = job.get("parts") or ()
        for part in parts:
            if part["node"] == node:
                return cls(rank=part["rank"], node=node, gpu_ids=tuple(part["gpus"]), state=part["state"])
        if not parts and job.get("node") == node:
            return cls(rank=None, node=node, gpu_ids=tuple(job["gpus"]), state=job["state"])
        return None
