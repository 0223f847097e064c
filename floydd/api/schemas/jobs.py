"""Jobs: ``/v1/jobs`` and what hangs off a job (metrics, compare, code uploads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from floydd.api.schemas.literals import JobState, Point
from floydd.model import Mount

__all__ = ["JobResources", "MetricSummary", "Part", "Event", "JobRestart", "Job", "SystemSample", "Metrics",
           "LastBest", "CompareRow", "Compare", "CodeUpload"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobResources:
    """What a job asked for on each box: ``gpus`` (0: CPU only); ``nodes`` only when over 1;
    ``cpus`` (cores) and ``memory`` (bytes) set aside, only when asked for."""

    gpus: int
    cpu: bool = False
    nodes: int = 1
    cpus: float = 0
    memory: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricSummary:
    """One metric of a job: its last point and the range of its values (``min``/``max`` ignore
    NaN; null when every value was NaN)."""

    last: float | None
    last_step: int | None
    min: float | None
    max: float | None
    count: int
    last_ts: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    """One box's part of a distributed job (rank 0 is the job's own ``node`` and ``gpus``)."""

    rank: int
    node: str
    node_id: str
    gpus: tuple[int, ...]
    state: JobState
    exit_code: int | None
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Something that happened to a job: the cluster's decisions and the box's own records
    (``seq`` null for the cluster's); ``ts`` null only in a note that events are unavailable."""

    ts: float | None
    kind: str
    message: str
    seq: int | None = None
    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRestart:
    """A job's restart policy (``floyd run --restart``): what reruns it (``never``, ``on-failure``:
    a failed or lost run, ``on-lost``: a run lost with its box), at most ``max_attempts`` runs,
    ``lost_after`` seconds out of touch before a run is lost (null: the cluster's default)."""

    policy: Literal["never", "on-failure", "on-lost"]
    max_attempts: int
    lost_after: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A job: ``GET /v1/jobs`` items, ``GET /v1/jobs/{project}/{number}`` (with ``events``) and
    the answer of submit, wait, stop, restart and delete. ``node`` is the name of the box it runs
    on (rank 0's), "" before it is placed; ``metrics`` the summary per metric so far.
    ``history``: a job only in this node's records (one it ran before it joined its cluster),
    which has no ``node_id`` and no parts; every other job is the cluster's. ``archived``: a
    finished job moved out of the hot replicated state (listed and read all the same; its
    cluster history is gone, its box's events stay). ``output_version`` is ``""`` when the job
    saved nothing (its /output was empty), null when there is none (yet)."""

    id: str
    project: str
    number: int
    state: JobState
    reason: str
    command: str
    params: dict[str, str]
    code_tree: str | None
    data: tuple[Mount, ...]
    resources: JobResources
    gpus: tuple[int, ...]
    env: str
    message: str
    created: float
    started: float | None
    ended: float | None
    exit_code: int | None
    output_version: str | None
    node: str
    user: str
    waiting_for: str
    metrics: dict[str, MetricSummary]
    mode: str = "job"
    max_runtime: float | None = None
    workspace: str = ""
    agent_pid: int | None = None
    latest: dict[str, Any] | None = None
    attempt: int = 0
    attempts: int = 0
    stop_requested: str = ""
    origin: str = ""
    endpoint: str | None = None
    node_id: str | None = None
    parts: tuple[Part, ...] = ()
    events: tuple[Event, ...] = ()
    history: bool = False
    archived: bool = False
    restart: JobRestart | None = None
    reruns: int = 0
    unknown_since: float | None = None
    warnings: tuple[str, ...] = ()
    """What the answering box has to say about running jobs (submit and ``GET`` of one job):
    today, that its jobs run without a sandbox (:mod:`floydd.runtime.sandboxing`)."""
    imported: dict[str, Any] | None = None
    """A job brought from another site (``floyd import``): the origin's fingerprint, kind and
    name, the job's id there, who exported it and when (:mod:`floydd.cluster.state.imported`)."""


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
