"""``floyd top --serve``: the same TUI in a browser through textual-serve, behind its one-time link,
per-browser cookies, Host and Origin checks (slow: a real server; the rules themselves:
test_tui_serve_guard.py)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """``python -m floydd.tui --serve`` in a real process; ``url``: what it printed, token and all."""

    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.port = _free_port()
        env = {**os.environ, "FLOYDD_STATE_DIR": str(tmp_path / "nodaemon"), "PYTHONPATH": str(ROOT)}
        env.pop("FLOYD_HOST", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "floydd.tui", "--serve", f"127.0.0.1:{self.port}", *extra],
                                     cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()
        printed = wait_until(lambda: next((line for line in self.lines if "?token=" in line), None)
                             or self.proc.poll() is not None, 30, what="the URL with its token",
                             details=lambda: "".join(self.lines))
        assert isinstance(printed, str), "".join(self.lines)
        self.url = re.search(r"http://\S+", printed).group(0)
        self.token = urllib.parse.parse_qs(urllib.parse.urlsplit(self.url).query)["token"][0]
        self.base = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def served(tmp_path: Path):
    server = Served(tmp_path)
    try:
        yield server
    finally:
        server.close()


async def _status(http: aiohttp.ClientSession, url: str, **headers: str) -> int:
    for _ in range(200):
        try:
            async with http.get(url, headers=headers, allow_redirects=False) as resp:
                return resp.status
        except aiohttp.ClientConnectionError:
            await asyncio.sleep(0.05)       # not listening yet: poll
    raise AssertionError(f"{url} never answered")


@pytest.mark.slow
async def test_serve_refuses_without_token_wrong_token_foreign_host_or_origin(served: Served) -> None:
    base, token = served.base, served.token
    assert served.url == f"{base}/?token={token}"
    async with aiohttp.ClientSession() as http:
        assert await _status(http, f"{base}/") == 403
        assert await _status(http, f"{base}/?token=not-{token}") == 403
        assert await _status(http, f"{base}/ws") == 403
        assert await _status(http, f"{base}/static/css/xterm.css") == 403
        # DNS rebinding: the right token, but a name that is not ours
        assert await _status(http, f"{base}/?token={token}", Host=f"evil.example:{served.port}") == 403
        # another page (another site, or another port on this box) opening our websocket
        for origin in ("http://evil.example", f"http://127.0.0.1:{served.port + 1}"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as err:
                await http.ws_connect(f"{base}/ws?token={token}", origin=origin)
            assert err.value.status == 403
        assert await _status(http, f"{base}/?token={token}") == 302


@pytest.mark.slow
async def test_serve_streams_the_app_to_a_browser_session(served: Served) -> None:
    base = served.base
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(served.url, allow_redirects=False) as first:
            assert first.status == 302 and first.headers["Location"] == f"{base}/"
            cookie = first.headers["Set-Cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and served.token not in cookie
        async with http.get(f"{base}/") as resp:          # the cookie, no token
            assert resp.status == 200
            page = await resp.text()
        assert f"ws://127.0.0.1:{served.port}/ws" in page
        async with http.ws_connect(f"{base}/ws", origin=base) as ws:
            await ws.send_json(["resize", {"width": 120, "height": 30}])
            seen = b""
            deadline = time.monotonic() + 30
            while b"unreachable" not in seen and time.monotonic() < deadline:
                try:
                    msg = await asyncio.wait_for(ws.receive(), 1)
                except asyncio.TimeoutError:
                    continue
                if msg.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                    break
                seen += msg.data if isinstance(msg.data, bytes) else msg.data.encode()
    assert b"floyd top" in seen and b"unreachable" in seen  # the app, with its banner (no daemon here)
    # the link is spent: another browser is refused with it, and takes the next link printed
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as other:
        async with other.get(served.url, allow_redirects=False) as again:
            assert again.status == 403 and "used already" in await again.text()
        line = wait_until(lambda: next((x for x in served.lines if "it works no more" in x), None), 10,
                          what="the next link", details=lambda: "".join(served.lines))
        following = re.search(r"http://\S+", line).group(0)
        assert following != served.url and following.startswith(f"{base}/?token=")
        async with other.get(following, allow_redirects=False) as resp:
            assert resp.status == 302 and served.token not in resp.headers["Set-Cookie"]
            assert resp.headers["Set-Cookie"].split(";")[0] != cookie.split(";")[0]     # its own session
