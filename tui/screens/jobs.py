"""The jobs screen: the queue and every run, filtered and sorted, with stop/restart/logs keys.

Newest first (the API's order), it polls a page of jobs, not all of them: the first
:data:`PAGE` of what it shows, with the state filter, the text filter and the sort asked of
the daemon (which filters and sorts before it pages), and one page more each time the cursor
comes near the end of what it has (10,000 jobs are a second of JSON a poll). The page is
filtered and sorted here again by the same rule (:mod:`floydd.model.order`), so a change
shows at once on the page it has, before the daemon's answer comes."""

from __future__ import annotations

from functools import partial
from typing import Any, Iterable, Sequence

from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Input

from floydd.model import (FINAL_STATES, MAX_FILTER, OPEN_STATES, UNSUCCESSFUL_STATES, WAITING_STATES, JobOrder, JobView,
                          job_text, matching, ordered)
from floydd.tui.format import duration, job_seconds, metric_summary, state_style
from floydd.tui.poll import PAGE, Snapshot, View, Want
from floydd.tui.screens.base import SnapshotScreen
from floydd.tui.widgets.panel import Panel
from floydd.tui.widgets.table import Column, Row, RowTable

__all__ = ["JobsScreen", "job_rows", "STATE_FILTERS", "SORTS", "COLUMNS"]

COLUMNS = (
    Column("Job", 12), Column("State", 8), Column("User", 7), Column("Node", 8), Column("GPUs", 5),
    Column("Time", 7, "right"), Column("Latest metrics", 30), Column("Command"),
)
STATE_FILTERS: dict[str, frozenset[str] | None] = {
    "all": None, "active": OPEN_STATES, "running": frozenset({"running"}), "queued": WAITING_STATES,
    "succeeded": FINAL_STATES - UNSUCCESSFUL_STATES, "failed": UNSUCCESSFUL_STATES,
}
SORTS = {"newest": "-created", "oldest": "created", "state": "state", "project": "project", "user": "user",
         "time": "-time"}
"""The screen's sorts, and each as the API's ``sort`` (:data:`floydd.model.SORTS`)."""
_SORT_BY_COLUMN = {0: "project", 1: "state", 2: "user", 5: "time"}


