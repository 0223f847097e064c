"""The shapes of the ``/v1`` API's JSON answers, as frozen dataclasses.

``/v1/openapi.json`` draws its response schemas from these types (with
``msgspec.json.schema_components``, as it draws the request bodies from
:mod:`floydd.model`), and the contract test converts real answers and the TUI's
test double with ``msgspec.convert(answer, Type)``, so the published spec, the
daemon and the double cannot drift apart unnoticed.

The rule for each field:

- **required**: what the CLI or the TUI reads (a renamed or removed field must fail,
  even where a reader falls back with ``.get``, since it would then draw ``-`` silently),
  and the ids other answers refer to (a node's ``id``, a part's ``node_id``);
- **optional**, with a default: what the daemon sends only sometimes (a distributed
  job's ``parts``, a job's ``events`` on ``GET /v1/jobs/{project}/{number}``) or what no
  reader relies on.

Unknown fields are allowed (msgspec ignores them for dataclasses), so the daemon may add
fields without breaking a client. Values with a closed set (job states, node health) are
``Literal`` types: a new one must reach the TUI's styles before the daemon sends it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from floydd.model import Mount

__all__ = ["ApiToken", "WhoAmI", 
    "Info", "Node", "Gpu", "Job", "JobRestart", "JobResources", "Part", "MetricSummary", "Event", "Metrics", "SystemSample",
    "Cluster", "Member", "DatasetVersion", "DatasetInfo", "DatasetEntry", "Compare", "CompareRow", "LastBest",
    "CodeUpload", "ImportResult", "ImportedJob", "ImportedDataset", "ExportOrigin", "JoinToken", "TokenRecord", "Left", "Removed", "AuditEntry", "AuditCheck", "DatasetDeleted", "GcReport", "Error", "ErrorDetail",
    "JobState", "Health", "NodeRole", "MemberRole", "Point", "Person", "PersonRemoved", "Role", "Visibility",
]

JobState = Literal["queued", "starting", "running", "unknown", "success", "failed", "stopped", "timeout", "lost"]
"""Every job state (:data:`floydd.model.STATES`)."""
Health = Literal["healthy", "suspect", "stale", "draining", "off", "down", "unknown"]
"""A node's health: ``healthy`` (up), ``suspect`` (the leader lost touch with it: nothing new goes
there, its jobs are ``unknown``), ``stale`` (up but its heartbeats stopped coming), the status it
reported otherwise (``draining``, ``off``, ``down``), ``unknown`` before its first report.
``floyd nodes`` and ``floydd members`` show the same word."""
NodeRole = Literal["leader", "voter", "learner", "none"]
MemberRole = Literal["voter", "learner", "none"]
Role = Literal["admin", "user"]
"""A person's role (:data:`floydd.cluster.people.ROLES`)."""
Visibility = Literal["lab", "private"]
"""Who may use a dataset: the whole lab, or its owner and admins."""

Point = tuple[int | None, float | None, float]
"""One metric point ``[step, value, ts]``; ``value`` is null for NaN or infinity."""


# -- this daemon and the machines --------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Info:
    """``GET /v1/info``: this daemon, its node and its place in the cluster."""

    version: str
    node: str
    pid: int
    state_dir: str
    socket: str
    uptime: float
    sandbox: str
    running: int
    role: NodeRole
    cluster_size: int
    log: str = ""
    started: float = 0.0
    cluster: str = ""
    leader: str | None = None
    sandbox_policy: str = ""
    """``require``, ``prefer`` or ``off`` (config ``sandbox``, :mod:`floydd.runtime.sandboxing`)."""
    sandbox_warning: str | None = None
    """One sentence when jobs here run (or cannot run) without a sandbox."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    """One GPU of a node; ``job`` is the job holding it (anywhere in the cluster), null if free;
    ``user`` the person who submitted that job."""

    index: int
    name: str
    memory_total: int
    memory_used: int
    utilization: int | None
    temperature: int | None
    power_w: float | None
    job: str | None
    uuid: str = ""
    fake: bool = False
    user: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """``GET /v1/nodes`` items: a node, its resources and what holds its GPUs. Another node's
    entry is its last heartbeat's sample (``hostname``, ``disk_path`` missing before one came)."""

    id: str
    name: str
    role: NodeRole
    health: Health
    cpus: int
    cpu_percent: float
    memory_total: int
    memory_available: int
    disk_total: int
    disk_free: int
    gpu_source: str
    gpus: tuple[Gpu, ...]
    address: str | None = None
    hostname: str = ""
    disk_path: str = ""


