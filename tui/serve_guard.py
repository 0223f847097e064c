"""Who may use ``floyd top --serve``: this user, one browser per link, our own Host and Origin.

Whoever drives the served TUI can stop and restart jobs as the user who ran it, and a
browser is easy to lead astray, so every HTTP and websocket request passes these checks
(:meth:`Gate.decide`, in this order):

- **Host** must name the address we listen on (or a loopback name when on loopback; the
  machine's names when on all addresses). A page on another site that points a DNS name
  of its own at 127.0.0.1 (DNS rebinding) is refused.
- **Origin**, when the browser sends one (it always does for websockets and for pages'
  own requests), must be this server (same scheme, host and port). Another page, even one
  served from the same machine on another port, cannot open the websocket.
- **This user only, on loopback.** TCP has no permissions: every user of the box can connect
  to 127.0.0.1:8000. Where the kernel lists connections (Linux,
  :mod:`floydd.tui.peer_uid`), a connection from this machine is served only when the user at
  its other end is the one who ran ``floyd top`` (an ``ssh -L`` tunnel runs as that user,
  too); another uid is refused even with the link. Beyond loopback (``--host``) nobody can
  say who is at the other end: the link alone lets a browser in.
- **A one-time link.** The URL printed at start carries a random token. The first visit that
  presents it spends it (:meth:`Gate.redeem`): that browser gets its own random session
  cookie (HttpOnly, SameSite=Strict), bound to the address (and, on loopback, the user) it
  came from, and is redirected to the URL without the token; any later use of the token is
  refused, saying when and from where it was used. A fresh link for one more browser is
  printed each time one is spent, so the terminal shows who came in. A cookie works only
  from where it was given: another browser, or another user, cannot ride it.

Everything else gets 403. :class:`Gate` holds the state (the token, the sessions) and
decides without I/O; :func:`guard_middleware` applies it to an aiohttp app (textual-serve's,
which has no hook of its own), asking the kernel who the peer is.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Guard", "Visitor", "Session", "Verdict", "Gate", "netloc", "allowed_netlocs", "guard_middleware",
           "LOOPBACK_NAMES"]

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
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


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
    """What does not change while a server runs: its cookie's name, its Host names, and the
    ``host:port`` of the URL it prints (pages are redirected there, so that their websocket,
    whose URL textual-serve writes from it, is same-origin)."""

    cookie_name: str
    allowed: frozenset[str]
    public: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Visitor:
    """Who is at the other end of a request: its address, and for a connection from this
    machine the user the kernel says made it (None: it cannot say, or not local)."""

    address: str
    uid: int | None = None

    @property
    def local(self) -> bool:
        return is_loopback(self.address)

    def same_as(self, other: Visitor) -> bool:
        """Whether ``other`` is where a session given to this visitor may be used: the same user
        on this machine (over IPv4 or IPv6 loopback alike), or the same address beyond it."""
        if self.local and other.local:
            return self.uid == other.uid
        return self.address == other.address

    def __str__(self) -> str:
        return self.address + (f" (uid {self.uid})" if self.uid is not None else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """One browser let in: its cookie's value, where it came from, when."""

    id: str
    visitor: Visitor
    since: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """``status`` 0: serve it; 302: ``location`` (``redeem``: spend the token and set a new
    session's cookie on the way); 403: ``reason``."""

    status: int
    reason: str = ""
    location: str = ""
    redeem: bool = False


