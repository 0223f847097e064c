"""``floyd top``: the Textual TUI, run as its own process so the core never imports textual."""

from __future__ import annotations

import os
import sys

import click

__all__ = ["top"]


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--refresh", default=1.0, show_default=True, help="Seconds between refreshes.")
@click.option("--serve", default=None, is_flag=False, flag_value="", metavar="[HOST:PORT]",
              help="Serve the same UI to a browser (default 127.0.0.1:8000).")
def top(refresh: float, serve: str | None) -> None:
    """Watch nodes, GPUs, jobs, logs and experiments in a terminal UI."""
    args = [sys.executable, "-m", "floydd.tui", "--refresh", str(refresh)]
    if serve is not None:
        args += ["--serve", serve] if serve else ["--serve"]
    os.execv(sys.executable, args)
