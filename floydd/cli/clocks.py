"""How the boxes' clocks stand against the leader's, as ``floyd nodes``, ``floydd members``
and ``floydd status`` print it (the daemon measures and judges: ``clock``, ``clock_offset``
and ``clock_skewed`` of each node or member)."""

from __future__ import annotations

from typing import Iterable

__all__ = ["clock_column", "skew_warnings"]


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
