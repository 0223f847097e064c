"""Who may use ``floyd top --serve``: a token, our own Host, our own Origin.

Whoever drives the served TUI can stop and restart jobs as the user who ran it, and a
browser is easy to lead astray, so every HTTP and websocket request passes three checks
(as Jupyter's do):

- **Host** must name the address we listen on (or a loopback name when on loopback; the
  machine's names when on all addresses). A page on another site that points a DNS name
  of its own at 127.0.0.1 (DNS rebinding) is refused.
- **Origin**, when the browser sends one (it always does for websockets and for pages'
  own requests), must be this server (same scheme, host and port). Another page, even one
  served from the same machine on another port, cannot open the websocket.
- **A token**: a random one made at start and printed in the URL. The first visit with
  ``?token=...`` gets an HttpOnly, SameSite=Strict session cookie (and is redirected to
  the URL without the token); later requests need that cookie, or the token again.

Everything else gets 403. :func:`decide` is the pure rule; :func:`guard_middleware`
applies it to an aiohttp app (textual-serve's, which has no hook of its own).
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import urllib.parse
from dataclasses import dataclass

__all__ = ["Guard", "Verdict", "netloc", "allowed_netlocs", "decide", "guard_middleware", "LOOPBACK_NAMES"]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def netloc(host: str, port: int) -> str:
    """``host:port`` as a browser writes it in Host and Origin (IPv6 in brackets), lower case."""
    host = host.strip("[]").lower()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    return host.strip("[]") in ("0.0.0.0", "::", "")


def allowed_netlocs(host: str, port: int, *, machine_names: tuple[str, ...] = ()) -> frozenset[str]:
    """The Host values we answer to: the listen address; plus the loopback names when it is
    a loopback address; plus ``machine_names`` (the host name, its addresses) when it is
    every address (``0.0.0.0``/``::``)."""
    names = {host}
    if is_loopback(host) or _is_wildcard(host):
        names.update(LOOPBACK_NAMES)
    if _is_wildcard(host):
        names.discard(host)
        names.update(machine_names)
    return frozenset(netloc(name, port) for name in names if name)


def machine_names() -> tuple[str, ...]:
    """This machine's names and addresses, for a server listening on every address."""
    names = {socket.gethostname(), socket.getfqdn()}
    for name in list(names):
        try:
            names.update(info[4][0] for info in socket.getaddrinfo(name, None))
        except OSError:
            pass
    return tuple(sorted(n for n in names if n))


@dataclass(frozen=True, slots=True, kw_only=True)
class Guard:
    """What one server checks against: its token, its session cookie, its Host names."""

    token: str
    session: str
    cookie_name: str
    allowed: frozenset[str]
    public: str
    """``host:port`` of the URL we print; pages are redirected there so their websocket
    (whose URL textual-serve writes from it) is same-origin."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """``status`` 0: serve it; 302: ``location`` (``set_cookie`` tells whether to set the
    session cookie); 403: ``reason``."""

    status: int
    reason: str = ""
    location: str = ""
    set_cookie: bool = False


def decide(guard: Guard, *, host: str | None, origin: str | None, path: str, query: dict[str, str],
           cookie: str | None) -> Verdict:
    """The whole rule for one request (pure: headers in, verdict out)."""
    host = (host or "").lower()
    if host not in guard.allowed:
        return Verdict(403, f"Host {host or '(none)'!r} is not this server; open the URL floyd top printed")
    if origin is not None:
        if origin.lower() != f"http://{host}":
            return Verdict(403, f"Origin {origin!r} is not this server ({host})")
    token = query.get("token")
    with_token = token is not None and hmac.compare_digest(token.encode(), guard.token.encode())
    with_cookie = cookie is not None and hmac.compare_digest(cookie.encode(), guard.session.encode())
    if not (with_token or with_cookie):
        return Verdict(403, "a token is needed: open the URL with ?token=... that floyd top --serve printed")
    if path == "/" and (host != guard.public or with_token):
        # a page: to the printed address, the token out of the URL (and out of history)
        rest = {k: v for k, v in query.items() if k != "token"}
        if host != guard.public and with_token:
            rest = dict(query)          # the cookie is set where the page will be, not here
        location = f"http://{guard.public}/" + (f"?{urllib.parse.urlencode(rest)}" if rest else "")
        return Verdict(302, location=location, set_cookie=with_token and host == guard.public)
    return Verdict(0)


def guard_middleware(guard: Guard):
    """An aiohttp middleware that applies :func:`decide` to every request, websockets included."""
    from aiohttp import web

    @web.middleware
    async def middleware(request: web.Request, handler):
        verdict = decide(guard, host=request.headers.get("Host"), origin=request.headers.get("Origin"),
                         path=request.path, query=dict(request.query), cookie=request.cookies.get(guard.cookie_name))
        if verdict.status == 403:
            return web.Response(status=403, text=f"floyd top: {verdict.reason}\n")
        if verdict.status == 302:
            response = web.Response(status=302, headers={"Location": verdict.location})
            if verdict.set_cookie:
                response.set_cookie(guard.cookie_name, guard.session, httponly=True, samesite="Strict", path="/")
            return response
        return await handler(request)

    return middleware
