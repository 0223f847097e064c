"""Progress bars (bytes, rate, ETA): over the daemon's NDJSON progress events, and over
bytes this client sends or fetches itself (tar transfers over FLOYD_HOST)."""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

from floydd.errors import InternalError

__all__ = ["follow_progress", "transfer_bar"]


def follow_progress(events: Iterator[dict], label: str) -> dict:
    """Draw progress events until the result; returns the result. The client raises a stream
    that ends without one (the daemon went away); an iterator that still does is a bug."""
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)
    result: dict | None = None
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
    if not isinstance(result, dict):
        raise InternalError(f"{label}: the daemon's answer ended without a result",
                            hint="this is a bug in floyd; run again with FLOYD_DEBUG=1 and report it")
    return result


@contextlib.contextmanager
def transfer_bar(label: str) -> Iterator[Callable[[int, int | None], None]]:
    """A bar for bytes moving between this machine and the daemon's (FLOYD_HOST); yields
    the ``progress(done, total)`` callback the client calls."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  disable=not sys.stderr.isatty(), console=Console(stderr=True)) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
