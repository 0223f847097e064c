"""The cluster and the lab's people: membership, join and personal tokens, the audit log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from floydd.api.schemas.literals import Health, MemberRole, Role

__all__ = ["Member", "Cluster", "Person", "PersonRemoved", "ApiToken", "WhoAmI", "JoinToken", "TokenRecord",
           "Left", "Drained", "Removed", "AuditEntry", "AuditCheck", "AuditHead"]


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
    """The cluster protocol it speaks (:mod:`floydd.cluster.state.versions`)."""
    audit_head: str | None = None
    """The head of its audit chain its last heartbeat said (``SEQ:HASH``; null: none said yet)."""
    audit_differs: str | None = None
    """How that head differs from the answering box's chain at the same seq (null: it agrees)."""
    store_why: str = ""
    """Why its health is ``disk full`` or ``store failing``, in its own words ("" when well)."""
    clock_offset: float | None = None
    """Seconds its wall clock is ahead of the leader's (negative: behind), measured NTP-like
    before its heartbeats (:mod:`floydd.cluster.clockskew`); null: not measured yet."""
    clock: str = ""
    """The same in words (``10.0 min ahead of the leader``); empty: not measured yet."""
    clock_skewed: bool = False
    """More than ``max_clock_skew`` (default 30 s) from the leader's clock."""


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
    """The cluster's level: what every box speaks (3 once every box runs floydd 0.3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Person:
    """``/v1/people``: a person of the lab (:mod:`floydd.cluster.state.people`): their role, and the
    local uids that act as them per box id (none mapped on a box: their login name there)."""

    name: str
    role: Role
    uids: dict[str, tuple[int, ...]]
    added: float = 0.0
    by: str = ""
    """The admin who added them (empty: the first admin, made at floydd init)."""
    boxes: tuple[str, ...] | None = None
    """Box ids where their login name acts as them (cluster level 3; absent before: every box)."""
    every_box: bool | None = None
    """Their login name acts as them on every box (cluster level 3)."""


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
    public_key: str | None = None
    """The public half of the token's signing key (cluster level 3): a box it is presented to
    may act for its person."""


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
    sign_in: tuple[str, ...] | None = None
    """The people signed in on the box it admits (cluster level 3)."""
    cancelled_join: str | None = None
    """A revoke of a used token: the box whose join it cancelled."""


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
    name: str = ""
    """The box's name (its id where it has none)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Removed:
    """``POST /v1/cluster/remove``: the node taken out of the cluster; its certificates are revoked."""

    removed: str
    cancelled_join: str | None = None
    """The node was a join redeemed but not started: cancelled, it can never become a member."""
    store_epoch: int | None = None
    """The store key epoch started after the removal (level 3): the removed box never receives it."""
    store_key: str | None = None
    """Why the store key was not rotated after the removal, and what to do."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """``GET /v1/audit`` items: one link of the audit chain (:mod:`floydd.cluster.state.audit`)."""

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
    against: str | None = None
    """The recorded head (``SEQ:HASH``) it was checked against (``head=``), if any."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditHead:
    """``GET /v1/audit/head``: the chain's newest entry, in the form an auditor records (``head``:
    ``SEQ:HASH``, what ``/v1/audit/verify?head=`` takes); seq 0 and 64 zeros: no entry yet.
    ``ok`` false (with ``finding``): the chain up to it is not whole, so it is no head to record."""

    seq: int
    hash: str
    head: str
    entries: int
    ok: bool
    index: int = 0
    ts: float | None = None
    finding: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreEpoch:
    """One store key epoch as the cluster records it (never its secret)."""

    epoch: int
    fingerprint: str
    made_on: str
    reason: str = ""
    by: str = ""
    ts: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreKeyReport:
    """``GET /v1/cluster/store-key``: the cluster's store key epochs and this box's re-seal:
    the epoch it seals new objects under, and whether every object here is under it yet."""

    node: str
    cluster_epoch: int
    seal_epoch: int
    held_epochs: tuple[int, ...]
    epochs: tuple[StoreEpoch, ...]
    resealed: bool
    resealed_objects: int
    resealed_bytes: int
    reseal_started: float | None = None
    reseal_seconds: float | None = None
    reseal_rate: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreKeyRotated:
    """``POST /v1/cluster/store-key``: the new epoch, and this box (the one that made it)."""

    epoch: int
    fingerprint: str
    made_on: str
    here: StoreKeyReport
    reason: str = ""
    by: str = ""
    ts: float = 0.0
