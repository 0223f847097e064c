"""``floyd top --serve``: the same TUI in a browser, through textual-serve.

textual-serve starts one ``python -m floydd.tui`` per browser tab and streams
it over a websocket; each tab has its own poller. It listens on loopback unless
told otherwise, because whoever opens the page can stop and restart jobs as the
user who ran it.
"""

from __future__ import annotations

import shlex
import sys

__all__ = ["serve", "parse_address"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def parse_address(where: str) -> tuple[str, int]:
    """``"HOST:PORT"``, ``":PORT"`` or ``"PORT"`` -> (host, port); the host defaults to loopback."""
    host, _, port = where.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise SystemExit(f"floyd top: --serve wants HOST:PORT, not {where!r}") from None
    if not 0 < number < 65536:
        raise SystemExit(f"floyd top: port {number} is out of range")
    return host, number


def serve(where: str, refresh: float) -> None:
    from textual_serve.server import Server

    host, port = parse_address(where)
    if host not in _LOOPBACK:
        print(f"floyd top: serving on {host}:{port}; anyone who can reach it can stop and restart "
              "your jobs (there is no login)", file=sys.stderr)
    command = shlex.join([sys.executable, "-m", "floydd.tui", "--refresh", f"{refresh:g}"])
    Server(command, host=host, port=port, title="floyd top").serve()
