"""Experiments: pick runs of a project and compare params and metrics, curves overlaid.

The projects to pick from are those of the newest :data:`~floydd.tui.poll.PAGE` jobs, and a
project's newest that many runs are listed (``floyd compare`` reaches older ones)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from rich import box
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widget import Widget

from floydd.model import JobView
from floydd.tui.format import metric_summary, number, state_style
from floydd.tui.poll import PAGE, Comparison, Snapshot, View, Want
from floydd.tui.screens.base import SnapshotScreen
from floydd.tui.widgets.chart import COLORS, LineChart, Series
from floydd.tui.widgets.panel import Panel
from floydd.tui.widgets.table import Column, Row, RowTable

__all__ = ["ExperimentsScreen", "compare_table", "projects_of", "MAX_RUNS"]

MAX_RUNS = len(COLORS)
COLUMNS = (Column("", 1), Column("Run", 10), Column("State", 8), Column("Latest metrics"))


class ExperimentsScreen(SnapshotScreen):
    VIEW = View.EXPERIMENTS
    DEFAULT_CSS = """
    ExperimentsScreen #exp-left { width: 48; border-right: vkey $panel; }
    ExperimentsScreen #exp-right { width: 1fr; }
    ExperimentsScreen #exp-table { height: auto; max-height: 50%; padding: 0 1; }
    ExperimentsScreen #exp-chart { height: 1fr; min-height: 8; }
    """
    BINDINGS = [
        Binding("space", "toggle", "Pick run"),
        Binding("p", "project(1)", "Next project"),
        Binding("P", "project(-1)", "Prev project", show=False),
        Binding("m", "metric", "Next metric"),
        Binding("c", "clear", "Clear picks"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.project: str | None = None
        self.picked: dict[str, list[str]] = {}
        self.metric = 0

    def compose_body(self) -> Iterable[Widget]:
        with Horizontal(id="exp"):
            with Vertical(id="exp-left"):
                yield Panel(id="exp-project", classes="summary")
                yield RowTable(COLUMNS, id="runs", empty="waiting for the daemon…")
            with Vertical(id="exp-right"):
                yield Panel(id="exp-table")
                yield LineChart(id="exp-chart")

    def want(self) -> Want:
        return Want(view=View.EXPERIMENTS, compare=tuple(self._picks()), project=self.project, limit=PAGE)

    def _picks(self) -> list[str]:
        return self.picked.get(self.project or "", [])

    def draw(self, snap: Snapshot) -> None:
        jobs = snap.jobs if snap.all_jobs and snap.jobs else ()  # not the cluster view's running-only list
        projects = projects_of(jobs)
        if self.project not in projects and projects:
            self.project = projects[0]
            self.want_changed()                 # its runs, not only the newest of all
        runs = [j for j in jobs if j.project == self.project]
        if self.project and self.project not in self.picked and snap.all_jobs:
            self.picked[self.project] = [j.id for j in runs if j.metrics][:3]
            self.want_changed()
        picks = self._picks()
        self.query_one("#exp-project", Panel).show(
            f"{self.project or '-'} ({projects.index(self.project) + 1 if self.project in projects else 0}"
            f"/{len(projects)}) · {len(runs)} runs · {len(picks)} picked · p: project")
        rows = [Row(j.id, (("●", COLORS[picks.index(j.id)]) if j.id in picks else " ",
                           j.id, (j.state, state_style(j.state)), metric_summary(j.metrics, 2)))
                for j in runs]
        self.query_one(RowTable).set_rows(rows, empty="no runs" if snap.all_jobs else "loading…")
        comparison = snap.comparison
        if comparison is None or list(comparison.keys) != picks:
            comparison = None
        self._draw_compare(comparison, picks)

    def _draw_compare(self, comparison: Comparison | None, picks: Sequence[str]) -> None:
        table, chart = self.query_one("#exp-table", Panel), self.query_one("#exp-chart", LineChart)
        if not picks:
            table.show(Text("pick runs with space to compare them", style="dim"), layout=True)
            chart.plot([])
            return
        if comparison is None:
            table.show(Text("comparing…", style="dim"), layout=True)
            return
        if comparison.error or comparison.table is None:
            table.show(Text(comparison.error or "no comparison", style="red"), layout=True)
            return
        table.show(compare_table(comparison.table, picks), key=(repr(comparison.table), tuple(picks)), layout=True)
        names = list(comparison.table.get("metrics") or ())
        if not names:
            chart.plot([], "no metrics in these runs")
            return
        name = names[self.metric % len(names)]
        series = [Series(key, comparison.curves.get(key, {}).get(name, ()), COLORS[i % len(COLORS)])
                  for i, key in enumerate(picks)]
        chart.plot(series, f"{name} ({self.metric % len(names) + 1}/{len(names)}, m: next)")

    def _redraw(self) -> None:
        if self.app.snapshot is not None:
            self.draw(self.app.snapshot)

    def action_toggle(self) -> None:
        key = self.query_one(RowTable).cursor_key
        if key is None or self.project is None:
            return
        picks = self.picked.setdefault(self.project, [])
        if key in picks:
            picks.remove(key)
        elif len(picks) >= MAX_RUNS:
            self.notify(f"at most {MAX_RUNS} runs side by side; unpick one first", severity="warning")
            return
        else:
            picks.append(key)
        self.want_changed()
        self._redraw()

    def on_row_table_selected(self, event: RowTable.Selected) -> None:
        event.stop()
        self.app.open_job(event.key)

    def action_project(self, step: int) -> None:
        snap = self.app.snapshot
        projects = projects_of(snap.jobs or ()) if snap and snap.all_jobs else []
        if projects:
            at = projects.index(self.project) if self.project in projects else 0
            self.project = projects[(at + step) % len(projects)]
            self.want_changed()
            self._redraw()

    def action_metric(self) -> None:
        self.metric += 1
        self._redraw()

    def action_clear(self) -> None:
        if self.project:
            self.picked[self.project] = []
            self.want_changed()
            self._redraw()


def projects_of(jobs: Iterable[JobView]) -> list[str]:
    return sorted({j.project for j in jobs if j.project})


def compare_table(table: Mapping[str, Any], picks: Sequence[str]) -> Table:
    """Params and metrics, one column per run (headed in its curve colour); best value in bold green."""
    entries = {e.get("id"): e for e in table.get("jobs") or ()}
    out = Table(box=box.SIMPLE_HEAD, pad_edge=False, expand=False, show_edge=False)
    out.add_column("", style="bold dim", no_wrap=True)
    for i, key in enumerate(picks):
        out.add_column(Text(key, style=f"bold {COLORS[i % len(COLORS)]}"), no_wrap=True, max_width=16)
    out.add_row("state", *(Text(str(entries.get(k, {}).get("state", "-")),
                                style=state_style(entries.get(k, {}).get("state"))) for k in picks))
    for name in table.get("params") or ():
        values = [str((entries.get(k, {}).get("params") or {}).get(name, "-")) for k in picks]
        differ = len(set(values)) > 1
        out.add_row(name, *(Text(v, style="bold" if differ else "") for v in values))
    for name in table.get("metrics") or ():
        cells = [(entries.get(k, {}).get("metrics") or {}).get(name) for k in picks]
        goal = next((c.get("goal") for c in cells if c), "min")
        bests = [c.get("best") for c in cells if c and isinstance(c.get("best"), (int, float))]
        winner = (min(bests) if goal == "min" else max(bests)) if bests else None
        row = []
        for c in cells:
            if not c:
                row.append(Text("-", style="dim"))
                continue
            best = c.get("best")
            style = "bold green" if winner is not None and best == winner and len(bests) > 1 else ""
            row.append(Text(f"{number(c.get('last'))} / {number(best)}", style=style))
        out.add_row(f"{name} ({goal}) last/best", *row)
    return out