@dataclass
class Gate:
    """One server's state (module docstring): its one-time token, the tokens spent, the sessions.
    ``owner_uid``: the only local user served; ``kernel_tells``: whether the kernel says who a
    local peer is (else the link alone lets a local browser in too)."""

    guard: Guard
    owner_uid: int
    kernel_tells: bool
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    announce: Callable[[str], object] = lambda line: print(line, file=sys.stderr, flush=True)
    clock: Callable[[], float] = time.time
    sessions: dict[str, Session] = field(default_factory=dict)
    spent: dict[str, tuple[Visitor, float]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The link that lets one more browser in."""
        return f"http://{self.guard.public}/?token={self.token}"

    def decide(self, *, host: str | None, origin: str | None, path: str, query: dict[str, str],
               cookie: str | None, visitor: Visitor) -> Verdict:
        """The whole rule for one request (module docstring); changes nothing."""
        guard = self.guard
        host = (host or "").lower()
        if host not in guard.allowed:
            return Verdict(403, f"Host {host or '(none)'!r} is not this server; open the URL floyd top printed")
        if origin is not None and origin.lower() != f"http://{host}":
            return Verdict(403, f"Origin {origin!r} is not this server ({host})")
        if visitor.local and self.kernel_tells and visitor.uid != self.owner_uid:
            who = "a user the kernel does not name" if visitor.uid is None else f"uid {visitor.uid}"
            return Verdict(403, f"this server answers only the user who ran floyd top (uid {self.owner_uid}); "
                                f"this connection is from {who}")
        session = self.sessions.get(cookie) if cookie else None
        if session is not None and not session.visitor.same_as(visitor):
            return Verdict(403, "this session cookie was given to another browser (at "
                                f"{session.visitor}); open the link floyd top printed last")
        token = query.get("token")
        if token is not None:
            rest = {k: v for k, v in query.items() if k != "token"}
            if path != "/":
                return Verdict(403, "a link's token opens the page only: open the URL floyd top printed")
            if _same(token, self.token):
                if host != guard.public:   # the cookie is set where the page will be, not here
                    return Verdict(302, location=f"http://{guard.public}/?{urllib.parse.urlencode(query)}")
                return Verdict(302, location=_page(guard, rest), redeem=True)
            used = next((when for spent, when in self.spent.items() if _same(token, spent)), None)
            if session is None:
                if used is not None:
                    by, at = used
                    return Verdict(403, f"this link was used already (by a browser at {by}, at "
                                        f"{time.strftime('%H:%M:%S', time.localtime(at))}): each link lets one "
                                        "browser in; open the newer one floyd top printed")
                return Verdict(403, "wrong token: open the URL floyd top printed")
            return Verdict(302, location=_page(guard, rest))    # a reload of a spent link, this browser's own
        if session is None:
            return Verdict(403, "a token is needed: open the URL with ?token=... that floyd top --serve printed")
        if path == "/" and host != guard.public:
            return Verdict(302, location=_page(guard, query))
        return Verdict(0)

    def redeem(self, visitor: Visitor) -> Session:
        """Spend the token for ``visitor``: its own session, and a new token for the next browser."""
        now = self.clock()
        self.spent[self.token] = (visitor, now)
        session = Session(id=secrets.token_urlsafe(32), visitor=visitor, since=now)
        self.sessions[session.id] = session
        self.token = secrets.token_urlsafe(24)
        self.announce(f"floyd top: a browser at {visitor} opened the link; it works no more. For one more "
                      f"browser: {self.url}")
        return session


def guard_middleware(gate: Gate, *, who: Callable[[tuple, tuple], int | None] | None = None):
    """An aiohttp middleware that applies :meth:`Gate.decide` to every request, websockets
    included. ``who(ours, theirs)``: the uid at the far end of a local connection
    (:func:`floydd.tui.peer_uid.peer_uid`)."""
    from aiohttp import web

    if who is None:
        from floydd.tui.peer_uid import peer_uid as who

    @web.middleware
    async def middleware(request: web.Request, handler):
        visitor = _visitor(request, who if gate.kernel_tells else None)
        verdict = gate.decide(host=request.headers.get("Host"), origin=request.headers.get("Origin"),
                              path=request.path, query=dict(request.query),
                              cookie=request.cookies.get(gate.guard.cookie_name), visitor=visitor)
        if verdict.status == 403:
            return web.Response(status=403, text=f"floyd top: {verdict.reason}\n")
        if verdict.status == 302:
            response = web.Response(status=302, headers={"Location": verdict.location})
            if verdict.redeem:
                session = gate.redeem(visitor)
                response.set_cookie(gate.guard.cookie_name, session.id, httponly=True, samesite="Strict", path="/")
            return response
        return await handler(request)

    return middleware


def _visitor(request, who) -> Visitor:
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    ours = transport.get_extra_info("sockname") if transport is not None else None
    if not peer:
        return Visitor(address="?")
    address = str(peer[0])
    uid = who((ours[0], ours[1]), (peer[0], peer[1])) if who is not None and ours and is_loopback(address) else None
    return Visitor(address=address, uid=uid)


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _page(guard: Guard, query: dict[str, str]) -> str:
    return f"http://{guard.public}/" + (f"?{urllib.parse.urlencode(query)}" if query else "")
