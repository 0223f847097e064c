"""This daemon and the machines: ``/v1/info``, ``/v1/nodes``."""

from __future__ import annotations

from dataclasses import dataclass

from floydd.api.schemas.literals import Health, NodeRole

__all__ = ["Info", "Gpu", "Node"]


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
    audit_warnings: tuple[str, ...] = ()
    """This box's stored audit chain found edited at start, and each box whose chain head
    differs from this box's chain (:mod:`floydd.cluster.audit_guard`)."""


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
    store_why: str = ""
    """Why its health is ``disk full`` or ``store failing``, in its own words ("" when well)."""
    hostname: str = ""
    disk_path: str = ""
    clock_offset: float | None = None
    """Seconds its wall clock is ahead of the leader's (negative: behind), measured NTP-like
    before its heartbeats (:mod:`floydd.cluster.clockskew`); null: not measured yet."""
    clock: str = ""
    """The same in words (``10.0 min ahead of the leader``); empty: not measured yet."""
    clock_skewed: bool = False
    """More than ``max_clock_skew`` (default 30 s) from the leader's clock."""
