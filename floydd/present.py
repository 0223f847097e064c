"""Text for people from what the daemon answers: sizes, durations, the boxes' clocks.

Shared by the CLI and the TUI (neither imports the other); pure functions of their arguments.
How the clocks stand is measured and judged by the daemon (``clock``, ``clock_offset`` and
``clock_skewed`` of each node or member); ``floyd nodes``, ``floydd members`` and ``floydd
status`` print it with :func:`clock_column` and :func:`skew_warnings`.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["human_bytes", "human_duration", "clock_column", "skew_warnings"]


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def clock_column(entry: dict) -> str:
    """``clock +0.0s``, ``clock -600.2s SKEWED``, or ``clock -`` (not measured yet)."""
    offset = entry.get("clock_offset")
    if offset is None:
        return "clock -"
    return f"clock {offset:+.1f}s" + (" SKEWED" if entry.get("clock_skewed") else "")


def skew_warnings(entries: Iterable[dict]) -> list[str]:
    """One line per box whose clock is past the daemon's ``max_clock_skew``."""
    return [f"warning: {e.get('name') or e.get('id')}'s clock is {e.get('clock') or 'off'} (more than "
            f"max_clock_skew): set its time right (NTP); the times it writes in job histories are off"
            for e in entries if e.get("clock_skewed")]
