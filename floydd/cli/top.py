"""``floyd top``: the Textual TUI, run as its own process so the core never imports textual."""

from __future__ import annotations

import importlib.util
import os
import sys

import click

from floydd.cli.common import fail

__all__ = ["top"]


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--refresh", default=1.0, show_default=True, help="Seconds between refreshes.")
@click.option("--serve", default=None, is_flag=False, flag_value="", metavar="[HOST:PORT]",
              help="Serve the same UI to a browser (default 127.0.0.1:8000); open the URL it prints "
                   "(a one-time link: it lets one browser in, and a new one is printed for the next).")
@click.option("--host", default=None, metavar="ADDRESS",
              help="With --serve: listen on ADDRESS instead of loopback (it warns).")
def top(refresh: float, serve: str | None, host: str | None) -> None:
    """Watch nodes, GPUs, jobs, logs and experiments in a terminal UI."""
    args = [sys.executable, "-m", "floydd.tui", "--refresh", str(refresh)]
    if host is not None and serve is None:
        raise click.UsageError("--host goes with --serve")
    if serve is not None:
        if importlib.util.find_spec("textual_serve") is None:
            fail("floyd top --serve needs textual-serve, which is not installed",
                 f"pip install 'floydd[serve]' (or textual-serve) into {sys.prefix}")
        args += ["--serve", serve] if serve else ["--serve"]
        if host is not None:
            args += ["--host", host]
    os.execv(sys.executable, args)