# -- jobs ------------------------------------------------------------------------------------

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
    name, the job's id there, who exported it and when (:mod:`floydd.cluster.imported`)."""


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
class CodeUpload:
    """``POST /v1/code``: the snapshot to submit with (``code_tree``) and what it held."""

    code_tree: str
    files: int
    bytes: int
    skipped: int = 0


# -- the cluster -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """A node in the cluster's membership (``leader``: the current leader, whatever its role)."""

    id: str
    name: str
    address: str | None
    role: MemberRole
    leader: bool
    status: str | None
    health: Health
    match: int | None = None
    cert_expires: float | None = None
    """When the member's current node certificate expires (unix seconds; renewed well before)."""
    version: str | None = None
    """The floydd release the member says it runs (``0.1.x``: one too old to say)."""
    protocol: int | None = None
    """The cluster protocol it speaks (:mod:`floydd.cluster.versions`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """``GET /v1/cluster``: membership as this node sees it; ``initialised``: it talks to other boxes."""

    initialised: bool
    node_id: str
    members: tuple[Member, ...]
    leader: str | None = None
    is_leader: bool = False
    term: int = 0
    ca_fingerprint: str | None = None
    """sha256 of the cluster CA (null: a box alone): what ``floyd login --fingerprint`` checks."""
    api: str | None = None
    """Where this box serves the TLS API (``floyd login HOST:PORT``); null: nowhere."""
    protocol: int = 1
    """The cluster's level: what every box speaks (2 once every box runs floydd 0.2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Person:
    """``/v1/people``: a person of the lab (:mod:`floydd.cluster.people`): their role, and the
    local uids that act as them per box id (none mapped on a box: their login name there)."""

    name: str
    role: Role
    uids: dict[str, tuple[int, ...]]
    added: float = 0.0
    by: str = ""
    """The admin who added them (empty: the first admin, made at floydd init)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PersonRemoved:
    """``DELETE /v1/people/{name}``: the person whose account went (their jobs keep the name)."""

    removed: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiToken:
    """``GET /v1/tokens`` (a list), ``DELETE /v1/tokens/{id}``: a personal API token as the
    cluster keeps it, never its secret (``POST`` adds ``token``, shown once)."""

    id: str
    person: str
    state: Literal["valid", "expired", "revoked"]
    created: float
    expires: float | None
    label: str
    made_on: str
    revoked: float | None = None
    revoked_by: str | None = None
    token: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WhoAmI:
    """``GET /v1/whoami``: the person a call is made as, the box that answered, and where
    that box serves the TLS API for ``floyd login`` (null: nowhere: a box alone)."""

    person: str
    node: str
    api: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinToken:
    """``POST /v1/cluster/tokens``: a one-time join token and how long it is valid."""

    token: str
    ttl: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenRecord:
    """``GET /v1/cluster/tokens`` (a list), ``DELETE /v1/cluster/tokens/{id}``: a join token as
    the cluster keeps it, never its secret. ``state``: valid, used, expired or revoked."""

    id: str
    state: Literal["valid", "used", "expired", "revoked"]
    created: float
    expires: float
    made_by: str
    made_on: str
    used: float | None = None
    used_by: str | None = None
    revoked: float | None = None
    revoked_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Left:
    """``POST /v1/cluster/leave``: the id of the node that left."""

    left: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Drained:
    """``POST /v1/cluster/drain``: this box takes no new jobs (``draining``), and the jobs it
    still runs (they carry on through a daemon restart)."""

    node: str
    draining: bool
    running: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Removed:
    """``POST /v1/cluster/remove``: the node taken out of the cluster; its certificates are revoked."""

    removed: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """``GET /v1/audit`` items: one link of the audit chain (:mod:`floydd.cluster.audit`)."""

    seq: int
    index: int
    prev: str
    who: str
    box: str
    op: str
    what: str
    ts: float
    hash: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditCheck:
    """``GET /v1/audit/verify``: this box's chain checked; ``finding`` names the first bad entry."""

    ok: bool
    entries: int
    first_bad: int | None = None
    finding: str | None = None
    head: str | None = None


