"""The ``/v1`` API's middleware: errors as JSON at the edge, and who may call over TCP."""

from __future__ import annotations

import asyncio
import hmac
import json
import socket

from aiohttp import web

from floydd import log
from floydd.api import keys
from floydd.errors import FloyddError, InternalError, Unauthorized, UserError

__all__ = ["error_middleware", "auth_middleware"]


@web.middleware
async def error_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except FloyddError as exc:
        return web.json_response(exc.to_payload(), status=exc.status)
    except json.JSONDecodeError as exc:
        err = UserError(f"request body is not valid JSON: {exc}", hint="send a JSON object")
        return web.json_response(err.to_payload(), status=400)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        err = FloyddError(exc.reason or f"HTTP {exc.status}", code=f"http_{exc.status}",
                          hint="see /v1/openapi.json for the API")
        return web.json_response(err.to_payload(), status=exc.status)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as exc:
        log.api.exception("unhandled error in %s %s", request.method, request.path)
        config = request.app[keys.CONFIG]
        err = InternalError(f"internal error: {type(exc).__name__}: {exc}",
                            hint=f"this is a bug; the daemon log {config.log_path} has the details")
        return web.json_response(err.to_payload(), status=500)


@web.middleware
async def auth_middleware(request: web.Request, handler):
    """The unix socket is guarded by file permissions; TCP callers need the API token."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        token = request.app.get(keys.TCP_TOKEN)
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not token or not hmac.compare_digest(sent.encode(), token.encode()):
            raise Unauthorized("a valid API token is required on TCP",
                               hint="send 'Authorization: Bearer TOKEN' (set FLOYD_TOKEN for the CLI); "
                                    "the token is in the daemon's state dir, file api-token")
    return await handler(request)