class JobsScreen(SnapshotScreen):
    VIEW = View.JOBS
    DEFAULT_CSS = """
    JobsScreen #filter { dock: bottom; margin-bottom: 1; }
    """
    BINDINGS = [
        Binding("l", "logs", "Logs"),
        Binding("s", "stop", "Stop"),
        Binding("R", "restart", "Restart"),
        Binding("slash", "filter", "Filter"),
        Binding("f", "state_filter", "State"),
        Binding("o", "sort", "Sort"),
        Binding("escape", "clear_filter", "Clear", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.text = ""
        self.state_filter = "all"
        self.sort = "newest"
        self.limit = PAGE

    def want(self) -> Want:
        states = STATE_FILTERS[self.state_filter]
        return Want(view=View.JOBS, limit=self.limit, state=",".join(sorted(states)) if states else None,
                    sort=None if self.sort == "newest" else SORTS[self.sort], text=self.text or None)

    def _asked_again(self) -> None:
        """Filter or sort changed: the first page of what they show, at once."""
        self.limit = PAGE
        self.want_changed()
        self._redraw()

    def compose_body(self) -> Iterable[Widget]:
        yield Panel(id="status", classes="summary")
        yield RowTable(COLUMNS, id="jobs", empty="waiting for the daemon…")
        yield Input(placeholder="filter: part of a job, user, node, state, param or command; enter to apply, escape to clear",
                    id="filter", max_length=MAX_FILTER)

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False

    def draw(self, snap: Snapshot) -> None:
        jobs = snap.jobs if snap.all_jobs and snap.jobs else ()  # not the cluster view's running-only list
        rows = job_rows(jobs, snap.now, text=self.text, states=STATE_FILTERS[self.state_filter], sort=self.sort)
        table = self.query_one(RowTable)
        table.set_rows(rows, empty="no jobs match" if jobs else
                       ("no jobs yet: submit one with `floyd run`" if snap.all_jobs else "loading jobs…"))
        if snap.more_jobs:
            shown = f"{'newest' if self.sort == 'newest' else 'first'} {len(rows)} jobs (more below)"
        else:
            shown = f"{len(rows)} of {len(jobs)} jobs" if len(rows) != len(jobs) else f"{len(jobs)} jobs"
        counted = snap.open_jobs if snap.open_jobs is not None else jobs
        queued = sum(1 for j in counted if j.state in WAITING_STATES)
        running = sum(1 for j in counted if j.state == "running")
        filt = f" · filter “{self.text}”" if self.text else ""
        self.query_one("#status", Panel).show(
            f"{shown} · {running} running, {queued} queued · state: {self.state_filter} (f) · "
            f"sort: {self.sort} (o){filt}")

    def _redraw(self) -> None:
        if self.app.snapshot is not None:
            self.draw(self.app.snapshot)

    # -- selection ------------------------------------------------------------------------

    def _current(self) -> JobView | None:
        key = self.query_one(RowTable).cursor_key
        snap = self.app.snapshot
        if key is None or snap is None:
            return None
        return next((j for j in snap.jobs or () if j.id == key), None)

    def on_row_table_highlighted(self, event: RowTable.Highlighted) -> None:
        """Near the end of a full page: ask for the next one too."""
        table, snap = event.table, self.app.snapshot
        if snap is not None and snap.more_jobs and len(table.rows) >= self.limit \
                and table.cursor >= len(table.rows) - max(1, table.size.height) * 2:
            self.limit += PAGE
            self.want_changed()

    def on_row_table_selected(self, event: RowTable.Selected) -> None:
        event.stop()
        self.app.open_job(event.key)

    def on_row_table_header_clicked(self, event: RowTable.HeaderClicked) -> None:
        event.stop()
        if event.column in _SORT_BY_COLUMN:
            self.sort = _SORT_BY_COLUMN[event.column]
            self._asked_again()

    def action_logs(self) -> None:
        job = self._current()
        if job:
            self.app.open_job(job.id, logs=True)

    def action_stop(self) -> None:
        job = self._current()
        if job:
            self.app.confirm_stop(job)

    def action_restart(self) -> None:
        job = self._current()
        if job:
            self.app.confirm_restart(job)

    # -- filter and sort ------------------------------------------------------------------

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.value = self.text
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.text = event.value.strip()
        self._asked_again()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        self.query_one(RowTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.display = False
        self.text = ""
        self.query_one(RowTable).focus()
        self._asked_again()

    def action_state_filter(self) -> None:
        names = list(STATE_FILTERS)
        self.state_filter = names[(names.index(self.state_filter) + 1) % len(names)]
        self._asked_again()

    def action_sort(self) -> None:
        names = list(SORTS)
        self.sort = names[(names.index(self.sort) + 1) % len(names)]
        self._asked_again()


def job_rows(jobs: Sequence[JobView], now: float, *, text: str = "",
             states: frozenset[str] | None = None, sort: str = "newest") -> list[Row]:
    """The rows for ``jobs`` (newest first, or already in ``sort``'s order, as the API lists
    them) after filter and sort: the daemon's rule (:mod:`floydd.model.order`)."""
    needle = text.strip().lower()
    picked = matching([j for j in jobs if states is None or j.state in states], needle, _haystack)
    if sort != "newest":                    # newest first: the API's own order
        picked = ordered(picked, JobOrder.parse(SORTS[sort]), now)
    return [Row(j.id, partial(_cells, j, now)) for j in picked]


def _haystack(job: JobView) -> str:
    return job_text(job.id, job.state, job.user, job.node, job.command, job.params)


def _cells(job: JobView, now: float) -> tuple:
    wants = job.resources.gpus
    gpu_text = ",".join(map(str, job.gpus)) if job.gpus else (f"({wants})" if wants else "cpu")
    if job.state in WAITING_STATES and job.waiting_for:
        metrics: Any = (f"waiting: {job.waiting_for}", "dim")
    elif job.state in UNSUCCESSFUL_STATES and job.message:
        metrics = (job.message, "red")
    else:
        metrics = metric_summary(job.metrics)
    return (
        (job.id, "bold"),
        (job.state, state_style(job.state)),
        job.user or "-",
        (job.node or "-") + (f" +{len(job.parts) - 1}" if len(job.parts) > 1 else ""),
        gpu_text,
        duration(job_seconds(job, now)),
        metrics,
        (job.command, "dim"),
    )