# -- datasets and the store ------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetVersion:
    """``GET /v1/datasets`` items: a version, with the names of the boxes holding it, those of
    them not heard from within the replica grace (``silent_holders``: their copies do not
    count), and how many ``copies`` count of the ``replicas`` the cluster keeps."""

    name: str
    version: int
    created: float
    size: int
    files: int
    message: str
    held_by: tuple[str, ...]
    silent_holders: tuple[str, ...]
    copies: int
    replicas: int
    ref: str = ""
    tree: str = ""
    holders: tuple[str, ...] = ()
    copies_note: str = ""
    owner: str = ""
    """The person who added the dataset's first version (empty: from before owners)."""
    visibility: Visibility = "lab"
    """``private``: only the owner and admins mount, clone or add to it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetEntry:
    """A file, folder or link of a dataset version."""

    path: str
    kind: str
    size: int
    mode: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetInfo:
    """``GET /v1/datasets/info``: one version, its copies (as :class:`DatasetVersion`, and
    ``copies_note``: "stored on 1 of 2 boxes; the second copy follows") and its first 1000 entries."""

    name: str
    version: int
    created: float
    size: int
    files: int
    message: str
    tree: str
    entries: tuple[DatasetEntry, ...]
    truncated: bool
    held_by: tuple[str, ...]
    silent_holders: tuple[str, ...]
    copies: int
    replicas: int
    copies_note: str
    ref: str = ""
    holders: tuple[str, ...] = ()
    owner: str = ""
    visibility: Visibility = "lab"


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetDeleted:
    """``POST /v1/datasets/delete``: the ref that was deleted, as given."""

    deleted: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GcReport:
    """``POST /v1/store/gc``: objects removed and kept, bytes freed, stray temp files removed."""

    removed: int
    freed: int
    kept: int = 0
    temp_files: int = 0


# -- export and import between sites ---------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class ExportOrigin:
    """Who made an export file: a cluster (``fingerprint``: its CA's sha256) or a box alone
    (``box:`` and its node key's sha256), its name and the box that wrote the file."""

    kind: Literal["cluster", "box"]
    fingerprint: str
    name: str
    node_id: str
    short: str
    description: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportedJob:
    """A job of the file (``origin_job``: its id at the origin) and the job it is here; ``new``
    False: an earlier import had made it."""

    origin_job: str
    job: str
    new: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportedDataset:
    """A dataset version of the file (``origin_ref``: its name there) and the version it is
    here; ``alone``: exported on its own (else: mounted by a job of the file)."""

    origin_ref: str
    ref: str
    alone: bool
    new: bool
    """False: the version was here already (an earlier import, or the same data)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportResult:
    """``POST /v1/import``: where the file came from and what it made here."""

    origin: ExportOrigin
    jobs: tuple[ImportedJob, ...]
    datasets: tuple[ImportedDataset, ...]
    bytes: int
    exported_by: str = ""
    created: float | None = None


# -- errors ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorDetail:
    """What went wrong (``message``), what to do (``hint``), a stable ``code`` and the
    :mod:`floydd.errors` class (``kind``) the client raises again."""

    code: str
    message: str
    hint: str = ""
    kind: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    """Every error answer, with the matching HTTP status."""

    error: ErrorDetail
