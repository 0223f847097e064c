"""Failed connections in words, from the errors aiohttp and the stdlib really raise."""

from __future__ import annotations

import asyncio
import socket
import ssl

import aiohttp
import pytest

from floydd.unreachable import cannot_reach, why
from tests.conftest import free_ports


def _fail(url: str, **kw) -> BaseException:
    async def go():
        async with aiohttp.ClientSession() as session:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=5), **kw):
                pass
    try:
        asyncio.run(go())
    except BaseException as exc:    # what the transport catches
        return exc
    raise AssertionError("it connected")


def test_a_refused_connection_is_said_in_words_without_aiohttps_repr():
    port, = free_ports(1)
    exc = _fail(f"https://127.0.0.1:{port}/", ssl=ssl.create_default_context())
    assert "ssl:<ssl.SSLContext" in str(exc)           # what used to reach people
    said = cannot_reach("box2", f"127.0.0.1:{port}", exc)
    assert said == (f"cannot reach box2 at 127.0.0.1:{port}: connection refused (nothing listens on that port, "
                    "or floydd is not running)")


def test_a_tls_handshake_with_something_that_is_not_tls_is_said_so():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        async def answer_plain():
            loop = asyncio.get_running_loop()
            conn, _ = await loop.sock_accept(server)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\nnot tls\n")
            conn.close()

        async def go():
            server.setblocking(False)
            serving = asyncio.ensure_future(answer_plain())
            try:
                async with aiohttp.ClientSession() as session:
                    async with session.get(f"https://127.0.0.1:{port}/", ssl=ssl.create_default_context(),
                                           timeout=aiohttp.ClientTimeout(total=5)):
                        pass
            finally:
                serving.cancel()
        with pytest.raises(Exception) as caught:
            asyncio.run(go())
    said = why(caught.value)
    assert said.startswith("the TLS handshake failed ("), said
    assert "SSLContext object" not in said


@pytest.mark.parametrize("exc,words", [
    (asyncio.TimeoutError(), "no answer in time"),
    (ConnectionResetError(104, "reset"), "connection reset"),
    (OSError(113, "No route to host"), "no route to host"),
    (ssl.SSLCertVerificationError(1, "certificate verify failed"), "its TLS certificate was refused"),
    (ValueError("Cannot connect to host h:1 ssl:<ssl.SSLContext object at 0x7f00> [boom]"),
     "ValueError: Cannot connect to host h:1")])
def test_each_kind_of_failure_has_its_words(exc, words):
    assert why(exc).startswith(words)
    assert "0x7f" not in why(exc)


def test_the_cause_is_found_behind_a_wrapper():
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert why(outer).startswith("connection refused")
    assert cannot_reach("box3", None, asyncio.TimeoutError()) == "cannot reach box3: no answer in time"
