"""Requests aiohttp's parser refuses before any middleware still get the API's JSON error
(issue 21: a request line over 8 KiB got aiohttp's plain-text 400)."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from floydd.api.badhttp import ApiRunner


async def _ask(port: int, raw: bytes) -> tuple[int, dict, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:]), body


@pytest.fixture
async def port():
    app = web.Application()
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})
    app.router.add_get("/ok", ok)
    runner = ApiRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("raw,status,code,said", [
    (b"GET /ok?q=" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "request_line_too_long", "too long"),
    (b"GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n", 431, "header_too_large", "too large"),
    (b"\x16\x03\x01\x02\x00garbage that is not HTTP\r\n\r\n", 400, "bad_http", "not well-formed HTTP"),
], ids=["long request line", "large header", "not HTTP"])
async def test_malformed_http_gets_the_apis_json_error(port, raw, status, code, said):
    got, headers, body = await _ask(port, raw)
    assert got == status, body[:300]
    assert headers["Content-Type"].startswith("application/json")
    error = json.loads(body)["error"]
    assert error["code"] == code and said in error["message"] and error["hint"], error
    assert len(body) < 1000


async def test_a_well_formed_request_is_untouched(port):
    got, _, body = await _ask(port, b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert got == 200 and json.loads(body) == {"ok": True}
