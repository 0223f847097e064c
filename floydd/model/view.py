"""A job as the API shows it: the answer of ``/v1/jobs`` and what ``floyd`` and ``floyd top`` read.

:class:`JobView` is the wire form of a job (``GET /v1/jobs``, ``GET /v1/jobs/{project}/{number}``
and the answers of submit, wait, stop, restart and delete), not the cluster's record
(:class:`floydd.model.Job`): the daemon's answers are these types (their JSON schemas are
``/v1/openapi.json``'s, the contract tests hold the daemon to them), and the CLI and the TUI
decode an answer into them once, where it arrives (:func:`floydd.answers.decode_job`, which
is lenient with a daemon of another release). The required fields stay required here: they
are what the daemon promises.

The daemon builds these values (:mod:`floydd.jobs.listing`: from the cluster's
:class:`~floydd.model.Job` and from this box's records) and encodes them with msgspec, which
writes the fields in their order here. A field an answer leaves out (a job of this box's
history has no ``node_id``, ``restart``, ``reruns``...; ``nodes``, ``cpus`` and ``memory`` of
:class:`ResourcesView` only when asked for; ``events`` only in ``GET`` of one job) holds
``msgspec.UNSET`` in the daemon's value, which msgspec omits; this package does not import
msgspec (the agent and the CLI load it), so the annotations do not say so. A client decoding
an answer gets each missing field's default: its views never hold UNSET.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from floydd.model.defaults import DEFAULT_MAX_ATTEMPTS, DEFAULT_RESTART
from floydd.model.mounts import Mount
from floydd.model.resources import Resources
from floydd.model.restart import RestartPolicy
from floydd.model.states import JobState

__all__ = ["ResourcesView", "MetricView", "PartView", "EventView", "RestartView", "JobView"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourcesView:
    """What a job asked for on each box: ``gpus`` (0: CPU only); ``nodes`` only when over 1;
    ``cpus`` (cores) and ``memory`` (bytes) set aside, only when asked for."""

    gpus: int
    cpu: bool = False
    nodes: int = 1
    cpus: float = 0
    memory: int = 0

    def asked(self) -> Resources:
        """What was asked, as the model's :class:`~floydd.model.Resources` (which describes it)."""
        return Resources(gpu_count=self.gpus, nodes=self.nodes or 1, cpus=self.cpus or 0, memory=self.memory or 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricView:
    """One metric of a job: its last point and the range of its values (``min``/``max`` ignore
    NaN; null when every value was NaN)."""

    last: float | None
    last_step: int | None
    last_ts: float | None = None
    min: float | None
    max: float | None
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PartView:
    """One box's part of a distributed job (rank 0 is the job's own ``node`` and ``gpus``)."""

    rank: int
    node: str
    gpus: tuple[int, ...]
    state: JobState
    exit_code: int | None
    reason: str
    node_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EventView:
    """Something that happened to a job: the cluster's decisions and the box's own records
    (``seq`` null for the cluster's); ``ts`` null only in a note that events are unavailable."""

    seq: int | None = None
    ts: float | None
    kind: str
    message: str
    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RestartView:
    """A job's restart policy (``floyd run --restart``): what reruns it (``never``, ``on-failure``:
    a failed or lost run, ``on-lost``: a run lost with its box), at most ``max_attempts`` runs,
    ``lost_after`` seconds out of touch before a run is lost (null: the cluster's default)."""

    policy: Literal["never", "on-failure", "on-lost"]
    max_attempts: int
    lost_after: float | None = None

    def asked(self) -> RestartPolicy:
        """The policy as the model's :class:`~floydd.model.RestartPolicy` (a value left out: its default)."""
        return RestartPolicy(policy=self.policy or DEFAULT_RESTART,
                             max_attempts=self.max_attempts or DEFAULT_MAX_ATTEMPTS, lost_after=self.lost_after or None)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobView:
    """A job: ``GET /v1/jobs`` items, ``GET /v1/jobs/{project}/{number}`` (with ``events``) and
    the answer of submit, wait, stop, restart and delete. ``node`` is the name of the box it runs
    on (rank 0's), "" before it is placed; ``metrics`` the summary per metric so far.
    ``history``: a job only in this node's records (one it ran before it joined its cluster),
    which has no ``node_id`` and no parts; every other job is the cluster's. ``archived``: a
    finished job moved out of the hot replicated state (listed and read all the same; its
    cluster history is gone, its box's events stay). ``output_version`` is ``""`` when the job
    saved nothing (its /output was empty), null when there is none (yet)."""

    # in the order of the answer's keys (msgspec encodes them in this order)
    command: str
    params: dict[str, str]
    code_tree: str | None
    data: tuple[Mount, ...]
    resources: ResourcesView
    env: str
    message: str
    mode: str = "job"
    max_runtime: float | None = None
    restart: RestartView | None = None
    id: str
    project: str
    number: int
    state: JobState
    reason: str
    waiting_for: str
    created: float
    started: float | None
    ended: float | None
    gpus: tuple[int, ...]
    exit_code: int | None
    output_version: str | None
    attempts: int = 0
    stop_requested: str = ""
    user: str
    origin: str = ""
    endpoint: str | None = None
    unknown_since: float | None = None
    imported: dict[str, Any] | None = None
    """A job brought from another site (``floyd import``): the origin's fingerprint, kind and
    name, the job's id there, who exported it and when (:mod:`floydd.cluster.state.imported`)."""
    node: str
    node_id: str | None = None
    metrics: dict[str, MetricView]
    workspace: str = ""
    agent_pid: int | None = None
    latest: dict[str, Any] | None = None
    attempt: int = 0
    reruns: int = 0
    archived: bool = False
    parts: tuple[PartView, ...] = ()
    history: bool = False
    events: tuple[EventView, ...] = ()
    warnings: tuple[str, ...] = ()
    """What the answering box has to say about running jobs (submit and ``GET`` of one job):
    today, that its jobs run without a sandbox (:mod:`floydd.runtime.sandboxing`)."""
