"""One poll of the daemon: what the visible screen asks for, and the picture the poller hands back.

A :class:`Want` says what the visible screen needs. A :class:`Snapshot` (the TUI's picture
of the cluster; raft's snapshots are another thing) is made by
:class:`floydd.tui.poller.Poller` about once a second and only ever replaced, never
changed; screens draw from the latest one and nothing else. ``now`` is the poller's clock
at the time of the poll, so a duration shown on screen is a pure function of the snapshot
(tests inject the clock and get the same picture every time).

Jobs are :class:`~floydd.model.JobView` values, decoded where the poller fetched them; the
dicts inside (info, nodes, ...) are the API's JSON as the client returned it; treat them as
read-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from floydd.model import JobView

__all__ = ["View", "Want", "LogLine", "Detail", "Comparison", "Snapshot", "PAGE"]

PAGE = 500
"""Jobs one poll of a list of jobs fetches (the jobs screen asks for more as it scrolls; sorted
and filtered by the daemon, so a page is the first of what the screen shows)."""

Points = tuple[tuple[float, float], ...]
"""A metric series as ``((step, value), ...)``, in step order."""


class View:
    """Which screen is visible; it decides what the poller fetches."""

    CLUSTER = "cluster"
    JOBS = "jobs"
    DETAIL = "detail"
    EXPERIMENTS = "experiments"


@dataclass(frozen=True, slots=True, kw_only=True)
class Want:
    """What the visible screen needs; the app sets it, the poller reads it.

    cluster: info, nodes, running jobs (who holds a GPU).
    jobs: info, the first ``limit`` jobs in ``state`` whose text holds ``text``, newest first or
    by ``sort`` (the daemon filters and sorts before it pages: :mod:`floydd.model.order`), and
    when that page is full or filtered by text the open jobs too (the counts of the header).
    experiments: info, the newest ``limit`` jobs (the projects to pick from) and the newest
    ``limit`` of ``project``, ``compare`` and curves.
    detail: info, the job in ``job``, its metric series and log tail.
    """

    view: str = View.CLUSTER
    job: str | None = None
    compare: tuple[str, ...] = ()
    limit: int | None = None
    """The page of the jobs and experiments views: the newest this many (None: all)."""
    project: str | None = None
    """The experiments view's project."""
    state: str | None = None
    """The jobs view's states, comma-separated as the API takes them (None: any)."""
    sort: str | None = None
    """The jobs view's sort as the API takes it (``state``, ``-time``...; None: newest first)."""
    text: str | None = None
    """The jobs view's text filter (None: none)."""


@dataclass(frozen=True, slots=True)
class LogLine:
    ts: float
    stream: str  # "o" stdout, "e" stderr
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Detail:
    """One job in depth, for the job detail screen."""

    key: str
    job: JobView | None = None
    metrics: Mapping[str, Points] = field(default_factory=dict)
    system: tuple[Mapping[str, Any], ...] = ()
    log: tuple[LogLine, ...] = ()
    log_total: int = 0
    """How many log lines the poller has read for this job so far (the tail is ``log``)."""
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """Runs side by side, for the experiments screen."""

    keys: tuple[str, ...]
    table: Mapping[str, Any] | None = None
    """``Client.compare(keys)``: params, metrics and one entry per job."""
    curves: Mapping[str, Mapping[str, Points]] = field(default_factory=dict)
    """job -> metric -> points."""
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Everything a screen may draw, as of ``now``."""

    seq: int
    now: float
    want: Want
    reachable: bool
    error: str | None = None
    """Why the daemon could not be read (shown in the banner), or None."""
    hint: str = ""
    where: str = ""
    last_ok: float | None = None
    """When the daemon last answered (data below is that old when unreachable)."""
    info: Mapping[str, Any] | None = None
    nodes: tuple[Mapping[str, Any], ...] | None = None
    jobs: tuple[JobView, ...] | None = None
    """The view's jobs (the jobs view's page; for experiments the project's newest and the
    newest of all) or only the running ones (cluster view)."""
    all_jobs: bool = False
    """Whether ``jobs`` is the view's list (not the cluster view's running ones)."""
    more_jobs: bool = False
    """The jobs view's page came back full: there are older jobs than ``jobs``."""
    open_jobs: tuple[JobView, ...] | None = None
    """Every open job, when ``jobs`` is a full page or the text filter's matches (the header
    counts them: running and queued over every job, as when every job was fetched)."""
    history: Mapping[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    """(node, gpu index) -> recent utilisation %, oldest first; gpu index -1 is the node's CPU."""
    detail: Detail | None = None
    comparison: Comparison | None = None
    poll_ms: float = 0.0
