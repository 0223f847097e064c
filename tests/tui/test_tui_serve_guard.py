"""``floyd top --serve`` access rules: Host, Origin, this user only, a one-time link, a session
cookie per browser. The rules themselves (pure, :meth:`Gate.decide`), then the gate in front
of an aiohttp app with real browsers' cookie jars and a real second user (the real
textual-serve server: test_tui_serve.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from floydd.tui.peer_uid import kernel_tells, peer_uid, proc_address
from floydd.tui.serve import make_gate, make_guard, parse_address
from floydd.tui.serve_guard import Gate, Visitor, allowed_netlocs, guard_middleware

HOST = "127.0.0.1:8000"
ME = Visitor(address="127.0.0.1", uid=1000)


def _gate(*, kernel_tells: bool = True, host: str = "127.0.0.1", port: int = 8000) -> tuple[Gate, list[str]]:
    said: list[str] = []
    gate = Gate(make_guard(host, port), owner_uid=1000, kernel_tells=kernel_tells, token="T0KEN", announce=said.append)
    return gate, said


def _decide(gate: Gate, *, host=HOST, origin=None, path="/", query=None, cookie=None, visitor=ME):
    return gate.decide(host=host, origin=origin, path=path, query=query or {}, cookie=cookie, visitor=visitor)


def _enter(gate: Gate, visitor: Visitor = ME) -> str:
    """A browser opens the current link: its session cookie."""
    verdict = _decide(gate, query={"token": gate.token}, visitor=visitor)
    assert verdict.status == 302 and verdict.redeem, verdict
    return gate.redeem(visitor).id


def test_a_request_without_token_or_cookie_is_refused():
    gate, _ = _gate()
    for path in ("/", "/ws", "/static/js/textual.js", "/download/x"):
        verdict = _decide(gate, path=path)
        assert verdict.status == 403 and "token is needed" in verdict.reason


def test_a_wrong_token_or_cookie_is_refused():
    gate, _ = _gate()
    assert _decide(gate, query={"token": "T0KEM"}).status == 403
    assert _decide(gate, query={"token": ""}).status == 403
    assert _decide(gate, path="/ws", cookie="not-a-session").status == 403
    assert _decide(gate, path="/ws", cookie="T0KEN").status == 403                 # the token is no cookie
    assert _decide(gate, path="/ws", query={"token": "T0KEN"}).status == 403      # it opens the page only


def test_the_link_lets_one_browser_in_once_with_its_own_cookie_and_a_new_link_for_the_next():
    gate, said = _gate()
    verdict = _decide(gate, query={"token": "T0KEN", "fontsize": "14"})
    assert verdict.status == 302 and verdict.redeem and verdict.location == "http://127.0.0.1:8000/?fontsize=14"
    first = gate.redeem(ME).id
    assert _decide(gate, cookie=first).status == 0                                 # the page, with the cookie
    assert _decide(gate, path="/ws", origin="http://127.0.0.1:8000", cookie=first).status == 0
    # the spent link: refused to anyone else, saying when and from where it was used
    other = Visitor(address="127.0.0.1", uid=1000)
    again = _decide(gate, query={"token": "T0KEN"}, visitor=other)
    assert again.status == 403 and "used already (by a browser at 127.0.0.1 (uid 1000), at " in again.reason
    assert _decide(gate, query={"token": "T0KEN"}, cookie=first).status == 302      # its own browser's reload
    # the terminal shows who came in, and the next link, which is another token
    assert said == [f"floyd top: a browser at 127.0.0.1 (uid 1000) opened the link; it works no more. For one "
                    f"more browser: http://127.0.0.1:8000/?token={gate.token}"]
    assert gate.token != "T0KEN" and len(gate.token) >= 24
    second = _enter(gate)
    assert second != first and len(second) >= 32 and first not in (gate.token, "T0KEN")
    assert _decide(gate, cookie=first).status == 0 and _decide(gate, cookie=second).status == 0


def test_another_local_user_is_refused_even_with_the_link_or_a_cookie():
    gate, _ = _gate()
    stranger = Visitor(address="127.0.0.1", uid=1001)
    verdict = _decide(gate, query={"token": "T0KEN"}, visitor=stranger)
    assert verdict.status == 403 and "answers only the user who ran floyd top (uid 1000)" in verdict.reason
    assert "uid 1001" in verdict.reason
    assert gate.token == "T0KEN"                      # not spent by the refused visit
    cookie = _enter(gate)
    assert _decide(gate, cookie=cookie, visitor=stranger).status == 403
    unknown = Visitor(address="127.0.0.1", uid=None)  # the kernel listed no such connection
    assert "does not name" in _decide(gate, cookie=cookie, visitor=unknown).reason


def test_where_the_kernel_cannot_say_the_link_alone_lets_a_local_browser_in():
    gate, _ = _gate(kernel_tells=False)
    anyone = Visitor(address="127.0.0.1", uid=None)
    assert _decide(gate, query={"token": "T0KEN"}, visitor=anyone).redeem


def test_beyond_loopback_a_cookie_works_only_from_the_address_it_was_given_to():
    gate, _ = _gate(host="10.0.0.5", port=8000)
    laptop, elsewhere = Visitor(address="10.0.0.9"), Visitor(address="10.0.0.66")
    verdict = _decide(gate, host="10.0.0.5:8000", query={"token": "T0KEN"}, visitor=laptop)
    assert verdict.redeem
    cookie = gate.redeem(laptop).id
    assert _decide(gate, host="10.0.0.5:8000", path="/ws", cookie=cookie, visitor=laptop).status == 0
    refused = _decide(gate, host="10.0.0.5:8000", path="/ws", cookie=cookie, visitor=elsewhere)
    assert refused.status == 403 and "given to another browser (at 10.0.0.9)" in refused.reason


def test_a_loopback_name_is_sent_to_the_printed_address_with_its_token_unspent():
    gate, said = _gate()
    verdict = _decide(gate, host="localhost:8000", query={"token": "T0KEN"})
    assert verdict.status == 302 and not verdict.redeem       # the cookie is set where the page will be
    assert verdict.location == "http://127.0.0.1:8000/?token=T0KEN" and gate.token == "T0KEN" and not said
    cookie = _enter(gate)
    assert _decide(gate, host="localhost:8000", cookie=cookie).location == "http://127.0.0.1:8000/"


@pytest.mark.parametrize("host", ["evil.example:8000", "127.0.0.1:8001", "127.0.0.1", "10.0.0.5:8000", "", None])
def test_a_foreign_host_is_refused_even_with_the_token(host):
    gate, _ = _gate()
    cookie = _enter(gate)
    verdict = _decide(gate, host=host, query={"token": gate.token}, cookie=cookie)
    assert verdict.status == 403 and "Host" in verdict.reason


@pytest.mark.parametrize("origin", ["http://evil.example", "http://127.0.0.1:9999", "https://127.0.0.1:8000",
                                    "http://localhost:8000", "null"])
def test_a_foreign_origin_is_refused_even_with_the_cookie(origin):
    gate, _ = _gate()
    verdict = _decide(gate, path="/ws", origin=origin, cookie=_enter(gate))
    assert verdict.status == 403 and "Origin" in verdict.reason


def test_allowed_hosts_follow_the_listen_address():
    assert allowed_netlocs("127.0.0.1", 80) == {"127.0.0.1:80", "localhost:80", "[::1]:80"}
    assert allowed_netlocs("10.0.0.5", 8000) == {"10.0.0.5:8000"}
    everywhere = allowed_netlocs("0.0.0.0", 8000, machine_names=("box1", "10.0.0.5"))
    assert everywhere == {"box1:8000", "10.0.0.5:8000", "127.0.0.1:8000", "localhost:8000", "[::1]:8000"}


def test_each_server_gets_its_own_token_for_this_user():
    a, b = make_gate("127.0.0.1", 8000), make_gate("127.0.0.1", 8000)
    assert len(a.token) >= 24 and a.token != b.token and a.owner_uid == os.getuid()
    assert a.url == f"http://127.0.0.1:8000/?token={a.token}"


def test_host_flag_wins_over_the_serve_address():
    assert parse_address("127.0.0.1:8000", "0.0.0.0") == ("0.0.0.0", 8000)
    assert parse_address("9000", None) == ("127.0.0.1", 9000)


# -- the kernel's answer: who is at the other end of a loopback connection ----------------------


def test_proc_addresses_are_written_as_the_kernel_writes_them():
    little = sys.byteorder == "little"
    assert proc_address("127.0.0.1", 8000) == ("0100007F:1F40" if little else "7F000001:1F40")
    assert proc_address("::1", 1) == ("00000000000000000000000001000000:0001" if little
                                      else "00000000000000000000000000000001:0001")


@pytest.mark.skipif(not kernel_tells(), reason="the kernel lists no connections here (not Linux)")
@pytest.mark.parametrize("family,listen", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::")])
def test_the_kernel_names_the_user_at_the_other_end(family, listen):
    with socket.socket(family) as server:
        server.bind((listen, 0))
        server.listen()
        with socket.create_connection(("127.0.0.1", server.getsockname()[1])) as _client:
            conn, peer = server.accept()
            with conn:
                assert peer_uid(conn.getsockname()[:2], peer[:2]) == os.getuid()
                assert peer_uid(conn.getsockname()[:2], (peer[0], 1)) is None    # no such connection


# -- the gate in front of a real aiohttp server --------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _app_behind(gate: Gate) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="the app")

    async def ws(request: web.Request) -> web.WebSocketResponse:
        sock = web.WebSocketResponse()
        await sock.prepare(request)
        await sock.send_str("hello")
        await sock.close()
        return sock
    app = web.Application(middlewares=[guard_middleware(gate)])
    app.router.add_get("/", page)
    app.router.add_get("/ws", ws)
    return app


@pytest.fixture
async def served():
    """``(gate, base URL, what it announced)``: the gate of this user in front of a small app."""
    port = _free_port()
    said: list[str] = []
    gate = make_gate("127.0.0.1", port, announce=said.append)
    server = TestServer(await _app_behind(gate), host="127.0.0.1", port=port)
    await server.start_server()
    try:
        yield gate, f"http://127.0.0.1:{port}", said
    finally:
        await server.close()


def _browser() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def test_two_browsers_get_their_own_cookies_and_the_link_works_once(served):
    gate, base, said = served
    link = gate.url
    async with _browser() as first, _browser() as second:
        async with first.get(link, allow_redirects=False) as resp:
            assert resp.status == 302 and resp.headers["Location"] == f"{base}/"
            cookie = resp.headers["Set-Cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and link.split("=")[-1] not in cookie
        async with first.get(f"{base}/") as resp:
            assert resp.status == 200 and await resp.text() == "the app"
        async with first.ws_connect(f"{base}/ws", origin=base) as ws:
            assert (await ws.receive()).data == "hello"
        async with second.get(link, allow_redirects=False) as resp:                 # the same link again
            assert resp.status == 403 and "used already" in await resp.text()
        async with second.get(f"{base}/") as resp:
            assert resp.status == 403
        new_link = said[-1].rsplit(" ", 1)[-1]
        assert new_link == gate.url != link
        async with second.get(new_link) as resp:                                    # the link printed next
            assert resp.status == 200 and await resp.text() == "the app"
        name = gate.guard.cookie_name
        one, two = (next(c.value for c in s.cookie_jar if c.key == name) for s in (first, second))
        assert one != two and set(gate.sessions) == {one, two}
        async with second.get(link, allow_redirects=False) as resp:                 # a reload: its own page
            assert resp.status == 302


_AS_NOBODY = """
import socket, sys
port, cookie, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with socket.create_connection(("127.0.0.1", port)) as s:
    s.sendall(f"GET {path} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\nCookie: {cookie}\\r\\nConnection: close\\r\\n\\r\\n".encode())
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
print(answer.decode(errors="replace"))
"""


def _python_for_nobody() -> str | None:
    """A Python that the 'nobody' account may run (ours may be under an 0700 folder)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        try:
            subprocess.run([candidate, "-I", "-c", "pass"], user=65534, group=65534, extra_groups=[], check=True,
                           capture_output=True, timeout=30)
            return candidate
        except (OSError, subprocess.SubprocessError):
            continue
    return None


