"""A job as the API shows it: the answer of ``/v1/jobs`` and what ``floyd`` and ``floyd top`` read.

:class:`JobView` is the wire form of a job (``GET /v1/jobs``, ``GET /v1/jobs/{project}/{number}``
and the answers of submit, wait, stop, restart and delete), not the cluster's record
(:class:`floydd.model.Job`): the daemon's answers are these types (their JSON schemas are
``/v1/openapi.json``'s, the contract tests hold the daemon to them), and the CLI and the TUI
decode an answer into them once, where it arrives, with :func:`decode_job`.

A ``floyd`` may talk to a daemon of another release (an upgrade goes box by box), so the
client decodes leniently: a field the daemon did not send gets the empty value of its type
(``""``, ``0``, None, ``{}``, ``()``), except the four a job is nothing without (``id``,
``project``, ``number``, ``state``); fields it does not know are ignored. What cannot be read
is a :class:`~floydd.errors.InternalError` naming the field, never a traceback. The required
fields stay required in the types themselves: they are what the daemon promises.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any, Literal

from floydd.errors import InternalError
from floydd.model.mounts import Mount
from floydd.model.resources import Resources
from floydd.model.states import JobState

__all__ = ["ResourcesView", "MetricView", "PartView", "EventView", "RestartView", "JobView", "decode_job",
           "decode_jobs"]


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
        return Resources(gpu_count=self.gpus, nodes=self.nodes or 1, cpus=self.cpus, memory=self.memory)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricView:
    """One metric of a job: its last point and the range of its values (``min``/``max`` ignore
    NaN; null when every value was NaN)."""

    last: float | None
    last_step: int | None
    min: float | None
    max: float | None
    count: int
    last_ts: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartView:
    """One box's part of a distributed job (rank 0 is the job's own ``node`` and ``gpus``)."""

    rank: int
    node: str
    node_id: str
    gpus: tuple[int, ...]
    state: JobState
    exit_code: int | None
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EventView:
    """Something that happened to a job: the cluster's decisions and the box's own records
    (``seq`` null for the cluster's); ``ts`` null only in a note that events are unavailable."""

    ts: float | None
    kind: str
    message: str
    seq: int | None = None
    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RestartView:
    """A job's restart policy (``floyd run --restart``): what reruns it (``never``, ``on-failure``:
    a failed or lost run, ``on-lost``: a run lost with its box), at most ``max_attempts`` runs,
    ``lost_after`` seconds out of touch before a run is lost (null: the cluster's default)."""

    policy: Literal["never", "on-failure", "on-lost"]
    max_attempts: int
    lost_after: float | None = None


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

    id: str
    project: str
    number: int
    state: JobState
    reason: str
    command: str
    params: dict[str, str]
    code_tree: str | None
    data: tuple[Mount, ...]
    resources: ResourcesView
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
    metrics: dict[str, MetricView]
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
    parts: tuple[PartView, ...] = ()
    events: tuple[EventView, ...] = ()
    history: bool = False
    archived: bool = False
    restart: RestartView | None = None
    reruns: int = 0
    unknown_since: float | None = None
    warnings: tuple[str, ...] = ()
    """What the answering box has to say about running jobs (submit and ``GET`` of one job):
    today, that its jobs run without a sandbox (:mod:`floydd.runtime.sandboxing`)."""
    imported: dict[str, Any] | None = None
    """A job brought from another site (``floyd import``): the origin's fingerprint, kind and
    name, the job's id there, who exported it and when (:mod:`floydd.cluster.state.imported`)."""


_ESSENTIAL = frozenset({"id", "project", "number", "state"})
"""The fields of :class:`JobView` a lenient decode does not make up."""


def decode_job(answer: object) -> JobView:
    """A job answer of the daemon (its JSON, decoded) as a :class:`JobView`, leniently (see the
    module's docstring); an answer that is no job raises :class:`~floydd.errors.InternalError`."""
    import msgspec      # only when a job is read: `floyd --help` need not load it

    if not isinstance(answer, dict):
        raise _malformed(f"a job is a JSON object, not {type(answer).__name__}")
    missing = sorted(_ESSENTIAL - answer.keys())
    if missing:
        raise _malformed(f"a job without {', '.join(missing)}")
    try:
        return msgspec.convert(_filled(JobView, answer), JobView)
    except msgspec.ValidationError as exc:
        raise _malformed(f"{str(answer.get('id'))[:80]}: {exc}") from None


def decode_jobs(answer: object) -> list[JobView]:
    """A list of job answers (``GET /v1/jobs``) as views."""
    if not isinstance(answer, list):
        raise _malformed(f"a list of jobs is a JSON array, not {type(answer).__name__}")
    return [decode_job(item) for item in answer]


def _malformed(what: str) -> InternalError:
    return InternalError(f"floydd answered a job this floyd cannot read: {what}",
                         hint="floyd and floydd may be of different releases: `floyd --version` and "
                              "`floydd status` say which; update the older one", code="malformed_answer")


def _filled(kind: type, raw: dict) -> dict:
    """``raw`` with every required field of dataclass ``kind`` it lacks set to the empty value
    of the field's type, in the dataclasses inside it too."""
    out = dict(raw)
    for name, hint, required in _fields_of(kind):
        if name not in out:
            if required and not (kind is JobView and name in _ESSENTIAL):
                out[name] = _empty(hint)
        else:
            out[name] = _fill_value(hint, out[name])
    return out


def _fill_value(hint: Any, value: Any) -> Any:
    if is_dataclass(hint) and isinstance(value, dict):
        return _filled(hint, value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _fill_value(inner[0], value) if len(inner) == 1 and value is not None else value
    if origin is tuple and args and isinstance(value, list):
        return [_fill_value(args[0], item) for item in value]
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {k: _fill_value(args[1], v) for k, v in value.items()}
    return value


def _empty(hint: Any) -> Any:
    if is_dataclass(hint):
        return _filled(hint, {})
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        return None
    if origin is Literal:
        return args[0]
    return {str: "", int: 0, float: 0.0, bool: False, dict: {}, tuple: [], list: []}[origin or hint]


@functools.cache
def _fields_of(kind: type) -> tuple[tuple[str, Any, bool], ...]:
    """Each field of dataclass ``kind``: its name, its type, whether it has no default."""
    hints = typing.get_type_hints(kind)
    return tuple((f.name, hints[f.name], f.default is MISSING and f.default_factory is MISSING) for f in fields(kind))
