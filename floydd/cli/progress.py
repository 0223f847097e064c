"""A progress bar (bytes, rate, ETA) over the daemon's NDJSON progress events."""

from __future__ import annotations

import sys
from typing import Iterator

__all__ = ["follow_progress"]


def follow_progress(events: Iterator[dict], label: str) -> dict:
    """Draw progress events until the result; returns the result."""
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)
    result: dict = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), transient=False, disable=not sys.stderr.isatty(),
                  console=Console(stderr=True)) as bar:
        task = bar.add_task(label, total=None)
        for event in events:
            if "progress" in event:
                done, total = event["progress"]
                bar.update(task, completed=done, total=total)
            elif "result" in event:
                result = event["result"]
    return result
