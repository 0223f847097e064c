"""The ``/v1`` API's middleware: errors as JSON at the edge, and who is calling.

Three ways in (:func:`auth_middleware`)::

    unix socket      file permissions decide who reaches it; the kernel says who it is
                     (SO_PEERCRED, :func:`floydd.api.request.acting_person`)
    TLS (a cluster's box, ``api_listen``)   a personal token (``Authorization: Bearer
                     FLP1...``, :mod:`floydd.cluster.state.apitokens`) names the person; checked
                     against the replicated records on every request, so a revoked token or
                     a removed person is refused at once. ``/v1/ca`` alone is open: it is
                     what ``floyd login`` pins before it sends any token. Failed tokens
                     are throttled per source and logged in aggregate
                     (:mod:`floydd.api.throttle`): past its share, a source gets 429
                     before its token is read. The token is presented for the rest of
                     the request (:mod:`floydd.cluster.net.presented`): it signs what this box
                     proposes for its person, which is how a box where that person is not
                     signed in may act for them.
    plain loopback TCP (``--dev-tcp``)      a dev option: one shared token, as the daemon's user
"""

from __future__ import annotations

import asyncio
import hmac
import json
import socket
import time

from aiohttp import web

from floydd import log
from floydd.api import keys
from floydd.api.request import PERSON, caller
from floydd.api.throttle import THROTTLE, source_of
from floydd.cluster.state.apitokens import parse_api_token
from floydd.cluster.net.presented import PresentedToken, presenting
from floydd.errors import FloyddError, Forbidden, InternalError, Unauthorized, UserError
from floydd.security.tokens import secret_digest

__all__ = ["error_middleware", "auth_middleware", "OPEN_PATHS"]


@web.middleware
async def error_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except FloyddError as exc:
        if isinstance(exc, (Forbidden, Unauthorized)):
            _log_refusal(request, exc)
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
                            hint=f"this is a bug; the daemon log ({config.log_where}) has the details")
        return web.json_response(err.to_payload(), status=500)


def _log_refusal(request: web.Request, exc: FloyddError) -> None:
    """A refused attempt in the daemon's log (the journal, in system mode), naming the caller:
    the audit chain holds only what changed, this says who tried what they may not. A failed
    token on the TLS API is not logged here: the throttle counts it (module docstring)."""
    if request.get(_COUNTED):
        return
    who = request.get(PERSON) or caller(request) or request.remote or "an unknown peer"
    log.api.warning("refused %s %s from %s: %s", request.method, request.path[:200], who, exc.message)


OPEN_PATHS = frozenset({"/v1/ca"})
"""What the TLS API answers without a token."""

_COUNTED: web.RequestKey[bool] = web.RequestKey("floydd.auth_counted", bool)
"""Set on a request whose failed token the throttle counted (and will log in aggregate)."""


@web.middleware
async def auth_middleware(request: web.Request, handler):
    """Who is calling (module docstring); a caller that proves nothing is refused here."""
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return await handler(request)
    if transport.get_extra_info("sslcontext") is not None:
        if request.path not in OPEN_PATHS:
            throttle = request.app.get(THROTTLE)
            if throttle is not None:
                source = source_of(request.remote)
                wait = throttle.wait(source)
                if wait > 0:
                    return throttle.refusal(source, wait)       # 429, the token unread
            try:
                request[PERSON] = _token_person(request)
            except Unauthorized as exc:
                if throttle is not None:
                    throttle.failed(source, exc.message)
                    request[_COUNTED] = True
                raise
            with presenting(_presented(request, request[PERSON])):     # it signs what is proposed for them
                return await handler(request)
    else:
        token = request.app.get(keys.TCP_TOKEN)
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not token or not hmac.compare_digest(sent.encode(), token.encode()):
            raise Unauthorized("a valid API token is required on the dev TCP port",
                               hint="send 'Authorization: Bearer TOKEN' (set FLOYD_TOKEN for the CLI); "
                                    "the token is in the daemon's state dir, file api-token")
    return await handler(request)


def _presented(request: web.Request, person: str) -> PresentedToken:
    """The personal token :func:`_token_person` accepted, for the rest of the request: a box acts
    for a person signed in on it only (:mod:`floydd.cluster.net.presented`, :mod:`floydd.cluster.state.signin`)."""
    token_id, secret = parse_api_token(request.headers.get("Authorization", "").removeprefix("Bearer "))
    return PresentedToken(token_id=token_id, person=person, secret=secret)


def _token_person(request: web.Request) -> str:
    """The person the request's personal token speaks for, or Unauthorized saying why."""
    sent = request.headers.get("Authorization", "")
    if not sent.startswith("Bearer "):
        raise Unauthorized("this API needs a personal token", code="api_token_missing",
                           hint="floyd login HOST, with a token made by floyd token create on a box of the lab")
    token_id, secret = parse_api_token(sent.removeprefix("Bearer "))
    state = request.app[keys.CLUSTER].state
    person = state.apitokens.person_for(token_id, secret_digest(token_id, secret), time.time())
    if state.people and person not in state.people:      # a lab of none: its only user's
        raise Unauthorized(f"{person} has no account in this lab any more", code="no_account",
                           hint="ask an admin (floydd user list shows the lab's people)")
    return person
