"""``floyd top --serve``: the same TUI in a browser, through textual-serve.

textual-serve starts one ``python -m floydd.tui`` per browser tab and streams
it over a websocket; each tab has its own poller. Whoever opens the page can stop
and restart jobs as the user who ran it, so it listens on loopback unless told
otherwise (and then warns), answers on loopback only the user who ran it, lets a browser
in only with the one-time link printed at start (each browser then has its own session
cookie; a fresh link is printed for the next one), and checks our own Host and our own
Origin (:mod:`floydd.tui.serve_guard`). textual-serve has no hook for that;
:class:`GuardedServer` puts the gate in front of every route of the aiohttp app it builds.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys

from floydd.tui.peer_uid import kernel_tells
from floydd.tui.serve_guard import (Gate, Guard, allowed_netlocs, guard_middleware, is_loopback, machine_names,
                                    netloc)

__all__ = ["serve", "parse_address", "make_guard", "make_gate"]


def parse_address(where: str, host: str | None = None) -> tuple[str, int]:
    """``"HOST:PORT"``, ``":PORT"`` or ``"PORT"`` -> (host, port); ``host`` (``--host``)
    wins; the host defaults to loopback."""
    given, _, port = where.rpartition(":")
    host = (host or given).strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise SystemExit(f"floyd top: --serve wants [HOST:]PORT, not {where!r}") from None
    if not 0 < number < 65536:
        raise SystemExit(f"floyd top: port {number} is out of range")
    return host, number


def make_guard(host: str, port: int) -> Guard:
    """The fixed checks for a server on ``host:port``: its Host names, its cookie's name."""
    everywhere = host.strip("[]") in ("0.0.0.0", "::")
    names = machine_names() if everywhere else ()
    public = netloc(socket.gethostname() if everywhere else host, port)
    return Guard(cookie_name=f"floyd-top-{port}", allowed=allowed_netlocs(host, port, machine_names=names),
                 public=public)


def make_gate(host: str, port: int, **kw) -> Gate:
    """The gate of a server on ``host:port``, for this user, with a fresh one-time token."""
    return Gate(make_guard(host, port), owner_uid=os.getuid(), kernel_tells=kernel_tells(), **kw)


def serve(where: str, refresh: float, host: str | None = None) -> None:
    try:
        from textual_serve.server import Server
    except ImportError:
        raise SystemExit("error: serving the TUI needs textual-serve, which is not installed\n"
                         f"  hint: pip install 'floydd[serve]' (or textual-serve) into {sys.prefix}") from None

    class GuardedServer(Server):
        """textual-serve's server with :func:`guard_middleware` on its app, and our own
        start-up line (the URL with the token)."""

        async def _make_app(self):
            app = await super()._make_app()
            app.middlewares.append(guard_middleware(gate))
            return app

        async def on_startup(self, app) -> None:
            print(f"floyd top: serving on {gate.url}", file=sys.stderr, flush=True)
            print("floyd top: open that URL (it lets one browser in, once; another link is printed for the next); "
                  "Ctrl-C stops", file=sys.stderr, flush=True)

    host, port = parse_address(where, host)
    gate = make_gate(host, port)
    if not is_loopback(host):
        print(f"floyd top: warning: serving on {host}:{port}, beyond this machine; the first browser to open "
              "the URL with its token can stop and restart your jobs", file=sys.stderr, flush=True)
    elif not gate.kernel_tells:
        print("floyd top: warning: this system does not say which user is at the other end of a loopback "
              "connection; the token alone lets a browser in", file=sys.stderr, flush=True)
    command = shlex.join([sys.executable, "-m", "floydd.tui", "--refresh", f"{refresh:g}"])
    GuardedServer(command, host=host, port=port, title="floyd top",
                  public_url=f"http://{gate.guard.public}").serve()
