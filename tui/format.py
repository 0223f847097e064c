"""Pure text helpers shared by the screens: sizes, durations, bars, sparklines, styles.

No Textual here; everything is a function of its arguments (time comes in as
``now``), so rows built with these are the same for the same snapshot.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from floydd.model import JobView, MetricView, run_seconds
from floydd.present import human_bytes

__all__ = ["human_bytes", "used_total", "duration", "job_seconds", "bar", "spark", "number",
           "level_style", "state_style", "health_style", "metric_summary", "STATE_STYLES"]

_BLOCKS = " ▏▎▍▌▋▊▉█"
_TICKS = "▁▂▃▄▅▆▇█"

STATE_STYLES = {
    "queued": "cyan", "starting": "cyan", "running": "bold green", "success": "green",
    "failed": "bold red", "stopped": "yellow", "timeout": "red", "lost": "magenta", "unknown": "yellow",
}


def used_total(used: float | None, total: float | None) -> str:
    """``"12.3/48.0 GiB"``: both in the unit of the total."""
    if used is None or not total:
        return "-"
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if total >= size:
            return f"{used / size:.1f}/{total / size:.1f} {unit}"
    return f"{used:.0f}/{total:.0f} B"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def job_seconds(job: JobView, now: float) -> float | None:
    """How long a job ran (or has run so far); for a queued job, how long it waited (the rule a
    ``time`` sort sorts by: :func:`floydd.model.run_seconds`)."""
    return run_seconds(job.started, job.ended, job.created, now)


def bar(percent: float | None, width: int) -> str:
    """A horizontal bar of ``width`` cells, in eighths."""
    if percent is None or width <= 0:
        return " " * max(width, 0)
    eighths = round(max(0.0, min(100.0, percent)) / 100 * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_BLOCKS[part] if part else "")
    return text.ljust(width)


def spark(values: Iterable[float], width: int, lo: float = 0.0, hi: float = 100.0) -> str:
    """The last ``width`` values as block ticks, right-aligned (newest at the right)."""
    tail = list(values)[-width:] if width > 0 else []
    span = (hi - lo) or 1.0
    ticks = "".join(_TICKS[max(0, min(7, int((v - lo) / span * 7.999)))] for v in tail)
    return ticks.rjust(width)


def number(value: Any) -> str:
    """A metric value, short: 4 significant digits."""
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, (int, float)):
        return f"{value:.4g}"
    return str(value)


def level_style(percent: float | None) -> str:
    if percent is None:
        return "dim"
    if percent >= 90:
        return "red"
    if percent >= 60:
        return "yellow"
    return "green"


def state_style(state: str | None) -> str:
    return STATE_STYLES.get(state or "", "")


def health_style(health: str | None) -> str:
    """The daemon's node health (:data:`floydd.api.schemas.Health`): healthy green; stale (its
    heartbeats stopped coming), suspect (the leader lost touch) or draining yellow; off, down,
    unknown, disk full or store failing red."""
    if health == "healthy":
        return "green"
    if health in ("stale", "suspect", "draining"):
        return "yellow"
    return "bold red"


def metric_summary(metrics: Mapping[str, MetricView] | None, limit: int = 3) -> str:
    """``"loss 0.231 · acc 0.93"``: the last value of the first few metrics, by name."""
    if not metrics:
        return ""
    parts = []
    for name in sorted(metrics)[:limit]:
        parts.append(f"{name} {number(metrics[name].last)}")
    return " · ".join(parts)
