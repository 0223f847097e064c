"""Jobs: ``/v1/jobs`` and what hangs off a job (metrics, compare, code uploads).

A job itself is :class:`floydd.model.JobView` (with its parts, resources, metric summaries,
events and restart policy): the CLI and the TUI read it too, and import no ``floydd.api``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from floydd.api.schemas.literals import JobState, Point
from floydd.model import EventView, JobView, MetricView, Mount, PartView, ResourcesView, RestartView

__all__ = ["ResourcesView", "MetricView", "PartView", "EventView", "RestartView", "JobView", "SystemSample",
           "Metrics", "LastBest", "CompareRow", "Compare", "CodeUpload"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemSample:
    """What the job's processes used at ``ts`` (null: not measured)."""

    ts: float
    cpu_percent: float | None
    rss_bytes: int | None
    gpu_util: float | None
    gpu_mem_bytes: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Metrics:
    """``GET /v1/jobs/{project}/{number}/metrics``: every series (``name -> [[step, value, ts]]``)
    and the system samples, oldest first."""

    metrics: dict[str, tuple[Point, ...]]
    system: tuple[SystemSample, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LastBest:
    """One metric of one job in a comparison: best is the minimum for losses and errors."""

    last: float | None
    best: float | None
    goal: Literal["min", "max"]
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CompareRow:
    """One job in a comparison: every compared param and metric (null where it has none)."""

    id: str
    state: JobState
    message: str
    command: str
    params: dict[str, str | None]
    metrics: dict[str, LastBest | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Compare:
    """``GET /v1/compare``: the union of params and metric names, one row per job."""

    params: tuple[str, ...]
    metrics: tuple[str, ...]
    jobs: tuple[CompareRow, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCheck:
    """``POST /v1/jobs/check``: the job would be taken; its data pinned to these versions, with
    these cores and bytes of memory on each box (the daemon's defaults where none were asked)."""

    ok: bool
    data: tuple[Mount, ...]
    cpus: float
    memory: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeUpload:
    """``POST /v1/code``: the handle to submit with (``code_upload``: good on this box, for
    whoever sent the folder, for an hour) and what the folder held."""

    code_upload: str
    files: int
    bytes: int
    skipped: int = 0
