"""One job: what it is, its metric curves and its live log tail."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import RichLog

from floydd.model import WAITING_STATES, JobView
from floydd.tui.format import duration, human_bytes, job_seconds, number, state_style
from floydd.tui.poll import Detail, LogLine, Snapshot, View, Want
from floydd.tui.screens.base import SnapshotScreen
from floydd.tui.widgets.chart import LineChart, Series
from floydd.tui.widgets.panel import Panel

__all__ = ["JobDetailScreen", "job_panel", "log_text"]


class JobDetailScreen(SnapshotScreen):
    VIEW = View.DETAIL
    DEFAULT_CSS = """
    JobDetailScreen #detail-top { height: 14; }
    JobDetailScreen #job-info { height: 100%; width: 60; padding: 0 1; border-right: vkey $panel; }
    JobDetailScreen #job-chart { width: 1fr; height: 14; }
    JobDetailScreen #job-log { height: 1fr; border-top: hkey $panel; border-title-color: $text-muted; padding: 0 1; }
    """
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("m", "metric", "Next metric"),
        Binding("F", "follow", "Follow log"),
        Binding("s", "stop", "Stop"),
        Binding("R", "restart", "Restart"),
    ]

    def __init__(self, key: str, *, logs: bool = False) -> None:
        super().__init__()
        self.key = key
        self.focus_log = logs
        self.metric = 0
        self._log_shown = 0
        self._log_start: float | None = None

    def compose_body(self) -> Iterable[Widget]:
        with Horizontal(id="detail-top"):
            yield Panel(id="job-info")
            yield LineChart(id="job-chart")
        yield RichLog(id="job-log", max_lines=2000, wrap=False, markup=False, auto_scroll=True)

    def on_mount(self) -> None:
        self.query_one("#job-log", RichLog).border_title = f"log · {self.key} · following"
        if self.focus_log:
            self.query_one("#job-log", RichLog).focus()

    def want(self) -> Want:
        return Want(view=View.DETAIL, job=self.key)

    def draw(self, snap: Snapshot) -> None:
        detail = snap.detail if snap.detail is not None and snap.detail.key == self.key else None
        info = self.query_one("#job-info", Panel)
        if detail is None:
            info.show(Text(f"{self.key}: loading…", style="dim"))
            return
        if detail.job is None:
            info.show(Text(f"{self.key}: {detail.error or 'not found'}", style="red"))
            return
        last = detail.system[-1] if detail.system else None
        info.show(job_panel(detail.job, snap.now, last), key=(repr(detail.job), repr(last), snap.now))
        self._draw_chart(detail)
        self._draw_log(detail)

    def _draw_chart(self, detail: Detail) -> None:
        names = sorted(detail.metrics)
        chart = self.query_one(LineChart)
        if not names:
            chart.plot([], "no metrics yet (print {\"metric\": \"loss\", \"value\": 0.3, \"step\": 10})")
            return
        name = names[self.metric % len(names)]
        points = detail.metrics[name]
        values = [v for _, v in points]
        title = (f"{name} ({self.metric % len(names) + 1}/{len(names)}, m: next) last {number(values[-1])} "
                 f"min {number(min(values))} max {number(max(values))}") if values else name
        chart.plot([Series(self.key, points, "cyan")], title)

    def _draw_log(self, detail: Detail) -> None:
        log = self.query_one("#job-log", RichLog)
        if detail.log_total < self._log_shown:
            log.clear()
            self._log_shown = 0
        new = detail.log_total - self._log_shown
        if new <= 0:
            return
        lines = detail.log[-new:] if new <= len(detail.log) else detail.log
        if self._log_start is None:
            started = detail.job.started if detail.job is not None else None
            self._log_start = started if isinstance(started, (int, float)) else (lines[0].ts if lines else 0.0)
        skipped = new - len(lines)
        text = log_text(lines, self._log_start, skipped)
        log.write(text)
        self._log_shown = detail.log_total

    def action_metric(self) -> None:
        self.metric += 1
        snap = self.app.snapshot
        if snap and snap.detail and snap.detail.key == self.key:
            self._draw_chart(snap.detail)

    def action_follow(self) -> None:
        log = self.query_one("#job-log", RichLog)
        log.auto_scroll = not log.auto_scroll
        if log.auto_scroll:
            log.scroll_end(animate=False)
        log.border_title = f"log · {self.key} · " + ("following" if log.auto_scroll else "paused (F: follow)")

    def _job(self) -> JobView | None:
        snap = self.app.snapshot
        if snap and snap.detail and snap.detail.key == self.key:
            return snap.detail.job
        return None

    def action_stop(self) -> None:
        job = self._job()
        if job:
            self.app.confirm_stop(job)

    def action_restart(self) -> None:
        job = self._job()
        if job:
            self.app.confirm_restart(job)


def job_panel(job: JobView, now: float, usage: Mapping[str, Any] | None = None) -> Table:
    """The job's facts as a two-column grid; ``usage`` is its latest system sample."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold dim", no_wrap=True)
    grid.add_column(overflow="fold")
    head = Text(job.id, style="bold")
    head.append(f"  {job.state}", style=state_style(job.state))
    if job.exit_code is not None:
        head.append(f" (exit {job.exit_code})", style="dim")
    grid.add_row("job", head)
    wants = job.resources.gpus
    gpus = (f"GPUs {','.join(map(str, job.gpus))}" if job.gpus else
            f"wants {wants} GPU{'s' if wants > 1 else ''}" if wants else "CPU only")
    grid.add_row("where", f"{job.node or '-'} · {gpus} · {job.user or '-'}")
    for part in job.parts:      # a distributed job: each box's part under torchrun
        line = Text(f"rank {part.rank} on {part.node} · "
                    f"{'GPUs ' + ','.join(map(str, part.gpus)) if part.gpus else 'CPU'} · ")
        line.append(part.state, style=state_style(part.state))
        grid.add_row("part", line)
    grid.add_row("time", duration(job_seconds(job, now)) + (" waiting" if not job.started else ""))
    if usage:
        grid.add_row("usage", _usage(usage))
    grid.add_row("command", job.command)
    grid.add_row("params", " ".join(f"{k}={v}" for k, v in sorted(job.params.items())) or "-")
    grid.add_row("data", ", ".join(f"{d.ref} → {d.mount}" for d in job.data) or "-")
    grid.add_row("output", job.output_version or "-")
    note = job.waiting_for if job.state in WAITING_STATES else job.message
    if note:
        grid.add_row("note", Text(note, style="yellow"))
    for event in job.events[-3:]:
        grid.add_row("event", f"{event.kind}: {event.message}")
    return grid


def _usage(sample: Mapping[str, Any]) -> str:
    parts = []
    if isinstance(sample.get("cpu_percent"), (int, float)):
        parts.append(f"cpu {sample['cpu_percent']:.0f}%")
    if sample.get("rss_bytes"):
        parts.append(f"rss {human_bytes(sample['rss_bytes'])}")
    if isinstance(sample.get("gpu_util"), (int, float)):
        parts.append(f"gpu {sample['gpu_util']:.0f}%")
    if sample.get("gpu_mem_bytes"):
        parts.append(f"vram {human_bytes(sample['gpu_mem_bytes'])}")
    return " · ".join(parts) or "-"


def log_text(lines: Iterable[LogLine], start: float, skipped: int = 0) -> Text:
    """Log lines stamped with the time since ``start``; stderr in red."""
    text = Text(no_wrap=True)
    if skipped > 0:
        text.append(f"… {skipped} earlier lines not shown\n", style="dim")
    first = True
    for line in lines:
        if not first:
            text.append("\n")
        first = False
        text.append(f"+{duration(line.ts - start):>7} ", style="dim")
        text.append(line.text, style="red" if line.stream == "e" else "")
    return text
