"""Requests too malformed to reach a handler still get the API's JSON error.

aiohttp refuses a request line over 8 KiB, a header too large, or bytes that are not HTTP
before any middleware runs, and answered them with its own plain-text 400 (issue 21): the one
answer of the API that was not ``{"error": {code, message, hint}}``. :class:`ApiRunner` is
the API's :class:`aiohttp.web.AppRunner` with that answer replaced: a request line too long is
414 ``request_line_too_long``, a header too large 431 ``header_too_large``, anything else
malformed 400 ``bad_http``, each with a hint. They are logged at INFO, not as tracebacks.

aiohttp calls ``RequestHandler.handle_error`` for these; the runner's server makes each new
connection's handler a subclass with this module's version (a 500 from a handler keeps
aiohttp's own, which the error middleware makes unreachable anyway).
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from floydd import log
from floydd.errors import UserError

__all__ = ["ApiRunner", "refusal"]

_TARGET = re.compile(r"(/|\*|[A-Za-z][A-Za-z+.-]*://|[A-Z]+ )")
"""How what aiohttp's parser quotes of a line too long starts when it is the request line (its
URL, or ``METHOD ``); of a header, it quotes the name or the value."""


class ApiRunner(web.AppRunner):
    """``web.AppRunner`` whose connections answer malformed HTTP with the API's JSON error."""

    async def _make_server(self) -> Any:
        return _JsonErrors(await super()._make_server())


def refusal(exc: BaseException | None, message: str | None) -> tuple[int, UserError]:
    """The status and error for a request aiohttp's parser refused with ``exc``."""
    said = (message or (str(exc) if exc else "") or "malformed request")[:200]
    if type(exc).__name__ == "LineTooLong":
        line = exc.args[0] if exc is not None and exc.args else said
        line = bytes(line).decode("latin-1") if isinstance(line, (bytes, bytearray)) else str(line)
        if not _TARGET.match(line) and "status line" not in line.lower():
            return 431, UserError(f"a request header is too large ({said})", code="header_too_large",
                                  hint="send shorter headers (each at most 8 KiB); long values go in the body")
        return 414, UserError(f"the request line is too long ({said})", code="request_line_too_long",
                              hint="keep the URL under 8 KiB: put long values in a JSON body, not the query")
    return 400, UserError(f"the request is not well-formed HTTP ({said})", code="bad_http",
                          hint="send HTTP/1.1 requests (floyd and floydd.client do); is this the right port?")


class _JsonHandler(RequestHandler):
    """aiohttp's connection handler with the API's answer to malformed HTTP."""

    __slots__ = ()

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status >= 500 or request.writer.output_size > 0:
            return super().handle_error(request, status, exc, message)
        code, err = refusal(exc, message)
        log.api.info("refused a malformed request from %s: %s", request.remote, err.message)
        resp = web.json_response(err.to_payload(), status=code)
        resp.force_close()
        return resp


class _JsonErrors:
    """The runner's server, each connection's handler made a :class:`_JsonHandler` (the same
    object layout: aiohttp's handler has ``__slots__``, so its method cannot be set per object)."""

    def __init__(self, server: web.Server) -> None:
        self._server = server

    def __call__(self) -> RequestHandler:
        handler = self._server()
        handler.__class__ = _JsonHandler
        return handler

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)
