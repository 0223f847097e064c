"""One run of a job on this box, as the box's records keep it (a row of ``records.db``), typed.

The cluster keeps a job as :class:`~floydd.model.Job`; each box keeps its own record of the
run placed there (or of a job of its history, ``attempt`` 0: run before it joined its
cluster), which its runtime starts, watches and settles. :meth:`Run.from_row` reads that
record once, where it leaves the records (``Records.get_run``/``list_runs``). What the row
calls ``gpus`` is the GPU indices the run holds (:attr:`Run.gpu_ids`), never the count it
asked for (:attr:`~floydd.model.Resources.gpu_count`, in :attr:`Run.resources`).

A row written before a column existed reads as that column's default, and a resources value
this version cannot read (a record of an older or newer floydd) as no resources asked: the
runtime never read more of it than the cores asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from floydd.errors import InvalidSpec
from floydd.model.defaults import DEFAULT_ENV, DEFAULT_MODE
from floydd.model.mounts import Mount
from floydd.model.resources import Resources

__all__ = ["Run"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """A run of a job on this box (module docstring). Frozen: the records change, not this."""

    project: str
    number: int
    state: str
    reason: str = ""
    attempt: int = 0
    """The cluster's attempt this record is of; 0 for this box's history."""
    command: str = ""
    params: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    code_tree: str | None = None
    data: tuple[Mount, ...] = ()
    resources: Resources = Resources()
    """What it asked for on this box (``gpu_count``: how many GPUs)."""
    gpu_ids: tuple[int, ...] = ()
    """The indices of the GPUs it holds here (set when it starts)."""
    env: str = DEFAULT_ENV
    message: str = ""
    mode: str = DEFAULT_MODE
    max_runtime: float | None = None
    created: float = 0.0
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    output_version: str | None = None
    """The version of its ``/output`` saved ("" when it was empty; None: not saved yet)."""
    node: str = ""
    workspace: str = ""
    """Its workspace folder ("" until it starts)."""
    agent_pid: int | None = None
    user: str = ""
    waiting_for: str = ""
    latest: Mapping[str, Any] | None = None

    @property
    def id(self) -> str:
        """Its key, ``project/number``."""
        return f"{self.project}/{self.number}"

    @property
    def key(self) -> tuple[str, int]:
        """``(project, number)``, as the runtime keys what it holds."""
        return self.project, self.number

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Run:
        """From a record as :meth:`floydd.records.Records.get_job` reads it (JSON columns
        decoded); a column the row lacks (an older schema's) takes its default."""
        latest = row.get("latest")
        return cls(project=row["project"], number=row["number"], state=row["state"], reason=row.get("reason") or "",
                   attempt=row.get("attempt") or 0, command=row.get("command") or "",
                   params=MappingProxyType(dict(row.get("params") or {})), code_tree=row.get("code_tree"),
                   data=tuple(Mount(ref=m.get("ref"), tree=m.get("tree"), mount=m.get("mount"))
                              for m in row.get("data") or ()),
                   resources=_resources(row.get("resources")),
                   gpu_ids=tuple(int(g) for g in row.get("gpus") or ()), env=row.get("env") or DEFAULT_ENV,
                   message=row.get("message") or "", mode=row.get("mode") or DEFAULT_MODE,
                   max_runtime=row.get("max_runtime"), created=row.get("created") or 0.0,
                   started=row.get("started"), ended=row.get("ended"), exit_code=row.get("exit_code"),
                   output_version=row.get("output_version"), node=row.get("node") or "",
                   workspace=row.get("workspace") or "", agent_pid=row.get("agent_pid"), user=row.get("user") or "",
                   waiting_for=row.get("waiting_for") or "",
                   latest=None if latest is None else MappingProxyType(dict(latest)))


def _resources(raw: object) -> Resources:
    try:
        return Resources.from_dict(raw if isinstance(raw, dict) else None)
    except (InvalidSpec, TypeError, ValueError):
        return Resources()