@pytest.mark.skipif(os.geteuid() != 0 or not kernel_tells(), reason="needs root (to be another user) and Linux")
async def test_another_local_user_is_refused_with_the_link_and_with_a_stolen_cookie(served):
    gate, base, _said = served
    python = _python_for_nobody()
    if python is None:
        pytest.skip("no Python that the nobody account may run")
    port = int(base.rsplit(":", 1)[1])
    link = gate.url.removeprefix(base)

    def as_nobody(path: str, cookie: str = "x=y") -> str:
        return subprocess.run([python, "-I", "-c", _AS_NOBODY, str(port), cookie, path], user=65534, group=65534,
                              extra_groups=[], capture_output=True, text=True, check=True, timeout=30).stdout

    answer = await asyncio.to_thread(as_nobody, link)
    assert answer.startswith("HTTP/1.1 403") and "answers only the user who ran floyd top" in answer
    assert "uid 65534" in answer and gate.url.endswith(link)          # refused, and the link still unspent
    async with _browser() as mine:
        async with mine.get(gate.url) as resp:
            assert resp.status == 200
        cookie = next(c for c in mine.cookie_jar if c.key == gate.guard.cookie_name)
    answer = await asyncio.to_thread(as_nobody, "/", f"{cookie.key}={cookie.value}")
    assert answer.startswith("HTTP/1.1 403") and "uid 65534" in answer
